"""The relay's publish loop: canal instance → mapping → codecs → Kafka → ack → saved position.

It builds none of its parts: ``relay.wiring`` makes them from the config and hands them in (``RelayParts``).

Threads: the canal instance's parser thread fills the ring store; ``Relay.run`` is the publisher
thread. It takes batches from the store (``get_without_ack``), encodes every row change into records
under the current mapping, sends them, and acknowledges a batch to the store — which saves the
resume point — only once Kafka has accepted every record of it and of every batch before it
(``KafkaPublisher.completed_prefix``). That is the relay contract (docs/architecture.md, "Invariants"):

- no loss: nothing is acked past an undelivered record; a retriable failure aborts the batches in
  flight, rolls the store back and resends after a backoff (``publish.retry``);
- a record Kafka will never take stops the relay with a clear error (``RecordRejectedError``), unless
  a dead-letter topic is configured — never a retry spin. Before it stops, the records sent before
  the refused one are given ``publish.drain_seconds`` to land and the batches completed before it
  are acked, so the saved position ends right before the refused record's batch;
- fail closed: a mapping error (a key column missing from a table) stops the relay without acking.
- hot reload: a new mapping version in ``mapping.store`` is switched to at a batch boundary, when no
  batch is in flight and a rolled-back range has been re-delivered under the old one (the rule is in
  ``mapping.watch``), so no change is published under both; an invalid version is refused and logged.
  The saved position names the mapping version of what follows it; a relay that starts or is elected
  resumes under that version and switches to the current one by the same rule (``_resume_mapping``).

High availability (``ha.enabled``, ``relay.ha.leadership``): ``run`` first stands by until ZooKeeper
elects this process (status ``standby``), then starts the instance from the position saved in ZooKeeper. The
leadership's fence is checked before every send and every ack; once fenced (session SUSPENDED or
LOST, lease expired) ``run`` stops with ``LeadershipError`` without acking anything more — the batches
in flight are abandoned, the new leader publishes them again from the saved position — and ``relay
run`` exits with status 3. After a MySQL failover (``relay.source.failover``) the records name the standby.

Transactional mode (``kafka.transactions``): after the election, ``init_transactions`` fences every older
producer of this instance's ``transactional.id`` (a zombie's queued records are refused by the broker,
its open transaction aborted). Consecutive batches share one Kafka transaction, committed when it holds
``publish.max_inflight_batches`` batches or has been open ``kafka.transaction_linger_seconds`` — the
fence is checked first; a batch is acked (and its position saved) only once its transaction committed.
A failed transaction is aborted and its batches rolled back and resent after a backoff; a fenced
producer stops the relay like lost leadership (``ProducerFencedError``, exit status 3). Exactly-once mode
(``kafka.exactly_once``) first proves that the broker hides aborted records (or refuses to start), and
puts the resume point of a transaction's last batch into that transaction (``relay.kafka.positions``).

``stop()`` (from a signal handler via the CLI) ends the loop at a batch boundary: batches in flight
get ``publish.drain_seconds`` to be delivered and acked, the rest is rolled back, the position stays
at the last acknowledged batch, and ``run`` returns normally.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from mapping import Mapping
from mapping.watch import MappingWatcher, Refusal, SwitchGate, check_against_tables
from relay.canal.entry import Entry, RowChange
from relay.common.binlog_names import file_order
from relay.common.gc_tuning import gc_thresholds
from relay.common.retry import Backoff
from relay.config.load import RelayConfig
from relay.config.state import SNAPSHOT_REQUEST_FILE, STATUS_FILE
from relay.daemon import snapshot_requests
from relay.daemon.mapping_report import MappingAnnouncer, MappingState
from relay.daemon.moves import MoveSwitch, last_identity
from relay.daemon.status import RelayStats, write_status
from relay.errors import (
    InvalidMappingError,
    LeadershipError,
    MappingError,
    PublishError,
    RecordRejectedError,
    RelayError,
)
from relay.ha.leadership import Leadership
from relay.kafka.codec import RecordEncoder
from relay.kafka.history import MovePlan, TableMove
from relay.kafka.positions import KafkaPositionStore, prove_aborted_records_hidden
from relay.kafka.publisher import KafkaPublisher
from relay.kafka.records import BatchHandle, Record
from relay.positions.lock import InstanceLock
from relay.positions.store import PositionStore, ResumePoint
from relay.source.instance import CanalInstance

log = logging.getLogger(__name__)

# The relay allocates tens of container objects per row change (entries, row tuples, records) and holds
# a store's worth of them alive; with CPython's default thresholds (700, 10, 10) the cycle collector
# re-scans those live objects again and again: ~18% of the relay's CPU on single-row transactions in
# ``relay bench`` (W1), though they form no cycles. Collections become rarer, not disabled. With 100,000
# young objects a W1 drain of 20,000 rows still spent 0.01-0.13 s (1-13 %) and a W2 drain 0.02-0.03 s
# (3 %) in young collections (timed by ``gc.callbacks``), each finding a few dozen objects of cyclic
# garbage; with 1,000,000 none ran during a drain. A young collection scans only the objects still
# alive, so its pause does not grow with the threshold; garbage without cycles is freed at once as ever.
GC_THRESHOLDS = (1_000_000, 50, 100)
# While batches are in flight their deliveries are served only by ``poll``: the wait for a fuller batch
# is cut to this, so their acks (and the saved position) do not wait on the store.
INFLIGHT_WAIT_SECONDS = 0.005


class RelayObserver(Protocol):
    """Watches a relay from the side (the metrics exporter): started and stopped with the publish loop,
    told about every batch sent and acked, on the publisher thread. Must not block."""

    def start(self) -> None: ...
    def stop(self) -> None: ...
    def batch_sent(self, batch_id: int) -> None: ...
    def batch_acked(self, batch_id: int) -> None: ...


@dataclass
class RelayParts:
    """A relay's collaborators, built by ``relay.wiring`` from the config.

    ``leadership`` None: no HA. ``lock``: held while running (a file position: one relay per file).
    ``open_watcher``: opens the mapping watcher once this process leads (None, or returning None: no
    hot reload). ``exactly_once``: the Kafka position store whose records go into the publisher's
    transactions (None: not exactly-once mode). ``read_mapping``: reads the mapping store's current
    mapping (None) or a version of its history (a number); None: the relay keeps the mapping it was given
    and cannot resume another. ``open_move``: starts the history copy of a switch that moves tables to
    another topic (None: ``mapping.move: switch``, the history stays where it is).
    """

    instance: CanalInstance
    positions: PositionStore
    publisher: KafkaPublisher
    leadership: Leadership | None = None
    lock: InstanceLock | None = None
    open_watcher: Callable[[Mapping], MappingWatcher | None] | None = None
    exactly_once: KafkaPositionStore | None = None
    read_mapping: Callable[[int | None], Mapping] | None = None
    open_move: Callable[[MovePlan], TableMove] | None = None


class Relay:
    """One relay process for one MySQL source. ``run()`` blocks until ``stop()`` or a fatal error."""

    def __init__(self, config: RelayConfig, mapping: Mapping, parts: RelayParts) -> None:
        self.config = config
        self.mapping = mapping
        # HA: the leadership, which also fences the ZooKeeper position store's writes (relay.ha).
        self.leadership = parts.leadership
        # The wall time the last fence check passed (HA only). The send and ack log lines carry it: a
        # process can be frozen between a check and what it allows, so a line stamped after a resume
        # may stand for a step its leadership allowed before the freeze.
        self._fence_passed = 0.0
        self.positions = parts.positions
        self.instance = parts.instance
        self.publisher = parts.publisher
        self.stats = RelayStats()
        self._observers: list[RelayObserver] = []
        self._lock = parts.lock
        self._open_watcher = parts.open_watcher
        self._exactly_once = parts.exactly_once
        self._read_mapping = parts.read_mapping
        # Resuming under the mapping version the saved position names (``_resume_mapping``): the
        # source's binlog end when this process started, past which no earlier process can have read.
        self._tail_end: tuple[str, int] | None = None
        self._stopping = threading.Event()
        self._encoder: RecordEncoder | None = None
        # Hot reload (mapping.watch): the watcher of mapping.store (opened by run()), the switch rule,
        # a version waiting for the pipeline to be quiet.
        self.watcher: MappingWatcher | None = None
        self._gate = SwitchGate()
        self._pending: Mapping | None = None
        # A switch that moves tables to another topic waits for their history to be copied there.
        self._moves = MoveSwitch(parts.open_move, self._move_tables, config.source_id)
        self._checked: Mapping | None = None  # the pending version last checked against the live tables
        # batch id → (records, rows, last event ms, (sequence, part) of its last record)
        self._batch_rows: dict[int, tuple[int, int, int, tuple[int, int] | None]] = {}
        self._refusal: Refusal | None = None  # a version refused with no watcher to keep the record
        lead = self.leadership
        self._announcer = MappingAnnouncer(
            config.instance,
            lead.member if lead is not None else None,
            lead.announce if lead is not None else None,
            lambda: self.watcher.store if self.watcher is not None else None,
        )
        self._next_status = 0.0
        self._next_request_check = 0.0
        self._snapshot_answer: dict[str, object] | None = None  # the last on-demand request's answer

    def observe(self, observer: RelayObserver) -> None:
        """Add an observer (before ``run``): it is started and stopped with the publish loop."""
        self._observers.append(observer)

    def stop(self) -> None:
        self._stopping.set()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    # -- the loop --------------------------------------------------------------------------------
    def run(self) -> ResumePoint | None:
        """Relay until stopped; returns the last saved position. Raises the error that stopped it
        (``LeadershipError`` when HA leadership is lost)."""
        if self.leadership is None:
            return self._run()
        try:
            if not self._stand_by():
                return None  # stopped before being elected
            return self._run()
        finally:
            self.leadership.close()  # resigns when still the leader: a standby takes over at once

    def _stand_by(self) -> bool:
        """HA: wait until ZooKeeper elects this process; False when stopped first."""
        assert self.leadership is not None
        self.leadership.start()
        self.stats.state = "standby"
        self._write_status(force=True)
        elected = self.leadership.acquire(self._stopping, lambda active: self._write_status(force=True))
        self.stats.state = "starting" if elected else "stopped"
        self._write_status(force=True)
        return elected

    def _fence(self) -> None:
        """Before every send and every ack: raise ``LeadershipError`` once this process may not lead."""
        if self.leadership is not None:
            self.leadership.check()
            self._fence_passed = time.time()

    def _fence_note(self) -> str:
        """For the send and ack log lines: when the fence check that allowed the step passed (HA)."""
        return "" if self.leadership is None else f" (fence passed at {self._fence_passed:.3f})"

    def mapping_state(self) -> MappingState:
        """The mapping in use, the one waiting for a batch boundary, the last refused and why."""
        watcher = self.watcher
        refused = watcher.refusal if watcher is not None and watcher.refusal is not None else self._refusal
        return MappingState(
            self.mapping.version,
            None if self._pending is None else self._pending.version,
            refused,
            None if watcher is None else watcher.store_error,
        )

    def _ha_status(self) -> dict[str, object]:
        lead = self.leadership
        return {} if lead is None else {"ha_member": lead.member, "ha_epoch": lead.epoch or None}

    def _new_encoder(self) -> RecordEncoder:
        return RecordEncoder(
            self.mapping,
            self.instance.source.identity,
            ddl_topic=self.config.kafka.ddl_topic,
            partitions=self.publisher.partitions,
            source_id=self.config.source_id,
        )

    def _run(self) -> ResumePoint | None:
        with gc_thresholds(GC_THRESHOLDS):  # process-wide: restored when the relay stops
            return self._relay()

    def _relay(self) -> ResumePoint | None:
        self._claim()
        try:
            self._start_transactions()
            self.instance.start()
            self._resume_mapping()
            if self._open_watcher is not None:
                self.watcher = self._open_watcher(self.mapping)
        except BaseException:
            self.instance.stop()
            self._release()
            raise
        self._encoder = self._new_encoder()
        self.publisher.ensure_topics(self._initial_topics())
        log.info(
            "relay %s: publishing from %s to %s",
            self.config.instance,
            self.instance.start_point,
            self.config.kafka.bootstrap_servers,
        )
        self.stats.state = "running"
        backoff = self.config.publish.retry.start(sleep=self._stopping.wait)
        try:
            while not self._stopping.is_set():
                try:
                    if self._step():
                        backoff.reset()
                except PublishError as exc:
                    # A delivery failure is handled just below; anything else raised while sending is a
                    # topic that could not be checked or created (the broker is away): roll back, retry.
                    if self.publisher.failed() is None:
                        if not exc.retriable:
                            raise
                        self._retry(exc, backoff)
                failed = self.publisher.failed()
                if failed is not None:
                    self._recover(failed, backoff)
                if self.instance.save_failure is not None:  # the position writer could not write
                    raise self.instance.save_failure
                self._snapshot_requests()
                self._write_status()
            self._drain()
        except BaseException as exc:
            self.stats.state, self.stats.error = "failed", str(exc)
            self._abandon(term_over=isinstance(exc, LeadershipError))
            raise
        finally:
            self._moves.abandon()
            self.instance.stop()
            if self.watcher is not None:
                self.watcher.store.close()
            self.publisher.close(timeout=1.0)
            self._release()
            self._write_status(force=True)
        self.stats.state = "stopped"
        self._write_status(force=True)
        return self.instance.last_saved

    def _claim(self) -> None:
        """Hold the instance (a file position's lock: one relay per position) and start the observers."""
        if self._lock is not None:
            self._lock.acquire()
        started: list[RelayObserver] = []
        try:
            for observer in self._observers:
                observer.start()
                started.append(observer)
        except BaseException:
            self._release(started)
            raise

    def _release(self, observers: Sequence[RelayObserver] | None = None) -> None:
        for observer in self._observers if observers is None else observers:
            observer.stop()
        if self._lock is not None:
            self._lock.release()

    def _start_transactions(self) -> None:
        """Exactly-once: prove the broker hides aborted records (or refuse, before fencing anyone);
        transactional: fence older producers of our ``transactional.id`` before reading any position."""
        if self._exactly_once is not None:
            prove_aborted_records_hidden(self._exactly_once.config)
        self._fence()
        self.publisher.init_transactions()

    def _initial_topics(self) -> list[str]:
        topics = list(self.mapping.topic_names())
        if self.config.kafka.ddl_topic:
            topics.append(self.config.kafka.ddl_topic)
        return topics

    def _step(self) -> bool:
        """Send one batch if the window allows, serve deliveries, ack the delivered prefix."""
        p = self.config.publish
        inflight = self.publisher.inflight()
        wait = min(p.batch_wait_seconds, INFLIGHT_WAIT_SECONDS) if inflight else p.batch_wait_seconds
        sent = False
        if self._reload() and inflight < p.max_inflight_batches:
            message = self.instance.get_without_ack(p.batch_size, timeout=wait)
            if message.entries:
                self._send(message.batch_id, message.entries)
                sent = True
        self.publisher.poll(0 if sent else wait)
        if self._transaction_due():
            self._commit()
        return self._ack_delivered() > 0

    def _transaction_due(self) -> bool:
        """A transaction commits when it holds ``max_inflight_batches`` batches or is ``linger`` old."""
        age = self.publisher.transaction_age()
        if age is None:
            return False
        full = self.publisher.inflight() >= self.config.publish.max_inflight_batches
        return full or age >= self.config.kafka.transaction_linger_seconds

    def _commit(self) -> bool:
        """Commit the open transaction (exactly-once: with the resume point after its last batch)."""
        extra: list[Record] = []
        point = None
        eos = self._exactly_once
        if eos is not None:
            point = self.instance.resume_point(self.publisher.batch_ids()[-1])
            epoch = self.leadership.epoch if self.leadership is not None else 0
            extra.append(eos.record(point, epoch))
        self._fence()
        committed = self.publisher.commit(extra)
        if committed and eos is not None and point is not None:
            eos.committed(point)
        return committed

    def _send(self, batch_id: int, entries: Sequence[Entry]) -> None:
        """Encode and send one batch; every log line about it names its binlog positions (``where``)."""
        assert self._encoder is not None
        if self._encoder.source != self.instance.source.identity:  # the instance failed over
            self._encoder = self._new_encoder()
        records: list[Record] = []
        rows = 0
        for entry in entries:
            records.extend(self._encoder.encode(entry))
            value = entry.store_value
            if isinstance(value, RowChange) and not value.is_ddl:
                rows += len(value.rows)
        last_ms = entries[-1].header.execute_time
        new_topics = self._encoder.topics()
        if new_topics:
            self.publisher.ensure_topics(new_topics)
        self._batch_rows[batch_id] = (len(records), rows, last_ms, last_identity(records))
        where = _span(entries[0], entries[-1])
        self._fence()
        self.publisher.send(batch_id, records, where)
        for observer in self._observers:
            observer.batch_sent(batch_id)
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "batch %d (%s): sent %d records (%d rows)%s",
                batch_id,
                where,
                len(records),
                rows,
                self._fence_note(),
            )

    def _ack_delivered(self) -> int:
        done: list[BatchHandle] = self.publisher.completed_prefix()
        if not done:
            return 0
        self._fence()
        point = self.instance.ack(*(handle.batch_id for handle in done))  # one position write for all
        for handle in done:
            for observer in self._observers:
                observer.batch_acked(handle.batch_id)
            records, rows, last_ms, last = self._batch_rows.pop(handle.batch_id, (0, 0, 0, None))
            self.stats.acked(records, rows, str(point), last_ms)
            self._moves.acked(last)
            if log.isEnabledFor(logging.DEBUG):
                log.debug(
                    "%s: %d records delivered; acked, position %s saved%s",
                    handle.label,
                    records,
                    point,
                    self._fence_note(),
                )
        return len(done)

    # -- hot reload ------------------------------------------------------------------------------
    def _resume_mapping(self) -> None:
        """Start publishing under the mapping version the saved position names, switching to the
        current one later, at a batch boundary, by the hot-reload rule (``mapping.watch``).

        The current mapping is read again here, when this process starts to lead — a standby elected
        days after it started does not lead with the mapping it read then, whether or not
        ``mapping.reload`` is on. When the saved position names another version, the records after it
        that the previous process may have published (at most a store's worth of entries, and nothing
        past the source's binlog end as it is now) are published again under that version, byte for
        byte; the switch comes after them. A version the store no longer has stops the relay (fail
        closed): ``relay positions set`` starts afresh under the current mapping.
        """
        current = self.mapping if self._read_mapping is None else self._read_mapping(None)
        if current != self.mapping:
            log.info(
                "mapping version %d is current (this process read %d)", current.version, self.mapping.version
            )
        saved = self.instance.saved_point
        named = saved.mapping_version if saved is not None else None
        self.mapping = current
        if named is not None and named != current.version:
            if self._read_mapping is None:
                raise MappingError(
                    "mapping.version",
                    f"the saved position {saved} was published under mapping version {named}; "
                    f"this relay has only version {current.version}",
                )
            try:
                self.mapping = self._read_mapping(named)
            except MappingError as exc:
                if exc.retriable:
                    raise
                raise MappingError(
                    "mapping.version",
                    f"the saved position {saved} names mapping version {named}, which the mapping store "
                    f"cannot give ({exc}); to start afresh under version {current.version}, move the "
                    "position with `relay positions set`",
                ) from exc
            self._pending = current
            self._gate.resumed(self.instance.store.config.buffer_size)
            info = self.instance.info
            self._tail_end = info.end if info is not None else None
            log.info(
                "resuming under mapping version %d (named by the saved position %s); switching to version "
                "%d once what an earlier process may have published after it is published again",
                named,
                saved,
                current.version,
            )
        self.instance.publish_under(self.mapping.version)

    def _tail_covered(self) -> None:
        """Resuming: the tail is covered once the saved position reaches the binlog end seen at start."""
        end, saved = self._tail_end, self.instance.last_saved
        if end is None or saved is None or saved.source != self.instance.source.identity:
            return
        if (file_order(saved.journal), saved.offset) >= (file_order(end[0]), end[1]):
            self._gate.tail_covered()
            self._tail_end = None

    def _reload(self) -> bool:
        """Switch to a new mapping version at a batch boundary (the rule: ``mapping.watch``).

        Returns False while a pending switch waits for the batches in flight to drain: no new batch
        is taken then, so every batch is encoded under one mapping and none under both.
        """
        if self.watcher is not None:
            new = self.watcher.poll()
            if new is not None:
                self._pending = new
        if self._pending is None:
            return True
        self._tail_covered()
        if not self._history_copied(self._pending) or self._pending is None:
            return True  # the moved tables' history is still being copied (or the version was refused)
        ack = self.instance.acked_sequence
        if self._gate.may_switch(self.publisher.inflight(), ack):
            if not self._moves.finished():
                return False  # nothing in flight: the copy takes the last records, no batch is taken
            self._switch(self._pending)
            return True
        return not self._gate.hold_new_batches(True, ack)

    def _history_copied(self, new: Mapping) -> bool:
        """A version that moves tables to another topic waits until their history has been copied
        there (``relay.daemon.moves``); one that cannot be used for the live tables is refused first."""
        if self._checked is not new:  # once per pending version (``_switch`` checks again)
            self._checked = new
            assert self._encoder is not None
            problem = check_against_tables(new, self._encoder.known_tables())
            if problem is not None:
                self._refuse(new, problem)
                return True
        try:
            return self._moves.may_switch(self.mapping, new, self.instance.saved_point)
        except InvalidMappingError as exc:
            self._refuse(new, exc)
            return True

    def _move_tables(self) -> list[tuple[str, str]]:
        """The physical tables a move is planned over: the source's captured tables and the tables
        published since the last switch (a dropped one still has history)."""
        assert self._encoder is not None
        known = [(db, table) for db, table, _ in self._encoder.known_tables()]
        return [*self.instance.captured_tables(), *known]

    def _switch(self, new: Mapping) -> None:
        """Swap the mapping (nothing in flight), or refuse it when it fails on the tables seen so far."""
        assert self._encoder is not None
        problem = check_against_tables(new, self._encoder.known_tables())
        if problem is not None:
            self._refuse(new, problem)
            return
        self.publisher.ensure_topics(new.topic_names())  # may raise a retriable error: stays pending
        self._fence()
        self.instance.publish_under(new.version)  # a restart from here publishes under ``new``
        old, self._encoder.mapping, self.mapping = self.mapping, new, new
        self._pending = None
        self._moves.switched()
        if self.config.snapshot.mode != "never":
            self._snapshot_answer = snapshot_requests.after_mapping_switch(self.instance, old, new)
        if self.watcher is not None:
            self.watcher.accept(new)
        else:
            log.info("mapping switched from version %d to version %d", old.version, new.version)

    def _refuse(self, new: Mapping, problem: MappingError) -> None:
        """Keep the current mapping: ``new`` cannot be used (logged once; the status shows it)."""
        self._pending = None
        self._moves.refused()
        if self.watcher is not None:
            self.watcher.refuse(new, problem)
        else:
            self._refusal = Refusal.of(new.version, problem)
            log.error(
                "refused mapping version %d; keeping version %d: %s",
                new.version,
                self.mapping.version,
                problem,
            )

    # -- failures --------------------------------------------------------------------------------
    def _recover(self, failed: BatchHandle, backoff: Backoff) -> None:
        error = failed.error
        assert error is not None
        if not error.retriable:
            if isinstance(error, RecordRejectedError):
                self._settle()
            log.error("stopping: %s; the position stays at %s", error, self._saved())
            raise error
        self._retry(error, backoff)

    def _retry(self, error: PublishError, backoff: Backoff) -> None:
        """Abort every batch in flight, roll the store back to the saved position, back off, go on."""
        aborted = self.publisher.abort_inflight()
        self._gate.rolled_back(self.instance.store.sequences[1])  # re-deliver these before a switch
        self.instance.rollback()
        for bid in aborted:
            self._batch_rows.pop(bid, None)
        self.stats.batches_rolled_back += len(aborted)
        self.stats.state = "retrying"
        log.warning(
            "%s; rolled back batches %s, the position stays at %s; retrying after a backoff",
            error,
            aborted,
            self._saved(),
        )
        if not backoff.wait():  # sleeps on the stop event: a stop cuts the wait short
            raise PublishError(f"gave up retrying: {error}") from error
        self.stats.state = "running"

    def _settle(self) -> None:
        """Stopping on a refused record: let what was sent before it land, ack the batches before it.

        The failed batch stays unacked (the position ends right before it); its records sent before
        the refused one are delivered too, and published again, identically, after a restart.
        """
        left = self.publisher.flush(self.config.publish.drain_seconds)
        self._ack_delivered()
        if left:
            log.warning("%d records sent before the refused one were not delivered in time", left)

    def _saved(self) -> str:
        return str(self.instance.last_saved or self.instance.start_point)

    def _drain(self) -> None:
        """Stopping: give batches in flight time to be delivered and acked, roll the rest back."""
        deadline = time.monotonic() + self.config.publish.drain_seconds
        while self.publisher.inflight() and time.monotonic() < deadline and self.publisher.failed() is None:
            self.publisher.poll(0.1)
            if self.publisher.transaction_age() is not None:
                self._commit()
            self._ack_delivered()
        self._abandon()
        log.info("relay %s stopped; position %s", self.config.instance, self._saved())

    def _abandon(self, term_over: bool = False) -> None:
        """Save what was acked, roll back the rest; ``term_over`` (leadership lost): the open transaction
        is left to the successor, which aborts it (``KafkaPublisher.abort_inflight``)."""
        try:  # what was acked is delivered: its position is written before anything else happens
            self.instance.save_pending()
        except RelayError as exc:
            log.warning("could not save the position %s: %s", self.instance.saved_point, exc)
        try:
            aborted = self.publisher.abort_inflight(term_over=term_over)
            if aborted:
                self.instance.rollback()
                log.info(
                    "batches %s not acknowledged; the position stays at %s: they will be published again",
                    aborted,
                    self._saved(),
                )
        except RelayError as exc:
            log.warning("while abandoning the batches in flight: %s", exc)

    # -- on-demand snapshots ---------------------------------------------------------------------
    def _snapshot_requests(self) -> None:
        """A ``relay snapshot run|cancel`` request waiting in its file: carried out at this boundary."""
        now = time.monotonic()
        if now < self._next_request_check:
            return
        self._next_request_check = now + snapshot_requests.CHECK_SECONDS
        request = snapshot_requests.take_request(self.config.state_path(SNAPSHOT_REQUEST_FILE))
        if request is not None:
            self._snapshot_answer = snapshot_requests.handle(self.instance, self.mapping, request)
            self._write_status(force=True)

    # -- status ----------------------------------------------------------------------------------
    def _write_status(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now < self._next_status:
            return
        self._next_status = now + self.config.status.interval_seconds
        fill = self.instance.store.fill()
        store = self.instance.store.config
        saved = self.instance.last_saved
        mapping = self.mapping_state()
        self._announcer.update(mapping)
        data = self.stats.snapshot(
            instance=self.config.instance,
            source=self.config.source.address,
            position=None if saved is None else json.loads(replace(saved, source=None).to_json()),
            store_entries=fill.entries,
            store_bytes=fill.bytes,
            store_slots=store.buffer_size,
            store_budget=store.memory_budget,
            store_mode=store.batch_mode.value,
            inflight_batches=self.publisher.inflight(),
            **mapping.to_status(),
            kafka_mode=self.config.kafka.mode,
            transactional_id=self.publisher.transactional_id,
            snapshot=self.instance.snapshot_status(),
            snapshot_request=self._snapshot_answer,
            mapping_move=self._moves.progress(),
            **self._ha_status(),
        )
        try:
            write_status(self.config.state_path(STATUS_FILE), data)
        except OSError as exc:
            log.warning("cannot write the status file: %s", exc)


def _span(first: Entry, last: Entry) -> str:
    """``mysql-bin.000003:4567..9876``: the binlog positions of a batch's first and last entry."""
    a, b = first.header, last.header
    end = f"{b.logfile_offset}"
    if b.logfile_name != a.logfile_name:
        end = f"{b.logfile_name}:{end}"
    return f"{a.logfile_name}:{a.logfile_offset}..{end}"
