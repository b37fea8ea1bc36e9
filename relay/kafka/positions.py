"""Exactly-once mode: the resume point kept in a compacted Kafka topic, committed with the records.

``KafkaPositionStore`` keeps one instance's resume point as the latest record under the key ``instance``
in ``kafka.positions_topic`` (created with ``cleanup.policy=compact``; one partition: the topic carries one
small record per transaction). ``load`` reads that partition ``read_committed`` to its end and keeps the
last record of the key. In the relay the store is *bound*: the pipeline puts ``record(point)`` into the
same Kafka transaction as the batches it covers (``KafkaPublisher.commit(extra=...)``), so records and
position commit or abort together; ``save`` (called by the instance's ack, after the commit) then only
checks that the point is the one just committed — it never writes outside the transaction. Unbound (an
operator's ``relay positions set``, the contract tests) ``save`` writes the point in a transaction of its
own, with the instance's ``transactional.id``: that fences a relay still running on the instance.

Why here and not in ``relay.positions``: the writes must go through the publisher's transactional
producer, and ``relay.positions`` sits below ``relay.kafka`` (the source loads positions without any
Kafka client). It implements the ``relay.positions.store.PositionStore`` protocol and passes its contract
suite (``tests/integration/test_positions_kafka.py``).

``prove_aborted_records_hidden`` is the start-up check of exactly-once mode: a probe record written in a
transaction that is then aborted must stay invisible to a ``read_committed`` consumer, while a committed
probe after it must be seen (so the check cannot pass vacuously). A broker that shows aborted records
(Tansu 0.6 does) is refused with ``ConfigError('kafka.exactly_once', ...)`` naming the reason.

The topic itself — checked, created, read to its end, written — is ``relay.kafka.compacted``'s, shared with
the schema history's Kafka store.

Threads: the publisher thread (relay), or the CLI's; every blocking call has a timeout.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from relay.common.kafka_log import quiet
from relay.errors import ConfigError, PositionError, PublishError
from relay.kafka.compacted import PARTITION, CompactedTopic, CompactedTopicConfig
from relay.kafka.records import Record
from relay.positions.store import ResumePoint

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class KafkaPositionConfig(CompactedTopicConfig):
    """Where the positions live, and the instance's ``transactional.id`` (an unbound ``save`` writes with it,
    fencing a relay still running on the instance)."""

    transactional_id: str


class KafkaPositionStore:
    """A ``PositionStore`` in a compacted topic; ``bound``: written only in the publisher's transactions."""

    def __init__(self, config: KafkaPositionConfig, *, bound: bool = False) -> None:
        self.config = config
        self.bound = bound
        self._committed: ResumePoint | None = None
        self._topic = CompactedTopic(config, PositionError)

    def describe(self) -> str:
        return f"kafka topic {self.config.topic} key {self.config.instance}"

    # -- inside the relay's transactions ----------------------------------------------------------
    def record(self, point: ResumePoint, epoch: int = 0) -> Record:
        """The record that saves ``point``: the pipeline produces it into the batches' transaction."""
        self.ensure_topic()
        body = {
            "instance": self.config.instance,
            "transactional_id": self.config.transactional_id,
            "epoch": epoch,
            "position": json.loads(point.to_json()),
        }
        value = json.dumps(body, sort_keys=True).encode("utf-8")
        return Record(self.config.topic, PARTITION, self.config.instance.encode("utf-8"), value)

    def committed(self, point: ResumePoint) -> None:
        """The transaction holding ``record(point)`` committed: ``save(point)`` may now confirm it."""
        self._committed = point

    # -- PositionStore ---------------------------------------------------------------------------
    def load(self) -> ResumePoint | None:
        if not self._topic.exists():
            return None  # nothing saved yet; reading creates nothing (``relay status`` reads too)
        latest: bytes | None = None
        for key, value in self._topic.read("relay-positions", {"isolation.level": "read_committed"}):
            if key == self.config.instance.encode("utf-8"):
                latest = value
        if latest is None:
            return None
        point = _decode(latest, self.describe())
        self._committed = point
        return point

    def save(self, point: ResumePoint) -> None:
        if self.bound:
            if point != self._committed:
                raise PositionError(
                    f"{self.describe()}: position {point} was not committed with its records; "
                    "exactly-once mode never writes a position outside the records' transaction"
                )
            return
        self._save_alone(point)

    def _save_alone(self, point: ResumePoint) -> None:
        record = self.record(point)
        assert record.key is not None and record.value is not None
        producer = Producer(quiet(self.config.client(**{"transactional.id": self.config.transactional_id})))
        try:
            producer.init_transactions(self.config.timeout_s)
            producer.begin_transaction()
            errors, _ = self._topic.produce(producer, [(record.key, record.value)])
            if errors:
                producer.abort_transaction(self.config.timeout_s)
                raise PositionError(f"cannot write {self.describe()}: {errors[0].str()}")
            producer.commit_transaction(self.config.timeout_s)
        except KafkaException as exc:
            raise PositionError(f"cannot write {self.describe()}: {exc.args[0].str()}") from exc
        self._committed = point

    # -- the topic --------------------------------------------------------------------------------
    def ensure_topic(self) -> None:
        """Create the compacted positions topic (one partition) where it does not exist."""
        self._topic.ensure()


