"""Why the relay waits for Kafka (``relay.daemon.kafka_wait``, ``relay.kafka.health``): reported once a batch
waited too long, again at an interval, gone once acks come back; and what the metadata is read to say. The
metadata is a fake here; tests/integration/test_broker_failures.py reads a real cluster's."""

from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

from relay.daemon.kafka_wait import REPEAT_S, REPORT_AFTER_S, KafkaWait
from relay.daemon.status import RelayStats
from relay.kafka.health import diagnose


class Publisher:
    def __init__(self) -> None:
        self.asked = 0

    def diagnose(self) -> list[str]:
        self.asked += 1
        return ["t [0] has 1 replica(s) in sync (1 of 1,2,3) and min.insync.replicas is 2"]

    def inflight(self) -> int:
        return 2


def test_a_batch_waiting_too_long_is_reported_again_at_an_interval_and_cleared_by_acks() -> None:
    now = [100.0]
    oldest: list[tuple[int, float] | None] = [(7, 100.0)]
    stats, publisher = RelayStats(), Publisher()
    wait = KafkaWait(publisher, stats, lambda: oldest[0], clock=lambda: now[0])  # type: ignore[arg-type]
    wait.check()
    assert stats.kafka_waiting is None and publisher.asked == 0  # not waiting long yet
    now[0] += REPORT_AFTER_S
    wait.check()
    assert publisher.asked == 1 and stats.kafka_waiting is not None
    assert stats.kafka_waiting["batch"] == 7 and stats.kafka_waiting["seconds"] == REPORT_AFTER_S
    assert "min.insync.replicas is 2" in stats.kafka_waiting["why"]
    now[0] += 1.0
    wait.check()
    assert publisher.asked == 1 and stats.kafka_waiting["seconds"] == REPORT_AFTER_S + 1  # same reason
    now[0] += REPEAT_S
    wait.check()
    assert publisher.asked == 2  # asked again
    oldest[0] = None  # acked
    wait.check()
    assert stats.kafka_waiting is None


def partition(leader: int, replicas: list[int], isrs: list[int]) -> Any:
    return SimpleNamespace(leader=leader, replicas=replicas, isrs=isrs)


class Admin:
    """The two calls ``diagnose`` makes, answered from fixed metadata and configs."""

    def __init__(
        self, brokers: list[int], topics: dict[str, dict[int, Any]], min_isr: dict[str, str]
    ) -> None:
        self.brokers, self.topics, self.min_isr = brokers, topics, min_isr

    def list_topics(self, timeout: float) -> Any:
        topics = {n: SimpleNamespace(error=None, partitions=p) for n, p in self.topics.items()}
        return SimpleNamespace(brokers=dict.fromkeys(self.brokers), topics=topics)

    def describe_configs(self, resources: list[Any], request_timeout: float) -> dict[Any, Future[Any]]:
        out: dict[Any, Future[Any]] = {}
        for resource in resources:
            future: Future[Any] = Future()
            future.set_result({"min.insync.replicas": SimpleNamespace(value=self.min_isr[resource.name])})
            out[resource] = future
        return out


def test_the_metadata_names_a_broker_gone_a_partition_without_leader_and_one_short_of_in_sync_replicas() -> (
    None
):
    admin = Admin(
        [1, 2],
        {
            "a": {0: partition(1, [1, 2, 3], [1, 2]), 1: partition(-1, [3], [])},
            "b": {0: partition(2, [1, 2, 3], [2])},
        },
        {"a": "2", "b": "2"},
    )
    lines = diagnose(admin, ["a", "b"], 1.0)  # type: ignore[arg-type]
    assert lines[0] == "broker(s) 3 not in the cluster (down?); 2 answer"
    assert lines[1] == "no leader for a [1]"
    assert lines[2].startswith("b [0] has 1 replica(s) in sync (2 of 1,2,3) and min.insync.replicas is 2")
    healthy = Admin([1, 2, 3], {"a": {0: partition(1, [1, 2, 3], [1, 2, 3])}}, {"a": "2"})
    assert diagnose(healthy, ["a"], 1.0) == []  # type: ignore[arg-type]
