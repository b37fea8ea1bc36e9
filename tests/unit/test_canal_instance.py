"""Unit tests of the canal instance's orchestration (``relay.source.instance`` and its parts) with fakes
for the binlog server (a fake parser reading a list of transactions), and an in-memory position store:
start, a batch acked and its position saved, a batch rolled back and handed out again, stop with batches
in flight, a takeover by a second instance, a parser failure after what closed before it, the lock order.
No services: the ring store, its server, the ack path and snapshot control are the real ones."""

from __future__ import annotations

import threading
import time
import types
from collections.abc import Callable
from unittest import mock

import pytest

from relay.canal.entry import (
    Entry,
    EntryPosition,
    EntryType,
    EventType,
    Header,
    RowChange,
    TransactionEnd,
    TxnContext,
)
from relay.canal.ring_store import RingStore
from relay.canal.server import EmbeddedServer
from relay.canal.sink import Sink
from relay.config.sections import BatchMode, InstanceConfig, SinkConfig, SourceConfig, StoreConfig
from relay.errors import PositionError, ServerError, SourceError
from relay.positions.store import MAX_GENERATION, ResumePoint, SourceIdentity, already_published
from relay.source.acks import AckPath, _Locks
from relay.source.instance import CanalInstance, InstanceParts
from relay.source.reading import Reading
from relay.source.snapshot_control import SnapshotControl

JOURNAL = "mysql-bin.000003"
DEADLINE = 10.0


def transaction(offset: int, rows: int = 2) -> list[Entry]:
    """One transaction of ``rows`` inserts and its END, at binlog offsets ``offset`` … (100 bytes each)."""
    txn = TxnContext(EntryPosition(JOURNAL, offset))
    out = []
    for i in range(rows + 1):
        at = offset + 100 * i
        header = Header(JOURNAL, at, 1, at, 100, EventType.INSERT, "db", "t")
        if i == rows:
            out.append(Entry(header, EntryType.TRANSACTIONEND, TransactionEnd(), txn, i, closes_txn=True))
        else:
            out.append(Entry(header, EntryType.ROWDATA, RowChange(EventType.INSERT), txn, i))
    return out


def binlog(count: int) -> list[list[Entry]]:
    return [transaction(1_000 * (n + 1)) for n in range(count)]


def offsets(entries: tuple[Entry, ...] | list[Entry]) -> list[int]:
    return [e.header.logfile_offset for e in entries]


class FakeSource:
    """What the facade and snapshot control ask of the binlog source."""

    identity = SourceIdentity("db.example", 3306, 1, "uuid-1")
    delivered = (JOURNAL, 4)

    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


class MemoryPositions:
    """A position store in memory that records every save and can be told to fail."""

    def __init__(self, point: ResumePoint | None = None) -> None:
        self.point = point
        self.saves: list[ResumePoint] = []
        self.fail = False

    def load(self) -> ResumePoint | None:
        return self.point

    def save(self, point: ResumePoint) -> None:
        if self.fail:
            raise PositionError("the position store is gone")
        self.point = point
        self.saves.append(point)

    def describe(self) -> str:
        return "memory"


class FakeParser:
    """The parser loop over a fake server: on start, puts every transaction of ``transactions`` not
    published before the saved point into the store, then fails with ``fail_with`` if given."""

    def __init__(self, store: RingStore, transactions: list[list[Entry]], stopping: threading.Event) -> None:
        self.store = store
        self.transactions = transactions
        self.stopping = stopping
        self.failure: BaseException | None = None
        self.fail_with: BaseException | None = None
        self.opened_with: ResumePoint | str | None = "not opened"
        self.last_event_ms = 0
        self._runner: threading.Thread | None = None

    def open(self, saved: ResumePoint | None) -> None:
        self.opened_with = saved

    def start(self) -> None:
        self._runner = threading.Thread(target=self._run, daemon=True)
        self._runner.start()

    def _run(self) -> None:
        saved = self.opened_with if isinstance(self.opened_with, ResumePoint) else None
        for txn in self.transactions:
            fresh = [e for e in txn if saved is None or not already_published(e, saved)]
            while fresh and not self.stopping.is_set():
                if self.store.put(fresh, timeout=0.05):
                    break
        if self.fail_with is not None:
            self.failure = self.fail_with

    @property
    def running(self) -> bool:
        return self._runner is not None and self._runner.is_alive()

    def join(self, timeout: float) -> None:
        if self._runner is not None:
            self._runner.join(timeout)


def build(
    positions: MemoryPositions, transactions: list[list[Entry]], *, save_interval: float = 0.0
) -> tuple[CanalInstance, FakeParser]:
    """The instance as ``relay.wiring.canal_instance`` builds it, with the fakes injected."""
    config = InstanceConfig(
        name="unit",
        store=StoreConfig(batch_mode=BatchMode.ITEMSIZE),  # a batch of n: n entries
        poll_seconds=0.05,
        save_interval_seconds=save_interval,
    )
    stopping = threading.Event()
    source = FakeSource()
    reading = Reading(SourceConfig(), source)  # type: ignore[arg-type]
    store = RingStore(config.store)
    server = EmbeddedServer(store)
    acks = AckPath(config.name, positions, server, store, save_interval, stopping)
    snapshots = SnapshotControl(config.name, config.snapshot, None, Sink(SinkConfig()), reading, acks)
    parser = FakeParser(store, transactions, stopping)
    parts = InstanceParts(reading, store, server, acks, snapshots, parser, stopping)
    return CanalInstance(config, parts), parser


