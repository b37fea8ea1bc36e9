"""Mapping stores: where the current mapping and every earlier version live, behind one interface.

Owns ``MappingStore`` (the interface the CLI editor, the relay's reload watcher and ``replay`` use),
the version rules, the history record format and ``FileMappingStore`` (the default: the YAML file plus
a history directory of ``NNNNNNNN.yaml`` records, which the relay keeps in its state directory:
``<state_dir>/mapping-history``, see ``relay.config.state``). ``mapping.store_zk`` holds the ZooKeeper
node store; ``open_store`` picks one from settings. Methods run on the caller's thread (CLI, relay
startup, the relay's publisher thread when it polls for a change); they hand back ``Mapping`` values.

Version rules, the same for every store:

- ``write(mapping, expected=N)`` stores ``mapping`` as version N + 1, but only if the stored version is
  still N (compare-and-set): otherwise ``MappingConflictError`` and nothing is stored. An edit is
  therefore based on the version it read, and of two concurrent edits one wins and one is refused.
- Every stored version is kept in the history (the version a store started from included, so a
  rollback can reach it). ``rollback`` is an edit: it stores an old version's content as a new version.
- A mapping is valid by construction: an invalid one cannot reach ``write`` (``parse_mapping`` raised).

A history record is the mapping's canonical YAML under one first comment line
``# relay-mapping {"version": N, "saved": "<UTC ISO time>", "by": "<user@host>", "note": "..."}``,
so every version is also a plain mapping file.
"""

from __future__ import annotations

import contextlib
import fcntl
import getpass
import json
import logging
import os
import re
import socket
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from mapping.document import stored_text
from mapping.load import load_mapping, parse_mapping
from mapping.model import Mapping
from relay.common.atomic import Ownership, ownership_of
from relay.common.atomic import atomic_write_text as _atomic_write_text
from relay.errors import MappingConflictError, MappingError, MappingStoreError

__all__ = [
    "FileMappingStore",
    "MappingConflictError",
    "MappingStore",
    "MappingStoreError",
    "VersionInfo",
    "acting_as",
    "atomic_write",
    "history_text",
    "keep_version",
    "parse_history_header",
]

log = logging.getLogger(__name__)
_HEADER = re.compile(r"#\s*relay-mapping\s+(\{.*\})\s*$")


@dataclass(frozen=True)
class VersionInfo:
    """One entry of a store's history (``saved``/``by``/``note`` empty when not recorded)."""

    version: int
    saved: str = ""
    by: str = ""
    note: str = ""


class MappingStore(Protocol):
    """Where mappings are kept. Implementations: ``FileMappingStore``, ``ZooKeeperMappingStore``."""

    @property
    def name(self) -> str:
        """What it is, for messages: ``file conf/mapping.yaml``, ``zookeeper host:2181/relay/mapping``."""
        ...

    def exists(self) -> bool:
        """Whether a mapping is stored at all (``create`` the first version if not)."""
        ...

    def read(self) -> Mapping:
        """The current mapping; ``InvalidMappingError`` if the stored text is invalid."""
        ...

    def create(self, mapping: Mapping, *, note: str = "") -> Mapping:
        """Store the first version (``mapping.version`` as it is); refused when a mapping exists."""
        ...

    def write(self, mapping: Mapping, *, expected: int, note: str = "") -> Mapping:
        """Store ``mapping`` as version ``expected + 1`` if the current version is ``expected``."""
        ...

    def history(self) -> list[VersionInfo]:
        """Every stored version, oldest first."""
        ...

    def version(self, number: int) -> Mapping:
        """The mapping stored as version ``number``; ``MappingError`` naming ``version`` if unknown."""
        ...

    def fingerprint(self) -> object:
        """A cheap token that changes when the stored mapping may have changed (no parsing)."""
        ...

    def record(self, mapping: Mapping, *, note: str = "") -> bool:
        """Keep ``mapping`` in the history when its version is not there yet; True when written.

        The relay calls it with every version it reads, so that a restart can resume under a version
        named by its saved position even when the edit that made it kept its record elsewhere (another
        state directory, a hand edit). A no-op where the history is complete by construction."""
        ...

    def announce(self, relay: str, info: dict[str, Any]) -> None:
        """Say, where the store's other readers can see it, which version ``relay`` runs (``info``); a
        no-op where the store has no shared place for it (a file: each relay's status file says it)."""
        ...

    def relays(self) -> list[dict[str, Any]]:
        """What relays announced (``announce``), for ``relay mapping history``."""
        ...

    def close(self) -> None: ...


