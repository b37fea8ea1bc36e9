"""Unit tests of the publish loop's rooms (``relay.daemon``): the HA fence, the hot-reload rule and
resuming under the saved mapping version, transactions' commit rule, retry/rollback and the drain at
stop, and the snapshot desk. Fakes stand for the canal instance, the producer, the watcher and the
leadership; the real mapping, switch gate, record encoder and backoff run. No services."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest

from mapping import Mapping
from mapping.load import parse_mapping
from relay.common.retry import RetryPolicy
from relay.config.load import RelayConfig, parse_config
from relay.daemon.fence import LeaderFence, Unfenced, fence_for
from relay.daemon.recovery import Recovery
from relay.daemon.reload import HotReload
from relay.daemon.snapshot_requests import SnapshotDesk
from relay.daemon.status import RelayStats
from relay.daemon.transactions import Transactions
from relay.errors import (
    LeadershipError,
    MappingError,
    PositionError,
    ProducerFatalError,
    PublishError,
    RecordRejectedError,
)
from relay.kafka.commit_intent import Probe, Settler, pending
from relay.kafka.records import BatchHandle, Record
from relay.positions.store import MemoryPositionStore, ResumePoint, SourceIdentity
from tests.unit.test_canal_instance import transaction
from tests.unit.test_relay_loop import FakeLeadership

SOURCE = SourceIdentity("db.example", 3306, 1, "uuid-1")


def mapping(version: int, key: list[str] | None = None) -> Mapping:
    table = {"t": {"key": key}} if key else {}
    return parse_mapping({"version": version, "logical_dbs": {"db": {"physical": ["db"], "tables": table}}})


def config(**publish: Any) -> RelayConfig:
    return parse_config(
        {
            "publish": {"max_inflight_batches": 3, "drain_seconds": 0.2, **publish},
            "kafka": {"transaction_linger_seconds": 5.0},
        }
    )


class FakeStore:
    def __init__(self) -> None:
        self.config = type("StoreConfig", (), {"buffer_size": 8})()
        self.sequences = (0, 0)


class FakeInstance:
    """What the rooms ask of the canal instance."""

    def __init__(self, saved: ResumePoint | None = None) -> None:
        self.source = type("Source", (), {"identity": SOURCE})()
        self.saved_point = saved
        self.last_saved = saved
        self.start_point = ResumePoint("mysql-bin.000001", 4)
        self.info: Any = None
        self.store = FakeStore()
        self.acked_sequence = -1
        self.published_under: list[int] = []
        self.rollbacks = 0
        self.saves = 0
        self.save_error: Exception | None = None
        self.snapshot_requests: list[str] = []

    def publish_under(self, version: int) -> None:
        self.published_under.append(version)

    def captured_tables(self) -> list[tuple[str, str]]:
        return [("db", "t")]

    def rollback(self) -> None:
        self.rollbacks += 1

    def save_pending(self) -> None:
        if self.save_error is not None:
            raise self.save_error
        self.saves += 1

    def resume_point(self, batch_id: int) -> ResumePoint:
        return ResumePoint("mysql-bin.000001", 100 + batch_id)

    def cancel_snapshot(self) -> str | None:
        self.snapshot_requests.append("cancel")
        return None

    def request_snapshot(self, only: Any, request_id: str, *args: Any) -> str | None:
        self.snapshot_requests.append(request_id)
        return None


class FakePublisher:
    """The producer's interface as the rooms use it; ``deliver_on_poll``: poll delivers everything."""

    transactional_id = None

    def __init__(self) -> None:
        self.inflight_batches: list[int] = []
        self.age: float | None = None
        self.commits: list[list[Record]] = []
        self.commit_ok = True
        self.topics: list[str] = []
        self.deliver_on_poll = False
        self.flushed: list[float] = []
        self.term_over: list[bool] = []
        self.inits = 0
        self.landed: Any = None  # the delivery report of a record of the open transaction

    def partitions(self, topic: str) -> int:
        return 1

    def ensure_topics(self, names: Iterable[str]) -> None:
        self.topics.extend(names)

    def inflight(self) -> int:
        return len(self.inflight_batches)

    def transaction_age(self) -> float | None:
        return self.age

    def init_transactions(self) -> None:
        self.inits += 1

    def batch_ids(self) -> list[int]:
        return list(self.inflight_batches)

    def commit(self, extra: Sequence[Record], before_end: Any = None) -> bool:
        if before_end is not None:  # every record delivered, the commit next
            before_end(self.landed)
        self.commits.append(list(extra))
        if self.commit_ok:
            self.age = None
        return self.commit_ok

    def poll(self, timeout: float = 0.0) -> int:
        return 0

    def failed(self) -> BatchHandle | None:
        return None

    def flush(self, timeout: float) -> int:
        self.flushed.append(timeout)
        return 0

    def abort_inflight(self, *, term_over: bool = False) -> list[int]:
        self.term_over.append(term_over)
        ids, self.inflight_batches = self.inflight_batches, []
        return ids