def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def take(instance: CanalInstance, size: int) -> tuple[int, tuple[Entry, ...]]:
    message = instance.get_without_ack(size, timeout=DEADLINE)
    assert message.entries, "no batch within the deadline"
    return message.batch_id, message.entries


def test_start_loads_the_saved_point_opens_the_parser_on_it_and_hands_out_what_follows() -> None:
    txns = binlog(3)
    saved = ResumePoint(JOURNAL, 1_300)  # after the first transaction
    positions = MemoryPositions(saved)
    instance, parser = build(positions, txns)
    instance.start()
    try:
        assert instance.started.is_set()
        assert parser.opened_with == saved
        assert instance.saved_point == saved
        _, entries = take(instance, 6)
        assert offsets(entries) == offsets(txns[1] + txns[2])
    finally:
        instance.stop()


def test_a_batch_acked_saves_the_point_after_it_stamped_with_the_source_and_mapping_version() -> None:
    txns = binlog(2)
    positions = MemoryPositions()
    instance, _ = build(positions, txns)
    instance.start()
    try:
        instance.publish_under(7)
        batch, entries = take(instance, 3)
        assert offsets(entries) == offsets(txns[0])
        expected = instance.resume_point(batch)
        point = instance.ack(batch)
        assert point == expected
        assert (point.journal, point.offset) == (JOURNAL, 1_300)
        assert point.source == FakeSource.identity and point.mapping_version == 7
        assert positions.saves == [point] and instance.last_saved is point
        assert instance.acked_sequence == 2
        with pytest.raises(ServerError, match="not outstanding"):
            instance.ack(batch)
    finally:
        instance.stop()


def test_the_position_writer_saves_the_newest_acked_point_within_the_interval() -> None:
    txns = binlog(4)
    positions = MemoryPositions()
    instance, _ = build(positions, txns, save_interval=0.05)
    instance.start()
    try:
        batches = [take(instance, 3)[0] for _ in txns]
        for batch in batches:
            instance.ack(batch)
        last = instance.last_acked
        assert last is not None and last.offset == 4_300
        wait_for(lambda: positions.point == last, "the writer to save the last acked point")
        assert len(positions.saves) <= len(batches)  # acks share writes; the newest is written
    finally:
        instance.stop()


def test_an_intent_is_written_at_once_and_the_writer_never_overwrites_it_with_an_older_point() -> None:
    """Transactional mode's commit intent (``AckPath.intend``): written on the calling thread before the
    commit; the position writer, which writes acked points later, has nothing older to write over it; the
    ack after the commit writes the point after the transaction."""
    txns = binlog(3)
    positions = MemoryPositions()
    instance, _ = build(positions, txns, save_interval=0.05)
    assert instance.intend(lambda base: base) is None  # nothing saved yet: no intent
    instance.start()
    try:
        instance.ack(take(instance, 3)[0])
        acked = instance.last_acked
        assert acked is not None
        second = take(instance, 3)[0]
        marked = ResumePoint(acked.journal, acked.offset, extra={"commit_pending": {"marker": 1}})
        written = instance.intend(lambda base: marked if base == acked else base)
        assert written == marked and positions.point == marked  # at once, holding the acked point
        # What the writer does when a point is due: nothing older to write over the intent.
        assert instance.save_pending() is None and positions.point == marked
        instance.ack(second)
        after = instance.last_acked
        wait_for(lambda: positions.point == after, "the writer to save the point after the commit")
    finally:
        instance.stop()


def test_a_failing_position_write_is_kept_for_the_publish_loop_to_raise() -> None:
    positions = MemoryPositions()
    instance, _ = build(positions, binlog(1), save_interval=0.05)
    instance.start()
    try:
        positions.fail = True
        instance.ack(take(instance, 3)[0])
        wait_for(lambda: instance.save_failure is not None, "the writer to report the failed save")
        assert isinstance(instance.save_failure, PositionError)
    finally:
        positions.fail = False
        instance.stop()


def test_a_batch_failed_and_rolled_back_is_handed_out_again_and_then_acked() -> None:
    txns = binlog(2)
    positions = MemoryPositions()
    instance, _ = build(positions, txns)
    instance.start()
    try:
        first, entries = take(instance, 3)
        second, _ = take(instance, 3)
        instance.rollback(first)  # the publish of the first failed: both go again, in order
        with pytest.raises(ServerError):
            instance.resume_point(second)
        again, resent = take(instance, 3)
        assert offsets(resent) == offsets(entries) and again != first
        instance.ack(again)
        assert positions.point is not None and positions.point.offset == 1_300
        instance.rollback()  # all outstanding (none): nothing changes
        _, rest = take(instance, 3)
        assert offsets(rest) == offsets(txns[1])
    finally:
        instance.stop()


