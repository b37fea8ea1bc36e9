"""The parser loop of a canal instance: binlog source → entry builder → XA buffer → sink → failover
filter → read-ahead → ring store, on one parser thread; and the switch to the standby when the master
is gone (``relay.source.failover``).

Entries of the events that are already buffered are put into the store together: one lock round and one
wake-up per burst instead of per event. The burst ends as soon as reading would have to wait, so an idle
stream adds no latency. A transaction's entries are held back until it ends, or until it is read ahead
whole and found sound (``relay.source.read_ahead``), so that a change refused further in stops the
relay before anything of it can be published. Putting blocks while the store is full: that is the
back-pressure that pauses parsing.

Threads: ``open`` runs in the caller's thread at start (a misconfigured server is refused before
anything runs); everything else on the parser thread ``parser-<instance>``.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import replace

from relay.binlog.events import BinlogEvent, QueryEvent
from relay.canal.entry import Entry, EntryPosition
from relay.canal.entry_builder import BuilderConfig, EntryBuilder
from relay.canal.ring_store import RingStore
from relay.canal.sink import Sink
from relay.canal.statements import StatementDmlGuard
from relay.canal.xa import XaBuffer
from relay.config.sections import InstanceConfig
from relay.errors import RelayError, SourceError, SourceUnavailableError
from relay.positions.store import ResumePoint, already_published, next_generation, resume_after
from relay.schema.history import SchemaHistory
from relay.source.acks import AckPath
from relay.source.binlog_source import BinlogSource
from relay.source.failover import Failover
from relay.source.read_ahead import Pending, TransactionScan
from relay.source.reading import Reading
from relay.source.schema_start import attach_schema_history
from relay.source.snapshot_control import SnapshotControl
from relay.source.snapshot_entry import is_snapshot
from relay.source.start_point import StartPoint, resolve_start

log = logging.getLogger(__name__)

# The parser is at the binlog end (``AckPath.idle``: a caught-up point is saved at once) when this
# passes with no event and nothing held back.
IDLE_SECONDS = 0.01
# At the binlog end the last empty transaction the sink dropped is put (``Sink.pass_dropped``), so the
# saved position and the lag follow filtered-out traffic; at most once per this many seconds, so a
# trickle of uncaptured writes costs one empty batch (and position write) a second, not one per write.
DROPPED_PASS_SECONDS = 1.0


class _Cursor:
    """The parser loop's own state: the builder and XA buffer of the server read, what is already
    published at the start, and the start of the transaction read ahead and found sound."""

    def __init__(self, reading: Reading, xa_buffer_bytes: int, published: ResumePoint | None) -> None:
        self.builder = _builder(reading)
        self.xa = XaBuffer(xa_buffer_bytes)
        self.published = published
        self.scanned: EntryPosition | None = None

    def reading_standby(self, reading: Reading) -> None:
        """After a failover: a builder for the standby; nothing is skipped as published any more."""
        self.builder = _builder(reading)
        self.published = None

    def holding(self) -> bool:
        """A transaction is open and not read ahead whole: its entries are held back."""
        txn_start = self.builder.transaction_start
        return txn_start is not None and txn_start != self.scanned


def _builder(reading: Reading) -> EntryBuilder:
    assert reading.info is not None and reading.start_point is not None
    return EntryBuilder(BuilderConfig(mariadb=reading.info.mariadb, gtid_set=reading.start_point.gtid_set))


class ParserLoop:
    """Reads the binlog into the ring store on its own thread; fails over to the standby."""

    def __init__(
        self,
        config: InstanceConfig,
        reading: Reading,
        failover: Failover,
        store: RingStore,
        sink: Sink,
        acks: AckPath,
        snapshots: SnapshotControl,
        stopping: threading.Event,
        schema_history: SchemaHistory | None = None,
    ) -> None:
        self.config = config
        self.reading = reading
        self.failover = failover
        self.store = store
        self.sink = sink
        self.acks = acks
        self.snapshots = snapshots
        self.schema_history = schema_history
        self._stopping = stopping
        self.statements = StatementDmlGuard(config.source.statement_dml, sink.keeps_table)
        # The read-ahead (relay.source.read_ahead): what was read and not put, and the read ahead of a
        # transaction too large to hold back until its end.
        self.pending = Pending(store.config)
        self.scan = TransactionScan(config.name, self.statements, stopping)
        self.failover.hold_bytes = max(1, store.config.memory_budget // 2)
        self.last_put: Entry | None = None  # a failover continues after it
        self._dropped_passed = 0.0  # time.monotonic() when an empty transaction was last passed at the end
        self.failure: BaseException | None = None
        self._runner: threading.Thread | None = None

    # -- start (caller's thread) -----------------------------------------------------------------
    def open(self, saved: ResumePoint | None) -> None:
        """Check the server and open the source at the start point: the saved one, else the configured
        one; on the standby when the saved point was read there or the master is unreachable."""
        self.reading.generation = saved.generation if saved is not None else 0
        if self.failover.on_standby(saved):
            self._switch(saved, "the saved position was read from the standby", saved_there=True)
            return
        try:
            info = self.reading.info = self.failover.check_master(self.reading.source)
        except SourceUnavailableError as exc:
            if not self.failover.enabled:
                raise
            self._switch(saved, str(exc))
            return
        # With an XA transaction prepared and undecided at the save, reading starts at its PREPARE's
        # transaction; what was published after it is dropped again (``_published_before``).
        start = resolve_start(self.config.source, info, saved.read_from if saved is not None else None)
        self.reading.start_point = start
        self._attach_history(self.reading.source, start, standby=False)
        self.reading.source.open(start)
        self.failover.track(info, start)

    def start(self) -> None:
        self._runner = threading.Thread(target=self.run, name=f"parser-{self.config.name}", daemon=True)
        self._runner.start()

    @property
    def running(self) -> bool:
        return self._runner is not None and self._runner.is_alive()

    @property
    def last_event_ms(self) -> int:
        """The binlog time of the last entry read (kept or filtered out); 0 before the first."""
        return self.sink.last_seen_ms

    def join(self, timeout: float) -> None:
        if self._runner is not None:
            self._runner.join(timeout)

    # -- the loop (parser thread) ----------------------------------------------------------------
    def run(self) -> None:
        start = self.reading.start_point
        assert start is not None
        cursor = _Cursor(self.reading, self.config.source.xa_buffer_bytes, self._published_before(start))
        try:
            while not self._stopping.is_set():
                cursor = self._step(cursor)
        except RelayError as exc:
            if not self._stopping.is_set():
                log.error("instance %s: parser stopped: %s", self.config.name, exc)
                # What closed before the failing transaction is sound: it goes to the store, to be
                # published and acknowledged before the failure stops the consumer (get_without_ack).
                self.put(_closed_prefix(self.pending.take()))
                self.failure = exc
        except BaseException as exc:
            log.exception("instance %s: parser crashed", self.config.name)
            self.failure = exc
        finally:
            self.reading.source.close()

    def _step(self, cursor: _Cursor) -> _Cursor:
        """Read one event (or wait a little for one) and pass its entries on; a new cursor after a
        failover."""
        holding = cursor.holding()
        if self.reading.move_to is not None and not (
            holding or self.pending or cursor.builder.in_transaction
        ):
            _move_generation(self)
        snap = self.snapshots.snapshot
        if snap is not None and snap.failure is not None:
            # A reader stopped on an error it cannot retry: the relay stops with it (fail closed), after
            # what closed before is published; a restart continues from the checkpoint.
            raise snap.failure
        if holding and not self._room_to_hold():
            return cursor  # the store and the held entries are at the budget: wait for acks
        if self.pending and not holding:
            wait = 0.0  # put what is buffered as soon as reading would have to wait
        else:  # a short first wait tells the binlog end (``AckPath.idle``) early
            wait = self.config.poll_seconds if self.acks.idle else IDLE_SECONDS
        if snap is not None and snap.active:
            wait = min(wait, 0.005)  # a chunk waits for the parser to reach its watermark
        try:
            event = self.reading.source.read(wait)
        except SourceUnavailableError as exc:
            return self._unavailable(exc, cursor, holding)
        if event is None:
            if not holding:
                self._pass_dropped()  # before any snapshot chunk: chunks sit at the place read now
            if snap is not None:
                self._add_chunks(snap.due(cursor.builder.in_transaction, cursor.builder.gtid_set))
            if not holding:
                self.put(self.pending.take())
                if wait > 0 and not self.acks.idle:  # silent for a whole wait: at the binlog end
                    self.acks.at_binlog_end()
            return cursor
        self.acks.idle = False
        return self._handle(cursor, event)

    def _handle(self, cursor: _Cursor, event: BinlogEvent) -> _Cursor:
        """Build, filter and hold or put the entries of ``event``."""
        if isinstance(event, QueryEvent):
            self.statements.check(event)  # raises for statement-logged DML (stop)
        entries = cursor.xa.process(event, cursor.builder.build(event))
        # Read after the event arrived: an on-demand snapshot started meanwhile sees it.
        snap = self.snapshots.snapshot
        if snap is not None:
            snap.observe(event, entries)
        if cursor.published is not None and entries:
            entries, cursor.published = _drop_published(entries, cursor.published)
        entries = self.sink.process(entries)
        drop = self.reading.drop
        if drop is not None and entries:
            # After the sink: what the standby re-reads is compared with what was put.
            entries = drop.filter(entries)
        if entries:
            self.pending.add(entries)
        if snap is not None:
            self._add_chunks(snap.due(cursor.builder.in_transaction, cursor.builder.gtid_set))
        holding = cursor.holding()
        if not self.pending.due(holding):
            return cursor
        if holding:
            txn_start = cursor.builder.transaction_start
            assert txn_start is not None
            try:
                # Too large to hold until its end: read the rest ahead, with the same checks, before any
                # of it goes to the store (it raises what the parser would raise).
                self.scan.run(self.reading.source, txn_start)
            except SourceUnavailableError as exc:
                return self._unavailable(exc, cursor, holding)
            cursor.scanned = txn_start
        self.put(self.pending.take())
        return cursor

    def _pass_dropped(self) -> None:
        """At the binlog end the sink's last dropped empty transaction goes to the store (at most once per
        ``DROPPED_PASS_SECONDS``): the saved position follows filtered-out traffic (``relay.canal.sink``)."""
        now = time.monotonic()
        if not self.sink.holds_dropped or now - self._dropped_passed < DROPPED_PASS_SECONDS:
            return
        self._dropped_passed = now
        entries = self.sink.pass_dropped()
        drop = self.reading.drop
        if drop is not None and entries:
            entries = drop.filter(entries)
        self.pending.add(entries)

    def _add_chunks(self, chunks: list[Entry]) -> None:
        """Snapshot chunks due now: after them an empty transaction dropped before may not be passed."""
        if chunks:
            self.sink.forget_dropped()
            self.pending.add(chunks)

    def _room_to_hold(self) -> bool:
        """Entries held back count against the store's budget: True when the store holds less than the
        budget minus them, after waiting at most a poll for acknowledgements."""
        limit = self.pending.store_limit()
        return limit is None or self.store.await_below(limit, self.config.poll_seconds)

    def _published_before(self, start: StartPoint) -> ResumePoint | None:
        """What was published already at the place reading starts: skip entries up to it."""
        saved = self.acks.loaded
        if (
            saved is not None
            and saved.xa_journal
            and (start.journal, start.offset)
            == (
                saved.xa_journal,
                saved.xa_offset,
            )
        ):
            return saved  # reading from a held XA PREPARE: everything up to the saved point was published
        if start.skip:
            return ResumePoint(start.journal, start.offset, start.skip)
        return None

    def put(self, entries: list[Entry]) -> None:
        """Put ``entries``, a burst at a time (``Pending.bursts``), each waiting while the store is full."""
        generation = self.reading.generation
        if entries and generation:
            for e in entries:
                e.generation = generation
        for burst in self.pending.bursts(entries):
            while not self._stopping.is_set():
                if self.store.put(burst, timeout=self.config.poll_seconds):
                    break
            else:
                return
            # A failover continues the binlog after the last binlog entry put; snapshot chunks are
            # no binlog transaction (no time, nothing a standby re-reads): they are not recorded.
            binlog = burst if self.snapshots.snapshot is None else [e for e in burst if not is_snapshot(e)]
            if binlog:
                self.last_put = binlog[-1]
                if self.failover.recording:
                    self.failover.record(binlog)

    # -- failover (parser thread) ----------------------------------------------------------------
    def _unavailable(self, exc: SourceUnavailableError, cursor: _Cursor, holding: bool) -> _Cursor:
        """The server is gone (a read, or a read ahead, gave up): fail over to the standby, if there is
        one, after putting what is sound — not the held part of a transaction not read ahead: the
        standby reads it again whole, after the last entry put. Returns the cursor for the standby."""
        if not self.failover.enabled or self.reading.drop is not None:
            raise exc
        xa = cursor.xa
        if xa.prepared:  # fail closed: their entries and positions are the master's
            raise SourceError(
                f"instance {self.config.name}: cannot fail over while XA transactions are "
                f"prepared and undecided ({', '.join(xa.prepared)}): their changes were read "
                "from the master and are published only at their XA COMMIT"
            ) from exc
        held = self.pending.take()
        self.put(_closed_prefix(held) if holding else held)
        self._fail_over(exc)
        cursor.reading_standby(self.reading)
        return cursor

    def _fail_over(self, cause: SourceUnavailableError) -> None:
        """The master is gone: continue on the standby right after the last binlog entry put; with none
        put since a start without a saved position, where that start was (``Failover._from_start``).

        See ``relay.source.failover``.
        """
        last = self.last_put
        after = replace(resume_after(last), source=None) if last is not None else self.acks.loaded
        self._switch(after, str(cause), wait_acked=True)
        self.snapshots.move()

    def _switch(
        self, after: ResumePoint | None, reason: str, *, wait_acked: bool = False, saved_there: bool = False
    ) -> None:
        switch = self.failover.open_standby(
            after, reason, saved_there=saved_there, prepare=self._attach_history
        )
        if wait_acked:
            # Every entry of the master is acknowledged (its position saved under the master's
            # identity) before the source changes: a position never mixes two servers.
            _await_acked(self)
        old, self.reading.source = self.reading.source, switch.source
        old.close()
        if not saved_there:
            # Another binlog history from here on: its sequences must sort after the master's. The
            # master's entries are all acknowledged (or none were put: ``after`` is the saved point),
            # so this is the saved generation + 1, the same after a restart (relay.source.failover).
            self.reading.generation = next_generation(after)
        self.failover.stop_recording()
        self.reading.info, self.reading.start_point, self.reading.drop = (
            switch.info,
            switch.start,
            switch.drop,
        )

    def _attach_history(self, source: BinlogSource, start: StartPoint, *, standby: bool = True) -> None:
        """The source follows the schema history (``standby`` False: the master, at the start). A standby
        has records of its own (its binlog places are another numbering). Switching by GTID it continues
        right after the master's last event: the master's schema now is its schema at its start, carried
        over. Switching by timestamp it re-reads an overlap, so its definitions are read from it
        (``relay.source.schema_start``: refused when a DDL lies between its start and the read)."""
        master = self.reading.source.schema
        carry = master.catalog.copy() if standby and master is not None and not start.journal else None
        mode, captures = self.config.schema_history, self.config.captures
        attach_schema_history(source, self.schema_history, mode, start, carry, captures=captures)


def _await_acked(loop: ParserLoop) -> None:
    """Until every entry put is handed out and acknowledged (or the loop stops)."""
    while not loop._stopping.is_set():
        put, get, _ = loop.store.sequences
        if put == get and not loop.acks.outstanding():
            return
        loop._stopping.wait(loop.config.poll_seconds)


def _move_generation(loop: ParserLoop) -> None:
    """A move to a higher binlog generation asked for (``Reading.move_to``), at a transaction boundary with
    nothing read ahead (parser thread): once everything put is acknowledged, the position is saved under
    it, the entries put from now on carry it, and what waited for it starts (a repair's snapshot)."""
    _await_acked(loop)
    reading = loop.reading
    target, then = reading.move_to, reading.after_move
    if loop._stopping.is_set() or target is None:
        return
    loop.acks.move_generation(target)
    reading.generation = target
    reading.move_to = reading.after_move = None
    log.warning("instance %s: publishing under binlog generation %d from here", loop.config.name, target)
    if then is not None:
        then()


def _closed_prefix(entries: list[Entry]) -> list[Entry]:
    """``entries`` up to the last one that closes a transaction (nothing of an open one)."""
    for i in range(len(entries) - 1, -1, -1):
        if entries[i].closes_txn:
            return entries[: i + 1]
    return []


def _drop_published(entries: list[Entry], point: ResumePoint) -> tuple[list[Entry], ResumePoint | None]:
    """Drop the entries published before ``point``; None once an entry past it was seen."""
    for i, e in enumerate(entries):
        if not already_published(e, point):
            return entries[i:], None
    return [], point
