"""The relay's configuration as values: one frozen dataclass per section of ``conf/relay.yaml``.

``RelayConfig`` is what every stage is built from (``relay.wiring``); ``relay.config.load`` reads a file
into one, ``relay.config.checks`` finds every problem of one. Besides the keys it carries where it was
read from (``config_file``, ``config_base``) and where its state lives (``state_root``), which are set
by the loader, never by YAML, and answers where a path points (``config_path``, ``state_path``: the
rule of ``relay.config.state``). Every key and its default is documented in ``conf/relay.yaml``; a test
keeps the two in step. Pure values, no I/O but the ``stat`` calls of the state checks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from relay.common.retry import RetryPolicy
from relay.config.sections import (
    BatchMode,
    EntryWeight,
    HAConfig,
    MetricsConfig,
    SnapshotConfig,
    SourceConfig,
    StoreConfig,
)
from relay.config.settings import DERIVED as _DERIVED
from relay.config.state import (
    DEFAULT_STATE_DIR,
    POSITION_FILE,
    SCHEMA_HISTORY_FILE,
    legacy_state_problem,
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
    # How long a command waits for the brokers to answer before it says they are unreachable (relay check,
    # status, verify, replay, positions); ``relay run`` keeps retrying instead.
    connect_timeout_seconds: float = 10.0
    ddl_topic: str | None = "relay.ddl"
    dead_letter_topic: str | None = None
    dead_letter_value_bytes: int = 1_024
    # The transaction metadata topic (relay.kafka.txn_meta): BEGIN/END of each source transaction; None: off.
    transaction_topic: str | None = None
    # Transactional mode (``relay.kafka.publisher``): batches committed in Kafka transactions.
    transactions: bool = False
    transactional_id: str = "canal-relay-{instance}"
    transaction_linger_seconds: float = 0.02
    # Exactly-once mode (``relay.kafka.positions``): the position is committed in the same transaction.
    exactly_once: bool = False
    positions_topic: str = "relay.positions"
    # Heartbeats (``relay.daemon.heartbeats``): every ``heartbeat_seconds``, a record with the saved
    # position to ``heartbeat_topic`` (None: none) and ``heartbeat_query`` run on the source (None: none).
    heartbeat_topic: str | None = None
    heartbeat_seconds: float = 10.0
    heartbeat_query: str | None = None

    @property
    def heartbeats(self) -> bool:
        """Whether the relay beats at all: a heartbeat topic or a heartbeat query is set."""
        return bool(self.heartbeat_topic) or bool(self.heartbeat_query)

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
