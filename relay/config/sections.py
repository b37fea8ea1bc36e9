"""The typed sections of ``conf/relay.yaml`` that runtime stages take as their own configuration.

Each stage imports its settings from here (the source its ``SourceConfig``, HA its ``HAConfig``, the
metrics exporter its ``MetricsConfig``, the ring store its ``StoreConfig``, canal's sink its
``SinkConfig``, the canal instance its ``InstanceConfig``), so configuration never
imports a runtime module. Validators take the key path they check (``path``) and raise ``ConfigError``
naming it; nothing parses a key back out of a message.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from relay.common.retry import RetryPolicy
from relay.common.tls import TlsConfig
from relay.errors import ConfigError, InvalidConfigError, StoreError

FAILOVER_MODES = ("auto", "gtid", "timestamp")

# --- snapshot ----------------------------------------------------------------------------------------

SNAPSHOT_MODES = ("initial", "when_needed", "never")


@dataclass(frozen=True)
class SnapshotConfig:
    """Reading the existing rows of the captured tables (``relay.source.snapshot``).

    ``mode``: ``when_needed`` and ``initial`` snapshot when no position is saved (also when
    ``source.start`` names an old place: the watermarks place the chunks after the history read from
    there); ``never`` starts none of its own. An unfinished snapshot recorded in the saved position is
    continued whatever the mode (``relay snapshot cancel`` ends it). ``max_rows_per_second`` 0: no
    limit. ``keyless_max_rows``: the most rows of a table without a usable key, read in one chunk.
    Requests from ``relay snapshot run|cancel`` reach the running relay through a file in its state
    directory (``relay.config.state``).
    """

    mode: str = "when_needed"
    chunk_rows: int = 2000
    max_rows_per_second: float = 0.0
    parallelism: int = 1
    keyless_max_rows: int = 100_000

    def validate(self, path: str = "snapshot") -> None:
        problems: list[ConfigError] = []
        if self.mode not in SNAPSHOT_MODES:
            problems.append(
                ConfigError(f"{path}.mode", f"must be one of {', '.join(SNAPSHOT_MODES)}, got {self.mode!r}")
            )
        if not 1 <= self.chunk_rows <= 1_000_000:
            problems.append(ConfigError(f"{path}.chunk_rows", f"must be 1..1000000, got {self.chunk_rows}"))
        if self.max_rows_per_second < 0:
            problems.append(ConfigError(f"{path}.max_rows_per_second", "must be 0 (no limit) or positive"))
        if not 1 <= self.parallelism <= 16:
            problems.append(ConfigError(f"{path}.parallelism", f"must be 1..16, got {self.parallelism}"))
        if not 1 <= self.keyless_max_rows <= 1_000_000:
            problems.append(
                ConfigError(f"{path}.keyless_max_rows", f"must be 1..1000000, got {self.keyless_max_rows}")
            )
        InvalidConfigError.raise_all(problems)


# --- source ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StartConfig:
    """Where to start when no position is saved. ``timestamp`` is in ms since the epoch."""

    gtid: str | None = None
    journal: str | None = None
    offset: int | None = None
    timestamp: int | None = None


@dataclass(frozen=True)
class StandbyConfig:
    """The server to fail over to (``relay.source.failover``).

    host "": none; empty user/password: the master's.
    """

    host: str = ""
    port: int = 3306
    user: str = ""
    password: str = field(default="", repr=False)


@dataclass(frozen=True)
class FailoverConfig:
    """When and how to switch to the standby (``relay.source.failover``)."""

    attempts: int = 3  # failed reconnects to the master before switching
    mode: str = "auto"  # auto (GTID where the servers have it, else timestamp), gtid, timestamp
    fallback_interval_seconds: float = 60.0  # timestamp mode: re-read from this long before the last change


@dataclass(frozen=True)
class SourceConfig:
    host: str = "127.0.0.1"
    port: int = 3306
    user: str = "relay"
    password: str = field(default="", repr=False)
    server_id: int = 6543  # our id as a replica: must be unique among the server's replicas
    start: StartConfig = StartConfig()
    heartbeat_seconds: float = 5.0
    connect_timeout: float = 10.0
    read_timeout: float = 30.0
    retry: RetryPolicy = field(default_factory=lambda: RetryPolicy(initial=0.5, maximum=30.0))
    # How TIMESTAMP values are rendered: "server" (the server's time_zone, followed across DST),
    # "UTC", an IANA name ("Asia/Shanghai") or a fixed offset ("+08:00").
    timezone: str = "server"
    standby: StandbyConfig = StandbyConfig()
    failover: FailoverConfig = FailoverConfig()
    tls: TlsConfig = field(default_factory=TlsConfig)  # MySQL TLS for every connection (relay.tls)
    # The source id of the change identity (source id, sequence) on every record; "" means the relay's
    # instance name. Unique per source server group, unchanged across failover and HA takeover.
    id: str = ""
    # A data change logged as a statement in a captured table: "stop" (fail closed) or "skip" (audit
    # topic only, with a warning); see relay.canal.statements.
    statement_dml: str = "stop"
    # Entry bytes of XA transactions prepared but not yet committed or rolled back that the relay holds
    # in memory; past it the relay stops (relay.canal.xa).
    xa_buffer_bytes: int = 64 * 1024 * 1024
    # Where these settings come from, for error messages: the config section, or a flag (``--mysql``);
    # set by whoever builds the config, never by YAML (the loader's "derived" fields).
    origin: str = field(default="source", metadata={"derived": True})

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def validate_source_capture(cfg: SourceConfig, path: str = "source") -> None:
    """The keys that decide what the relay does with changes it cannot capture exactly."""
    problems: list[ConfigError] = []
    if cfg.statement_dml not in ("stop", "skip"):
        problems.append(
            ConfigError(f"{path}.statement_dml", f"must be stop or skip, got {cfg.statement_dml!r}")
        )
    if cfg.xa_buffer_bytes <= 0:
        problems.append(
            ConfigError(f"{path}.xa_buffer_bytes", f"must be positive, got {cfg.xa_buffer_bytes}")
        )
    InvalidConfigError.raise_all(problems)


def validate_failover(cfg: SourceConfig, path: str = "source") -> None:
    problems: list[ConfigError] = []
    f = cfg.failover
    if f.mode not in FAILOVER_MODES:
        modes = ", ".join(FAILOVER_MODES)
        problems.append(ConfigError(f"{path}.failover.mode", f"must be one of {modes}, got {f.mode!r}"))
    if f.attempts <= 0:
        problems.append(ConfigError(f"{path}.failover.attempts", "must be positive"))
    if f.fallback_interval_seconds < 0:
        problems.append(ConfigError(f"{path}.failover.fallback_interval_seconds", "must not be negative"))
    if bool(cfg.standby.host) and not 0 < cfg.standby.port < 65536:
        problems.append(ConfigError(f"{path}.standby.port", f"must be a TCP port, got {cfg.standby.port}"))
    InvalidConfigError.raise_all(problems)


# --- ring store --------------------------------------------------------------------------------------


class BatchMode(StrEnum):
    """How ``get`` sizes a batch and whether ``put`` also checks a memory budget (canal's ``batchMode``)."""

    MEMSIZE = "MEMSIZE"
    ITEMSIZE = "ITEMSIZE"


class EntryWeight(StrEnum):
    """What an entry weighs in MEMSIZE mode (its share of ``buffer_size x memunit`` and of a batch).

    ``event_length``: its binlog event length, as canal weighs it; ``memory``: its decoded size in
    memory (``Entry.footprint``), so that the budget bounds the store's real memory — a small row takes
    about eleven times its binlog length once decoded. The relay's config defaults to ``memory``."""

    MEMORY = "memory"
    EVENT_LENGTH = "event_length"


@dataclass(frozen=True)
class StoreConfig:
    """Ring store settings; canal's defaults. ``batch_mode`` also accepts the plain strings.

    Built directly (tests, ``relay entries``) a wrong value raises ``StoreError``; the config file's
    validation asks ``store_problems`` and names the key path.
    """

    buffer_size: int = 16384
    memunit: int = 1024
    batch_mode: BatchMode = BatchMode.MEMSIZE
    ddl_isolation: bool = False
    entry_weight: EntryWeight = EntryWeight.EVENT_LENGTH  # canal's; the relay's config: memory

    def __post_init__(self) -> None:
        for name, problem in store_problems(
            self.buffer_size, self.memunit, self.batch_mode, self.ddl_isolation, self.entry_weight
        ):
            raise StoreError(f"{name}: {problem}")
        object.__setattr__(self, "batch_mode", BatchMode(str(self.batch_mode).upper()))
        object.__setattr__(self, "entry_weight", EntryWeight(str(self.entry_weight).lower()))

    @property
    def by_memory(self) -> bool:
        """MEMSIZE mode weighing entries by their decoded size: the budget bounds memory."""
        return self.batch_mode is BatchMode.MEMSIZE and self.entry_weight is EntryWeight.MEMORY

    @property
    def memory_budget(self) -> int:
        """Bytes the store may hold before a put waits (MEMSIZE mode)."""
        return self.buffer_size * self.memunit


def store_problems(
    buffer_size: object,
    memunit: object,
    batch_mode: object,
    ddl_isolation: object,
    entry_weight: object = EntryWeight.EVENT_LENGTH,
) -> list[tuple[str, str]]:
    """(field, problem) for every wrong store setting; empty when they are usable."""
    out: list[tuple[str, str]] = []
    for name, value in (("buffer_size", buffer_size), ("memunit", memunit)):
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            out.append((name, f"must be a positive integer, got {value!r}"))
    if isinstance(buffer_size, int) and buffer_size > 0 and buffer_size & (buffer_size - 1):
        out.append(("buffer_size", f"must be a power of two, got {buffer_size}"))
    if str(batch_mode).upper() not in BatchMode.__members__:
        modes = ", ".join(m.value for m in BatchMode)
        out.append(("batch_mode", f"must be one of {modes}, got {batch_mode!r}"))
    if not isinstance(ddl_isolation, bool):
        out.append(("ddl_isolation", f"must be true or false, got {ddl_isolation!r}"))
    if str(entry_weight).lower() not in {w.value for w in EntryWeight}:
        weights = ", ".join(w.value for w in EntryWeight)
        out.append(("entry_weight", f"must be one of {weights}, got {entry_weight!r}"))
    return out


# --- sink filters -------------------------------------------------------------------------------------


def compile_filter(text: str, key: str) -> list[re.Pattern[str]]:
    """canal's filter syntax: comma-separated regexes over ``schema.table``, case-insensitive."""
    patterns: list[re.Pattern[str]] = []
    for raw in (text or "").split(","):
        item = raw.strip()
        if not item:
            continue
        try:
            patterns.append(re.compile(item, re.IGNORECASE))
        except re.error as exc:
            raise ConfigError(key, f"invalid regex `{item}`: {exc}") from exc
    return patterns


def validate_counter(value: object, key: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(key, f"must be a whole number >= 0, got {value!r}")


# --- high availability ----------------------------------------------------------------------------


@dataclass(frozen=True)
class HAConfig:
    """The ``ha:`` section of conf/relay.yaml."""

    enabled: bool = False
    zookeeper: str = "127.0.0.1:2181"  # kazoo connection string host:port[,host:port]
    root: str = "/canal-relay"
    session_timeout_seconds: float = 10.0
    connect_timeout_seconds: float = 10.0
    member_id: str = ""  # "" : hostname:pid


def validate_ha(ha: HAConfig, path: str = "ha") -> None:
    problems: list[ConfigError] = []
    if not ha.root.startswith("/") or (ha.root.endswith("/") and ha.root != "/"):
        problems.append(ConfigError(f"{path}.root", f"must be an absolute ZooKeeper path, got {ha.root!r}"))
    if ha.session_timeout_seconds <= 0 or ha.connect_timeout_seconds <= 0:
        problems.append(ConfigError(f"{path}.session_timeout_seconds", "timeouts must be positive"))
    if ha.member_id and "/" in ha.member_id:
        problems.append(ConfigError(f"{path}.member_id", f"must not contain '/', got {ha.member_id!r}"))
    InvalidConfigError.raise_all(problems)


# --- metrics ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MetricsConfig:
    port: int = 0  # 0: no exporter
    host: str = "127.0.0.1"
    server_check_seconds: float = 10.0
    ready_max_lag_seconds: float = 60.0

    def validate(self, path: str = "metrics") -> None:
        problems: list[ConfigError] = []
        if not 0 <= self.port < 65536:
            problems.append(ConfigError(f"{path}.port", f"must be a TCP port or 0 (off), got {self.port}"))
        if self.server_check_seconds <= 0:
            problems.append(ConfigError(f"{path}.server_check_seconds", "must be positive"))
        if self.ready_max_lag_seconds < 0:
            problems.append(ConfigError(f"{path}.ready_max_lag_seconds", "must not be negative"))
        InvalidConfigError.raise_all(problems)


# --- kafka --------------------------------------------------------------------------------------------

# librdkafka settings the publisher sets itself; a config that sets them is refused.
OWNED_KAFKA_KEYS = {
    "bootstrap.servers": "bootstrap_servers",
    "client.id": "client_id",
    "message.timeout.ms": "delivery_timeout_s",
    "delivery.timeout.ms": "delivery_timeout_s",
    "transactional.id": "kafka.transactional_id (with kafka.transactions: true)",
    "error_cb": "the publisher (it owns the callbacks)",
    "on_delivery": "the publisher (it owns the callbacks)",
    "dr_cb": "the publisher (it owns the callbacks)",
    "dr_msg_cb": "the publisher (it owns the callbacks)",
    "partitioner": "the publisher (murmur2_random: where a key lives, as Kafka's Java client places it)",
}


def validate_kafka_settings(settings: Mapping[str, Any], path: str = "kafka.settings") -> None:
    """Refuse passthrough settings that would weaken ``acks=all`` + idempotence; the error names the key."""
    problems: list[ConfigError] = []
    for key, owner in OWNED_KAFKA_KEYS.items():
        if key in settings:
            problems.append(
                ConfigError(f"{path}.{key}", f"is set by {owner}; remove it from the kafka settings")
            )
    for key in ("acks", "request.required.acks"):
        if key in settings and str(settings[key]).strip().lower() not in ("all", "-1"):
            problems.append(
                ConfigError(
                    f"{path}.{key}",
                    f"must be 'all' (the relay acks only what every replica has), got {settings[key]!r}",
                )
            )
    if "enable.idempotence" in settings and not _truthy(settings["enable.idempotence"]):
        problems.append(
            ConfigError(
                f"{path}.enable.idempotence", "must be true (per-key order and no duplicates on retry)"
            )
        )
    for key in (*_COUNTS, *_LIMITS):
        if key in settings and _whole(settings[key]) is None:
            problems.append(ConfigError(f"{path}.{key}", f"expected a whole number, got {settings[key]!r}"))
    for key in _COUNTS:
        if key in settings and (_whole(settings[key]) or 0) <= 0 and _whole(settings[key]) is not None:
            problems.append(
                ConfigError(f"{path}.{key}", "must be positive: the idempotent producer retries internally")
            )
    for key in _LIMITS:
        if key in settings and (_whole(settings[key]) or 0) > 5:
            problems.append(
                ConfigError(f"{path}.{key}", "must be at most 5 with idempotence (order is kept only then)")
            )
    InvalidConfigError.raise_all(problems)


_COUNTS = ("retries", "message.send.max.retries")
_LIMITS = ("max.in.flight.requests.per.connection", "max.in.flight")


def _whole(value: Any) -> int | None:
    try:
        return int(str(value).strip())
    except ValueError:
        return None


def _truthy(value: Any) -> bool:
    return str(value).strip().lower() in ("true", "1", "yes", "on")


@dataclass(frozen=True)
class SinkConfig:
    """canal's sink (``relay.canal.sink``): the table filters and empty-transaction trimming."""

    filter: str = ""  # canal.instance.filter.regex; "" keeps every table
    black_filter: str = ""  # canal.instance.filter.black.regex; "" drops none
    filter_empty_transactions: bool = True  # canal's filterEmtryTransactionEntry
    empty_transaction_interval_ms: int = 5_000  # canal's emptyTransactionInterval
    empty_transaction_threshold: int = 8_192  # canal's emptyTransctionThresold

    def __post_init__(self) -> None:
        self.validate("sink")

    def validate(self, path: str) -> None:
        """Raise ``ConfigError`` naming ``path.<field>`` for a bad regex or counter."""
        compile_filter(self.filter, f"{path}.filter")
        compile_filter(self.black_filter, f"{path}.black_filter")
        for key in ("empty_transaction_interval_ms", "empty_transaction_threshold"):
            validate_counter(getattr(self, key), f"{path}.{key}")


@dataclass(frozen=True)
class InstanceConfig:
    """Everything one canal instance (``relay.source.instance``) needs; built from the YAML config by
    ``relay.wiring``."""

    name: str = "default"
    source: SourceConfig = field(default_factory=SourceConfig)
    store: StoreConfig = field(default_factory=StoreConfig)
    sink: SinkConfig = field(default_factory=SinkConfig)
    poll_seconds: float = 0.2  # how often the parser thread looks at its stop flag while waiting
    # positions.save_interval_seconds: > 0: a writer thread saves the point after the last ack, at most
    # once per interval (acks never wait on the disk or ZooKeeper); 0: every ack saves, on its thread.
    save_interval_seconds: float = 0.1
    schema_history: str = "off"  # schema.history: off (FULL metadata required), auto, always
    # Snapshots (relay.source.snapshot): the settings, and which physical tables are captured (the
    # mapping and the sink filters, decided by relay.wiring); None: no snapshots.
    snapshot: SnapshotConfig = field(default_factory=SnapshotConfig)
    captures: Callable[[str, str], bool] | None = None