def _decode(value: bytes, where: str) -> ResumePoint:
    try:
        position = json.loads(value.decode("utf-8"))["position"]
    except (ValueError, KeyError, TypeError) as exc:
        raise PositionError(f"{where}: not a saved position record ({exc!r})") from exc
    return ResumePoint.from_json(json.dumps(position), where=where)


# --- the start-up proof of exactly-once mode -----------------------------------------------------------
def prove_aborted_records_hidden(config: KafkaPositionConfig) -> None:
    """Refuse exactly-once mode (``ConfigError``) unless the broker hides aborted records from
    ``read_committed`` consumers and shows committed ones. Writes two probe records to
    ``{positions_topic}.probe`` with the transactional id ``{transactional_id}.probe`` (not the relay's:
    the probe must not fence the relay's own producer)."""
    topic = f"{config.topic}.probe"
    CompactedTopic(config, PositionError, topic).ensure({"retention.ms": "3600000"})  # not compacted
    nonce = uuid.uuid4().hex
    aborted, committed = f"aborted-{nonce}".encode(), f"committed-{nonce}".encode()
    producer = Producer(quiet(config.client(**{"transactional.id": f"{config.transactional_id}.probe"})))
    offsets: list[int] = []
    try:
        producer.init_transactions(config.timeout_s)
        _probe_transaction(producer, topic, aborted, offsets.append, producer.abort_transaction, config)
        _probe_transaction(producer, topic, committed, offsets.append, producer.commit_transaction, config)
    except KafkaException as exc:
        raise PublishError(f"exactly-once probe on {topic}: {exc.args[0].str()}") from exc
    if len(offsets) != 2:
        raise PublishError(f"exactly-once probe on {topic}: the probe records were not delivered")
    seen = _probe_read(config, topic, offsets[0], committed)
    where = f"broker {config.bootstrap_servers}, probe topic {topic}"
    if aborted in seen:
        raise ConfigError(
            "kafka.exactly_once",
            f"refused: a read_committed consumer sees a record of an ABORTED transaction ({where}, "
            f"offset {offsets[0]}); this broker cannot keep aborted batches out of consumers' view, so "
            "exactly-once cannot hold here (Apache Kafka does; Tansu does not). Use kafka.transactions "
            "without exactly_once, or a broker that hides aborted records",
        )
    if committed not in seen:
        raise ConfigError(
            "kafka.exactly_once",
            f"refused: the COMMITTED probe record (offset {offsets[1]}) was not visible to a read_committed "
            f"consumer within {config.timeout_s:.0f}s ({where}): the check cannot prove the broker hides "
            "aborted records",
        )
    log.info("exactly-once probe passed: %s hides aborted records and shows committed ones", where)


def _probe_transaction(
    producer: Producer,
    topic: str,
    value: bytes,
    offset: Callable[[int], None],
    end: Callable[[float], None],
    config: KafkaPositionConfig,
) -> None:
    producer.begin_transaction()

    def delivered(err: KafkaError | None, msg: Any) -> None:
        if err is None and msg.offset() is not None:  # None: acked implicitly, landing unknown
            offset(msg.offset())

    producer.produce(topic, value=value, partition=PARTITION, on_delivery=delivered)
    producer.flush(config.timeout_s)  # the aborted record reaches the broker: the broker must hide it
    end(config.timeout_s)


def _probe_read(config: KafkaPositionConfig, topic: str, start: int, committed: bytes) -> set[bytes]:
    """Every value a read_committed consumer sees from ``start`` until the committed probe shows (or the
    deadline): the end of the partition is not enough, the commit markers are written after the commit."""
    consumer = Consumer(
        quiet(
            config.client(
                **{
                    "group.id": f"relay-probe-{uuid.uuid4().hex}",
                    "enable.auto.commit": False,
                    "isolation.level": "read_committed",
                }
            )
        )
    )
    seen: set[bytes] = set()
    try:
        consumer.assign([TopicPartition(topic, PARTITION, start)])
        deadline = time.monotonic() + config.timeout_s
        while committed not in seen and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                seen.add(msg.value() or b"")
    finally:
        consumer.close()
    return seen
