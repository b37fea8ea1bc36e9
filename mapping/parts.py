"""The plain values a mapping is made of: logical dbs and tables, defaults, the unmapped rule, topic settings.

No rules here: ``mapping.checks`` validates these values and ``mapping.model.Mapping`` holds them valid
by construction. Kept apart so the checks can name these types without importing the model that calls
them (no import cycle). Frozen dataclasses; safe to share between threads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class TopicSettings:
    """How the relay creates a missing topic (``create: false`` makes a missing topic an error).

    ``replication_factor`` -1 and ``retention_ms`` None mean the broker's defaults
    (``default.replication.factor``, ``retention.ms``; -1 retention = keep forever). ``config`` holds
    further topic configs as sorted (name, value) pairs, values as text, as Kafka's admin API takes them.
    """

    partitions: int = 1
    replication_factor: int = -1
    retention_ms: int | None = None
    create: bool = True
    config: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        # One canonical order, so two settings with the same configs compare equal.
        object.__setattr__(self, "config", tuple(sorted(dict(self.config).items())))

    def topic_config(self) -> dict[str, str]:
        """The config dict for a new topic: ``config`` plus ``retention.ms`` when set (a fresh dict)."""
        out = dict(self.config)
        if self.retention_ms is not None:
            out["retention.ms"] = str(self.retention_ms)
        return out


@dataclass(frozen=True)
class UnmappedRule:
    """What happens to a table no mapping claims: ``action`` ``topic`` (publish to the expanded
    ``topic`` template) or ``drop`` (``topic`` None).

    Template placeholders (everywhere a topic is written): ``{db}`` and ``{table}`` the physical
    names, ``{logical_db}`` and ``{logical_table}`` the logical ones — for unmapped tables the
    logical names ARE the physical ones. Examples: ``{db}``, ``{db}.{table}``, ``raw.{db}``.
    """

    action: str = "topic"
    topic: str | None = "{db}"

    @classmethod
    def drop(cls) -> UnmappedRule:
        return cls(action="drop", topic=None)

    @property
    def drops(self) -> bool:
        return self.action == "drop"


@dataclass(frozen=True)
class ColumnControls:
    """A logical db's or table's ``columns`` section: what of a row's columns reaches Kafka
    (``mapping.columns`` merges and checks them; ``relay.kafka.columns`` applies them).

    ``include`` None keeps every column but the ``exclude`` ones; ``hash`` maps a column to its
    algorithm, ``mask`` and ``truncate`` to their N, each as sorted (column, value) pairs;
    ``salt_env`` names the environment variable holding the hash salt.
    """

    exclude: tuple[str, ...] = ()
    include: tuple[str, ...] | None = None
    hash: tuple[tuple[str, str], ...] = ()
    mask: tuple[tuple[str, int], ...] = ()
    truncate: tuple[tuple[str, int], ...] = ()
    salt_env: str | None = None

    def __post_init__(self) -> None:
        for name in ("hash", "mask", "truncate"):  # one canonical order: equal settings compare equal
            object.__setattr__(self, name, tuple(sorted(getattr(self, name))))


@dataclass(frozen=True)
class Defaults:
    """Values a logical db or table inherits when it does not set its own."""

    codec: str = "canal-json"
    topic: str = "{logical_db}"
    unclaimed_tables: str = "own_name"
    key_shard: str = "none"


@dataclass(frozen=True)
class LogicalTable:
    """A logical table: the physical table patterns it claims inside its logical db.

    ``topic`` None inherits the db's topic; ``key`` None means the primary key; ``codec`` and
    ``key_shard`` None inherit. ``origin`` is the YAML path where it was written (for messages only;
    not compared).

    ``key_shard`` puts the shard identity into the record key (``mapping.key_shard.KEY_SHARD_HELP``):
    ``none``, ``physical`` (the physical ``db.table``) or ``column:<name>`` (that column's value).
    ``columns`` (column controls) adds to, and per column overrides, the db's (``mapping.columns``).
    """

    name: str
    physical: tuple[str, ...]
    topic: str | None = None
    key: tuple[str, ...] | None = None
    tag: str | None = None
    codec: str | None = None
    origin: str | None = field(default=None, compare=False, repr=False)
    key_shard: str | None = None
    columns: ColumnControls | None = None


@dataclass(frozen=True)
class LogicalDb:
    """A logical db: the physical db patterns it claims, its topic template and its tables.

    ``topic``, ``codec``, ``unclaimed_tables`` and ``key_shard`` None inherit from ``Mapping.defaults``;
    ``key_shard`` is also what the db's logical tables (and its unclaimed tables) inherit; ``columns``
    (column controls) apply to every table of the db that has the columns they name.
    """

    name: str
    physical: tuple[str, ...]
    topic: str | None = None
    codec: str | None = None
    unclaimed_tables: str | None = None
    tables: tuple[LogicalTable, ...] = ()
    key_shard: str | None = None
    columns: ColumnControls | None = None

    def table(self, name: str) -> LogicalTable | None:
        return next((t for t in self.tables if t.name == name), None)


@dataclass(frozen=True)
class DebeziumSettings:
    """How the ``debezium-json`` codec writes its records (the mapping's ``debezium`` section), for every
    route whose codec it is. Each setting mirrors the Debezium / Kafka Connect property it is named after.

    ``schemas_enable`` (JsonConverter's ``schemas.enable``, default true): key and value as
    ``{"schema":…,"payload":…}``; false: the payload alone. ``decimal_handling_mode`` (Debezium's
    ``decimal.handling.mode``): ``precise`` (base64 of the unscaled value, ``Decimal`` schema),
    ``string`` or ``double``. ``tombstones_on_delete`` (Debezium's ``tombstones.on.delete``, default
    true): a DELETE is followed by a tombstone. ``schema_change_topic``: where DDL goes in Debezium's
    schema-change shape, a template whose ``{source_id}`` is the relay's source id (Debezium's
    ``topic.prefix`` topic); "" publishes no schema changes.
    """

    schemas_enable: bool = True
    decimal_handling_mode: str = "precise"
    tombstones_on_delete: bool = True
    schema_change_topic: str = "{source_id}"


class MappingFields(Protocol):
    """What the checks read of a ``mapping.model.Mapping`` (which calls them while it is being built)."""

    @property
    def version(self) -> int: ...
    @property
    def logical_dbs(self) -> tuple[LogicalDb, ...]: ...
    @property
    def defaults(self) -> Defaults: ...
    @property
    def unmapped(self) -> UnmappedRule: ...
    @property
    def topics(self) -> TopicSettings: ...
    @property
    def debezium(self) -> DebeziumSettings: ...
