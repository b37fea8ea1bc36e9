"""The parser's read-ahead: a transaction held back until it ends, within the store's memory budget.

Owned here: ``Pending`` — the entries the parser thread has read and not yet put into the ring store,
their weight, and when they are due — and ``TransactionScan``, the validating read ahead of a
transaction too large to hold.

Why hold back at all: a change the relay cannot capture exactly (an incomplete row image, a DML
logged as a statement, a TABLE_MAP the schema history cannot verify, an event it cannot decode) must
stop the relay before anything of its transaction is published. So a transaction's entries stay here
until its end, and a refusal inside it leaves nothing of it in the store.

Why memory stays bounded whatever the transaction's size: what is held counts against the store's
budget (``store.buffer_size x store.memunit``, weighed as the store weighs entries: their decoded size
with ``store.entry_weight: memory``) — while the store and the held entries together reach it, the
parser reads no further (``RingStore.await_below``) — and once the held entries weigh half the budget
(or fill half the store's slots), the rest of the transaction is read ahead on a second replication
connection (``BinlogSource.side_stream``, under ``source.server_id`` with bit 31 flipped) with the
same checks, decoding every row and keeping nothing. A refusal there is raised before anything of the
transaction is put. Once it reached the transaction's end sound, the held entries go to the store,
and the rest of the transaction follows from the parser's own connection as it is read, in bursts of
at most a sixteenth of the budget (and ``PUT_BURST`` entries), waiting for room like any other put.
So the store, plus what the parser holds, stays within the budget plus one burst and one event;
the cost of a large transaction is a second read and decode of its events, not memory. Its order, its
entries' numbering (``txn_index``) and so its records, their change identities and the resume points
inside it are those of any transaction: the read ahead only reads.

Threads: the parser thread only (``relay.source.instance``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

from relay.binlog.events import QueryEvent
from relay.canal.entry import Entry, EntryPosition
from relay.canal.entry_builder import BuilderConfig, EntryBuilder
from relay.canal.statements import StatementDmlGuard
from relay.config.sections import BatchMode, StoreConfig
from relay.errors import SourceConnectionError, SourceUnavailableError
from relay.source.binlog_source import BinlogSource

log = logging.getLogger(__name__)

PUT_BURST = 256  # most entries put into the store in one call
BURST_SHARE = 16  # a burst weighs at most budget / BURST_SHARE
HOLD_SHARE = 2  # a transaction is held back up to budget / HOLD_SHARE (and half the slots)


class Pending:
    """Entries read and not yet put, in binlog order. Not thread-safe: the parser thread only."""

    def __init__(self, config: StoreConfig) -> None:
        slots = config.buffer_size
        self.burst_entries = max(1, min(PUT_BURST, slots // 4))
        self.hold_entries = max(self.burst_entries, slots // HOLD_SHARE)
        # MEMSIZE: weighed as the store weighs them; ITEMSIZE bounds entries only (budget 0).
        self.budget = config.memory_budget if config.batch_mode is BatchMode.MEMSIZE else 0
        self.by_memory = config.by_memory
        self.burst_weight = max(1, self.budget // BURST_SHARE)
        self.hold_weight = max(1, self.budget // HOLD_SHARE)
        self.entries: list[Entry] = []
        self.weight = 0

    def __bool__(self) -> bool:
        return bool(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def weigh(self, entry: Entry) -> int:
        return entry.footprint if self.by_memory else entry.size

    def add(self, entries: list[Entry]) -> None:
        self.entries.extend(entries)
        if self.budget:
            for e in entries:
                self.weight += e.footprint if self.by_memory else e.size

    def take(self) -> list[Entry]:
        """Everything pending, which is then empty."""
        out, self.entries, self.weight = self.entries, [], 0
        return out

    def due(self, holding: bool) -> bool:
        """Time to put (or, ``holding`` an open transaction not read ahead yet, to read it ahead)."""
        if holding:
            return len(self.entries) >= self.hold_entries or (
                self.budget > 0 and self.weight >= self.hold_weight
            )
        return len(self.entries) >= self.burst_entries or (
            self.budget > 0 and self.weight >= self.burst_weight
        )

    def store_limit(self) -> int | None:
        """While holding: the fill the store must be below for the parser to read on (the held entries
        count against the budget); None without a byte budget or with nothing held."""
        if not self.budget or not self.weight:
            return None
        return max(1, self.budget - self.weight)

    def bursts(self, entries: list[Entry]) -> Iterator[list[Entry]]:
        """``entries`` in consecutive slices of at most one burst (entries and weight; an entry heavier
        than a burst makes one of its own)."""
        first, n = 0, len(entries)
        while first < n:
            end, weight = first, 0
            while end < n and end - first < self.burst_entries:
                if self.budget:
                    weight += self.weigh(entries[end])
                    if end > first and weight > self.burst_weight:
                        break  # one entry heavier than a burst still goes, alone
                end += 1
            yield entries[first:end]
            first = end


class TransactionScan:
    """Reads one transaction to its end on a second connection, with the parser's checks, keeping
    nothing (module docstring): it raises what reading the transaction on the parser's stream would
    raise, before anything of it is put. A lost connection is retried from the transaction's start
    with the source's backoff (``source.retry``); when that runs out, ``SourceUnavailableError``, as
    the parser's own read would raise (with a standby: a failover)."""

    def __init__(self, name: str, statements: StatementDmlGuard, stopping: threading.Event) -> None:
        self.name = name
        self.statements = statements
        self.stopping = stopping
        self.scans = 0  # transactions read ahead (status, tests)

    def run(self, source: BinlogSource, start: EntryPosition) -> None:
        log.info(
            "instance %s: reading ahead the large transaction at %s:%d",
            self.name,
            start.journal,
            start.offset,
        )
        self.scans += 1
        backoff = source.config.retry.start(sleep=self.stopping.wait)
        while not self.stopping.is_set():
            try:
                self._read(source, start)
                return
            except SourceConnectionError as exc:
                log.warning(
                    "instance %s: reading ahead the transaction at %s:%d: %s; again (try %d)",
                    self.name, start.journal, start.offset, exc, backoff.tries + 1,
                )  # fmt: skip
                if not backoff.wait():
                    raise SourceUnavailableError(
                        f"{source.config.address}: reading ahead the transaction at {start.journal}:"
                        f"{start.offset}: gave up after {backoff.tries} tries: {exc}"
                    ) from exc

    def _read(self, source: BinlogSource, start: EntryPosition) -> None:
        assert source.info is not None
        side = source.side_stream(start.journal, start.offset, checked=True)
        builder = EntryBuilder(BuilderConfig(mariadb=source.info.mariadb, gtid_set=None))
        deadline = source.config.read_timeout
        try:
            while not self.stopping.is_set():
                event = side.read(timeout=deadline)
                if event is None:
                    raise SourceConnectionError(
                        f"reading ahead the transaction at {start.journal}:{start.offset}: no event within "
                        f"{deadline} s"
                    )
                if event.header.artificial:
                    continue
                if isinstance(event, QueryEvent):
                    self.statements.check(event)
                built = builder.build(event)
                if any(e.closes_txn for e in built):
                    return
                begun = builder.transaction_start
                if begun is not None and begun != start and built:
                    return  # abandoned (a new transaction began inside it): so will the parser's builder
        finally:
            side.close()