class FakeWatcher:
    """A watcher whose ``poll`` hands out ``offered`` once."""

    def __init__(self) -> None:
        self.offered: Mapping | None = None
        self.accepted: list[int] = []
        self.refused: list[int] = []
        self.refusal = None
        self.store_error = None
        self.store = type("Store", (), {"close": lambda self: None})()

    def poll(self) -> Mapping | None:
        new, self.offered = self.offered, None
        return new

    def accept(self, new: Mapping) -> None:
        self.accepted.append(new.version)

    def refuse(self, new: Mapping, problem: MappingError) -> None:
        self.refused.append(new.version)


def hot_reload(
    instance: FakeInstance,
    publisher: FakePublisher,
    current: Mapping,
    *,
    history: dict[int, Mapping] | None = None,
    fence: Any = None,
) -> tuple[HotReload, FakeWatcher, list[tuple[int, int]]]:
    watcher, switches = FakeWatcher(), []

    def read(number: int | None) -> Mapping:
        if number is None:
            return current
        if history is None or number not in history:
            raise MappingError("mapping.store", f"no version {number}")
        return history[number]

    reload = HotReload(
        config(),
        current,
        instance,  # type: ignore[arg-type]
        publisher,  # type: ignore[arg-type]
        fence or Unfenced(),
        read_mapping=read,
        open_watcher=lambda m: watcher,  # type: ignore[arg-type,return-value]
        on_switch=lambda old, new: switches.append((old.version, new.version)),
    )
    return reload, watcher, switches


# -- the fence --------------------------------------------------------------------------------------
def test_without_ha_the_relay_leads_at_once_and_every_check_passes() -> None:
    fence = fence_for(None)
    reports: list[str] = []
    assert isinstance(fence, Unfenced) and fence.stand_by(threading.Event(), reports.append)
    fence.check()
    assert reports == [] and fence.note() == "" and fence.epoch == 0


def test_with_ha_the_relay_stands_by_until_elected_and_a_lost_leadership_fails_the_check() -> None:
    lead = FakeLeadership()
    fence = fence_for(lead)  # type: ignore[arg-type]
    reports: list[str] = []
    assert isinstance(fence, LeaderFence) and fence.stand_by(threading.Event(), reports.append)
    assert reports == ["standby", "starting"]
    fence.check()
    assert fence.passed > 0 and fence.note() == f" (fence passed at {fence.passed:.3f})"
    lead.lost.set()
    with pytest.raises(LeadershipError):
        fence.check()


# -- hot reload -------------------------------------------------------------------------------------
def test_a_new_version_waits_for_the_batches_in_flight_then_switches_at_the_boundary() -> None:
    instance, publisher = FakeInstance(), FakePublisher()
    reload, watcher, switches = hot_reload(instance, publisher, mapping(1))
    reload.start()
    assert reload.ready() and reload.state().pending is None
    publisher.inflight_batches = [1, 2]
    watcher.offered = mapping(2)
    assert not reload.ready()  # no new batch while a switch waits for the ones in flight
    assert reload.mapping.version == 1 and reload.state().pending == 2
    publisher.inflight_batches = []
    assert reload.ready()
    assert reload.mapping.version == 2 and reload.encoder().mapping is reload.mapping
    assert instance.published_under == [1, 2] and watcher.accepted == [2] and switches == [(1, 2)]
    assert reload.state().pending is None


