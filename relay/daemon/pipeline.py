"""The relay's publish loop: canal instance → mapping → codecs → Kafka → ack → saved position.

It builds none of its collaborators: ``relay.wiring`` makes them from the config and hands them in
(``RelayParts``), and the rooms that do the loop's jobs (``RelayRooms``) are built from those parts.

Threads: the canal instance's parser thread fills the ring store; ``Relay.run`` is the publisher
thread. It takes batches from the store (``get_without_ack``), encodes every row change into records
under the current mapping, sends them, and acknowledges a batch to the store — which saves the
resume point — only once Kafka has accepted every record of it and of every batch before it
(``KafkaPublisher.completed_prefix``). That is the relay contract (docs/architecture.md, "Invariants"):

- no loss: nothing is acked past an undelivered record (``BatchPath``, here); a retriable failure
  rolls back and resends, a record Kafka will never take stops the relay (``relay.daemon.recovery``);
- fail closed: a mapping error (a key column missing from a table) stops the relay without acking;
- hot reload: a new mapping version is switched to at a batch boundary, never with a batch in flight
  (``relay.daemon.reload``);
- HA: the leadership's fence is checked before every send, ack and commit (``relay.daemon.fence``);
  after a MySQL failover (``relay.source.failover``) the records name the standby;
- transactions: a batch is acked only once its Kafka transaction committed (``relay.daemon.transactions``);
- transaction metadata: a batch whose END records wait is acked only once they are delivered too, and
  they are produced only once the batch is (``relay.daemon.txn_topic``);
- ``stop()`` (from a signal handler via the CLI) ends the loop at a batch boundary: the batches in flight
  are drained, the rest rolled back, and ``run`` returns normally (``relay.daemon.recovery``).

The rooms, each with one job: ``Fence`` (standing by, the fence), ``HotReload`` (the mapping, its encoder and
switches), ``Transactions`` (fencing older producers, commits), ``BatchPath`` (send and ack, the hot path),
``Recovery`` (retry, rollback, drain), ``StatusReporter`` (status file, mapping announcements, snapshot
requests), ``KafkaWait`` (why a batch waits for Kafka). ``Relay`` is the loop that calls them in order.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from mapping import Mapping
from mapping.watch import MappingWatcher
from relay.canal.captures import CapturedTables
from relay.canal.entry import Entry, RowChange
from relay.common.gc_tuning import RELAY_THRESHOLDS, gc_thresholds
from relay.common.retry import Backoff
from relay.config.load import RelayConfig
from relay.config.state import SNAPSHOT_REQUEST_FILE
from relay.daemon.fence import Fence, fence_for
from relay.daemon.kafka_wait import KafkaWait
from relay.daemon.mapping_report import MappingState
from relay.daemon.moves import last_identity
from relay.daemon.recovery import Recovery
from relay.daemon.reload import HotReload
from relay.daemon.reporting import StatusReporter
from relay.daemon.snapshot_requests import SnapshotDesk
from relay.daemon.status import RelayStats
from relay.daemon.transactions import Transactions
from relay.daemon.txn_topic import TransactionTopic
from relay.errors import LeadershipError, PublishError
from relay.ha.leadership import Leadership
from relay.kafka.commit_intent import Settler
from relay.kafka.history import MovePlan, TableMove
from relay.kafka.positions import KafkaPositionStore
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
GC_THRESHOLDS = RELAY_THRESHOLDS
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
    ``open_watcher``: opens the mapping watcher once this process leads (None, or returning None: no hot
    reload). ``exactly_once``: the Kafka position store whose records go into the publisher's transactions
    (None: not exactly-once mode). ``commit_intents``: how transactional mode settles a commit intent left by
    a predecessor (``relay.kafka.commit_intent``; None: no intents). ``read_mapping``: reads the mapping
    store's current mapping (None) or a version of its history (a number); None: the relay keeps the mapping
    it was given and cannot resume another. ``open_move``: starts the history copy of a switch that moves
    tables to another topic (None: ``mapping.move: switch``, the history stays where it is). ``captures``:
    the captured tables the instance's snapshots and schema history use (a mapping switch updates them).
    """

    instance: CanalInstance
    positions: PositionStore
    publisher: KafkaPublisher
    leadership: Leadership | None = None
    lock: InstanceLock | None = None
    open_watcher: Callable[[Mapping], MappingWatcher | None] | None = None
    exactly_once: KafkaPositionStore | None = None
    commit_intents: Settler | None = None
    read_mapping: Callable[[int | None], Mapping] | None = None
    open_move: Callable[[MovePlan], TableMove] | None = None
    # The instance's captured tables (the filters and the mapping in use): a mapping switch updates them.
    captures: CapturedTables | None = None


