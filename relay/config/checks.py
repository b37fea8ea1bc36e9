"""Every problem of a ``RelayConfig`` that can be found without a network, all of them in one pass.

Owns the cross-key rules of ``conf/relay.yaml`` (positions backend against HA and exactly-once, the
schema history's store, store sizes, filters, Kafka passthrough settings…); each section's own rules
live beside its settings (``relay.config.sections``, ``relay.common.tls``) and report all their problems
too. ``RelayConfig.validate`` raises them together, as ``relay.config.load`` does with unknown keys,
wrong types and duplicate keys, so one run of ``relay check`` or ``relay run`` names every key to fix.
Pure functions, on the caller's thread.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mapping.names import topic_problem
from relay.common.addresses import hosts_problem
from relay.config.model import RelayConfig
from relay.config.sections import (
    compile_filter,
    store_problems,
    validate_counter,
    validate_failover,
    validate_ha,
    validate_kafka_settings,
    validate_source_capture,
)
from relay.errors import ConfigError, InvalidConfigError

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


class _Problems:
    def __init__(self) -> None:
        self.errors: list[ConfigError] = []

    def add(self, key: str, problem: str) -> None:
        self.errors.append(ConfigError(key, problem))

    def run(self, check: Callable[..., Any], *args: Any) -> None:
        try:
            check(*args)
        except InvalidConfigError as exc:
            self.errors.extend(exc.errors)
        except ConfigError as exc:
            self.errors.append(exc)


def config_problems(c: RelayConfig) -> list[ConfigError]:
    p = _Problems()
    if not c.instance or not all(ch.isalnum() or ch in "._-" for ch in c.instance):
        p.add("instance", f"must be letters, digits, '.', '_' or '-', got {c.instance!r}")
    if c.positions.backend not in ("file", "zookeeper", "kafka"):
        p.add("positions.backend", f"unknown backend {c.positions.backend!r}; known: file, zookeeper, kafka")
    if not 0 <= c.positions.save_interval_seconds <= 10:
        p.add(
            "positions.save_interval_seconds",
            f"must be between 0 and 10, got {c.positions.save_interval_seconds!r}",
        )
    _transactions(c, p)
    _heartbeats(c, p)
    _ha(c, p)
    p.run(c.metrics.validate, "metrics")
    p.run(c.snapshot.validate, "snapshot")
    p.run(c.source.tls.validate, "source.tls")
    if c.mapping.store not in ("file", "zookeeper"):
        p.add("mapping.store", f"must be file or zookeeper, got {c.mapping.store!r}")
    if c.mapping.reload_check_seconds <= 0:
        p.add("mapping.reload_check_seconds", "must be positive")
    if c.mapping.move not in ("copy", "switch"):
        p.add("mapping.move", f"must be copy or switch, got {c.mapping.move!r}")
    if c.mapping.move_rate < 0:
        p.add("mapping.move_rate", f"must be 0 (no limit) or positive, got {c.mapping.move_rate}")
    if not 0 < c.source.port < 65536:
        p.add("source.port", f"must be a TCP port, got {c.source.port}")
    if c.source.server_id <= 0:
        p.add("source.server_id", "must be a positive replica server id")
    p.run(validate_source_capture, c.source, "source")
    if c.publish.batch_size <= 0:
        p.add("publish.batch_size", "must be positive")
    if c.publish.max_inflight_batches <= 0:
        p.add("publish.max_inflight_batches", "must be positive")
    if c.logging.format not in ("plain", "json"):
        p.add("logging.format", f"must be plain or json, got {c.logging.format!r}")
    if c.logging.level.upper() not in LEVELS:
        p.add("logging.level", f"must be DEBUG, INFO, WARNING or ERROR, got {c.logging.level!r}")
    s = c.store
    for name, problem in store_problems(
        s.buffer_size, s.memunit, s.batch_mode, s.ddl_isolation, s.entry_weight
    ):
        p.add(f"store.{name}", problem)
    f = c.filter
    p.run(compile_filter, f.include, "filter.include")
    p.run(compile_filter, f.exclude, "filter.exclude")
    p.run(validate_counter, f.empty_transaction_interval_ms, "filter.empty_transaction_interval_ms")
    p.run(validate_counter, f.empty_transaction_threshold, "filter.empty_transaction_threshold")
    p.run(validate_kafka_settings, c.kafka.settings, "kafka.settings")
    _addresses(c, p)
    _schema(c, p)
    _transaction_topic(c, p)
    return p.errors


def _transaction_topic(c: RelayConfig, p: _Problems) -> None:
    """``kafka.transaction_topic``: null (off) or a topic name of its own."""
    k = c.kafka
    topic = k.transaction_topic
    if topic is None:
        return
    problem = topic_problem(topic)
    if problem is not None:
        p.add("kafka.transaction_topic", f"{topic!r}: {problem}")
    others = {
        "kafka.ddl_topic": k.ddl_topic,
        "kafka.dead_letter_topic": k.dead_letter_topic,
        "kafka.heartbeat_topic": k.heartbeat_topic,
        "kafka.positions_topic": k.positions_topic if k.exactly_once else None,
        "schema.topic": c.schema.topic if c.positions.backend == "kafka" else None,
    }
    for name, other in others.items():
        if other == topic:
            p.add("kafka.transaction_topic", f"{topic!r} is also {name}; give it a topic of its own")


def _addresses(c: RelayConfig, p: _Problems) -> None:
    """The host lists: a URL or a stray word where ``host:port`` belongs is refused here, naming the key,
    not found later as a timeout."""
    problem = hosts_problem(c.kafka.bootstrap_servers)
    if problem is not None:
        p.add("kafka.bootstrap_servers", problem)
    if not 0 < c.kafka.connect_timeout_seconds <= 600:
        p.add(
            "kafka.connect_timeout_seconds",
            f"must be 0..600 seconds, got {c.kafka.connect_timeout_seconds!r}",
        )
    zk = "10.0.0.5:2181,10.0.0.6:2181"
    if c.ha.enabled or c.positions.backend == "zookeeper":
        problem = hosts_problem(c.ha.zookeeper, chroot=True, example=zk)
        if problem is not None:
            p.add("ha.zookeeper", problem)
    if c.mapping.store == "zookeeper":
        problem = hosts_problem(c.mapping.zookeeper.hosts, chroot=True, example=zk)
        if problem is not None:
            p.add("mapping.zookeeper.hosts", problem)
    host = c.source.host
    if not isinstance(host, str) or not host.strip() or "/" in host or host.count(":") == 1 or " " in host:
        p.add(
            "source.host",
            f"must be a host name or address (the port goes in source.port), got {c.source.host!r}",
        )


def _schema(c: RelayConfig, p: _Problems) -> None:
    if c.schema.history not in ("off", "auto", "always"):
        p.add("schema.history", f"must be off, auto or always, got {c.schema.history!r}")
    if c.schema.history != "off" and c.positions.backend == "kafka" and not c.schema.topic:
        p.add("schema.topic", "must name a topic (positions.backend: kafka keeps the history there)")


def _transactions(c: RelayConfig, p: _Problems) -> None:
    k = c.kafka
    if k.exactly_once and not k.transactions:
        p.add("kafka.exactly_once", "needs kafka.transactions: true")
    if k.exactly_once != (c.positions.backend == "kafka"):
        if k.exactly_once:
            p.add("positions.backend", "must be kafka when kafka.exactly_once is true")
        else:
            p.add("positions.backend", "kafka needs kafka.exactly_once: true")
    if k.transactions:
        try:
            transactional_id = k.transactional_id.format(instance=c.instance)
        except (KeyError, IndexError, ValueError):
            transactional_id = ""
            p.add(
                "kafka.transactional_id", f"{k.transactional_id!r}: only {{instance}} may be used in braces"
            )
        if not transactional_id.strip():
            p.add("kafka.transactional_id", "must not be empty")
    if k.transaction_linger_seconds < 0:
        p.add("kafka.transaction_linger_seconds", "must not be negative")
    if k.exactly_once and not k.positions_topic:
        p.add("kafka.positions_topic", "must name a topic")


def _heartbeats(c: RelayConfig, p: _Problems) -> None:
    k = c.kafka
    if k.heartbeat_topic is not None:
        problem = topic_problem(k.heartbeat_topic)
        if problem is not None:
            p.add("kafka.heartbeat_topic", problem)
        others = {"kafka.ddl_topic": k.ddl_topic, "kafka.dead_letter_topic": k.dead_letter_topic}
        if k.exactly_once:
            others["kafka.positions_topic"] = k.positions_topic
        for key, topic in others.items():
            if topic == k.heartbeat_topic:
                p.add("kafka.heartbeat_topic", f"{topic!r} is also {key}: heartbeats need their own topic")
    if not 0.1 <= k.heartbeat_seconds <= 3600:
        p.add("kafka.heartbeat_seconds", f"must be 0.1..3600 seconds, got {k.heartbeat_seconds!r}")
    if k.heartbeat_query is not None and not k.heartbeat_query.strip():
        p.add("kafka.heartbeat_query", "must be an SQL statement, or null for none")


def _ha(c: RelayConfig, p: _Problems) -> None:
    p.run(validate_failover, c.source, "source")
    if c.ha.enabled and c.positions.backend == "file":
        # A file cannot be shared by relays on several hosts, nor fenced by the leader's epoch
        # (ZooKeeper's compare-and-set is; so is a Kafka position by the transactional producer's epoch).
        p.add("positions.backend", "must be zookeeper (or kafka) when ha.enabled is true")
    p.run(validate_ha, c.ha, "ha")