def test_a_rolled_back_range_is_redelivered_under_the_old_version_before_the_switch() -> None:
    instance, publisher = FakeInstance(), FakePublisher()
    reload, watcher, switches = hot_reload(instance, publisher, mapping(1))
    reload.start()
    reload.rolled_back(5)  # batches up to store sequence 5 were rolled back
    watcher.offered = mapping(2)
    instance.acked_sequence = 2
    assert reload.ready() and switches == []  # keep taking batches: they re-deliver the range
    instance.acked_sequence = 5
    publisher.inflight_batches = [9]
    assert not reload.ready()  # settled: hold new batches until the one in flight is acked
    publisher.inflight_batches = []
    assert reload.ready() and switches == [(1, 2)]


def test_a_version_that_fails_on_a_table_already_published_is_refused_and_the_old_one_kept() -> None:
    instance, publisher = FakeInstance(), FakePublisher()
    reload, watcher, switches = hot_reload(instance, publisher, mapping(1))
    reload.start()
    encoder = reload.encoder()
    for entry in transaction(1_000):
        encoder.encode(entry)
    assert encoder.known_tables()
    watcher.offered = mapping(2, key=["no_such_column"])
    assert reload.ready()
    assert watcher.refused == [2] and switches == [] and reload.mapping.version == 1
    assert reload.state().pending is None and instance.published_under == [1]


def test_a_switch_is_fenced_before_the_position_names_the_new_version() -> None:
    instance, publisher, lead = FakeInstance(), FakePublisher(), FakeLeadership()
    reload, watcher, switches = hot_reload(instance, publisher, mapping(1), fence=LeaderFence(lead))  # type: ignore[arg-type]
    reload.start()
    lead.lost.set()
    watcher.offered = mapping(2)
    with pytest.raises(LeadershipError):
        reload.ready()
    assert instance.published_under == [1] and switches == [] and reload.mapping.version == 1


def test_a_relay_resumes_under_its_saved_positions_version_and_switches_once_the_tail_is_covered() -> None:
    saved = ResumePoint("mysql-bin.000001", 400, source=SOURCE, mapping_version=1)
    instance, publisher = FakeInstance(saved), FakePublisher()
    instance.info = type("Info", (), {"end": ("mysql-bin.000001", 900)})()
    reload, _, switches = hot_reload(instance, publisher, mapping(2), history={1: mapping(1)})
    reload.start()
    assert reload.mapping.version == 1 and reload.state().pending == 2
    assert instance.published_under == [1]
    assert reload.ready() and switches == []  # what an earlier process may have published: again, under 1
    instance.last_saved = ResumePoint("mysql-bin.000001", 900, source=SOURCE)  # the binlog end seen at start
    assert reload.ready() and switches == [(1, 2)] and instance.published_under == [1, 2]


def test_a_saved_version_the_store_no_longer_has_stops_the_relay_naming_the_way_out() -> None:
    saved = ResumePoint("mysql-bin.000001", 400, source=SOURCE, mapping_version=1)
    reload, _, _ = hot_reload(FakeInstance(saved), FakePublisher(), mapping(2), history={})
    with pytest.raises(MappingError, match="relay positions set"):
        reload.start()


# -- transactions -----------------------------------------------------------------------------------
class FakeExactlyOnce:
    config = None

    def __init__(self) -> None:
        self.committed_points: list[ResumePoint] = []

    def record(self, point: ResumePoint, epoch: int) -> Record:
        return Record("positions", None, b"k", json.dumps([point.offset, epoch]).encode())

    def committed(self, point: ResumePoint) -> None:
        self.committed_points.append(point)


def test_a_transaction_is_due_when_full_or_old_enough() -> None:
    publisher = FakePublisher()
    txns = Transactions(config(), FakeInstance(), publisher, Unfenced())  # type: ignore[arg-type]
    assert not txns.due() and not txns.open()  # idempotent mode: no transaction
    publisher.age, publisher.inflight_batches = 1.0, [1, 2]
    assert txns.open() and not txns.due()
    publisher.inflight_batches = [1, 2, 3]  # publish.max_inflight_batches
    assert txns.due()
    publisher.age, publisher.inflight_batches = 5.0, [1]  # kafka.transaction_linger_seconds
    assert txns.due()