def history_text(
    mapping: Mapping, note: str = "", saved: datetime | None = None, *, body: str | None = None
) -> str:
    """The text a store keeps for one version: the header comment line + ``body``, the mapping's YAML
    (default: its own text with its version, comments and all, else the canonical form)."""
    if body is None:
        body = stored_text(None, None, mapping, f"mapping version {mapping.version}")
    meta = {
        "version": mapping.version,
        "saved": (saved or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "by": _who(),
        "note": note,
    }
    return f"# relay-mapping {json.dumps(meta, ensure_ascii=False)}\n{body}"


def parse_history_header(text: str, version: int) -> VersionInfo:
    """The ``VersionInfo`` of a stored text (only ``version`` when it has no header line)."""
    first = text.split("\n", 1)[0]
    match = _HEADER.match(first)
    if match is None:
        return VersionInfo(version)
    try:
        meta = json.loads(match.group(1))
    except ValueError:
        return VersionInfo(version)
    return VersionInfo(
        version, str(meta.get("saved", "")), str(meta.get("by", "")), str(meta.get("note", ""))
    )


def keep_version(store: MappingStore, mapping: Mapping, note: str) -> None:
    """``store.record(mapping)``, best effort: a history the caller cannot write (another user's state
    directory) is logged, never fatal — the version stays usable, only a later resume under it may lack it."""
    try:
        if store.record(mapping, note=note):
            log.info("kept mapping version %d in the history of %s", mapping.version, store.name)
    except MappingError as exc:
        log.warning(
            "could not keep mapping version %d in the history of %s: %s", mapping.version, store.name, exc
        )


def conflict(where: str, expected: int, found: int) -> MappingConflictError:
    return MappingConflictError(
        where,
        f"the mapping changed while you edited it: your edit is based on version {expected}, "
        f"the stored version is now {found}; nothing was stored (read it again and redo the edit)",
    )


def unknown_version(number: int, known: list[int]) -> MappingError:
    shown = ", ".join(str(v) for v in known) or "none"
    return MappingError("version", f"no stored version {number} (stored versions: {shown})")


_ACTING: ContextVar[str | None] = ContextVar("mapping_store_acting_as", default=None)


@contextlib.contextmanager
def acting_as(who: str) -> Iterator[None]:
    """Record ``who`` as the author (``by``) of every version stored inside the block, on this thread,
    instead of the process's user@host: the console stores edits for its logged-in users."""
    token = _ACTING.set(who)
    try:
        yield
    finally:
        _ACTING.reset(token)


def _who() -> str:
    acting = _ACTING.get()
    if acting:
        return acting
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()}"


# --- the YAML file ---------------------------------------------------------------------------


