"""The compacted-topic store: one instance's keys in one partition of a compacted Kafka topic.

What the exactly-once position store (``relay.kafka.positions``) and the schema history's Kafka store
(``relay.kafka.schema_history``) share: where the topic is and how to reach it (``CompactedTopicConfig``:
brokers, topic, instance, the passthrough client settings — security — copied), and ``CompactedTopic``:
whether the topic exists, creating it (one partition, ``cleanup.policy=compact``), reading its partition
from a start offset to its end, and producing keyed records to it with their delivery collected. Each
store keeps its own record format, producer and error type (``failure``: ``PositionError`` for positions,
``SchemaError`` for the schema history).

Topics are found by listing all of them: a metadata request naming a topic auto-creates it on some
brokers (Tansu). The partition is read with ``enable.partition.eof``: the read ends at the end the broker
reports, within ``timeout_s``.

Threads: whoever calls the store (the publisher thread, the binlog reader thread for schema history
appends, the CLI's); every blocking call has a timeout.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from relay.common.kafka_log import quiet
from relay.errors import PublishError, RelayError

log = logging.getLogger(__name__)

PARTITION = 0  # the store's topic has one partition (created so; an existing one must have one too)
COMPACT = {"cleanup.policy": "compact"}


@dataclass(frozen=True)
class CompactedTopicConfig:
    """Where an instance's compacted topic lives; ``kafka`` are the passthrough client settings (security)."""

    bootstrap_servers: str
    topic: str
    instance: str
    kafka: dict[str, Any] = field(default_factory=dict, repr=False, kw_only=True)
    timeout_s: float = field(default=30.0, kw_only=True)

    def __post_init__(self) -> None:
        object.__setattr__(self, "kafka", dict(self.kafka))  # our own copy: the caller's dict stays theirs

    def client(self, **extra: Any) -> dict[str, Any]:
        """A client's librdkafka settings: the passthrough ones, the brokers, then ``extra``."""
        return {**self.kafka, "bootstrap.servers": self.bootstrap_servers, **extra}


class CompactedTopic:
    """``config.topic`` (or, for a probe, another topic on the same brokers), checked, created, read, written.

    ``failure`` is the error a listing or reading failure raises (the owner's: ``PositionError``,
    ``SchemaError``); creating a topic fails with a (retriable) ``PublishError``.
    """

    def __init__(
        self, config: CompactedTopicConfig, failure: type[RelayError], topic: str | None = None
    ) -> None:
        self.config = config
        self.topic = config.topic if topic is None else topic
        self._failure = failure
        self._ready = False

    def exists(self) -> bool:
        """Whether the topic exists (known to exist once ``ensure`` passed)."""
        if self._ready:
            return True
        try:
            topics = (
                AdminClient(quiet(self.config.client())).list_topics(timeout=self.config.timeout_s).topics
            )
        except KafkaException as exc:
            raise self._failure(f"cannot list topics: {exc.args[0].str()}") from exc
        return self.topic in topics and topics[self.topic].error is None

    def ensure(self, topic_config: dict[str, str] = COMPACT) -> None:
        """Create the topic (one partition, ``topic_config``) where it does not exist."""
        if self._ready:
            return
        if not self.exists():
            admin = AdminClient(quiet(self.config.client()))
            futures = admin.create_topics([NewTopic(self.topic, 1, -1, config=dict(topic_config))])
            try:
                futures[self.topic].result(timeout=self.config.timeout_s)
                log.info("created topic %s (%s)", self.topic, topic_config)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise PublishError(f"cannot create topic {self.topic!r}: {exc.args[0].str()}") from exc
        self._ready = True

    def read(
        self, group: str, settings: dict[str, Any] | None = None, start: int = OFFSET_BEGINNING
    ) -> Iterator[tuple[bytes | None, bytes]]:
        """(key, value) of every record a consumer of ``group``-<random> with ``settings`` may see in the
        partition, from ``start`` to its end (EOF); the consumer is closed when the iteration ends."""
        consumer = Consumer(
            quiet(
                self.config.client(
                    **{
                        "group.id": f"{group}-{uuid.uuid4().hex}",
                        "enable.auto.commit": False,
                        "enable.partition.eof": True,
                        **(settings or {}),
                    }
                )
            )
        )
        try:
            yield from self._read_to_end(consumer, start)
        finally:
            consumer.close()

    def _read_to_end(self, consumer: Consumer, start: int) -> Iterator[tuple[bytes | None, bytes]]:
        consumer.assign([TopicPartition(self.topic, PARTITION, start)])
        timeout = self.config.timeout_s
        deadline = time.monotonic() + timeout
        while True:
            if time.monotonic() > deadline:
                raise self._failure(
                    f"{self.topic}: did not reach the end of partition {PARTITION} in {timeout:.0f}s"
                )
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    return
                if err.fatal() or not err.retriable():
                    raise self._failure(f"{self.topic}: cannot read: {err.str()}")
                continue
            yield msg.key(), msg.value() or b""

    def produce(
        self, producer: Producer, records: Iterable[tuple[bytes, bytes]]
    ) -> tuple[list[KafkaError], int]:
        """Produce (key, value) records to the partition and flush: (the delivery errors, records left
        undelivered within ``timeout_s``). ``KafkaException`` and ``BufferError`` are the caller's."""
        errors: list[KafkaError] = []

        def delivered(err: KafkaError | None, msg: Any) -> None:
            if err is not None:
                errors.append(err)
            elif msg.offset() is None:  # acked implicitly: its landing is unknown (relay.kafka.delivery)
                errors.append(KafkaError(KafkaError._FAIL, "acknowledged without an offset: landing unknown"))

        for key, value in records:
            producer.produce(self.topic, value=value, key=key, partition=PARTITION, on_delivery=delivered)
        left = producer.flush(self.config.timeout_s)
        return errors, int(left)
