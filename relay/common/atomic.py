"""Atomic file replacement, the one way this project writes state files (positions, mappings, status).

``atomic_write_text`` writes a temp file in the target's directory, fsyncs it, renames it over the
target and fsyncs the directory: a reader (or a restart after a crash) sees the old content or the
new, never a torn write. Raises ``OSError``; callers translate it into their stage's error.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def atomic_write_text(target: Path, text: str, *, durable: bool = True) -> None:
    """Replace ``target`` with ``text`` atomically; ``durable`` also fsyncs (skip it only for advisory
    files such as the status file, rewritten every second, where a lost update after a crash is harmless)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
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