def test_exactly_once_commits_the_resume_point_after_the_last_batch_inside_the_transaction() -> None:
    publisher, eos, lead = FakePublisher(), FakeExactlyOnce(), FakeLeadership()
    txns = Transactions(config(), FakeInstance(), publisher, LeaderFence(lead), eos)  # type: ignore[arg-type]
    publisher.age, publisher.inflight_batches = 1.0, [4, 5]
    assert txns.commit()
    assert [r.value for r in publisher.commits[0]] == [b"[105, 1]"]  # the point after batch 5, epoch 1
    assert [p.offset for p in eos.committed_points] == [105]
    publisher.commit_ok, publisher.age = False, 1.0
    assert not txns.commit() and len(eos.committed_points) == 1  # a failed commit saves nothing
    lead.lost.set()
    with pytest.raises(LeadershipError):
        txns.commit()
    assert len(publisher.commits) == 2  # fenced before committing


def test_a_commit_waits_while_before_commit_says_not_yet() -> None:
    """The transaction topic's hook: its ENDs go in before the commit; while one cannot, no commit."""
    publisher = FakePublisher()
    txns = Transactions(config(), FakeInstance(), publisher, Unfenced())  # type: ignore[arg-type]
    ready: list[bool] = [False]
    txns.before_commit = lambda: ready[0]
    publisher.age, publisher.inflight_batches = 1.0, [1]
    assert not txns.commit() and publisher.commits == []
    ready[0] = True
    assert txns.commit() and len(publisher.commits) == 1


class Landed:
    """A delivery report's place, as confluent_kafka's ``Message`` gives it."""

    def topic(self) -> str:
        return "db.t"

    def partition(self) -> int:
        return 2

    def offset(self) -> int:
        return 41


class IntentInstance(FakeInstance):
    """Records the points written before a commit, and when (how many commits had run by then)."""

    def __init__(self, publisher: FakePublisher, saved: ResumePoint) -> None:
        super().__init__(saved)
        self.publisher = publisher
        self.intents: list[tuple[ResumePoint, int]] = []

    def intend(self, make: Any) -> ResumePoint | None:
        assert self.saved_point is not None
        written = make(self.saved_point)
        self.intents.append((written, len(self.publisher.commits)))
        return written


def test_transactional_mode_writes_the_intent_before_the_commit_naming_a_record_of_it() -> None:
    publisher = FakePublisher()
    saved = ResumePoint("mysql-bin.000001", 90)
    instance = IntentInstance(publisher, saved)
    settler = Settler({}, 1.0, lambda: None)
    positions = MemoryPositionStore(saved)
    txns = Transactions(config(), instance, publisher, Unfenced(), None, (positions, settler))  # type: ignore[arg-type]
    publisher.age, publisher.inflight_batches, publisher.landed = 1.0, [4, 5], Landed()
    assert txns.commit()
    [(written, commits_before)] = instance.intents
    assert commits_before == 0, "the intent is written before the transaction commits"
    found = pending(written)
    assert found is not None
    after, probe = found
    assert (written.journal, written.offset) == ("mysql-bin.000001", 90)  # still the point before it
    assert after.offset == 105 and probe == Probe("db.t", 2, 41)  # the point after batch 5; a record
    publisher.age, publisher.inflight_batches, publisher.landed = 1.0, [6], None
    assert txns.commit() and len(instance.intents) == 1  # nothing landed: nothing to publish twice


def test_exactly_once_mode_writes_no_intent_its_position_commits_inside_the_transaction() -> None:
    publisher, eos = FakePublisher(), FakeExactlyOnce()
    instance = IntentInstance(publisher, ResumePoint("mysql-bin.000001", 90))
    intents = (MemoryPositionStore(), Settler({}, 1.0, lambda: None))
    txns = Transactions(config(), instance, publisher, Unfenced(), eos, intents)  # type: ignore[arg-type]
    publisher.age, publisher.inflight_batches, publisher.landed = 1.0, [4], Landed()
    assert txns.commit() and instance.intents == []


