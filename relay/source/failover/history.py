"""What was put from the master, for the timestamp fallback: the digests of recent transactions' changes.

Threads: the instance's parser thread (``History.record`` from ``_put``).
"""

from __future__ import annotations

import hashlib
from collections import deque
from dataclasses import dataclass

from relay.canal.entry import Entry, EntryPosition, EntryType, RowChange


def digest(entry: Entry) -> bytes:
    """What identifies an entry's change on any server: table, kind, row images, DDL text.

    Positions, server ids and xids differ between a master and its replica; the changes do not.
    """
    h = entry.header
    value = entry.store_value
    parts: list[str] = [str(int(entry.entry_type)), h.schema_name, h.table_name]
    if isinstance(value, RowChange):
        parts += [str(int(value.event_type)), value.sql if value.is_ddl else ""]
        parts += [repr((row.before, row.after)) for row in value.rows]
    return hashlib.blake2b("\x1f".join(parts).encode("utf-8", "surrogateescape"), digest_size=16).digest()


DIGEST = 16  # bytes of one change's digest
# What a re-read transaction being matched may hold before its held changes are let go (module docstring
# of FingerprintSkip): the instance passes half the store's budget.
HOLD_BYTES = 8 << 20


@dataclass(slots=True)
class _Txn:
    """A transaction put: where and when it started, and its changes' digests, back to back (16 bytes
    each: ~64 bytes a change less than a list of ``bytes``, which matters for a large transaction)."""

    start: EntryPosition
    time_ms: int
    digests: bytearray
    closed: bool = False  # its END (or a closing statement) was put: nothing of it comes after

    @property
    def changes(self) -> int:
        return len(self.digests) // DIGEST

    def digest(self, k: int) -> bytes:
        return bytes(self.digests[k * DIGEST : (k + 1) * DIGEST])


class History:
    """The transactions recently put into the store (after the sink's filters), as the digests of their
    changes (ROWDATA entries: rows and statements), covering ``window_ms`` of binlog time: about 250 bytes
    a transaction and 16 a rows event (at most ``max_txns`` transactions)."""

    def __init__(self, window_ms: int, max_txns: int = 200_000) -> None:
        self.window_ms = window_ms
        self.txns: deque[_Txn] = deque(maxlen=max_txns)

    def record(self, entries: list[Entry]) -> None:
        for e in entries:
            last = self.txns[-1] if self.txns else None
            if e.entry_type == EntryType.ROWDATA:
                if last is None or last.start != e.txn.start:
                    last = _Txn(e.txn.start, e.header.execute_time, bytearray())
                    self.txns.append(last)
                last.digests += digest(e)
            # BEGIN/END carry no change (and the sink passes empty ones by its own clock): not compared
            if e.closes_txn and last is not None and last.start == e.txn.start:
                last.closed = True
        newest = self.txns[-1].time_ms if self.txns else 0
        while self.txns and self.txns[0].time_ms < newest - self.window_ms - 1_000:
            self.txns.popleft()
