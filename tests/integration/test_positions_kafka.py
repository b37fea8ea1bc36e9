"""The Kafka position store (exactly-once mode) on the real broker: the same contract as every other
position store (``tests/position_contract.py``), run unchanged; plus what is particular to it: the topic
is compacted, one instance's key does not see another's, a reader creates nothing, and a bound store (the
relay's) refuses to write a point that was not committed with its records.

The contract needs only committed transactions, so it runs on any broker (Tansu too); what exactly-once
needs beyond it (aborted records hidden) is proven by the relay at start (``test_transactions.py``)."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource  # type: ignore[attr-defined]

from relay.dev.services import KafkaService
from relay.errors import PositionError
from relay.kafka.positions import KafkaPositionConfig, KafkaPositionStore
from relay.positions.store import ResumePoint
from tests.position_contract import (  # noqa: F401  (the shared contract, run against the Kafka store)
    POINT,
    test_contract_empty_store_loads_none,
    test_contract_last_save_wins,
    test_contract_save_then_load_round_trips,
)


def _config(kafka: KafkaService, topic: str, instance: str = "t") -> KafkaPositionConfig:
    return KafkaPositionConfig(kafka.bootstrap_servers, topic, instance, f"relay-test-{uuid.uuid4().hex[:8]}")


@pytest.fixture
def store(kafka_service: KafkaService) -> KafkaPositionStore:
    return KafkaPositionStore(_config(kafka_service, f"positions-{uuid.uuid4().hex[:10]}"))


def test_instances_share_the_topic_each_reads_its_own_key(kafka_service: KafkaService) -> None:
    topic = f"positions-{uuid.uuid4().hex[:10]}"
    a = KafkaPositionStore(_config(kafka_service, topic, "a"))
    b = KafkaPositionStore(_config(kafka_service, topic, "b"))
    a.save(POINT)
    later = ResumePoint(journal="mysql-bin.000009", offset=4)
    b.save(later)
    assert a.load() == POINT and b.load() == later
    assert KafkaPositionStore(_config(kafka_service, topic, "c")).load() is None


def test_the_topic_is_compacted_and_a_reader_creates_nothing(kafka_service: KafkaService) -> None:
    topic = f"positions-{uuid.uuid4().hex[:10]}"
    reader = KafkaPositionStore(_config(kafka_service, topic))
    assert reader.load() is None
    admin = AdminClient({"bootstrap.servers": kafka_service.bootstrap_servers})
    assert topic not in admin.list_topics(timeout=30).topics
    reader.save(POINT)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(timeout=30)
    assert configs["cleanup.policy"].value == "compact"


def test_a_bound_store_writes_nothing_outside_the_records_transaction(kafka_service: KafkaService) -> None:
    topic = f"positions-{uuid.uuid4().hex[:10]}"
    bound = KafkaPositionStore(_config(kafka_service, topic), bound=True)
    with pytest.raises(PositionError, match="not committed with its records"):
        bound.save(POINT)
    assert bound.load() is None
    bound.committed(POINT)  # what the pipeline says once the transaction holding record(POINT) committed
    bound.save(POINT)  # confirms it; writes nothing itself
    assert bound.load() is None
