"""Binlog file names (``mysql-bin.000123``): their number, their order, and bytes between two places.

One definition for every stage that reads names: the source orders files when it searches by time, the
codec numbers changes by file, the metrics exporter shows the file index, ``relay status`` the lag in
bytes. Pure functions.
"""

from __future__ import annotations

import re

_NUMBER = re.compile(r"\.(\d+)$")


def file_number(journal: str) -> int | None:
    """The numeric suffix of a binlog file name (``mysql-bin.000123`` → 123); None when it has none."""
    match = _NUMBER.search(journal)
    return int(match.group(1)) if match else None


def file_order(journal: str) -> tuple[str, int]:
    """A sort key for binlog file names: base name, then the number (which grows past its zero padding)."""
    number = file_number(journal)
    base = journal[: journal.rfind(".")] if number is not None else journal
    return (base, number if number is not None else 0)


def bytes_behind(binlogs: tuple[tuple[str, int], ...], journal: str, offset: int) -> int | None:
    """Bytes of binlog written after ``journal:offset`` (None when the file is no longer on the server).

    ``binlogs`` is ``SHOW BINARY LOGS``: (name, size) of each file, oldest first.
    """
    names = [name for name, _ in binlogs]
    if journal not in names:
        return None
    i = names.index(journal)
    return max(0, binlogs[i][1] - offset) + sum(size for _, size in binlogs[i + 1 :])
