"""The relay's configuration: ``conf/relay.yaml`` as typed, validated values.

``load_config(path)`` reads YAML, replaces ``${ENV}`` references (for secrets), and builds a
``RelayConfig`` with ``relay.config.settings.build``: an unknown key, a wrong type or a bad value raises
``ConfigError`` naming the key path (``source.port``, ``kafka.settings.acks``) before anything starts.
Every key and its default is documented in ``conf/relay.yaml``; a test keeps the two in step.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from relay.common.redact import register_config_secrets
from relay.common.retry import RetryPolicy
from relay.config.sections import (
    BatchMode,
    EntryWeight,
    HAConfig,
    MetricsConfig,
    SnapshotConfig,
    SourceConfig,
    StoreConfig,
    compile_filter,
    store_problems,
    validate_counter,
    validate_failover,
    validate_ha,
    validate_kafka_settings,
    validate_source_capture,
)
from relay.config.settings import DERIVED as _DERIVED
from relay.config.settings import build, interpolate
from relay.config.state import (
    DEFAULT_STATE_DIR,
    MOVED_KEYS,
    POSITION_FILE,
    SCHEMA_HISTORY_FILE,
    legacy_base,
    legacy_state_problem,
    moved_key_problem,
    resolve_state_dir,
)
from relay.errors import ConfigError


@dataclass(frozen=True)
class FilterSettings:
    """canal's filters over ``schema.table`` (comma-separated regexes); ``exclude`` applies after."""

    include: str = ".*\\..*"
    exclude: str = ""
    empty_transaction_interval_ms: int = 5_000
    empty_transaction_threshold: int = 8_192


@dataclass(frozen=True)
class StoreSettings:
    buffer_size: int = 16_384
    memunit: int = 1_024
    batch_mode: str = "MEMSIZE"
    ddl_isolation: bool = True
    entry_weight: str = "memory"


@dataclass(frozen=True)
class PositionSettings:
    backend: str = "file"  # file: ``position.json`` in the state directory (``relay.config.state``)
    save_interval_seconds: float = 0.1  # acks closer together share one write; 0: a write per ack


@dataclass(frozen=True)
class MappingZooKeeperSettings:
    hosts: str = "127.0.0.1:2181"
    path: str = "/canal-relay/mapping"
    auth: str | None = None  # user:password (a digest identity): needed to edit a node with an ACL
    timeout_seconds: float = 10.0

    def __repr__(self) -> str:  # never show the password
        return f"MappingZooKeeperSettings(hosts={self.hosts!r}, path={self.path!r})"


@dataclass(frozen=True)
class MappingSettings:
    store: str = "file"
    file: str = "conf/mapping.yaml"
    reload: bool = True
    reload_check_seconds: float = 1.0
    # A version that sends tables to another topic: ``copy`` their retained history there before switching
    # (relay.kafka.history), or ``switch`` at once, the history left in the old topic.
    move: str = "copy"
    move_rate: float = 0.0  # records a history copy writes per second at most; 0: no limit
    zookeeper: MappingZooKeeperSettings = field(default_factory=MappingZooKeeperSettings)


@dataclass(frozen=True)
class KafkaSettings:
    bootstrap_servers: str = "127.0.0.1:9092"
    client_id: str = "canal-relay-{instance}"
    settings: dict[str, str] = field(default_factory=dict)
    delivery_timeout_seconds: float = 120.0
    ddl_topic: str | None = "relay.ddl"
    dead_letter_topic: str | None = None
    dead_letter_value_bytes: int = 1_024
    # Transactional mode (``relay.kafka.publisher``): batches committed in Kafka transactions.
    transactions: bool = False
    transactional_id: str = "canal-relay-{instance}"
    transaction_linger_seconds: float = 0.02
    # Exactly-once mode (``relay.kafka.positions``): the position is committed in the same transaction.
    exactly_once: bool = False
    positions_topic: str = "relay.positions"

    @property
    def mode(self) -> str:
        """What ``relay status`` shows: idempotent, transactional or exactly-once."""
        if self.exactly_once:
            return "exactly-once"
        return "transactional" if self.transactions else "idempotent"


@dataclass(frozen=True)
class PublishSettings:
    batch_size: int = 1024
    batch_wait_seconds: float = 0.002
    max_inflight_batches: int = 8
    retry: RetryPolicy = field(default_factory=lambda: RetryPolicy(initial=0.5, maximum=30.0))
    drain_seconds: float = 30.0


@dataclass(frozen=True)
class StatusSettings:
    interval_seconds: float = 1.0


@dataclass(frozen=True)
class SchemaSettings:
    """The schema history (relay.schema): auto (the default), always or off; where it is kept follows
    ``positions.backend``: a file in the state directory (file), a node beside the position node
    (zookeeper), ``topic`` (kafka)."""

    history: str = "auto"
    topic: str = "relay.schema-history"


@dataclass(frozen=True)
class LoggingSettings:
    level: str = "INFO"
    format: str = "plain"


