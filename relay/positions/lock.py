"""Who holds an instance's file position: an exclusive ``flock`` on ``<position file>.lock``.

``Relay.run`` (the publisher thread) takes the lock before it starts and releases it when it returns,
so a second relay of the same instance on the same host refuses to start, and ``relay positions set``
refuses to move a position a running relay would overwrite. The kernel releases the lock when the
process dies (SIGKILL, OOM), so a crash never leaves a stale lock behind; the pid written into the
file is only for people reading it.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from relay.errors import PositionError


def lock_path(position_path: Path) -> Path:
    return position_path.with_name(position_path.name + ".lock")


class InstanceLock:
    """An exclusive, non-blocking lock on one instance's position; ``acquire`` → ``release``."""

    def __init__(self, position_path: Path) -> None:
        self.path = lock_path(position_path)
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock, or raise ``PositionError`` naming the holder's pid."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise PositionError(f"cannot open the instance lock {self.path}: {exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = _read_pid(fd)
            os.close(fd)
            raise PositionError(
                f"another relay process (pid {holder or '?'}) holds {self.path}: it is running this instance"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> InstanceLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def holder(position_path: Path) -> int | None:
    """The pid of the process holding the lock (0 when unknown), or None when nobody holds it."""
    path = lock_path(position_path)
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise PositionError(f"cannot open the instance lock {path}: {exc}") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return _read_pid(fd) or 0
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode(errors="replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
