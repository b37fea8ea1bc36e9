"""Atomic file replacement, the one way this project writes state files (positions, mappings, status).

``atomic_write_text`` writes a temp file in the target's directory, fsyncs it, renames it over the
target and fsyncs the directory: a reader (or a restart after a crash) sees the old content or the
new, never a torn write. A temp file is created with mode 0600; ``mode`` and ``owner`` give the new file
its permissions and owner before the rename (``ownership_of`` reads them from a file being replaced),
so that replacing a file other users read — the mapping, read by relays running as another user —
does not leave it unreadable to them. Raises ``OSError`` (``PermissionError`` when the owner cannot be
given); callers translate it into their stage's error.
"""

from __future__ import annotations

import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Ownership:
    """Permission bits, owner and group to give a file."""

    mode: int
    uid: int
    gid: int


def ownership_of(path: Path) -> Ownership | None:
    """The permission bits, owner and group of ``path`` (following links), or None when it is absent."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return Ownership(stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid)


def atomic_write_text(
    target: Path, text: str, *, durable: bool = True, ownership: Ownership | None = None
) -> None:
    """Replace ``target`` with ``text`` atomically; ``durable`` also fsyncs (skip it only for advisory
    files such as the status file, rewritten every second, where a lost update after a crash is harmless).
    ``ownership``: the new file's mode, owner and group (changing the owner needs root, or the owner's
    own uid and one of its groups)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            if ownership is not None:
                _give(fh.fileno(), ownership)
            if durable:
                os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if not durable:
        return
    dir_fd = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _give(fd: int, ownership: Ownership) -> None:
    st = os.fstat(fd)
    if (st.st_uid, st.st_gid) != (ownership.uid, ownership.gid):
        os.fchown(fd, ownership.uid, ownership.gid)  # before the mode: chown clears set-id bits
    os.fchmod(fd, ownership.mode)
