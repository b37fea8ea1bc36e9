"""How one version of an instance definition is kept: a header line, then the YAML as written.

A stored version is the definition's text under one first comment line
``# relay-instance {"instance": "shop01", "version": N, "saved": "<UTC ISO time>", "by": "<user@host>",
"note": "...", "removed": false}``, so every version is also a plain definition file. A removal is a
version too (a tombstone: ``removed`` true, no body), so the history keeps what ran before it and a
later ``add`` continues the same history. Pure functions and values, on the caller's thread.
"""

from __future__ import annotations

import getpass
import json
import os
import re
import socket
from dataclasses import dataclass
from datetime import UTC, datetime

from relay.cluster.definition import InstanceDefinition
from relay.errors import ClusterError

__all__ = ["StoredVersion", "VersionInfo", "parse_stored", "stored_text"]

_HEADER = re.compile(r"#\s*relay-instance\s+(\{.*\})\s*$")


@dataclass(frozen=True)
class VersionInfo:
    """One entry of an instance's history."""

    instance: str
    version: int
    saved: str = ""
    by: str = ""
    note: str = ""
    removed: bool = False

    def as_dict(self) -> dict[str, object]:
        return {
            "instance": self.instance,
            "version": self.version,
            "saved": self.saved,
            "by": self.by,
            "note": self.note,
            "removed": self.removed,
        }


@dataclass(frozen=True)
class StoredVersion:
    """A version as stored: its header and its definition (None for a removal)."""

    info: VersionInfo
    definition: InstanceDefinition | None

    @property
    def text(self) -> str:
        return self.definition.text if self.definition is not None else ""


def stored_text(info: VersionInfo, definition: InstanceDefinition | None) -> str:
    """The text a store keeps for one version (``info.saved``/``by`` filled in when empty)."""
    meta = info.as_dict()
    meta["saved"] = info.saved or datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    meta["by"] = info.by or _who()
    body = definition.text if definition is not None else ""
    return f"# relay-instance {json.dumps(meta, ensure_ascii=False)}\n{body}"


def parse_stored(name: str, text: str, where: str) -> StoredVersion:
    """The version a stored text holds. The body is not validated again: it was when it was stored, and a
    node resolves it with ``relay_config`` (which checks it once more, with the node's environment)."""
    first, _, body = text.partition("\n")
    match = _HEADER.match(first)
    if match is None:
        raise ClusterError(f"{where}: not an instance definition (no relay-instance header line)")
    try:
        meta = json.loads(match.group(1))
        info = VersionInfo(
            name,
            int(meta["version"]),
            str(meta.get("saved", "")),
            str(meta.get("by", "")),
            str(meta.get("note", "")),
            bool(meta.get("removed", False)),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise ClusterError(f"{where}: unreadable relay-instance header: {exc}") from None
    return StoredVersion(info, None if info.removed else InstanceDefinition(name, body))


def _who() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()}"