@dataclass(frozen=True)
class RelayConfig:
    instance: str = "default"
    source: SourceConfig = field(default_factory=SourceConfig)
    filter: FilterSettings = field(default_factory=FilterSettings)
    store: StoreSettings = field(default_factory=StoreSettings)
    positions: PositionSettings = field(default_factory=PositionSettings)
    mapping: MappingSettings = field(default_factory=MappingSettings)
    kafka: KafkaSettings = field(default_factory=KafkaSettings)
    publish: PublishSettings = field(default_factory=PublishSettings)
    status: StatusSettings = field(default_factory=StatusSettings)
    logging: LoggingSettings = field(default_factory=LoggingSettings)
    ha: HAConfig = field(default_factory=HAConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    schema: SchemaSettings = field(default_factory=SchemaSettings)
    snapshot: SnapshotConfig = field(default_factory=SnapshotConfig)
    state_dir: str = DEFAULT_STATE_DIR  # everything the relay writes (relay.config.state)
    # Where the config came from, set by ``parse_config``/``load_config``, never from YAML (``_DERIVED``):
    # the file ("" when built from a dict), the folder config-relative paths resolve against, and the
    # state directory as resolved when the config was loaded (absolute; "" resolves on use).
    config_file: str = field(default="", metadata=_DERIVED)
    config_base: str = field(default="", metadata=_DERIVED)
    state_root: str = field(default="", metadata=_DERIVED)

    # -- derived values, each validated once ------------------------------------------------------
    def config_path(self, value: str) -> Path:
        """A path that is configuration (``mapping.file``): relative to the config file's folder (its
        parent when that folder is ``conf``), as in every earlier version."""
        p = Path(value.format(instance=self.instance))
        return p if p.is_absolute() else Path(self.config_base or ".") / p

    @property
    def state_directory(self) -> Path:
        """The absolute state directory (``state_dir``, or ``RELAY_STATE_DIR``; relative to the working
        directory the config was loaded in)."""
        if self.state_root:
            return Path(self.state_root)
        return resolve_state_dir(self.state_dir, self.instance, Path.cwd())

    def state_path(self, name: str) -> Path:
        """A file of the state directory (``relay.config.state``: ``POSITION_FILE``, ``STATUS_FILE``…)."""
        return self.state_directory / name

    def legacy_state_problem(self) -> str | None:
        """Durable state of this config left where earlier versions kept it (``relay.config.state``)."""
        durable: list[str] = []
        if self.positions.backend == "file":
            durable.append(POSITION_FILE)
            if self.schema.history != "off":
                durable.append(SCHEMA_HISTORY_FILE)
        config_file = Path(self.config_file) if self.config_file else None
        return legacy_state_problem(self.state_directory, config_file, self.instance, tuple(durable))

    def check_state_location(self) -> None:
        """Refuse (``ConfigError`` on ``state_dir``) where ``legacy_state_problem`` finds stranded state."""
        problem = self.legacy_state_problem()
        if problem is not None:
            raise ConfigError("state_dir", problem)

    @property
    def source_id(self) -> str:
        """The source id records carry (``source.id``, else the instance name)."""
        return self.source.id or self.instance

    def store_config(self) -> StoreConfig:
        s = self.store
        weight = EntryWeight(s.entry_weight.lower())
        return StoreConfig(s.buffer_size, s.memunit, BatchMode(s.batch_mode.upper()), s.ddl_isolation, weight)

    def validate(self) -> None:
        """Everything that can be checked without a network, so a bad config changes nothing."""
        if not self.instance or not all(c.isalnum() or c in "._-" for c in self.instance):
            raise ConfigError("instance", f"must be letters, digits, '.', '_' or '-', got {self.instance!r}")
        if self.positions.backend not in ("file", "zookeeper", "kafka"):
            raise ConfigError(
                "positions.backend",
                f"unknown backend {self.positions.backend!r}; known: file, zookeeper, kafka",
            )
        if not 0 <= self.positions.save_interval_seconds <= 10:
            raise ConfigError(
                "positions.save_interval_seconds",
                f"must be between 0 and 10, got {self.positions.save_interval_seconds!r}",
            )
        self._validate_transactions()
        self._validate_ha()
        self.metrics.validate("metrics")
        self.snapshot.validate("snapshot")
        self.source.tls.validate("source.tls")
        if self.mapping.store not in ("file", "zookeeper"):
            raise ConfigError("mapping.store", f"must be file or zookeeper, got {self.mapping.store!r}")
        if self.mapping.reload_check_seconds <= 0:
            raise ConfigError("mapping.reload_check_seconds", "must be positive")
        if self.mapping.move not in ("copy", "switch"):
            raise ConfigError("mapping.move", f"must be copy or switch, got {self.mapping.move!r}")
        if self.mapping.move_rate < 0:
            raise ConfigError(
                "mapping.move_rate", f"must be 0 (no limit) or positive, got {self.mapping.move_rate}"
            )
        if not 0 < self.source.port < 65536:
            raise ConfigError("source.port", f"must be a TCP port, got {self.source.port}")
        if self.source.server_id <= 0:
            raise ConfigError("source.server_id", "must be a positive replica server id")
        validate_source_capture(self.source, "source")
        if self.publish.batch_size <= 0:
            raise ConfigError("publish.batch_size", "must be positive")
        if self.publish.max_inflight_batches <= 0:
            raise ConfigError("publish.max_inflight_batches", "must be positive")
        if self.logging.format not in ("plain", "json"):
            raise ConfigError("logging.format", f"must be plain or json, got {self.logging.format!r}")
        if self.logging.level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR"):
            levels = "DEBUG, INFO, WARNING or ERROR"
            raise ConfigError("logging.level", f"must be {levels}, got {self.logging.level!r}")
        s = self.store
        for name, problem in store_problems(
            s.buffer_size, s.memunit, s.batch_mode, s.ddl_isolation, s.entry_weight
        ):
            raise ConfigError(f"store.{name}", problem)
        f = self.filter
        compile_filter(f.include, "filter.include")
        compile_filter(f.exclude, "filter.exclude")
        validate_counter(f.empty_transaction_interval_ms, "filter.empty_transaction_interval_ms")
        validate_counter(f.empty_transaction_threshold, "filter.empty_transaction_threshold")
        validate_kafka_settings(self.kafka.settings, "kafka.settings")
        self._validate_schema()

    def _validate_schema(self) -> None:
        if self.schema.history not in ("off", "auto", "always"):
            raise ConfigError("schema.history", f"must be off, auto or always, got {self.schema.history!r}")
        if self.schema.history != "off" and self.positions.backend == "kafka" and not self.schema.topic:
            raise ConfigError(
                "schema.topic", "must name a topic (positions.backend: kafka keeps the history there)"
            )

    def _validate_transactions(self) -> None:
        k = self.kafka
        if k.exactly_once and not k.transactions:
            raise ConfigError("kafka.exactly_once", "needs kafka.transactions: true")
        if k.exactly_once != (self.positions.backend == "kafka"):
            if k.exactly_once:
                raise ConfigError("positions.backend", "must be kafka when kafka.exactly_once is true")
            raise ConfigError("positions.backend", "kafka needs kafka.exactly_once: true")
        if k.transactions and not k.transactional_id.format(instance=self.instance).strip():
            raise ConfigError("kafka.transactional_id", "must not be empty")
        if k.transaction_linger_seconds < 0:
            raise ConfigError("kafka.transaction_linger_seconds", "must not be negative")
        if k.exactly_once and not k.positions_topic:
            raise ConfigError("kafka.positions_topic", "must name a topic")

    def _validate_ha(self) -> None:
        validate_failover(self.source, "source")
        if self.ha.enabled and self.positions.backend == "file":
            # A file cannot be shared by relays on several hosts, nor fenced by the leader's epoch
            # (ZooKeeper's compare-and-set is; so is a Kafka position by the transactional producer's epoch).
            raise ConfigError("positions.backend", "must be zookeeper (or kafka) when ha.enabled is true")
        validate_ha(self.ha, "ha")


def parse_config(
    data: Any,
    base_dir: str = "",
    *,
    config_file: str = "",
    work_dir: str | os.PathLike[str] | None = None,
) -> RelayConfig:
    """The validated config of a YAML tree. ``base_dir``: where config-relative paths (``mapping.file``)
    resolve ("" = the working directory); ``config_file``: the file it was read from, if any;
    ``work_dir``: what a relative ``state_dir`` is relative to (default: the working directory)."""
    data = interpolate(data)
    _refuse_moved_keys(data, work_dir, base_dir if config_file else None)
    config = build(RelayConfig, data)
    root = resolve_state_dir(config.state_dir, config.instance, Path(work_dir or os.getcwd()))
    config = replace(config, config_file=config_file, config_base=base_dir, state_root=str(root))
    config.validate()
    register_config_secrets(config)  # from now on every log line, error and report hides them
    return config


def _refuse_moved_keys(data: Any, work_dir: str | os.PathLike[str] | None, base: str | None) -> None:
    """The keys that named one state file each (``relay.config.state.MOVED_KEYS``), refused with where
    the file lives now."""
    if not isinstance(data, dict):
        return
    for section, key in MOVED_KEYS:
        node = data.get(section)
        if isinstance(node, dict) and key in node:
            instance = str(data.get("instance") or RelayConfig.instance)
            configured = str(data.get("state_dir") or DEFAULT_STATE_DIR)
            try:
                root = resolve_state_dir(configured, instance, Path(work_dir or os.getcwd()))
            except ConfigError:
                root = Path(configured)
            value = node[key]
            if isinstance(value, str):
                value = value.replace("{instance}", instance)
            problem = moved_key_problem(section, key, value, root, Path(base) if base is not None else None)
            raise ConfigError(f"{section}.{key}", problem)


def load_config(path: str | os.PathLike[str]) -> RelayConfig:
    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(str(p), f"cannot read the config file: {exc}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(str(p), f"not valid YAML: {exc}") from exc
    # Config-relative paths (mapping.file) resolve against the folder holding conf/, as they always have;
    # state resolves against the working directory (relay.config.state).
    return parse_config(data, str(legacy_base(p)), config_file=str(p.resolve()))
