"""The publisher's values and verdicts: records, topic defaults, the publisher's configuration, the batch
handles it tracks, and what a failed delivery means (``classify``).

Pure values and functions, no I/O: ``relay.kafka.publisher`` sends with them, on the publisher thread
(delivery callbacks run there too, inside ``poll``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from confluent_kafka import KafkaError

from relay.common.redact import redact_settings
from relay.config.sections import validate_kafka_settings
from relay.errors import ConfigError, PublishError

Verdict = Literal["fatal", "rejected", "retriable"]

# Errors after which this record will never be accepted, whatever we retry (KafkaError codes).
REJECTED_CODES: frozenset[int] = frozenset(
    {
        KafkaError.MSG_SIZE_TOO_LARGE,  # also librdkafka's local size check at produce()
        KafkaError.RECORD_LIST_TOO_LARGE,
        KafkaError.INVALID_RECORD,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
        KafkaError.TOPIC_EXCEPTION,  # Kafka's INVALID_TOPIC_EXCEPTION
        KafkaError.UNSUPPORTED_FOR_MESSAGE_FORMAT,
        KafkaError.POLICY_VIOLATION,
        KafkaError.INVALID_REQUIRED_ACKS,
        KafkaError._INVALID_ARG,
        KafkaError._INVALID_TYPE,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError._KEY_SERIALIZATION,
        KafkaError._VALUE_SERIALIZATION,
    }
)
UNKNOWN_TOPIC_CODES: frozenset[int] = frozenset({KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC})
SIZE_CODES: frozenset[int] = frozenset({KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE})
# librdkafka fails queued messages with _FATAL once the producer raised a fatal error (fencing, a
# sequence gap it cannot repair); the instance is unusable from then on.
FATAL_CODES: frozenset[int] = frozenset({KafkaError._FATAL, KafkaError._FENCED, KafkaError.PRODUCER_FENCED})
# A newer producer with our transactional.id exists (transactional mode): this relay's term is over.
FENCED_CODES: frozenset[int] = frozenset(
    {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}
)

# librdkafka keys the publisher decides itself; the passthrough dict may not set them.
# The longest wait for a transaction's commit or abort once its records are delivered (EndTxn is one round
# trip to the coordinator). Longer means doubt: a fenced producer on some brokers (Tansu) gets no answer.
TXN_CONTROL_TIMEOUT_S = 10.0

DEAD_LETTER_ERROR = "relay.error"
DEAD_LETTER_TOPIC = "relay.original.topic"
DEAD_LETTER_PARTITION = "relay.original.partition"
DEAD_LETTER_SIZE = "relay.original.size"


@dataclass(init=False, slots=True)
class Record:
    """One Kafka record. ``partition`` None: by ``key`` with murmur2, or the client's choice when unkeyed.
    ``value`` None is a tombstone (compacted topics)."""

    topic: str
    partition: int | None
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()

    def __init__(
        self,
        topic: str,
        partition: int | None,
        key: bytes | None,
        value: bytes | None,
        headers: tuple[tuple[str, bytes], ...] = (),
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.key = key
        self.value = value
        self.headers = headers

    @property
    def size(self) -> int:
        """Payload bytes (key, value, headers): what a size rejection is about."""
        head = sum(len(name.encode()) + len(value) for name, value in self.headers)
        return len(self.value or b"") + len(self.key or b"") + head


@dataclass(frozen=True)
class TopicDefaults:
    """How missing topics are created: ``replication_factor`` -1 means the broker's default."""

    partitions: int = 6
    replication_factor: int = -1
    config: dict[str, str] = field(default_factory=dict)  # e.g. {"retention.ms": "604800000"}


