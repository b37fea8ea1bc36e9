"""The ZooKeeper mapping store: one node every relay of a cluster reads, edited by compare-and-set.

Owns the node layout, the kazoo client and the translation of kazoo's exceptions into
``MappingStoreError`` / ``MappingConflictError``. Runs on the caller's thread; kazoo's own event thread
runs the data watch, which only records the node version it saw (``fingerprint``) for the relay's
watcher to compare at its next batch boundary. Hands ``Mapping`` values to the editor and the watcher.

Layout under ``path`` (e.g. ``/canal-relay/mapping``):

- ``path``: the current mapping's text (the history record format of ``mapping.store``: a header line,
  then the YAML as imported, each edit applied in place with its comments kept, ``mapping.document``);
- ``path/history/v0000000001`` …: every stored version's text;
- ``path.relays/<instance>@<member>``: ephemeral, which version each relay reading the node runs (and
  what it refused), for ``relay mapping history``.

A write reads the node (text + stat), checks the mapping version against ``expected``, then commits
ONE ZooKeeper transaction: ``set_data(path, version=stat.version)`` + ``create(history/vN)``. If another
writer changed the node in between, ZooKeeper refuses the node version and nothing of the transaction
is applied (``MappingConflictError``); two writers of the same new version also collide on the
history node. With ``auth: user:password`` the nodes are created with a digest ACL: that identity may
do everything, everyone else may only read — relays need no credentials, editors do.
"""

from __future__ import annotations

import contextlib
import json
import threading
from dataclasses import dataclass
from typing import Any

from kazoo.exceptions import (
    BadVersionError,
    KazooException,
    NoAuthError,
    NodeExistsError,
    NoNodeError,
)
from kazoo.security import READ_ACL_UNSAFE, make_digest_acl

from mapping.document import stored_text
from mapping.load import parse_mapping
from mapping.model import Mapping
from mapping.store import VersionInfo, conflict, history_text, parse_history_header, unknown_version
from relay.common import zookeeper
from relay.errors import (
    MappingConflictError,
    MappingStoreError,
    MappingStoreUnavailableError,
    ZooKeeperUnavailableError,
)

__all__ = ["ZooKeeperMappingStore", "ZooKeeperStoreConfig"]


@dataclass(frozen=True)
class ZooKeeperStoreConfig:
    """Where the node is and who may edit it. ``auth`` is ``user:password`` (a digest identity) or None."""

    hosts: str = "127.0.0.1:2181"
    path: str = "/canal-relay/mapping"
    auth: str | None = None
    timeout_seconds: float = 10.0
    setting: str = "mapping.zookeeper.hosts"  # where ``hosts`` came from, for messages (or ``--zookeeper``)

    def __repr__(self) -> str:  # never show the password
        auth = None if self.auth is None else self.auth.split(":", 1)[0] + ":***"
        return f"ZooKeeperStoreConfig(hosts={self.hosts!r}, path={self.path!r}, auth={auth!r})"