# -- retry, rollback, drain -------------------------------------------------------------------------
class FakeAcks:
    def __init__(self, publisher: FakePublisher) -> None:
        self.publisher = publisher
        self.acked: list[int] = []
        self.forgotten: list[int] = []
        self.deliverable = 0  # how many batches in flight Kafka has delivered

    def ack_delivered(self) -> int:
        done = self.publisher.inflight_batches[: self.deliverable]
        del self.publisher.inflight_batches[: len(done)]
        self.deliverable -= len(done)
        self.acked.extend(done)
        return len(done)

    def forget(self, batch_ids: Iterable[int]) -> None:
        self.forgotten.extend(batch_ids)


def recovery(
    instance: FakeInstance, publisher: FakePublisher, **publish: Any
) -> tuple[Recovery, FakeAcks, RelayStats, HotReload]:
    acks, stats = FakeAcks(publisher), RelayStats()
    reload, _, _ = hot_reload(instance, publisher, mapping(1))
    txns = Transactions(config(), instance, publisher, Unfenced())  # type: ignore[arg-type]
    room = Recovery(config(**publish), instance, publisher, stats, reload, acks, txns)  # type: ignore[arg-type]
    return room, acks, stats, reload


def failed(batch_id: int, error: PublishError) -> BatchHandle:
    handle = BatchHandle(batch_id, 1, pending=1)
    handle.fail(error)
    return handle


def test_a_retriable_failure_aborts_what_is_in_flight_rolls_back_and_backs_off() -> None:
    instance, publisher = FakeInstance(), FakePublisher()
    room, acks, stats, _ = recovery(instance, publisher)
    publisher.inflight_batches = [3, 4]
    instance.store.sequences = (7, 7)
    slept: list[float] = []
    backoff = RetryPolicy(initial=0.01, jitter=0.0).start(sleep=slept.append)
    room.recover(failed(3, PublishError("leader not available")), backoff)
    assert publisher.inflight() == 0 and instance.rollbacks == 1 and acks.forgotten == [3, 4]
    assert stats.batches_rolled_back == 2 and stats.state == "running" and slept == [0.01]


def test_retrying_gives_up_once_the_backoff_is_spent() -> None:
    instance, publisher = FakeInstance(), FakePublisher()
    room, _, stats, _ = recovery(instance, publisher)
    backoff = RetryPolicy(initial=0.01, max_tries=1).start(sleep=lambda s: None)
    with pytest.raises(PublishError, match="gave up retrying: broker away"):
        room.retry(PublishError("broker away"), backoff)
    assert stats.state == "retrying" and instance.rollbacks == 1


def test_a_refused_record_stops_after_what_was_sent_before_it_landed_and_was_acked() -> None:
    instance, publisher = FakeInstance(), FakePublisher()
    room, acks, _, _ = recovery(instance, publisher)
    publisher.inflight_batches, acks.deliverable = [1, 2, 3], 2  # batches 1 and 2 land, 3 holds the refused
    error = RecordRejectedError("record too large", topic="db", key=b"1", size=2_000_000, reason="too large")
    with pytest.raises(RecordRejectedError):
        room.recover(failed(3, error), RetryPolicy().start(sleep=lambda s: None))
    assert publisher.flushed == [0.2] and acks.acked == [1, 2] and instance.rollbacks == 0


def test_another_fatal_failure_stops_without_waiting() -> None:
    instance, publisher = FakeInstance(), FakePublisher()
    room, acks, _, _ = recovery(instance, publisher)
    publisher.inflight_batches = [1]
    with pytest.raises(ProducerFatalError):
        room.recover(failed(1, ProducerFatalError("producer fenced")), RetryPolicy().start())
    assert publisher.flushed == [] and acks.acked == []


def test_stop_drains_commits_and_acks_what_lands_then_rolls_back_the_rest() -> None:
    instance, publisher = FakeInstance(), FakePublisher()
    room, acks, _, _ = recovery(instance, publisher, drain_seconds=0.3)
    publisher.inflight_batches, acks.deliverable, publisher.age = [1, 2, 3], 2, 0.5
    room.drain()
    assert acks.acked == [1, 2] and len(publisher.commits) == 1  # the open transaction committed first
    assert publisher.term_over == [False] and instance.rollbacks == 1 and instance.saves == 1