class BatchPath:
    """The hot path of one batch: encode and send it, then ack it once it and every batch before it
    were delivered (``KafkaPublisher.completed_prefix``) — one position write for all acked at once.
    Every log line about a batch names its binlog positions and, with HA, when its fence check passed."""

    def __init__(
        self,
        instance: CanalInstance,
        publisher: KafkaPublisher,
        fence: Fence,
        reload: HotReload,
        stats: RelayStats,
        txn: TransactionTopic | None = None,
    ) -> None:
        self._instance, self._publisher, self._fence, self._reload = instance, publisher, fence, reload
        self._stats = stats
        self.observers: list[RelayObserver] = []
        self.txn = txn  # kafka.transaction_topic (relay.daemon.txn_topic); None: off
        # batch id → (records, rows, last event ms, (sequence, part) of its last record)
        self._ledger: dict[int, tuple[int, int, int, tuple[int, int] | None]] = {}
        self._sent_at: dict[int, float] = {}  # batch id → when it was sent (time.monotonic()), until acked

    def send(self, batch_id: int, entries: Sequence[Entry]) -> None:
        """Encode and send one batch under the mapping in use."""
        encoder = self._reload.encoder()
        records: list[Record] = []
        rows = 0
        txn = self.txn
        for entry in entries:
            produced = encoder.encode(entry)
            if txn is not None:  # kafka.transaction_topic: transaction headers, BEGIN (and END later)
                produced = txn.follow(encoder.mapping, entry, produced)
            records.extend(produced)
            value = entry.store_value
            if isinstance(value, RowChange) and not value.is_ddl:
                rows += len(value.rows)
        last_ms = entries[-1].header.execute_time
        new_topics = encoder.topics()
        if new_topics:
            self._publisher.ensure_topics(new_topics)
        self._ledger[batch_id] = (len(records), rows, last_ms, last_identity(records))
        self._sent_at[batch_id] = time.monotonic()
        where = _span(entries[0], entries[-1])
        if txn is not None:
            txn.batch_sent(batch_id)
        self._fence.check()
        self._publisher.send(batch_id, records, where)
        for observer in self.observers:
            observer.batch_sent(batch_id)
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "batch %d (%s): sent %d records (%d rows)%s",
                batch_id,
                where,
                len(records),
                rows,
                self._fence.note(),
            )

    def ack_delivered(self) -> int:
        """Ack the delivered prefix of the batches in flight; how many were acked. The END records of a
        delivered batch are produced first: the batch completes once they are delivered too."""
        if self.txn is not None:
            self.txn.release()
        done: list[BatchHandle] = self._publisher.completed_prefix()
        if not done:
            return 0
        self._fence.check()
        point = self._instance.ack(*(handle.batch_id for handle in done))  # one position write for all
        if self.txn is not None:
            self.txn.acked(handle.batch_id for handle in done)
        for handle in done:
            for observer in self.observers:
                observer.batch_acked(handle.batch_id)
            records, rows, last_ms, last = self._ledger.pop(handle.batch_id, (0, 0, 0, None))
            self._sent_at.pop(handle.batch_id, None)
            self._stats.acked(records, rows, str(point), last_ms)
            self._reload.moves.acked(last)
            if log.isEnabledFor(logging.DEBUG):
                log.debug(
                    "%s: %d records delivered; acked, position %s saved%s",
                    handle.label,
                    records,
                    point,
                    self._fence.note(),
                )
        return len(done)

    def oldest(self) -> tuple[int, float] | None:
        """The oldest batch sent and not yet acked, and when it was sent (``time.monotonic()``)."""
        if not self._sent_at:
            return None
        batch_id = min(self._sent_at)
        return batch_id, self._sent_at[batch_id]

    def forget(self, batch_ids: Iterable[int]) -> None:
        """Batches rolled back: they will be sent again under new ids."""
        batch_ids = list(batch_ids)
        for batch_id in batch_ids:
            self._ledger.pop(batch_id, None)
            self._sent_at.pop(batch_id, None)
        if self.txn is not None:
            self.txn.forget(batch_ids)