def test_stop_with_batches_in_flight_saves_only_what_was_acked() -> None:
    txns = binlog(3)
    positions = MemoryPositions()
    instance, parser = build(positions, txns, save_interval=5.0)  # the writer would wait: stop writes
    instance.start()
    first, _ = take(instance, 3)
    take(instance, 3)  # in flight at the stop
    instance.ack(first)
    instance.stop()
    assert positions.point is not None and positions.point.offset == 1_300
    assert not parser.running and instance.store.closed
    assert instance.reading.source.closed  # type: ignore[attr-defined]


def test_a_takeover_continues_from_the_saved_point_and_resends_what_was_in_flight() -> None:
    txns = binlog(3)
    positions = MemoryPositions()
    old, _ = build(positions, txns)
    old.start()
    acked, _ = take(old, 3)
    _, in_flight = take(old, 3)
    old.ack(acked)
    old.stop()  # the leader goes; its batch in flight was never acknowledged

    new, parser = build(positions, txns)  # the standby relay takes over the same position store
    new.start()
    try:
        assert parser.opened_with == positions.point
        _, resent = take(new, 3)
        assert offsets(resent) == offsets(in_flight)  # nothing skipped, nothing before it again
        batch, last = take(new, 3)
        assert offsets(last) == offsets(txns[2])
        new.ack(batch - 1, batch)
        assert positions.point is not None and positions.point.offset == 3_300
    finally:
        new.stop()


def test_a_parser_failure_is_raised_once_what_closed_before_it_is_acknowledged() -> None:
    positions = MemoryPositions()
    instance, parser = build(positions, binlog(1))
    parser.fail_with = SourceError("statement-logged DML on db.t")
    instance.start()
    try:
        wait_for(lambda: instance.failure is not None, "the parser to fail")
        batch, entries = take(instance, 3)  # what it put before is still handed out
        assert offsets(entries) == offsets(binlog(1)[0])
        assert instance.get_without_ack(3, timeout=0.01).is_empty  # a batch is outstanding: no raise yet
        instance.ack(batch)
        with pytest.raises(SourceError, match="statement-logged"):
            instance.get_without_ack(3, timeout=0.01)
        assert positions.point is not None and positions.point.offset == 1_300
    finally:
        instance.stop()


def test_the_lock_order_is_enforced_not_a_comment() -> None:
    locks = _Locks()
    with locks.both():
        pass
    with locks.state(), pytest.raises(RuntimeError, match="lock order"), locks.writing():
        pass
    with locks.writing(), locks.state():  # the one order works, also after the refusal
        pass


def test_no_snapshot_without_captures() -> None:
    instance, _ = build(MemoryPositions(), [])
    instance.start()
    try:
        assert instance.snapshot is None and instance.snapshot_status() is None
        assert instance.cancel_snapshot() == "no snapshot is running"
    finally:
        instance.stop()


def test_a_move_to_a_new_generation_saves_the_acked_point_under_it_before_anything_of_it() -> None:
    # A repair of records beyond the relay's position (relay verify --repair): the position is saved
    # under the new generation at once, so a restart re-reads what follows under it too; never while a
    # batch is outstanding, never downwards.
    txns = binlog(2)
    positions = MemoryPositions(ResumePoint(JOURNAL, 1_300, generation=2))
    instance, _ = build(positions, txns)
    instance.start()
    try:
        batch, _ = take(instance, 3)
        assert instance.acks.move_generation(5) is None  # a batch is outstanding
        acked = instance.ack(batch)
        moved = instance.acks.move_generation(5)
        assert moved is not None and moved.generation == 5
        assert (moved.journal, moved.offset) == (acked.journal, acked.offset)  # the same place
        assert positions.saves[-1] == moved and instance.saved_point == moved
        assert instance.acks.move_generation(4) is None  # never downwards
    finally:
        instance.stop()


def test_a_snapshot_above_a_generation_waits_for_the_move_and_refuses_past_the_last_one() -> None:
    instance, _ = build(MemoryPositions(), binlog(1))
    snapshots, reading = instance.parts.snapshots, instance.parts.reading
    reading.info = types.SimpleNamespace(server_id=1, mariadb=True)  # type: ignore[assignment]
    only = lambda db, table: True  # noqa: E731
    plan = {"id": "s", "tables": {"db.t": {}}}
    with mock.patch("relay.source.snapshot_control.plan", return_value=plan):
        assert "generations end" in (snapshots.request(only, "s", "", None, MAX_GENERATION) or "")
        assert reading.move_to is None
        assert snapshots.request(only, "s", "", None, 3) is None
    assert reading.move_to == 4 and reading.after_move is not None  # started by the parser after the move
    assert "waits for the move" in (snapshots.request(only, "t", "", None, None) or "")
