"""The change identity's numbers: the ``sequence`` of a row change and, where one place holds many, ``part``.

The change identity — what consumers de-duplicate by — is (source id, sequence); the sequence orders a
key's changes. It is ``(generation << 52) | (file_number << 32) | (event_start_offset + row_index)``:
``file_number`` is the numeric suffix of the binlog file name (``mysql-bin.000123`` → 123, below 2^20),
``generation`` the binlog history the entry was read in (``Entry.generation``, saved in the resume point,
below 2^11; +1 on a failover to the standby and on ``relay positions set``). Binlog offsets are 32-bit,
and a row index is smaller than its event's length, so ``start + row_index`` stays below the next
event's start: the sequence grows along a source's binlog (files are numbered in order), every later
generation sorts after every earlier one whatever its file numbers, and it depends only on where the
change is and the saved generation, so a re-published change gets the same number. The sequence is a
non-negative signed 64-bit integer for Java and Spark readers; generation 0 gives the numbers of earlier
versions. A file name without a numeric suffix, a file number, offset or generation past its bits raises
``SequenceError``: the relay stops rather than publish an unordered number.

Where several changes share one place — the rows of a transaction payload (``row_part``), the rows of a
snapshot chunk, the two records of a key change — ``part`` tells them apart and orders them: (source id,
sequence, part) is the identity.

Pure functions, no state but a small cache of file numbers: called per row on the publisher thread.
"""

from __future__ import annotations

from functools import lru_cache

from relay.canal.entry import Entry
from relay.common import binlog_names
from relay.errors import SequenceError
from relay.positions.store import MAX_GENERATION

MAX_OFFSET = 1 << 32
FILE_BITS = 20
GENERATION_SHIFT = 32 + FILE_BITS
MAX_FILE_NUMBER = (1 << FILE_BITS) - 1
assert MAX_GENERATION == (1 << (63 - GENERATION_SHIFT)) - 1  # the sequence stays below 2^63

# Rows of one event inside a transaction payload: the row's ordinal sits above bit 1 of ``part``, the
# payload event's ordinal above it (see ``row_part``).
MAX_PAYLOAD_ROWS = 1 << 21


@lru_cache(maxsize=1024)
def file_number(journal: str) -> int:
    """The numeric suffix of a binlog file name: ``mysql-bin.000123`` → 123 (``SequenceError`` when none)."""
    number = binlog_names.file_number(journal)
    if number is None:
        raise SequenceError(
            f"binlog file name {journal!r} has no numeric suffix (expected like mysql-bin.000123)"
        )
    if number > MAX_FILE_NUMBER:
        raise SequenceError(f"binlog file number of {journal!r} is above {MAX_FILE_NUMBER}")
    return number


def sequence(journal: str, offset: int, row_index: int, generation: int = 0) -> int:
    """The stable, monotonic order key of row ``row_index`` of the event at ``journal``:``offset``, read
    under binlog history ``generation`` (see the module docstring)."""
    if offset < 0 or row_index < 0 or offset + row_index >= MAX_OFFSET:
        raise SequenceError(
            f"binlog position {journal}:{offset} row {row_index} is outside 32-bit offsets; "
            "no sequence can order it"
        )
    if not 0 <= generation <= MAX_GENERATION:
        raise SequenceError(
            f"generation {generation} is outside 0..{MAX_GENERATION}; "
            f"no sequence can order {journal}:{offset}"
        )
    return (generation << GENERATION_SHIFT) | (file_number(journal) << 32) | (offset + row_index)


def entry_sequence(entry: Entry, row_index: int = 0) -> int:
    """``sequence`` of row ``row_index`` of ``entry``, under the generation it was read in."""
    h = entry.header
    return sequence(h.logfile_name, h.logfile_offset, row_index, entry.generation)


def row_part(entry: Entry, row_index: int) -> int | None:
    """The ``part`` of a row's records beyond its ``sequence``: None (0) for an event in its own place
    in the binlog; inside a transaction payload, where every event has the payload's place, the event's
    ordinal in the payload and the row's ordinal in the event, doubled so the two records of a key
    change (+0, +1) stay apart. (sequence, part) is then unique and in binlog order."""
    if entry.payload_index < 0:
        return None
    if row_index >= MAX_PAYLOAD_ROWS:
        raise SequenceError(
            f"{entry.header.logfile_name}:{entry.header.logfile_offset}: a payload event with more than "
            f"{MAX_PAYLOAD_ROWS} rows; no (sequence, part) can order it"
        )
    return ((entry.payload_index << 21) | row_index) << 1
