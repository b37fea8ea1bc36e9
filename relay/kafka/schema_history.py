"""The schema history in a compacted Kafka topic, for relays whose positions live in Kafka.

Owned here: ``KafkaSchemaHistory`` — each record is one or more Kafka records in ``schema.topic``
(default ``relay.schema-history``: one partition, ``cleanup.policy=compact``), keyed
``{instance}/{record id}/{part}``; the value is a part as ``relay.schema.history.encode_parts``
makes it (a header line and a slice of the zlib-compressed record). The record id is a digest of the
record's content, so every key is written once per distinct record: compaction (which keeps the last
value of each key) never drops a record, and a record written twice (a retried send, a zombie relay
re-reading the same DDL) collapses to one. Loading reads the partition from the start to its end and
keeps the instance's records in offset order; a record whose last part is missing (a crash while
appending) is left out — the relay had not gone past its event.

Why a compacted topic: with ``positions.backend: kafka`` the relay keeps no state outside Kafka, and
any host that takes the instance over must find the history there. A compacted topic is replicated
like the records, is never emptied by time retention (compact alone deletes nothing by age), and is
read back from its start. Records are written by an idempotent ``acks=all`` producer and flushed
before ``append`` returns; they are not part of the publisher's transactions, because the history
must be durable before the parser goes past the DDL — before the records after it exist. Fencing is
not needed for correctness: a record is a function of the binlog (what a zombie writes is what the
leader would write), and operators' resyncs run while no relay holds the instance.

Threads: the binlog reader thread appends; the CLI's thread reads and appends for ``relay schema``.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer

from relay.errors import PositionError, PublishError, SchemaError
from relay.kafka.positions import KafkaPositionConfig, _ensure_topic, _read_to_end, _topic_exists
from relay.schema.history import PartAssembler, Record, SchemaHistory, encode_parts, record_id

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class KafkaSchemaHistoryConfig:
    """Where the history lives; ``kafka`` are the passthrough client settings (security), copied."""

    bootstrap_servers: str
    topic: str
    instance: str
    kafka: dict[str, Any] = field(default_factory=dict, repr=False)
    timeout_s: float = 30.0

    def client_settings(self, **extra: Any) -> dict[str, Any]:
        return {**self.kafka, "bootstrap.servers": self.bootstrap_servers, **extra}

    def positions_view(self) -> KafkaPositionConfig:
        """The shape the topic helpers of ``relay.kafka.positions`` take."""
        return KafkaPositionConfig(self.bootstrap_servers, self.topic, self.instance, "", dict(self.kafka),
                                   self.timeout_s)  # fmt: skip


class KafkaSchemaHistory(SchemaHistory):
    """The instance's history in the compacted topic (module docstring)."""

    def __init__(self, config: KafkaSchemaHistoryConfig) -> None:
        super().__init__()
        self.config = config
        self._prefix = f"{config.instance}/".encode()
        self._producer: Producer | None = None
        self._topic_ready = False

    def describe(self) -> str:
        return f"kafka topic {self.config.topic} key {self.config.instance}/…"

    def load(self) -> None:
        self.records = self._read()

    def _read(self) -> list[Record]:
        view = self.config.positions_view()
        try:
            if not _topic_exists(view, self.config.topic):
                return []
        except PositionError as exc:
            raise SchemaError(f"cannot read the schema history ({self.describe()}): {exc}") from exc
        assembler = PartAssembler(self.describe())
        consumer = Consumer(
            self.config.client_settings(
                **{
                    "group.id": f"relay-schema-{uuid.uuid4().hex}",
                    "enable.auto.commit": False,
                    "enable.partition.eof": True,
                }
            )
        )
        try:
            for key, value in _read_to_end(consumer, self.config.topic, self.config.timeout_s):
                if key is not None and key.startswith(self._prefix) and value:
                    assembler.add(value)
        except PositionError as exc:
            raise SchemaError(f"cannot read the schema history ({self.describe()}): {exc}") from exc
        finally:
            consumer.close()
        return assembler.records

    def _write(self, record: Record) -> None:
        if not self._topic_ready:
            try:
                _ensure_topic(self.config.positions_view(), self.config.topic, {"cleanup.policy": "compact"})
            except (PublishError, PositionError) as exc:
                raise SchemaError(f"cannot create the schema history topic: {exc}") from exc
            self._topic_ready = True
        producer = self._producer or self._new_producer()
        rid = record_id(record)
        errors: list[KafkaError] = []
        try:
            for i, part in enumerate(encode_parts(record, self.part_bytes)):
                producer.produce(
                    self.config.topic,
                    value=part,
                    key=self._prefix + f"{rid}/{i}".encode(),
                    partition=0,
                    on_delivery=lambda err, _msg: errors.append(err) if err is not None else None,
                )
            left = producer.flush(self.config.timeout_s)
        except (KafkaException, BufferError) as exc:
            raise SchemaError(f"cannot write the schema history ({self.describe()}): {exc}") from exc
        if errors or left:
            reason = (
                errors[0].str() if errors else f"{left} parts not delivered in {self.config.timeout_s:.0f}s"
            )
            raise SchemaError(
                f"cannot write the schema history record at {record.at[0]}:{record.at[1]} "
                f"({self.describe()}): {reason}"
            )

    def _new_producer(self) -> Producer:
        # One record per produce request: brokers that compute a partition's end from its last batch's
        # base offset (Tansu) then report it exactly, and a history write is rare enough not to batch.
        self._producer = Producer(
            self.config.client_settings(
                **{"enable.idempotence": True, "acks": "all", "batch.num.messages": 1, "linger.ms": 0}
            )
        )
        return self._producer

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(self.config.timeout_s)
            self._producer = None