def test_stop_with_everything_delivered_rolls_nothing_back() -> None:
    instance, publisher = FakeInstance(), FakePublisher()
    room, acks, _, _ = recovery(instance, publisher)
    publisher.inflight_batches, acks.deliverable = [1, 2], 2
    room.drain()
    assert acks.acked == [1, 2] and instance.rollbacks == 0 and instance.saves == 1


def test_abandoning_on_lost_leadership_leaves_the_transaction_to_the_successor() -> None:
    instance, publisher = FakeInstance(), FakePublisher()
    room, _, _, _ = recovery(instance, publisher)
    instance.save_error = PositionError("the position store is gone")  # logged, not raised
    publisher.inflight_batches = [7]
    room.abandon(term_over=True)
    assert publisher.term_over == [True] and instance.rollbacks == 1


# -- on-demand snapshot requests --------------------------------------------------------------------
def test_the_desk_takes_a_waiting_request_once_and_keeps_its_answer(tmp_path: Path) -> None:
    instance, path = FakeInstance(), tmp_path / "snapshot-request.json"
    desk = SnapshotDesk(instance, path, after_switch=False)  # type: ignore[arg-type]
    assert not desk.take(mapping(1)) and desk.answer is None
    path.write_text(json.dumps({"id": "r1", "action": "cancel"}))
    assert not desk.take(mapping(1))  # checked at most every CHECK_SECONDS
    desk._next_check = 0.0
    assert desk.take(mapping(1)) and not path.exists()
    assert desk.answer is not None and desk.answer["id"] == "r1" and desk.answer["accepted"]
    desk.mapping_switched(mapping(1), mapping(2))  # snapshot.mode never: no snapshot at a switch
    assert instance.snapshot_requests == ["cancel"] and desk.answer["id"] == "r1"


def test_a_switch_snapshots_the_tables_it_adds(tmp_path: Path) -> None:
    instance = FakeInstance()
    desk = SnapshotDesk(instance, tmp_path / "none.json", after_switch=True)  # type: ignore[arg-type]
    desk.mapping_switched(mapping(1), mapping(2))
    assert instance.snapshot_requests == ["mapping-v2"]
    assert desk.answer is not None and desk.answer["id"] == "mapping-v2" and desk.answer["accepted"]


def test_lag_is_zero_while_caught_up_and_the_age_of_the_last_acked_change_otherwise() -> None:
    # The one definition the status file, the metrics, relay status and a cluster node's record share.
    stats = RelayStats()
    assert stats.lag_seconds() is None  # nothing acked, no saved position to go by
    old = int((time.time() - 30) * 1000)
    assert 29 < (stats.lag_seconds(saved_ms=old) or 0) < 60  # before any ack: the saved position's age
    stats.acked(1, 1, "mysql-bin.000001:4", old)
    assert 29 < (stats.lag_seconds() or 0) < 60
    assert stats.lag_seconds(caught_up=True) == 0.0  # at the binlog end: 0, however old the change
    assert stats.snapshot(caught_up=True)["lag_seconds"] == 0.0
    assert stats.snapshot(caught_up=True)["caught_up"] is True
    assert 29 < stats.snapshot()["lag_seconds"] < 60


def test_a_change_after_a_quiet_hour_lags_by_its_own_age_not_the_hour() -> None:
    stats = RelayStats()
    hour_ago = int((time.time() - 3600) * 1000)
    stats.acked(1, 1, "mysql-bin.000001:4", hour_ago)  # the last change before the quiet hour
    new = int((time.time() - 2) * 1000)  # one change, read two seconds ago, not yet acknowledged
    assert 1 < (stats.lag_seconds(pending_ms=new) or 0) < 30
    assert 1 < stats.snapshot(pending_ms=new)["lag_seconds"] < 30
    assert stats.lag_seconds(caught_up=True, pending_ms=new) == 0.0
    assert (stats.lag_seconds() or 0) > 3500, "nothing pending known: the last acknowledged change's age"