class ZooKeeperMappingStore:
    """``MappingStore`` on a ZooKeeper node. Connects in the constructor; ``close()`` disconnects."""

    def __init__(self, config: ZooKeeperStoreConfig) -> None:
        self.config = config
        self.path = config.path.rstrip("/") or "/"
        self._history = f"{self.path}/history"
        self._relays = f"{self.path}.relays"
        self._seen: object = None
        self._watch_lock = threading.Lock()
        self._watching = False
        try:
            self._client = zookeeper.start_client(
                config.hosts,
                session_timeout=config.timeout_seconds,
                connect_timeout=config.timeout_seconds,
                auth=config.auth,
                setting=config.setting,
            )
        except ZooKeeperUnavailableError as exc:
            raise MappingStoreUnavailableError(config.setting, str(exc)) from exc

    @property
    def name(self) -> str:
        return f"zookeeper {self.config.hosts}{self.path}"

    def exists(self) -> bool:
        try:
            return self._client.exists(self.path) is not None
        except KazooException as exc:
            raise self._translate(exc, "read") from exc

    def read(self) -> Mapping:
        text, _ = self._get(self.path)
        return parse_mapping(text, source=self.name)

    def create(self, mapping: Mapping, *, note: str = "") -> Mapping:
        """Store the first version (``mapping.version`` as it is); refused when a mapping exists."""
        text = history_text(mapping, note).encode()
        acl = self._acl()
        parent = self.path.rsplit("/", 1)[0]
        try:
            if parent:
                self._client.ensure_path(parent)
            tx = self._client.transaction()
            tx.create(self.path, text, acl=acl)
            tx.create(self._history, b"", acl=acl)
            tx.create(self._node(mapping.version), text, acl=acl)
            self._commit(tx, mapping.version, mapping.version)
        except KazooException as exc:
            raise self._translate(exc, "create") from exc
        return mapping

    def write(self, mapping: Mapping, *, expected: int, note: str = "") -> Mapping:
        text, stat = self._get(self.path)
        current = parse_mapping(text, source=self.name)
        if current.version != expected:
            raise conflict(self.name, expected, current.version)
        new = mapping.with_version(expected + 1)
        body = stored_text(text, current, new, self.name)  # the text as it was written, this edit in it
        data = history_text(new, note, body=body).encode()
        try:
            self._ensure_history()
            tx = self._client.transaction()
            tx.set_data(self.path, data, version=stat.version)
            tx.create(self._node(new.version), data, acl=self._acl())
            self._commit(tx, expected, new.version)
        except KazooException as exc:
            raise self._translate(exc, "write") from exc
        return new

    def history(self) -> list[VersionInfo]:
        try:
            children = self._client.get_children(self._history)
        except NoNodeError:
            children = []
        except KazooException as exc:
            raise self._translate(exc, "read") from exc
        out = []
        for child in sorted(c for c in children if c.startswith("v") and c[1:].isdigit()):
            number = int(child[1:])
            text, _ = self._get(self._node(number))
            out.append(parse_history_header(text, number))
        return out

    def version(self, number: int) -> Mapping:
        try:
            data, _ = self._client.get(self._node(number))
        except NoNodeError:
            raise unknown_version(number, [v.version for v in self.history()]) from None
        except KazooException as exc:
            raise self._translate(exc, "read") from exc
        return parse_mapping(data.decode("utf-8"), source=f"{self.name} version {number}")

    def fingerprint(self) -> object:
        """The node version the data watch last saw (the watch is set on the first call)."""
        if not self._watching:  # one caller thread (the relay's); DataWatch calls back at once, here
            self._watching = True
            self._client.DataWatch(self.path, self._on_data)
        with self._watch_lock:
            return self._seen

    def record(self, mapping: Mapping, *, note: str = "") -> bool:
        """Every version is in the node's history by construction (``write`` commits both at once)."""
        return False

    def announce(self, relay: str, info: dict[str, Any]) -> None:
        """An ephemeral node ``<path>.relays/<relay>`` says which version ``relay`` runs (beside the
        mapping node, not under it: relays without the editors' credentials may write there)."""
        path = f"{self._relays}/{relay.replace('/', '_')}"
        data = json.dumps(info, sort_keys=True).encode("utf-8")
        try:
            if self._client.exists(path) is None:
                self._client.ensure_path(self._relays)
                self._client.create(path, data, ephemeral=True)
            else:
                self._client.set(path, data)
        except KazooException as exc:
            raise self._translate(exc, "report to") from exc

    def relays(self) -> list[dict[str, Any]]:
        """What every relay reading this node announced (``announce``), while its session lives."""
        try:
            names = sorted(self._client.get_children(self._relays))
        except NoNodeError:
            return []
        except KazooException as exc:
            raise self._translate(exc, "read") from exc
        out: list[dict[str, Any]] = []
        for name in names:
            with contextlib.suppress(NoNodeError, ValueError, UnicodeDecodeError):
                data, _ = self._client.get(f"{self._relays}/{name}")
                value = json.loads(data.decode("utf-8"))
                if isinstance(value, dict):
                    out.append(value)
        return out

    def close(self) -> None:
        try:
            self._client.stop()
        finally:
            self._client.close()

    # -- internals ------------------------------------------------------------------------------
    def _on_data(self, data: bytes | None, stat: Any) -> None:
        # kazoo's event thread: record, never parse or block here.
        with self._watch_lock:
            self._seen = None if stat is None else (stat.version, stat.mzxid)

    def _ensure_history(self) -> None:
        """The history container (a mapping stored by other means may lack it)."""
        if self._client.exists(self._history):
            return
        with contextlib.suppress(NodeExistsError):  # a concurrent writer created it
            self._client.create(self._history, b"", acl=self._acl())

    def _node(self, number: int) -> str:
        return f"{self._history}/v{number:010d}"

    def _acl(self) -> list[Any] | None:
        if not self.config.auth:
            return None
        user, _, password = self.config.auth.partition(":")
        return [make_digest_acl(user, password, all=True), *READ_ACL_UNSAFE]

    def _get(self, path: str) -> tuple[str, Any]:
        try:
            data, stat = self._client.get(path)
        except NoNodeError:
            raise MappingStoreError(
                self.name, f"no mapping at {path} (store one with `relay mapping import FILE`)"
            ) from None
        except KazooException as exc:
            raise self._translate(exc, "read") from exc
        return data.decode("utf-8"), stat

    def _commit(self, tx: Any, expected: int, new: int) -> None:
        results = tx.commit()
        errors = [r for r in results if isinstance(r, Exception)]
        for err in errors:
            if isinstance(err, BadVersionError | NodeExistsError):
                raise MappingConflictError(
                    self.name,
                    f"another edit stored a new mapping while yours (version {expected} → {new}) was being "
                    "written; nothing of yours was stored (read it again and redo the edit)",
                )
        for err in errors:
            if not type(err).__name__ == "RolledBackError":
                raise err
        if errors:
            raise MappingStoreError(self.name, f"transaction rolled back: {errors}")

    def _translate(self, exc: KazooException, action: str) -> MappingStoreError:
        if isinstance(exc, NoAuthError):
            return MappingStoreError(
                "mapping.zookeeper.auth",
                f"not authorized to {action} {self.name}: the node has a digest ACL; "
                "give the operator identity as user:password",
            )
        return MappingStoreUnavailableError(self.name, f"cannot {action}: {type(exc).__name__} {exc}")
