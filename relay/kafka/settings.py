"""The publisher's own configuration: ``PublisherConfig``, and ``TopicDefaults`` for the topics it creates.

``relay.wiring`` fills them from ``conf/relay.yaml``'s ``kafka`` section and the mapping's ``topics``
(``publisher_config``); tests and ``relay bench`` build them directly. ``producer_settings()`` turns them
into the librdkafka configuration, adding what the relay contract requires whatever the passthrough dict
says (``acks=all``, idempotence, the Java client's partitioner) — Kafka-client policy, which is why these
types live with the Kafka stage and not in ``relay.config`` (the YAML layer, which imports no stage).

Frozen values, validated on construction (``ConfigError`` naming the key). Built on whatever thread
configures the relay, then only read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from relay.common.redact import redact_settings
from relay.config.sections import validate_kafka_settings
from relay.errors import ConfigError


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

    def admin_settings(self) -> dict[str, Any]:
        """The admin client's: the same cluster and security settings, none of the producer's own."""
        drop = {
            "enable.idempotence",
            "acks",
            "message.timeout.ms",
            "transactional.id",
            "transaction.timeout.ms",
        }
        return {k: v for k, v in self.producer_settings().items() if k not in drop}

    def describe(self) -> dict[str, str]:
        """The librdkafka settings for logs and error messages, secrets redacted."""
        return redact_settings(self.producer_settings())