@dataclass(frozen=True)
class RelayRooms:
    """The rooms a ``Relay`` runs its loop with; ``build`` makes them from the parts (``relay.wiring``
    does; a test may hand in its own)."""

    stats: RelayStats
    fence: Fence
    reload: HotReload
    transactions: Transactions
    batches: BatchPath
    recovery: Recovery
    reporter: StatusReporter
    kafka_wait: KafkaWait

    @classmethod
    def build(cls, config: RelayConfig, mapping: Mapping, parts: RelayParts) -> RelayRooms:
        instance, publisher, stats = parts.instance, parts.publisher, RelayStats()
        fence = fence_for(parts.leadership)
        desk = SnapshotDesk(
            instance,
            config.state_path(SNAPSHOT_REQUEST_FILE),
            after_switch=config.snapshot.mode != "never",
            captures=parts.captures,
        )
        reload = HotReload(
            config,
            mapping,
            instance,
            publisher,
            fence,
            read_mapping=parts.read_mapping,
            open_watcher=parts.open_watcher,
            open_move=parts.open_move,
            on_switch=desk.mapping_switched,
        )
        intents = None if parts.commit_intents is None else (parts.positions, parts.commit_intents)
        transactions = Transactions(config, instance, publisher, fence, parts.exactly_once, intents)
        txn = None
        if config.kafka.transaction_topic:
            txn = TransactionTopic(
                config.kafka.transaction_topic,
                config.source_id,
                instance,
                publisher,
                config.kafka.delivery_timeout_seconds,
            )
            transactions.before_commit = txn.before_commit
        batches = BatchPath(instance, publisher, fence, reload, stats, txn)
        recovery = Recovery(config, instance, publisher, stats, reload, batches, transactions)
        reporter = StatusReporter(config, instance, publisher, stats, reload, desk, parts.leadership)
        kafka_wait = KafkaWait(publisher, stats, batches.oldest)
        return cls(stats, fence, reload, transactions, batches, recovery, reporter, kafka_wait)


