"""Unit tests of the publish loop (``relay.daemon.pipeline.Relay``) with fakes for the producer, the
binlog server (the canal instance's fake parser, ``tests.unit.test_canal_instance``), the position store
and the HA leadership: start and batches acked, a failed batch rolled back and resent, stop with batches
in flight, a takeover after the leadership is lost, an empty transaction's position committed inside
the Kafka transaction in exactly-once mode. No services; the real canal instance parts, store
and record encoder run."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from mapping.load import parse_mapping
from relay.config.load import parse_config
from relay.daemon.pipeline import Relay, RelayParts
from relay.errors import LeadershipError, PublishError
from relay.kafka.records import BatchHandle, Record
from relay.positions.store import ResumePoint
from tests.unit.test_canal_instance import MemoryPositions, binlog, build, transaction, wait_for


class FakeProducer:
    """The publisher's interface in memory: batches sent are delivered on ``poll``, the first ``limit``
    of them (None: all); ``fail_next`` fails the next batch sent with a retriable error."""

    transactional_id = None  # idempotent mode

    def __init__(self) -> None:
        self.sent: list[int] = []  # batch ids, in send order
        self.handles: list[BatchHandle] = []
        self.limit: int | None = None
        self.delivered = 0
        self.fail_next = False
        self.aborted: list[int] = []
        self.closed = False

    def partitions(self, topic: str) -> int:
        return 1

    def ensure_topics(self, names: Iterable[str]) -> None:
        pass

    def init_transactions(self) -> None:
        pass

    def transaction_age(self) -> float | None:
        return None

    def send(self, batch_id: int, records: Sequence[Record], where: str = "") -> BatchHandle:
        handle = BatchHandle(batch_id, len(records), pending=1, where=where)
        if self.fail_next:
            self.fail_next = False
            handle.fail(PublishError("leader not available"))
        self.sent.append(batch_id)
        self.handles.append(handle)
        return handle

    def poll(self, timeout: float = 0.0) -> int:
        for handle in self.handles:
            if (
                handle.error is None
                and handle.pending
                and (self.limit is None or self.delivered < self.limit)
            ):
                handle.pending = 0
                self.delivered += 1
        return 0

    def completed_prefix(self) -> list[BatchHandle]:
        done = []
        while self.handles and self.handles[0].delivered:
            done.append(self.handles.pop(0))
        return done

    def failed(self) -> BatchHandle | None:
        return next((h for h in self.handles if h.error is not None), None)

    def inflight(self) -> int:
        return len(self.handles)

    def abort_inflight(self, *, term_over: bool = False) -> list[int]:
        ids = [h.batch_id for h in self.handles]
        self.aborted.extend(ids)
        self.handles.clear()
        return ids

    def flush(self, timeout: float) -> int:
        self.poll()
        return 0

    def close(self, timeout: float = 10.0) -> None:
        self.closed = True


class FakeLeadership:
    """Elected at once; ``lose()`` fences it: every later ``check`` raises."""

    member = "m-1"
    epoch = 1

    def __init__(self) -> None:
        self.lost = threading.Event()

    def start(self) -> None:
        pass

    def acquire(self, stopping: threading.Event, on_change: Any) -> bool:
        return True

    def check(self) -> None:
        if self.lost.is_set():
            raise LeadershipError("leadership lost: session expired")

    @property
    def fenced(self) -> bool:
        return self.lost.is_set()

    def announce(self, *args: Any, **kwargs: Any) -> None:
        pass

    def close(self) -> None:
        pass


MAPPING = parse_mapping({"version": 1, "logical_dbs": {"db": {"physical": ["db"]}}})


def relay_over(
    tmp_path: Path,
    positions: MemoryPositions,
    producer: FakeProducer,
    leadership: FakeLeadership | None = None,
) -> Relay:
    config = parse_config(
        {
            "state_dir": str(tmp_path),
            "store": {"batch_mode": "ITEMSIZE"},
            "publish": {
                "batch_size": 3,
                "max_inflight_batches": 2,
                "drain_seconds": 0.2,
                "retry": {"initial": 0.01, "maximum": 0.02, "jitter": 0.0},
            },
        }
    )
    instance, _ = build(positions, binlog(4))
    parts = RelayParts(instance=instance, positions=positions, publisher=producer, leadership=leadership)  # type: ignore[arg-type]
    return Relay(config, MAPPING, parts)


def run_in_thread(relay: Relay) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def target() -> None:
        try:
            out["saved"] = relay.run()
        except BaseException as exc:
            out["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, out


def test_batches_sent_are_acked_once_delivered_and_the_position_follows(tmp_path: Path) -> None:
    positions, producer = MemoryPositions(), FakeProducer()
    relay = relay_over(tmp_path, positions, producer)
    thread, out = run_in_thread(relay)
    wait_for(lambda: positions.point is not None and positions.point.offset == 4_300, "every batch acked")
    relay.stop()
    thread.join(10)
    assert "error" not in out and out["saved"] == positions.point
    assert producer.sent == sorted(producer.sent) and len(producer.sent) == 4
    assert producer.closed and relay.stats.state == "stopped"


def test_a_failed_batch_is_rolled_back_and_resent_and_nothing_is_acked_past_it(tmp_path: Path) -> None:
    positions, producer = MemoryPositions(), FakeProducer()
    producer.fail_next = True
    relay = relay_over(tmp_path, positions, producer)
    thread, out = run_in_thread(relay)
    wait_for(lambda: positions.point is not None and positions.point.offset == 4_300, "every batch acked")
    relay.stop()
    thread.join(10)
    assert "error" not in out
    assert producer.aborted and producer.aborted[0] == producer.sent[0]  # the failed batch, rolled back
    assert len(producer.sent) > 4  # what was rolled back went again
    assert relay.stats.batches_rolled_back >= 1
    assert [p.offset for p in positions.saves] == sorted(p.offset for p in positions.saves)


def test_stop_with_batches_in_flight_rolls_them_back_and_saves_only_what_was_acked(tmp_path: Path) -> None:
    positions, producer = MemoryPositions(), FakeProducer()
    producer.limit = 1  # Kafka accepts the first batch, then nothing
    relay = relay_over(tmp_path, positions, producer)
    thread, out = run_in_thread(relay)
    wait_for(lambda: positions.point is not None, "a first batch acked")
    wait_for(lambda: producer.inflight() > 0, "a batch in flight")
    saved_before = positions.point
    relay.stop()
    thread.join(10)
    assert "error" not in out and not thread.is_alive()
    assert producer.aborted  # not delivered within drain_seconds: rolled back, not acked
    assert positions.point == saved_before and out["saved"] == saved_before


def test_a_takeover_after_lost_leadership_resends_what_was_in_flight(tmp_path: Path) -> None:
    positions = MemoryPositions()
    old_producer, lead = FakeProducer(), FakeLeadership()
    old_producer.limit = 1
    old = relay_over(tmp_path / "old", positions, old_producer, lead)
    thread, out = run_in_thread(old)
    wait_for(lambda: positions.point is not None, "a first batch acked")
    wait_for(lambda: old_producer.inflight() > 0, "a batch in flight")
    lead.lost.set()  # the session expires: the old leader must ack nothing more
    old_producer.limit = None  # ... even when Kafka now takes what it had in flight
    thread.join(10)
    assert isinstance(out.get("error"), LeadershipError)
    fenced_at = positions.point
    assert fenced_at is not None and fenced_at.offset < 4_300

    new_producer = FakeProducer()
    new = relay_over(tmp_path / "new", positions, new_producer, FakeLeadership())
    thread, out = run_in_thread(new)
    wait_for(
        lambda: positions.point is not None and positions.point.offset == 4_300, "the new leader caught up"
    )
    new.stop()
    thread.join(10)
    assert "error" not in out
    assert fenced_at.offset == 1_300  # the first batch; the next was in flight at the fence, never acked
    assert len(new_producer.sent) == 3  # what was in flight at the fence is published again, then the rest


def test_a_start_that_fails_on_the_topics_stops_the_instance_and_closes_the_producer(tmp_path: Path) -> None:
    positions, producer = MemoryPositions(), FakeProducer()

    def unreachable(names: Iterable[str]) -> None:
        raise PublishError("no broker answers: the topics could not be checked")

    producer.ensure_topics = unreachable  # type: ignore[method-assign]
    relay = relay_over(tmp_path, positions, producer)
    thread, out = run_in_thread(relay)
    thread.join(10)
    assert isinstance(out.get("error"), PublishError)
    assert not relay.instance.running and producer.closed  # nothing left reading or open after it
    assert producer.sent == [] and positions.point is None
    assert relay.stats.state == "failed"


class TransactionalProducer(FakeProducer):
    """The transactional publisher's interface in memory: batches are delivered only by ``commit``, which
    records the extra records (the exactly-once position) it was given."""

    transactional_id = "unit"

    def __init__(self) -> None:
        super().__init__()
        self.opened: float | None = None
        self.commits: list[list[Record]] = []

    def send(self, batch_id: int, records: Sequence[Record], where: str = "") -> BatchHandle:
        if self.opened is None:
            self.opened = time.monotonic()
        return super().send(batch_id, records, where)

    def transaction_age(self) -> float | None:
        return None if self.opened is None else time.monotonic() - self.opened

    def batch_ids(self) -> list[int]:
        return [h.batch_id for h in self.handles]

    def poll(self, timeout: float = 0.0) -> int:
        return 0  # nothing is delivered outside a commit

    def commit(self, extra: Sequence[Record] = (), before_end: Any = None) -> bool:
        self.commits.append(list(extra))
        for handle in self.handles:
            handle.pending = 0
        self.opened = None
        return True


class PositionRecords:
    """The exactly-once position store's part in a transaction: a record of the point, and the points
    whose transactions committed."""

    config = None

    def __init__(self) -> None:
        self.committed_points: list[ResumePoint] = []

    def record(self, point: ResumePoint, epoch: int) -> Record:
        return Record("positions", None, b"unit", point.to_json().encode())

    def committed(self, point: ResumePoint) -> None:
        self.committed_points.append(point)


def test_an_empty_transaction_passed_by_the_sink_commits_its_position_inside_the_kafka_transaction(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """Exactly-once mode: a batch holding only an empty transaction's END (what the sink passes through
    filtered-out traffic) makes no record, but its transaction commits the resume point after that END,
    acknowledged after the batch of rows before it — the position follows filtered-out traffic the same
    way rows move it."""
    monkeypatch.setattr("relay.daemon.transactions.prove_aborted_records_hidden", lambda _config: None)
    positions, producer, eos = MemoryPositions(), TransactionalProducer(), PositionRecords()
    config = parse_config(
        {
            "state_dir": str(tmp_path),
            "store": {"batch_mode": "ITEMSIZE"},
            "publish": {"batch_size": 3, "max_inflight_batches": 1, "drain_seconds": 0.2},
            "kafka": {"transactions": True, "exactly_once": True, "transaction_linger_seconds": 0.0},
            "positions": {"backend": "kafka"},
        }
    )
    rows, empty = transaction(1_000, rows=2), transaction(2_000, rows=0)  # the empty one: its END alone
    instance, _ = build(positions, [rows, empty])
    parts = RelayParts(instance=instance, positions=positions, publisher=producer, exactly_once=eos)  # type: ignore[arg-type]
    relay = Relay(config, MAPPING, parts)
    thread, out = run_in_thread(relay)
    wait_for(lambda: positions.point is not None and positions.point.offset == 2_100, "the empty one acked")
    relay.stop()
    thread.join(10)
    assert "error" not in out
    assert [p.offset for p in eos.committed_points] == [1_300, 2_100]  # one transaction per batch, in order
    assert [ResumePoint.from_json(c[0].value.decode()).offset for c in producer.commits] == [1_300, 2_100]
    assert [p.offset for p in positions.saves] == [1_300, 2_100]