@dataclass(frozen=True)
class PublisherConfig:
    """Publisher settings; ``kafka`` is passed through to librdkafka (copied, never mutated)."""

    bootstrap_servers: str
    client_id: str = "canal-relay"
    kafka: dict[str, Any] = field(default_factory=dict, repr=False)
    delivery_timeout_s: float = 120.0
    dead_letter_topic: str | None = None  # None: a rejected record stops the relay
    dead_letter_value_bytes: int = 1024  # value bytes kept when a record was rejected for its size
    create_topics: bool = False
    topic_defaults: TopicDefaults = field(default_factory=TopicDefaults)
    admin_timeout_s: float = 30.0
    transactional_id: str | None = None  # None: idempotent mode; set: every batch inside a Kafka transaction

    @property
    def transactional(self) -> bool:
        return self.transactional_id is not None

    def __post_init__(self) -> None:
        object.__setattr__(self, "kafka", dict(self.kafka))  # our own copy: the caller's dict stays theirs
        validate_kafka_settings(self.kafka, "kafka")
        if self.delivery_timeout_s <= 0:
            raise ConfigError("delivery_timeout_s", f"must be positive, got {self.delivery_timeout_s}")
        if self.topic_defaults.partitions <= 0:
            raise ConfigError("topic_defaults.partitions", "must be positive")

    def producer_settings(self) -> dict[str, Any]:
        """The librdkafka configuration: the passthrough dict plus what the relay contract requires."""
        settings = dict(self.kafka)
        settings.update(
            {
                "bootstrap.servers": self.bootstrap_servers,
                "client.id": self.client_id,
                "enable.idempotence": True,
                "acks": "all",
                "message.timeout.ms": max(1, int(self.delivery_timeout_s * 1000)),
                # Keyed records are placed by librdkafka with the Java client's hash (relay.kafka.partitioner
                # says where, and a test holds librdkafka to it); unkeyed ones go anywhere.
                "partitioner": "murmur2_random",
            }
        )
        if self.transactional_id is not None:
            # librdkafka refuses a message timeout above the transaction timeout.
            timeout_ms = max(60_000, settings["message.timeout.ms"])
            settings.update({"transactional.id": self.transactional_id, "transaction.timeout.ms": timeout_ms})
        return settings

    def describe(self) -> dict[str, str]:
        """The librdkafka settings for logs and error messages, secrets redacted."""
        return redact_settings(self.producer_settings())


def classify(error: KafkaError) -> Verdict:
    """What a failed delivery means for the relay: stop (fatal), give up on the record, or retry later.

    Delivery reports carry no ``retriable()`` flag of their own (it is set only for errors of API calls),
    so the verdict comes from the code; ``fatal()`` is honoured wherever librdkafka sets it. An unknown
    topic or partition is retriable whatever ``topics.create`` says: brokers answer it for a moment
    while metadata propagates or a leader moves, and it says nothing about the record — a good record
    must never be dead-lettered (nor the position moved past it) for it. A topic that is really gone
    is found when the batch is sent again (``MissingTopicError``, retried with backoff).
    """
    code = error.code()
    if error.fatal() or code in FATAL_CODES:
        return "fatal"
    if code in REJECTED_CODES:
        return "rejected"
    return "retriable"


@dataclass(eq=False)
class BatchHandle:
    """One sent batch: delivered once ``pending`` reaches 0 with no ``error``."""

    batch_id: int
    records: int
    pending: int
    error: PublishError | None = None
    dead_lettered: int = 0
    aborted: bool = field(default=False, repr=False)
    committed: bool = True  # transactional mode: False until its transaction committed
    where: str = ""  # the batch's binlog positions, for log lines and error messages

    @property
    def label(self) -> str:
        """``batch 12 (mysql-bin.000003:4567..9876)``: how every log line and error names the batch."""
        return f"batch {self.batch_id} ({self.where})" if self.where else f"batch {self.batch_id}"

    @property
    def delivered(self) -> bool:
        return self.pending == 0 and self.error is None and self.committed

    def fail(self, error: PublishError) -> None:
        """Keep the first error: it is the cause; later ones are usually its consequences."""
        if self.error is None:
            self.error = error