class FileMappingStore:
    """The mapping file itself, edited under an exclusive lock, with its versions in ``history_dir``.

    The mapping file is configuration, the history is state: ``history_dir`` is the state directory's
    ``mapping-history`` (``relay.wiring``). Versions recorded by earlier releases in the sidecar
    ``<file>.history/`` are still read (never written) when ``history_dir`` lacks them.

    An edit keeps the file a person wrote (``mapping.document``: comments, order, layout; only the
    edited values and ``version`` change) and the file's mode, owner and group: relays running as
    another user read it after an edit as before (an edit that cannot give the file its owner back —
    not run as root or as the owner — is refused, nothing stored). A link is followed: the file it
    points to is replaced. Writes are atomic (temp file + fsync + rename, then the directory fsync):
    a reader — the relay's watcher — sees the old file or the new one. The history record (the same
    text under a header line) is written before the file, so the current version is always in the
    history once the store has been written through; records are readable by whoever may read the
    mapping, and owned by the state directory's owner when written as root.
    Writers are serialised by an exclusive ``flock`` on the mapping file's folder: the version check
    and the write happen under it, which makes ``write`` a compare-and-set between processes — every
    editor of the file takes the same lock, whatever its state directory, and no lock file is left
    beside the configuration.
    """

    def __init__(
        self, path: str | os.PathLike[str], history_dir: str | os.PathLike[str], setting: str = "mapping.file"
    ) -> None:
        self.path = Path(path)
        self.setting = setting  # the key or flag that named the file, for messages
        self.history_dir = Path(history_dir)
        self.legacy_history_dir = self.path.with_name(self.path.name + ".history")  # read only

    @property
    def name(self) -> str:
        return f"file {self.path}"

    def exists(self) -> bool:
        return self.path.exists()

    def read(self) -> Mapping:
        return load_mapping(self.path, self.setting)

    def create(self, mapping: Mapping, *, note: str = "") -> Mapping:
        real = self.path.resolve()
        with self._locked(real.parent):
            if real.exists():
                raise MappingStoreError(str(self.path), "a mapping is already stored here; edit it instead")
            body = stored_text(None, None, mapping, str(self.path))
            self._record(mapping.version, history_text(mapping, note, body=body))
            atomic_write(real, body, _new_file(real.parent))
        return mapping

    def write(self, mapping: Mapping, *, expected: int, note: str = "") -> Mapping:
        real = self.path.resolve()
        with self._locked(real.parent):
            current_text = _read(real)
            current = parse_mapping(current_text, source=str(self.path))
            if current.version != expected:
                raise conflict(str(self.path), expected, current.version)
            self._keep_original(current, current_text)
            new = mapping.with_version(expected + 1)
            body = stored_text(current_text, current, new, str(self.path))
            ownership = ownership_of(real)
            _check_owner(self.path, ownership)  # refused before anything is written
            self._record(new.version, history_text(new, note, body=body))
            atomic_write(real, body, ownership)
        return new

    def history(self) -> list[VersionInfo]:
        out: dict[int, VersionInfo] = {}
        for number, path in self._history_files():
            out[number] = parse_history_header(_read(path), number)
        with contextlib.suppress(MappingError):
            current = self.read().version
            out.setdefault(current, VersionInfo(current))  # never written through the store yet
        return [out[v] for v in sorted(out)]

    def version(self, number: int) -> Mapping:
        for path in (self._history_file(number), self._legacy_history_file(number)):
            if path.exists():
                return parse_mapping(_read(path), source=str(path))
        current = self.read()
        if current.version == number:
            return current
        raise unknown_version(number, [v.version for v in self.history()])

    def record(self, mapping: Mapping, *, note: str = "") -> bool:
        number = mapping.version
        if self._history_file(number).exists() or self._legacy_history_file(number).exists():
            return False
        self._record(number, history_text(mapping, note))
        return True

    def fingerprint(self) -> object:
        try:
            st = self.path.stat()
        except OSError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def announce(self, relay: str, info: dict[str, Any]) -> None:
        pass  # each relay's status file says it (``relay mapping history -c`` reads it)

    def relays(self) -> list[dict[str, Any]]:
        return []

    def close(self) -> None:
        pass

    # -- internals ------------------------------------------------------------------------------
    def _history_file(self, number: int) -> Path:
        return self.history_dir / f"{number:08d}.yaml"

    def _legacy_history_file(self, number: int) -> Path:
        return self.legacy_history_dir / f"{number:08d}.yaml"

    def _history_files(self) -> Iterator[tuple[int, Path]]:
        """Every record, the state directory's first (a version in both is read from there)."""
        seen: set[int] = set()
        for folder in (self.history_dir, self.legacy_history_dir):
            if not folder.is_dir():
                continue
            for path in sorted(folder.glob("*.yaml")):
                if path.stem.isdigit() and int(path.stem) not in seen:
                    seen.add(int(path.stem))
                    yield int(path.stem), path

    def _keep_original(self, current: Mapping, text: str) -> None:
        """Before the first write through the store, keep the file as it is (comments included)."""
        target = self._history_file(current.version)
        if not target.exists() and not self._legacy_history_file(current.version).exists():
            self._record(current.version, text)

    def _record(self, number: int, text: str) -> None:
        """A history record, readable by whoever may read the mapping; its folder (and the record) owned
        by the state directory's owner when written as root, so the relay can keep versions there too."""
        state = ownership_of(self.history_dir.parent)
        if not self.history_dir.is_dir():
            try:
                self.history_dir.mkdir(parents=True, exist_ok=True)
                if state is not None and os.geteuid() == 0:
                    os.chown(self.history_dir, state.uid, state.gid)
            except OSError as exc:
                raise MappingStoreError(str(self.history_dir), f"cannot create: {exc}") from exc
        mapping_mode = ownership_of(self.path.resolve())
        mode = (mapping_mode.mode if mapping_mode is not None else 0o644) & 0o666 | 0o600
        if state is not None and os.geteuid() == 0:
            ownership = Ownership(mode, state.uid, state.gid)
        else:
            ownership = Ownership(mode, os.geteuid(), os.getegid())
        atomic_write(self._history_file(number), text, ownership)

    @contextlib.contextmanager
    def _locked(self, folder: Path) -> Iterator[None]:
        try:
            fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        except OSError as exc:
            why = (exc.strerror or str(exc)).lower()
            raise MappingStoreError(
                self.setting, f"cannot open {folder}, the folder of {self.path}: {why}"
            ) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the flock


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise MappingStoreError(str(path), f"cannot read: {exc}") from exc


def atomic_write(target: Path, text: str, ownership: Ownership | None = None) -> None:
    """Replace ``target`` with ``text`` atomically (``relay.common.atomic``), as a store error on failure."""
    try:
        _atomic_write_text(target, text, ownership=ownership)
    except OSError as exc:
        raise MappingStoreError(str(target), f"cannot write: {exc}") from exc


def _new_file(folder: Path) -> Ownership:
    """A new mapping file: mode 0644, owned like its folder when created as root."""
    owner = ownership_of(folder)
    if owner is not None and os.geteuid() == 0:
        return Ownership(0o644, owner.uid, owner.gid)
    return Ownership(0o644, os.geteuid(), os.getegid())


def _check_owner(path: Path, ownership: Ownership | None) -> None:
    """Refuse an edit that would hand the file to another owner or group (readers would lose it)."""
    if ownership is None or os.geteuid() == 0:
        return
    if ownership.uid != os.geteuid() or ownership.gid not in (os.getegid(), *os.getgroups()):
        raise MappingStoreError(
            str(path),
            f"owned by uid {ownership.uid} gid {ownership.gid}: an edit by uid {os.geteuid()} cannot keep "
            "that owner and group (relays reading it as that user could lose it); run the edit as root "
            "or as the file's owner. Nothing was stored",
        )
