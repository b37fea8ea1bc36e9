"""One canal instance: source → entry builder → XA buffer → sink → ring store, behind canal's streaming API.

Fail closed on changes that cannot be captured exactly: the decoder refuses incomplete row images
(``IncompleteRowImageError``), ``relay.canal.statements`` statement-logged DML on captured tables, and
``relay.canal.xa`` holds prepared XA transactions until their decision. A transaction's entries are
kept back from the store until it ends (up to half the store), so such a refusal stops the relay before
anything of that transaction can be published; what closed before it is still published and
acknowledged, then the failure is raised to the consumer.

The composition root of the canal core. Like canal's ``CanalInstanceWithSpring`` it starts the
downstream end first (positions → store → server) and the parser last, and stops the parser first.

Threads: ``start()`` checks the server and resolves the start position in the caller's thread (so a
misconfigured server is refused before anything runs), then one parser thread reads the binlog,
builds entries, filters them and puts them into the store (blocking while the store is full — that is
the back-pressure that pauses parsing). Consumers call ``get_without_ack`` / ``ack`` / ``rollback``
from their own thread; ``ack`` saves the resume point of the acknowledged prefix.

With a standby configured (``source.standby``), a master that stays unreachable for
``source.failover.attempts`` reconnects is replaced, on the parser thread, by the standby, continuing
right after the last entry put (``relay.source.failover``); the entries read from the standby carry
the next generation (``Entry.generation``, saved in the resume point after them).
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from relay.binlog.events import QueryEvent
from relay.canal.entry import Entry, EntryPosition
from relay.canal.entry_builder import BuilderConfig, EntryBuilder
from relay.canal.ring_store import RingStore
from relay.canal.server import EmbeddedServer, Message
from relay.canal.sink import Sink, SinkConfig
from relay.canal.statements import StatementDmlGuard
from relay.canal.xa import XaBuffer
from relay.config.sections import SnapshotConfig, SourceConfig, StoreConfig
from relay.errors import RelayError, ServerError, SourceError, SourceUnavailableError
from relay.positions.store import PositionStore, ResumePoint, already_published, next_generation, resume_after
from relay.schema.history import SchemaHistory
from relay.source.binlog_source import BinlogSource, ServerInfo, StartPoint, resolve_start
from relay.source.failover import EntryFilter, Failover, master_config, standby_config
from relay.source.read_ahead import Pending, TransactionScan
from relay.source.schema_start import attach_schema_history
from relay.source.snapshot import (
    EXTRA_KEY,
    Snapshot,
    SnapshotEntry,
    captured_tables,
    check_where,
    compacted,
    is_snapshot,
    plan,
    state_rows,
)

log = logging.getLogger(__name__)

# The parser is at the binlog end (``_idle``: a caught-up point is saved at once) when this passes
# with no event and nothing held back.
IDLE_SECONDS = 0.01
NO_CAPTURED_TABLE = "no captured table matches"  # request_snapshot's answer when no table is left


@dataclass(frozen=True)
class InstanceConfig:
    """Everything one canal instance needs; built from the YAML config by ``relay.wiring``."""

    name: str = "default"
    source: SourceConfig = field(default_factory=SourceConfig)
    store: StoreConfig = field(default_factory=StoreConfig)
    sink: SinkConfig = field(default_factory=SinkConfig)
    poll_seconds: float = 0.2  # how often the parser thread looks at its stop flag while waiting
    # positions.save_interval_seconds: > 0: a writer thread saves the point after the last ack, at most
    # once per interval (acks never wait on the disk or ZooKeeper); 0: every ack saves, on its thread.
    save_interval_seconds: float = 0.1
    schema_history: str = "off"  # schema.history: off (FULL metadata required), auto, always
    # Snapshots (relay.source.snapshot): the settings, and which physical tables are captured (the
    # mapping and the sink filters, decided by relay.wiring); None: no snapshots.
    snapshot: SnapshotConfig = field(default_factory=SnapshotConfig)
    captures: Callable[[str, str], bool] | None = None


class CanalInstance:
    """A running canal instance. ``start`` → ``get_without_ack``/``ack``/``rollback`` → ``stop``."""

    def __init__(
        self,
        config: InstanceConfig,
        positions: PositionStore,
        schema_history: SchemaHistory | None = None,
    ) -> None:
        self.config = config
        self.positions = positions
        self.failover = Failover(config.source)
        self.source = BinlogSource(master_config(config.source))
        # Names and keys where the server writes no full row metadata; kept and checked against FULL
        # metadata where it does (relay.source.schema_start).
        self.schema_history = schema_history
        self.source.accept_schema_history = schema_history is not None and config.schema_history != "off"
        self.failover.accept_schema_history = self.source.accept_schema_history
        self.store = RingStore(config.store)
        self.server = EmbeddedServer(self.store)
        self.sink = Sink(config.sink)
        self.statements = StatementDmlGuard(config.source.statement_dml, self.sink.keeps_table)
        # The parser's read-ahead (relay.source.read_ahead): what it has read and not put, and the
        # read ahead of a transaction too large to hold back until its end.
        self._pending = Pending(self.store.config)
        self.failover.hold_bytes = max(1, self.store.config.memory_budget // 2)
        self.info: ServerInfo | None = None
        self.start_point: StartPoint | None = None
        self.last_saved: ResumePoint | None = None  # written to the position store
        self.last_acked: ResumePoint | None = None  # after the last acked batch (written, or about to be)
        self.save_failure: BaseException | None = None  # what stopped the position writer, if anything
        self._saved_at = 0.0  # time.monotonic() of the last position write
        # The parser waited a whole poll at the binlog end with nothing held back (set by the parser).
        self._idle = False
        self._caught_up_saved_at = 0.0  # time.monotonic() of the last write of a caught-up point
        self._save_lock = threading.Lock()  # one write at a time; taken before ``_lock``, never after
        self._writer: threading.Thread | None = None
        self._resume: dict[int, ResumePoint] = {}
        self._stopping = threading.Event()
        self._scan = TransactionScan(config.name, self.statements, self._stopping)
        self._parser_thread: threading.Thread | None = None
        self._failure: BaseException | None = None
        self._lock = threading.Lock()
        self._acked = threading.Condition(self._lock)  # the writer waits on it for a new acked point
        # Failover (``relay.source.failover``): what the standby must drop, the last entry put, the saved
        # point.
        self._drop: EntryFilter | None = None  # set once reading the standby
        self._last_put: Entry | None = None
        self._saved: ResumePoint | None = None
        # The binlog history being read (``ResumePoint.generation``): the saved one, + 1 on a failover.
        self.generation = 0
        # The mapping version the batches taken now are published under (set by the publisher thread);
        # stamped on their resume points (``ResumePoint.mapping_version``).
        self.mapping_version: int | None = None
        self.started = threading.Event()  # set once the server is checked and the parser thread runs
        # The running snapshot, if any, and its checkpoint as of the last batch handed out (saved in
        # every resume point's ``extra``, so a restart continues it).
        self.snapshot: Snapshot | None = None
        self._snapshot_state: dict[str, Any] | None = None
        self._snapshot_fresh: dict[str, Any] | None = None  # the running snapshot's state before any chunk
        self._cancelled: tuple[str, dict[str, Any]] | None = None  # the id and end state of a cancelled one

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> None:
        saved = self._saved = self.positions.load()
        self.generation = saved.generation if saved is not None else 0
        if self.failover.on_standby(saved):
            self._switch(saved, "the saved position was read from the standby", saved_there=True)
        else:
            try:
                self.info = self.failover.check_master(self.source)
            except SourceUnavailableError as exc:
                if not self.failover.enabled:
                    raise
                self._switch(saved, str(exc))
            else:
                # With an XA transaction prepared and undecided at the save, reading starts at its
                # PREPARE's transaction; what was published after it is dropped again (``_run_parser``).
                self.start_point = resolve_start(
                    self.config.source, self.info, saved.read_from if saved is not None else None
                )
                history, mode = self.schema_history, self.config.schema_history
                attach_schema_history(self.source, history, mode, self.start_point)
                self.source.open(self.start_point)
                self.failover.track(self.info, self.start_point)
        self._begin_snapshot(saved)  # on whichever server the parser reads
        self._parser_thread = threading.Thread(
            target=self._run_parser, name=f"parser-{self.config.name}", daemon=True
        )
        self._parser_thread.start()
        self.started.set()

    @property
    def saved_point(self) -> ResumePoint | None:
        """The position after the last acknowledged batch (written, or written by the next
        ``save_pending``), else the one this run started from."""
        return self.last_acked or self.last_saved or self._saved

    @property
    def acked_sequence(self) -> int:
        """The store's ack sequence (the last entry acknowledged); -1 before any."""
        return self.store.sequences[2]

    def snapshot_status(self) -> dict[str, Any] | None:
        """The running snapshot's progress (read by the status file and the metrics), or None."""
        if self.snapshot is None:
            return None
        status = self.snapshot.status()
        saved = self.saved_point
        acked = saved.extra.get(EXTRA_KEY) if saved is not None else None
        # "read": every chunk is in the store; "done": every chunk is acknowledged (in Kafka).
        status["read"] = status["done"]
        if isinstance(acked, dict) and acked.get("id") == status["id"]:
            status["acked_rows"] = state_rows(acked)
            status["done"] = bool(acked.get("done"))
        else:
            status["acked_rows"] = 0
            status["done"] = False
        return status

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the parser first, then the store; unacknowledged batches are simply not saved."""
        self._stopping.set()
        with self._acked:
            self._acked.notify()
        if self._writer is not None:
            self._writer.join(timeout)
        try:  # what was acked is in Kafka: write its position rather than re-read it on the next start
            self.save_pending()
        except RelayError as exc:
            log.warning("instance %s: could not save the position at stop: %s", self.config.name, exc)
        if self.snapshot is not None:
            self.snapshot.stop()
        self.store.close()
        if self._parser_thread is not None:
            self._parser_thread.join(timeout)
        self.source.close()
        if self.schema_history is not None:
            self.schema_history.close()

    @property
    def running(self) -> bool:
        return self._parser_thread is not None and self._parser_thread.is_alive()

    @property
    def failure(self) -> BaseException | None:
        return self._failure

    # -- parser thread ---------------------------------------------------------------------------
    def _run_parser(self) -> None:
        assert self.start_point is not None and self.info is not None
        start = self.start_point
        builder = EntryBuilder(BuilderConfig(mariadb=self.info.mariadb, gtid_set=start.gtid_set))
        xa = XaBuffer(self.config.source.xa_buffer_bytes)
        published = self._published_before(start)
        # Entries of the events that are already buffered are put into the store together: one lock
        # round and one wake-up per burst instead of per event. The burst ends as soon as reading would
        # have to wait, so an idle stream adds no latency. A transaction's entries are held back until
        # it ends, or until it is read ahead whole and found sound (``relay.source.read_ahead``), so
        # that a change refused further in stops the relay before anything of it can be published.
        pending = self._pending
        scanned: EntryPosition | None = None  # the start of the transaction read ahead and found sound
        try:
            while not self._stopping.is_set():
                txn_start = builder.transaction_start
                holding = txn_start is not None and txn_start != scanned
                snap = self.snapshot
                if snap is not None and snap.failure is not None:
                    # A reader stopped on an error it cannot retry: the relay stops with it (fail closed),
                    # after what closed before is published; a restart continues from the checkpoint.
                    raise snap.failure
                if holding and not self._room_to_hold():
                    continue  # the store and the held entries are at the budget: wait for acks
                try:
                    if pending and not holding:
                        wait = 0.0  # put what is buffered as soon as reading would have to wait
                    else:  # a short first wait tells the binlog end (``_idle``) early
                        wait = self.config.poll_seconds if self._idle else IDLE_SECONDS
                    if snap is not None and snap.active:
                        wait = min(wait, 0.005)  # a chunk waits for the parser to reach its watermark
                    event = self.source.read(wait)
                except SourceUnavailableError as exc:
                    builder = self._unavailable(exc, xa, holding)
                    published = None
                    continue
                if event is None:
                    if snap is not None:
                        pending.add(snap.due(builder.in_transaction, builder.gtid_set))
                    if not holding:
                        self._put(pending.take())
                        if wait > 0 and not self._idle:  # silent for a whole wait: at the binlog end
                            self._idle = True
                            with self._acked:
                                self._acked.notify()  # the writer may now write the last acked point
                    continue
                self._idle = False
                if isinstance(event, QueryEvent):
                    self.statements.check(event)  # raises for statement-logged DML (stop)
                entries = builder.build(event)
                entries = xa.process(event, entries)
                # Read after the event arrived: an on-demand snapshot started meanwhile sees it.
                snap = self.snapshot
                if snap is not None:
                    snap.observe(event, entries)
                if published is not None and entries:
                    entries, published = _drop_published(entries, published)
                entries = self.sink.process(entries)
                if self._drop is not None and entries:
                    # After the sink: what the standby re-reads is compared with what was put.
                    entries = self._drop.filter(entries)
                if entries:
                    pending.add(entries)
                if snap is not None:
                    pending.add(snap.due(builder.in_transaction, builder.gtid_set))
                txn_start = builder.transaction_start
                holding = txn_start is not None and txn_start != scanned
                if pending.due(holding):
                    if holding:
                        assert txn_start is not None
                        try:
                            # Too large to hold until its end: read the rest ahead, with the same checks,
                            # before any of it goes to the store (it raises what the parser would raise).
                            self._scan.run(self.source, txn_start)
                        except SourceUnavailableError as exc:
                            builder = self._unavailable(exc, xa, holding)
                            published = None
                            continue
                        scanned = txn_start
                    self._put(pending.take())
        except RelayError as exc:
            if not self._stopping.is_set():
                log.error("instance %s: parser stopped: %s", self.config.name, exc)
                # What closed before the failing transaction is sound: it goes to the store, to be
                # published and acknowledged before the failure stops the consumer (get_without_ack).
                self._put(_closed_prefix(pending.take()))
                self._failure = exc
        except BaseException as exc:
            log.exception("instance %s: parser crashed", self.config.name)
            self._failure = exc
        finally:
            self.source.close()

    def _unavailable(self, exc: SourceUnavailableError, xa: XaBuffer, holding: bool) -> EntryBuilder:
        """The server is gone (a read, or a read ahead, gave up): fail over to the standby, if there is
        one, after putting what is sound — not the held part of a transaction not read ahead: the
        standby reads it again whole, after the last entry put. Returns the builder for the standby."""
        if not self.failover.enabled or self._drop is not None:
            raise exc
        if xa.prepared:  # fail closed: their entries and positions are the master's
            raise SourceError(
                f"instance {self.config.name}: cannot fail over while XA transactions are "
                f"prepared and undecided ({', '.join(xa.prepared)}): their changes were read "
                "from the master and are published only at their XA COMMIT"
            ) from exc
        held = self._pending.take()
        self._put(_closed_prefix(held) if holding else held)
        self._fail_over(exc)
        assert self.start_point is not None and self.info is not None
        return EntryBuilder(BuilderConfig(mariadb=self.info.mariadb, gtid_set=self.start_point.gtid_set))

    def _room_to_hold(self) -> bool:
        """Entries held back count against the store's budget: True when the store holds less than the
        budget minus them, after waiting at most a poll for acknowledgements."""
        limit = self._pending.store_limit()
        return limit is None or self.store.await_below(limit, self.config.poll_seconds)

    def _published_before(self, start: StartPoint) -> ResumePoint | None:
        """What was published already at the place reading starts: skip entries up to it."""
        saved = self._saved
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

    def _put(self, entries: list[Entry]) -> None:
        """Put ``entries``, a burst at a time (``Pending.bursts``), each waiting while the store is full."""
        if entries and self.generation:
            for e in entries:
                e.generation = self.generation
        for burst in self._pending.bursts(entries):
            while not self._stopping.is_set():
                if self.store.put(burst, timeout=self.config.poll_seconds):
                    break
            else:
                return
            # A failover continues the binlog after the last binlog entry put; snapshot chunks are
            # no binlog transaction (no time, nothing a standby re-reads): they are not recorded.
            binlog = burst if self.snapshot is None else [e for e in burst if not is_snapshot(e)]
            if binlog:
                self._last_put = binlog[-1]
                if self.failover.recording:
                    self.failover.record(binlog)

    # -- failover (parser thread) ----------------------------------------------------------------
    def _fail_over(self, cause: SourceUnavailableError) -> None:
        """The master is gone: continue on the standby right after the last binlog entry put; with none
        put since a start without a saved position, where that start was (``Failover._from_start``).

        See ``relay.source.failover``.
        """
        last = self._last_put
        after = replace(resume_after(last), source=None) if last is not None else self._saved
        self._switch(after, str(cause), wait_acked=True)
        self._move_snapshot()

    def _switch(
        self, after: ResumePoint | None, reason: str, *, wait_acked: bool = False, saved_there: bool = False
    ) -> None:
        prepare = self._attach_history
        switch = self.failover.open_standby(after, reason, saved_there=saved_there, prepare=prepare)
        if wait_acked:
            # Every entry of the master is acknowledged (its position saved under the master's
            # identity) before the source changes: a position never mixes two servers.
            self._await_acked()
        old, self.source = self.source, switch.source
        old.close()
        if not saved_there:
            # Another binlog history from here on: its sequences must sort after the master's. The
            # master's entries are all acknowledged (or none were put: ``after`` is the saved point),
            # so this is the saved generation + 1, the same after a restart (relay.source.failover).
            self.generation = next_generation(after)
        self.failover.stop_recording()
        self.info, self.start_point, self._drop = switch.info, switch.start, switch.drop

    def _attach_history(self, source: BinlogSource, start: StartPoint) -> None:
        """The standby's source follows the schema history too, with records of its own (its binlog
        places are another numbering). Switching by GTID, the standby continues right after the
        master's last event: the master's schema now is the standby's at its start, carried over.
        Switching by timestamp it re-reads an overlap, so its definitions are read from it
        (``relay.source.schema_start``: refused when a DDL lies between its start and the read)."""
        master = self.source.schema
        carry = master.catalog.copy() if master is not None and not start.journal else None
        attach_schema_history(source, self.schema_history, self.config.schema_history, start, carry)

    def _await_acked(self) -> None:
        while not self._stopping.is_set():
            put, get, _ = self.store.sequences
            with self._lock:
                outstanding = bool(self._resume)
            if put == get and not outstanding:
                return
            self._stopping.wait(self.config.poll_seconds)

    # -- streaming API ---------------------------------------------------------------------------
    def _raise_failure(self) -> None:
        if self._failure is not None:
            raise self._failure
        if self.snapshot is not None and self.snapshot.failure is not None:
            raise self.snapshot.failure

    def get_without_ack(self, batch_size: int, timeout: float | None = None) -> Message:
        """The next batch. Once the parser has failed, what it put before is still handed out; the
        failure is raised when nothing is left and every batch handed out was acknowledged (or rolled
        back), so the saved position reaches the failing transaction but never passes it."""
        if self._failure is not None:
            message = self.server.get_without_ack(batch_size, None)  # None: take what is there, no wait
            if not message.entries:
                with self._lock:
                    outstanding = bool(self._resume)
                if not outstanding:
                    self._raise_failure()
                self._stopping.wait(min(timeout or 0.0, self.config.poll_seconds))
        else:
            message = self.server.get_without_ack(batch_size, timeout)
        if message.entries:
            point = replace(
                resume_after(message.entries[-1]),
                source=self.source.identity,
                mapping_version=self.mapping_version,
                extra=self._snapshot_extra(message.entries),
            )
            with self._lock:
                self._resume[message.batch_id] = point
        return message

    def resume_point(self, batch_id: int) -> ResumePoint:
        """The point ``ack(batch_id)`` will save (exactly-once mode writes it before the ack)."""
        with self._lock:
            point = self._resume.get(batch_id)
        if point is None:
            raise ServerError(f"batch {batch_id} is not outstanding")
        return point

    def ack(self, *batch_ids: int) -> ResumePoint:
        """Acknowledge batches (the oldest outstanding ones, in order; Kafka has every record of them)
        and have the resume point after the last saved (``_write_acked``): under load one write covers
        many acks. A crash before that write re-publishes those batches (byte-identical records), never
        skips."""
        if not batch_ids:
            raise ServerError("no batch to acknowledge")
        with self._lock:
            point = None
            for batch_id in batch_ids:
                point = self._resume.get(batch_id)
                if point is None:
                    raise ServerError(f"batch {batch_id} is not outstanding")
                self.server.ack(batch_id)
                del self._resume[batch_id]
            assert point is not None
            self.last_acked = point
            if self.config.save_interval_seconds <= 0:
                self._write(point)
            else:
                self._start_writer()
                self._acked.notify()
        log.debug("instance %s: batches %s acked, position %s", self.config.name, batch_ids, point)
        return point

    def save_pending(self) -> ResumePoint | None:
        """Write the point after the last acked batch now, if it is not written yet (stopping, failing:
        what Kafka has is never re-read for want of a write). Returns the point written, if any."""
        with self._save_lock:
            point = self.last_acked
            if point is None or point is self.last_saved:
                return None
            self._write(point)
            return point

    def _write(self, point: ResumePoint) -> None:
        self.positions.save(point)
        self.last_saved, self._saved_at = point, time.monotonic()

    def _start_writer(self) -> None:
        if self._writer is None:
            self._writer = threading.Thread(
                target=self._write_acked, name=f"positions-{self.config.name}", daemon=True
            )
            self._writer.start()

    def _write_acked(self) -> None:
        """The position writer: the newest acked point, at most once per ``save_interval_seconds``
        while the relay is behind; a point that leaves it caught up (the parser waiting at the binlog end,
        nothing in the store, no batch outstanding) is written at once, at most once per interval too —
        so at most two writes per interval, and the saved position is current as soon as a backlog is
        through.

        Under load many acks share one write; a crash loses at most the acks since the last write, and
        the relay then re-publishes those batches (byte-identical records) — it never skips one. A write
        that fails is kept in ``save_failure`` (the publish loop raises it) and ends the writer.
        """
        interval = self.config.save_interval_seconds
        while True:
            with self._acked:
                while not self._stopping.is_set():
                    if self.last_acked is self.last_saved:
                        self._acked.wait(1.0)
                        continue
                    caught_up = self._caught_up()
                    since = self._caught_up_saved_at if caught_up else self._saved_at
                    pause = since + interval - time.monotonic()
                    if pause <= 0:
                        break
                    self._acked.wait(pause)  # a later ack, or the parser reaching the end, notifies
                if self._stopping.is_set():
                    return  # stopping: the caller writes what is pending (save_pending)
            try:
                self.save_pending()
            except BaseException as exc:
                self.save_failure = exc
                log.error("instance %s: could not save the position: %s", self.config.name, exc)
                return
            if caught_up:
                self._caught_up_saved_at = self._saved_at

    def _caught_up(self) -> bool:
        """The last acked point is all there is (under ``_lock``): the parser waits at the binlog end,
        the store holds nothing not taken, no batch is outstanding."""
        if not self._idle or self._resume:
            return False
        put, got, _ = self.store.sequences
        return put == got

    def publish_under(self, mapping_version: int) -> ResumePoint | None:
        """From now on batches are published under ``mapping_version``; with nothing outstanding, the
        saved position is saved again naming it, so a restart re-publishes what follows it under that
        version (and not under the one before). Returns the point saved, if any."""
        with self._save_lock, self._lock:
            self.mapping_version = mapping_version
            point = self.saved_point
            if point is None or self._resume or point.mapping_version == mapping_version:
                return None
            point = replace(point, mapping_version=mapping_version)
            self._write(point)
            self.last_acked = point
        log.info(
            "instance %s: position %s saved under mapping version %d",
            self.config.name,
            point,
            mapping_version,
        )
        return point

    def rollback(self, batch_id: int | None = None) -> None:
        with self._lock:
            if batch_id is None:
                self.server.rollback()
                self._resume.clear()
            else:
                self.server.rollback(batch_id)
                for bid in [b for b in self._resume if b >= batch_id]:
                    del self._resume[bid]
            # The snapshot checkpoint goes back with the batches: to the last one still outstanding.
            # (A point of an earlier snapshot means none of the current one's chunks was handed out.)
            last = self._resume[max(self._resume)] if self._resume else self.saved_point
            back = last.extra.get(EXTRA_KEY) if last is not None else None
            current = self._snapshot_state
            if current is not None:
                same = isinstance(back, dict) and back.get("id") == current.get("id")
                self._snapshot_state = self._unless_cancelled(
                    back if same else self._snapshot_fresh or current
                )

    # -- snapshots -------------------------------------------------------------------------------
    def _begin_snapshot(self, saved: ResumePoint | None) -> None:
        """Start a snapshot if the mode asks for one, or continue the one the saved point records.

        ``initial`` and ``when_needed`` snapshot when no position is saved, also when ``source.start``
        names an old place: the parser then reads the binlog from there while the readers read the
        tables now, and a chunk is put only once the parser has reached the binlog end its SELECT saw
        (its ``high``), so the history before the chunk sorts before it and every change of its rows
        after the SELECT supersedes it (``relay.source.snapshot``). An unfinished snapshot recorded in
        the saved point is continued whatever the mode: it was asked for (``relay snapshot cancel``
        ends it, also with the relay stopped)."""
        cfg, captures = self.config.snapshot, self.config.captures
        if captures is None or self.info is None or self.start_point is None:
            return
        state = saved.extra.get(EXTRA_KEY) if saved is not None else None
        if state is not None:
            if state.get("done"):
                self._snapshot_state = state
                return
        elif saved is None and cfg.mode != "never":
            snapshot_id = f"{self.config.name}-{int(time.time())}"
            state = plan(cfg, self._snapshot_source(), captures, snapshot_id)
        else:
            return
        self._run_snapshot(state, (self.start_point.journal, self.start_point.offset))

    def _snapshot_source(self) -> SourceConfig:
        """The server the snapshot readers read: the one the parser reads (the standby after a failover).
        On the master with the configured ``source.retry``: a reader that cannot reach it keeps trying
        (not just ``failover.attempts`` times) until the parser fails over and moves the snapshot."""
        if self._drop is not None:
            return standby_config(self.config.source)
        return self.config.source

    def _run_snapshot(
        self, state: dict[str, Any], at: tuple[str, int] | None, *, moved: bool = False
    ) -> Snapshot:
        """Start readers for ``state`` on the server being read; ``at``: where the parser reads.
        ``moved``: the same snapshot on another server, whose checkpoints as handed out stay."""
        assert self.info is not None
        if not moved:
            # Copies: the snapshot moves its own state on as chunks are put, points carry what was
            # handed out.
            self._snapshot_state = copy.deepcopy(state)
            self._snapshot_fresh = copy.deepcopy(state)
        snap = Snapshot(
            self.config.snapshot,
            self._snapshot_source(),
            state,
            server_id=self.info.server_id,
            mariadb=self.info.mariadb,
        )
        self.snapshot = snap  # before its readers start: the parser watches for it from the next event
        snap.start(at)
        return snap

    def _move_snapshot(self) -> None:
        """After a failover (parser thread): continue the running snapshot on the standby from what was
        put. The chunks read from the master and put stay (they are in the store, placed in the
        master's binlog); the chunks read but not put are dropped, their watermarks being the master's
        binlog places; every unfinished table is read on, after its last key put, with the standby's
        binlog as watermarks and the standby's generation in the sequences."""
        old = self.snapshot
        if old is None or old.done or old.failure is not None:
            return
        old.stop()
        state = old.moved_state()
        assert self.start_point is not None
        log.warning(
            "instance %s: snapshot %s continues on the standby from its checkpoint (%d rows put)",
            self.config.name,
            state["id"],
            state_rows(state),
        )
        # The master's chunks in the store are still handed out with their own checkpoints.
        self._run_snapshot(state, (self.start_point.journal, self.start_point.offset), moved=True)

    def request_snapshot(
        self,
        only: Callable[[str, str], bool],
        snapshot_id: str,
        where: str = "",
        keys: dict[str, Any] | None = None,
    ) -> str | None:
        """Start an on-demand snapshot of the physical tables ``only`` names (and the sink filters
        keep) while streaming; returns why not, or None once it runs. ``keys``: only these keys of these
        tables (``relay.source.snapshot_keys``; the tables must be among those). Publisher thread."""
        running = self.snapshot
        if running is not None and running.active:
            return f"snapshot {running.state['id']} is still running"
        if self.info is None:
            return "the instance is not reading a server"

        def captures(db: str, table: str) -> bool:
            name = f"{db}.{table}"
            return self.sink.include.matches(name) and not self.sink.exclude.matches(name) and only(db, table)

        source = self._snapshot_source()
        state = plan(self.config.snapshot, source, captures, snapshot_id, where)
        if not state["tables"]:
            return NO_CAPTURED_TABLE
        if where:
            problem = check_where(source, list(state["tables"]), where)
            if problem is not None:
                return problem
        if keys is not None:
            unknown = sorted(set(keys) - set(state["tables"]))
            if unknown:
                return f"keys name tables this relay does not snapshot for it: {', '.join(unknown)}"
            state["keys"] = keys
        self._run_snapshot(state, self.source.delivered)
        return None

    def captured_tables(self) -> list[tuple[str, str]]:
        """(db, table) of the base tables on the server read now that the sink's filters keep."""

        def captures(db: str, table: str) -> bool:
            name = f"{db}.{table}"
            return self.sink.include.matches(name) and not self.sink.exclude.matches(name)

        return captured_tables(self._snapshot_source(), captures)

    def cancel_snapshot(self) -> str | None:
        """Cancel the running snapshot; returns why not, or None. Publisher thread."""
        snap = self.snapshot
        if snap is None or not snap.active:
            return "no snapshot is running"
        state = compacted(snap.cancel())
        with self._save_lock, self._lock:
            self._cancelled = (str(state["id"]), state)
            self._snapshot_state = state
            # The batches handed out carry the checkpoint of their chunks: they save the cancel instead.
            for batch_id, point in self._resume.items():
                if self._unless_cancelled(point.extra.get(EXTRA_KEY)) is state:
                    self._resume[batch_id] = replace(point, extra={**point.extra, EXTRA_KEY: state})
            saved = self.saved_point
            # Nothing outstanding (an idle source): written now, so a restart does not continue it. An
            # exactly-once store writes only what a transaction committed: there it waits for a batch.
            if not self._resume and saved is not None and not getattr(self.positions, "bound", False):
                saved = replace(saved, extra={**saved.extra, EXTRA_KEY: state})
                self._write(saved)
                self.last_acked = saved
        log.info(
            "instance %s: snapshot %s cancelled (%d rows put)",
            self.config.name,
            state["id"],
            state_rows(state),
        )
        return None

    def _unless_cancelled(self, state: dict[str, Any] | None) -> dict[str, Any] | None:
        """``state``, or the cancelled end state when it is a checkpoint of the snapshot cancelled: the
        chunks put before the cancel still carry checkpoints saying it goes on, and a restart must not
        continue it."""
        cancelled = self._cancelled
        if cancelled is not None and isinstance(state, dict) and state.get("id") == cancelled[0]:
            return cancelled[1]
        return state

    def _snapshot_extra(self, entries: Sequence[Entry]) -> dict[str, Any]:
        """The ``extra`` of the resume point after ``entries``: the snapshot checkpoint as of them."""
        for e in reversed(entries):
            if isinstance(e, SnapshotEntry):
                self._snapshot_state = self._unless_cancelled(compacted(e.checkpoint))
                break
        return {EXTRA_KEY: self._snapshot_state} if self._snapshot_state is not None else {}


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
