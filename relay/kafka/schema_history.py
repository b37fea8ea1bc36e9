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

The topic itself — checked, created, read to its end, written — is ``relay.kafka.compacted``'s, shared with
the exactly-once position store.

Threads: the binlog reader thread appends; the CLI's thread reads and appends for ``relay schema``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from confluent_kafka import KafkaException, Producer

from relay.common.kafka_log import quiet
from relay.errors import PublishError, SchemaError
from relay.kafka.compacted import CompactedTopic, CompactedTopicConfig
from relay.schema.history import PartAssembler, Record, SchemaHistory, encode_parts, record_id

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class KafkaSchemaHistoryConfig(CompactedTopicConfig):
    """Where the history lives (``schema.topic``), and for which instance."""


class KafkaSchemaHistory(SchemaHistory):
    """The instance's history in the compacted topic (module docstring)."""

    def __init__(self, config: KafkaSchemaHistoryConfig) -> None:
        super().__init__()
        self.config = config
        self._prefix = f"{config.instance}/".encode()
        self._producer: Producer | None = None
        self._topic = CompactedTopic(config, SchemaError)

    def describe(self) -> str:
        return f"kafka topic {self.config.topic} key {self.config.instance}/…"

    def load(self) -> None:
        self.records = self._read()

    def _read(self) -> list[Record]:
        try:
            if not self._topic.exists():
                return []
            parts = [
                value
                for key, value in self._topic.read("relay-schema")
                if key is not None and key.startswith(self._prefix) and value
            ]
        except SchemaError as exc:  # the topic could not be listed or read
            raise SchemaError(f"cannot read the schema history ({self.describe()}): {exc}") from exc
        assembler = PartAssembler(self.describe())
        for part in parts:
            assembler.add(part)
        return assembler.records

    def _write(self, record: Record) -> None:
        try:
            self._topic.ensure()
        except (PublishError, SchemaError) as exc:
            raise SchemaError(f"cannot create the schema history topic: {exc}") from exc
        producer = self._producer or self._new_producer()
        rid = record_id(record)
        parts = encode_parts(record, self.part_bytes)
        try:
            keyed = [(self._prefix + f"{rid}/{i}".encode(), part) for i, part in enumerate(parts)]
            errors, left = self._topic.produce(producer, keyed)
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
            quiet(
                self.config.client(
                    **{"enable.idempotence": True, "acks": "all", "batch.num.messages": 1, "linger.ms": 0}
                )
            )
        )
        return self._producer

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(self.config.timeout_s)
            self._producer = None