class Relay:
    """One relay process for one MySQL source. ``run()`` blocks until ``stop()`` or a fatal error."""

    def __init__(
        self, config: RelayConfig, mapping: Mapping, parts: RelayParts, rooms: RelayRooms | None = None
    ) -> None:
        self.config = config
        self.leadership = parts.leadership  # HA: also fences the ZooKeeper position store's writes
        self.positions = parts.positions
        self.instance = parts.instance
        self.publisher = parts.publisher
        self._lock = parts.lock
        self.rooms = rooms or RelayRooms.build(config, mapping, parts)
        self.stats = self.rooms.stats
        self._stopping = threading.Event()
        # it got past its start (claimed, source open, topics checked): an error now is the run's
        self.publishing = False

    @property
    def mapping(self) -> Mapping:
        """The mapping in use."""
        return self.rooms.reload.mapping

    @property
    def watcher(self) -> MappingWatcher | None:
        """The watcher of ``mapping.store`` (opened once this process leads; None: no hot reload)."""
        return self.rooms.reload.watcher

    def mapping_state(self) -> MappingState:
        """The mapping in use, the one waiting for a batch boundary, the last refused and why."""
        return self.rooms.reload.state()

    def observe(self, observer: RelayObserver) -> None:
        """Add an observer (before ``run``): it is started and stopped with the publish loop."""
        self.rooms.batches.observers.append(observer)

    def stop(self) -> None:
        self._stopping.set()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    # -- the loop --------------------------------------------------------------------------------
    def run(self) -> ResumePoint | None:
        """Relay until stopped; returns the last saved position. Raises the error that stopped it
        (``LeadershipError`` when HA leadership is lost)."""
        fence = self.rooms.fence
        try:
            if not fence.stand_by(self._stopping, self.rooms.reporter.state):
                return None  # stopped before being elected
            with gc_thresholds(GC_THRESHOLDS):  # process-wide: restored when the relay stops
                return self._relay()
        finally:
            fence.close()  # HA: resigns when still the leader: a standby takes over at once

    def _relay(self) -> ResumePoint | None:
        rooms = self.rooms
        self._open()
        try:
            self.publisher.ensure_topics(rooms.reload.initial_topics())
            log.info(
                "relay %s: publishing from %s to %s",
                self.config.instance,
                self.instance.start_point,
                self.config.kafka.bootstrap_servers,
            )
            self.stats.state = "running"
            self.publishing = True
            self._loop(self.config.publish.retry.start(sleep=self._stopping.wait))
            rooms.recovery.drain()
        except BaseException as exc:
            self.stats.state, self.stats.error = "failed", str(exc)
            rooms.recovery.abandon(term_over=isinstance(exc, LeadershipError))
            raise
        finally:
            rooms.reload.close()
            self.instance.stop()
            self.publisher.close(timeout=1.0)
            self._release()
            rooms.reporter.write(force=True)
        rooms.reporter.state("stopped")
        return self.instance.last_saved

    def _open(self) -> None:
        """Claim the instance, fence older producers, start reading, resume under the saved mapping."""
        self._claim()
        try:
            self.rooms.transactions.start()
            self.instance.start()
            if self.rooms.batches.txn is not None:
                self.rooms.batches.txn.start()  # continue a transaction the saved position is inside of
            self.rooms.reload.start()
            self.rooms.reload.encoder()
        except BaseException:
            self.rooms.reload.close()
            self.instance.stop()
            self.publisher.close(timeout=1.0)
            self._release()
            raise

    def _loop(self, backoff: Backoff) -> None:
        """Until stopped: a step, then what it left to handle — a failure, a position not written, a
        snapshot request, the status file."""
        recovery, publisher = self.rooms.recovery, self.publisher
        while not self._stopping.is_set():
            try:
                if self._step():
                    backoff.reset()
            except PublishError as exc:
                # A delivery failure is handled just below; anything else raised while sending is a
                # topic that could not be checked or created (the broker is away): roll back, retry.
                if publisher.failed() is None:
                    if not exc.retriable:
                        raise
                    recovery.retry(exc, backoff)
            failed = publisher.failed()
            if failed is not None:
                recovery.recover(failed, backoff)
            if self.instance.save_failure is not None:  # the position writer could not write
                raise self.instance.save_failure
            self.rooms.kafka_wait.check()
            self.rooms.reporter.snapshot_requests()
            self.rooms.reporter.write()

    def _step(self) -> bool:
        """Send one batch if the window allows, serve deliveries, ack the delivered prefix."""
        p, rooms = self.config.publish, self.rooms
        inflight = self.publisher.inflight()
        wait = min(p.batch_wait_seconds, INFLIGHT_WAIT_SECONDS) if inflight else p.batch_wait_seconds
        sent = False
        if rooms.reload.ready() and inflight < p.max_inflight_batches:
            message = self.instance.get_without_ack(p.batch_size, timeout=wait)
            if message.entries:
                rooms.batches.send(message.batch_id, message.entries)
                sent = True
        self.publisher.poll(0 if sent else wait)
        if rooms.transactions.due():
            rooms.transactions.commit()
        return rooms.batches.ack_delivered() > 0

    def _claim(self) -> None:
        """Hold the instance (a file position's lock: one relay per position) and start the observers."""
        if self._lock is not None:
            self._lock.acquire()
        started: list[RelayObserver] = []
        try:
            for observer in self.rooms.batches.observers:
                observer.start()
                started.append(observer)
        except BaseException:
            self._release(started)
            raise

    def _release(self, observers: Sequence[RelayObserver] | None = None) -> None:
        for observer in self.rooms.batches.observers if observers is None else observers:
            observer.stop()
        if self._lock is not None:
            self._lock.release()


def _span(first: Entry, last: Entry) -> str:
    """``mysql-bin.000003:4567..9876``: the binlog positions of a batch's first and last entry."""
    a, b = first.header, last.header
    end = f"{b.logfile_offset}"
    if b.logfile_name != a.logfile_name:
        end = f"{b.logfile_name}:{end}"
    return f"{a.logfile_name}:{a.logfile_offset}..{end}"
