"""Roma's logical model: physical MySQL dbs/tables → logical dbs/tables → Kafka topics.

Owns the immutable, versioned ``Mapping`` value and the routing decision ``Mapping.resolve(db, table)``
that hands a ``Route`` (logical names, topic, key columns, tag, codec) to the relay's router and
publisher. Pure data, no I/O and no threads of its own: the relay's publisher thread calls ``resolve``
once per row event (answers are cached), the Spark readers use the same value to name topics.
YAML loading and saving live in ``mapping.load``; static checks in ``mapping.checks``, templates in
``mapping.names``.

Matching rules (documented once, here):

- A pattern is a Python regex matched against the WHOLE physical name (``re.fullmatch``), and
  case-sensitively: MySQL database and table names are case-sensitive on Linux. A server with
  ``lower_case_table_names=1`` writes lower-case names to the binlog, so write lower-case patterns
  there (or opt in per pattern with the inline flag ``(?i)``).
- A physical db claimed by no logical db follows the ``unmapped`` rule. A physical table of a claimed
  db that no logical table claims follows the db's ``unclaimed_tables`` setting: ``own_name`` (the
  default: logical table = the physical table's own name, in the db's topic), ``unmapped`` (the
  global unmapped rule) or ``drop``.
- Two logical dbs whose patterns match the same physical db, or two logical tables of one logical db
  whose patterns match the same physical table, are an error: detected when the mapping is built
  where decidable (identical patterns, a literal name matching another pattern), otherwise by
  ``resolve`` and ``validate_against`` (``MappingError`` naming both claimants). The relay never guesses.
- Key columns ``None`` mean the table's primary key. MySQL column names are case-insensitive, so
  ``Route.check_columns`` compares them case-insensitively and answers with the table's spelling.
- ``key_shard`` (table, else its db, else ``defaults``; default ``none``) adds the shard identity to the
  record key as its first field ``_shard``: ``physical`` = the physical ``db.table``, ``column:<name>``
  = that column's value. ``Mapping.warnings`` (and ``Coverage.warnings`` for real table names) name the
  logical tables whose key may collide across shards because it has none.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from mapping.checks import CODECS, UNCLAIMED_CHOICES, check_mapping
from mapping.columns import Controls, merge
from mapping.key_shard import KEY_SHARD_NONE, MappingWarning, collapse_problem, key_warnings, shard_column
from mapping.names import (
    PLACEHOLDERS,
    db_topic_path,
    expand_topic,
    has_physical_placeholder,
    name_path,
    table_path,
    topic_problem,
)
from mapping.parts import (
    ColumnControls,
    DebeziumSettings,
    Defaults,
    LogicalDb,
    LogicalTable,
    TopicSettings,
    UnmappedRule,
)
from mapping.patterns import Claimant, first_match, quoted
from relay.errors import InvalidMappingError, MappingError

__all__ = [
    "CODECS",
    "PLACEHOLDERS",
    "RESOLVE_CACHE_SIZE",
    "UNCLAIMED_CHOICES",
    "ColumnControls",
    "Coverage",
    "DebeziumSettings",
    "Defaults",
    "InvalidMappingError",
    "LogicalDb",
    "LogicalTable",
    "Mapping",
    "MappingWarning",
    "Route",
    "TopicSettings",
    "UnmappedRule",
    "route_codec_conflicts",
]

RESOLVE_CACHE_SIZE = 65536
"""Bound of the per-(db, table) answer cache; cleared when full (far above any real table count)."""


@dataclass(frozen=True)
class Route:
    """Where one physical table's changes go. ``key_columns`` None = the primary key.

    ``mapped`` is False when the route comes from the global unmapped rule. ``rule`` is the YAML path
    of the rule that produced it (``logical_dbs.shop.tables.orders``, ``logical_dbs.shop.unclaimed_tables``,
    ``unmapped``), so ``resolve`` can show exactly why a table goes where it goes. ``key_shard`` is the
    effective setting and ``key_shard_rule`` the YAML path it comes from.
    """

    physical_db: str
    physical_table: str
    logical_db: str
    logical_table: str
    topic: str
    key_columns: tuple[str, ...] | None
    tag: str | None
    codec: str
    mapped: bool
    rule: str
    key_shard: str = KEY_SHARD_NONE
    key_shard_rule: str = "defaults.key_shard"
    columns: Controls | None = None  # column controls (``mapping.columns``); None: every column as read

    def check_shard_column(self, column_names: Iterable[str]) -> str | None:
        """The ``column:<name>`` shard column in the table's spelling, or None for other settings.

        Raises ``InvalidMappingError`` naming ``key_shard_rule`` when the table has no such column.
        """
        wanted = shard_column(self.key_shard)
        if wanted is None:
            return None
        names = list(column_names)
        actual = next((c for c in names if c.lower() == wanted.lower()), None)
        if actual is None:
            problem = (
                f"shard column {wanted!r} is not a column of {self.physical_db}.{self.physical_table} "
                f"(columns: {', '.join(names) or 'none'})"
            )
            where = f"{self.physical_db}.{self.physical_table}"
            raise InvalidMappingError(where, [MappingError(self.key_shard_rule, problem)])
        return actual

    def check_columns(self, column_names: Iterable[str]) -> tuple[str, ...] | None:
        """Check the key columns against the physical table's columns (called when the relay first
        sees the table). Returns the key columns in the table's spelling, or None (primary key).

        Raises ``InvalidMappingError`` naming ``<rule>.key[i]`` for every missing column.
        """
        if self.key_columns is None:
            return None
        by_lower = {c.lower(): c for c in column_names}
        found: list[str] = []
        errors: list[MappingError] = []
        for i, col in enumerate(self.key_columns):
            actual = by_lower.get(col.lower())
            if actual is None:
                problem = (
                    f"key column {col!r} is not a column of {self.physical_db}.{self.physical_table} "
                    f"(columns: {', '.join(by_lower.values()) or 'none'})"
                )
                errors.append(MappingError(f"{self.rule}.key[{i}]", problem))
            else:
                found.append(actual)
        if errors:
            raise InvalidMappingError(f"{self.physical_db}.{self.physical_table}", errors)
        return tuple(found)


@dataclass(frozen=True)
class Coverage:
    """What ``validate_against`` found for a list of real physical (db, table) names."""

    routes: tuple[Route, ...]
    unmapped: tuple[tuple[str, str], ...]
    dropped: tuple[tuple[str, str], ...]
    errors: tuple[MappingError, ...]
    warnings: tuple[MappingWarning, ...] = ()


_MISS = object()


@dataclass(frozen=True)
class Mapping:
    """The whole mapping: an immutable, versioned value, valid by construction.

    Building one runs every static check and raises ``InvalidMappingError`` listing all problems
    (``.errors`` holds one ``MappingError`` per problem, each with its YAML key path). ``resolve`` is
    safe to call from several threads: answers are deterministic and the cache only holds them.
    """

    version: int = 1
    logical_dbs: tuple[LogicalDb, ...] = ()
    defaults: Defaults = field(default_factory=Defaults)
    unmapped: UnmappedRule = field(default_factory=UnmappedRule)
    topics: TopicSettings = field(default_factory=TopicSettings)
    debezium: DebeziumSettings = field(default_factory=DebeziumSettings)  # the debezium-json codec's
    # The YAML text it was parsed from, comments and all (None when built otherwise, e.g. by an edit):
    # what a store writes for a rollback or an import (``mapping.document``). Not part of the value.
    text: str | None = field(default=None, compare=False, repr=False)
    _index: tuple[Claimant, ...] = field(default=(), init=False, repr=False, compare=False)
    _cache: dict[tuple[str, str], Route | None] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        errors, index = check_mapping(self)
        if errors:
            raise InvalidMappingError("mapping", errors)
        object.__setattr__(self, "_index", index)

    def logical_db(self, name: str) -> LogicalDb | None:
        return next((d for d in self.logical_dbs if d.name == name), None)

    def with_version(self, version: int) -> Mapping:
        """The same mapping under another version number (what a store does on save)."""
        return dataclasses.replace(self, version=version)

    def resolve(self, db: str, table: str) -> Route | None:
        """The route of physical ``db``.``table``, or None when its changes are dropped.

        Raises ``MappingError`` when two logical dbs (or tables) claim it, or when its topic
        template expands to a name Kafka would refuse. Neither is cached: the relay stops on them.
        """
        key = (db, table)
        hit = self._cache.get(key, _MISS)
        if hit is not _MISS:
            return hit  # type: ignore[return-value]
        route = self._resolve(db, table)
        if len(self._cache) >= RESOLVE_CACHE_SIZE:
            self._cache.clear()
        self._cache[key] = route
        return route

    def validate_against(self, tables: Iterable[tuple[str, str]], *, raise_errors: bool = True) -> Coverage:
        """Resolve every real (db, table): which are mapped, unmapped, dropped or in error.

        Raises ``InvalidMappingError`` listing every ambiguous (or badly named) table when
        ``raise_errors``; otherwise the errors are in ``Coverage.errors``.
        """
        routes: list[Route] = []
        unmapped: list[tuple[str, str]] = []
        dropped: list[tuple[str, str]] = []
        errors: list[MappingError] = []
        for db, table in tables:
            try:
                route = self.resolve(db, table)
            except MappingError as exc:
                errors.extend(getattr(exc, "errors", (exc,)))
                continue
            if route is None:
                dropped.append((db, table))
            else:
                routes.append(route)
                if not route.mapped:
                    unmapped.append((db, table))
        errors.extend(route_codec_conflicts(routes))
        if errors and raise_errors:
            raise InvalidMappingError("mapping", errors)
        return Coverage(tuple(routes), tuple(unmapped), tuple(dropped), tuple(errors), _collisions(routes))

    def warnings(self) -> tuple[MappingWarning, ...]:
        """Valid but probably wrong: logical tables whose patterns may map several physical tables
        while their key holds no shard identity (see ``Coverage.warnings`` for real table names)."""
        return tuple(key_warnings(self))

    def column_controls(self) -> tuple[Controls, ...]:
        """The effective column controls of every logical db and logical table that has some (a db's
        apply to its unclaimed tables)."""
        out: list[Controls] = []
        for db in self.logical_dbs:
            merged = [merge(db.columns, _columns_path(db), None, "")]
            merged += [
                merge(db.columns, _columns_path(db), t.columns, f"{table_path(db.name, t)}.columns")
                for t in db.tables
            ]
            out.extend(m for m in merged if m is not None)
        return tuple(out)

    def topic_names(self) -> tuple[str, ...]:
        """Every topic fully known without seeing physical names (templates with only logical
        placeholders), sorted: what a Spark job can subscribe to, or an admin pre-create."""
        names: set[str] = set()
        for db in self.logical_dbs:
            own = db.topic or self.defaults.topic
            unclaimed = db.unclaimed_tables or self.defaults.unclaimed_tables
            if unclaimed == "own_name" and not has_physical_placeholder(own) and "{logical_table}" not in own:
                names.add(expand_topic(own, "", "", db.name, ""))
            for table in db.tables:
                template = table.topic or db.topic or self.defaults.topic
                if not has_physical_placeholder(template):
                    names.add(expand_topic(template, "", "", db.name, table.name))
        return tuple(sorted(names))

    def to_dict(self) -> dict[str, Any]:
        """The canonical plain-dict form (what ``dump_mapping`` writes); parses back to an equal value."""
        out: dict[str, Any] = {"version": self.version, "defaults": dataclasses.asdict(self.defaults)}
        topics = dataclasses.asdict(self.topics)
        topics["config"] = dict(self.topics.config)
        out["topics"] = topics
        out["unmapped"] = {"action": self.unmapped.action}
        if not self.unmapped.drops:
            out["unmapped"]["topic"] = self.unmapped.topic
        if self.debezium != DebeziumSettings():  # written when set: older readers know no such section
            out["debezium"] = dataclasses.asdict(self.debezium)
        out["logical_dbs"] = {db.name: _db_dict(db) for db in self.logical_dbs}
        return out

    def _resolve(self, db: str, table: str) -> Route | None:
        claimants = [entry for entry in self._index if first_match(entry.patterns, db) is not None]
        if len(claimants) > 1:
            raise _ambiguity("db", db, db, claimants)
        if not claimants:
            return self._unmapped_route(db, table)
        entry = claimants[0]
        tables = [t for t in entry.tables if first_match(t.patterns, table) is not None]
        assert isinstance(entry.item, LogicalDb)
        if len(tables) > 1:
            raise _ambiguity("table", f"{db}.{table}", table, tables)
        ldb = entry.item
        if tables:
            lt = tables[0].item
            assert isinstance(lt, LogicalTable)
            return self._table_route(ldb, lt, db, table)
        unclaimed = ldb.unclaimed_tables or self.defaults.unclaimed_tables
        if unclaimed == "drop":
            return None
        if unclaimed == "unmapped":
            return self._unmapped_route(db, table)
        template, where = self._db_topic(ldb)
        return Route(
            physical_db=db,
            physical_table=table,
            logical_db=ldb.name,
            logical_table=table,
            topic=_topic(template, where, db, table, logical=(ldb.name, table)),
            key_columns=None,
            tag=None,
            codec=ldb.codec or self.defaults.codec,
            mapped=True,
            rule=f"{name_path('logical_dbs', ldb.name)}.unclaimed_tables",
            key_shard=ldb.key_shard or self.defaults.key_shard,
            key_shard_rule=self._db_key_shard_path(ldb),
            columns=merge(ldb.columns, _columns_path(ldb), None, ""),
        )

    def _table_route(self, ldb: LogicalDb, lt: LogicalTable, db: str, table: str) -> Route:
        path = table_path(ldb.name, lt)
        template, where = (lt.topic, f"{path}.topic") if lt.topic else self._db_topic(ldb)
        return Route(
            physical_db=db,
            physical_table=table,
            logical_db=ldb.name,
            logical_table=lt.name,
            topic=_topic(template, where, db, table, logical=(ldb.name, lt.name)),
            key_columns=lt.key,
            tag=lt.tag,
            codec=lt.codec or ldb.codec or self.defaults.codec,
            mapped=True,
            rule=path,
            key_shard=lt.key_shard or ldb.key_shard or self.defaults.key_shard,
            key_shard_rule=f"{path}.key_shard" if lt.key_shard else self._db_key_shard_path(ldb),
            columns=merge(ldb.columns, _columns_path(ldb), lt.columns, f"{path}.columns"),
        )

    @staticmethod
    def _db_key_shard_path(ldb: LogicalDb) -> str:
        return f"{name_path('logical_dbs', ldb.name)}.key_shard" if ldb.key_shard else "defaults.key_shard"

    def _db_topic(self, ldb: LogicalDb) -> tuple[str, str]:
        return ldb.topic or self.defaults.topic, db_topic_path(ldb)

    def _unmapped_route(self, db: str, table: str) -> Route | None:
        rule = self.unmapped
        if rule.drops or rule.topic is None:
            return None
        return Route(
            physical_db=db,
            physical_table=table,
            logical_db=db,
            logical_table=table,
            topic=_topic(rule.topic, "unmapped.topic", db, table, logical=(db, table)),
            key_columns=None,
            tag=None,
            codec=self.defaults.codec,
            mapped=False,
            rule="unmapped",
        )


def _columns_path(ldb: LogicalDb) -> str:
    return f"{name_path('logical_dbs', ldb.name)}.columns"


def _topic(template: str, where: str, db: str, table: str, *, logical: tuple[str, str]) -> str:
    logical_db, logical_table = logical
    topic = expand_topic(template, db, table, logical_db, logical_table)
    problem = topic_problem(topic)
    if problem is not None:
        raise MappingError(where, f"template {template!r} gives topic {topic!r} for {db}.{table}: {problem}")
    return topic


def route_codec_conflicts(routes: Iterable[Route]) -> list[MappingError]:
    """Real tables whose rules send them to one topic with different codecs (what ``check_mapping``
    cannot see where a topic template uses the physical names)."""
    first: dict[str, Route] = {}
    errors: list[MappingError] = []
    reported: set[tuple[str, str]] = set()
    for route in routes:
        seen = first.setdefault(route.topic, route)
        if seen.codec == route.codec or (route.topic, route.rule) in reported:
            continue
        reported.add((route.topic, route.rule))
        errors.append(
            MappingError(
                route.rule,
                f"topic {route.topic!r} would carry {route.codec} records of "
                f"{route.physical_db}.{route.physical_table} and {seen.codec} records of "
                f"{seen.physical_db}.{seen.physical_table} ({seen.rule}): one topic, one codec (a consumer "
                "decodes a topic with one); give them the same codec or different topics",
            )
        )
    return errors


def _collisions(routes: Iterable[Route]) -> tuple[MappingWarning, ...]:
    """Logical tables that several real physical tables map to with no shard identity in the key
    (``key_shard`` inherited from ``defaults`` as ``none``; an explicit ``none`` says keys are unique)."""
    groups: dict[tuple[str, str], list[Route]] = {}
    for route in routes:
        if (
            route.mapped
            and route.key_shard == KEY_SHARD_NONE
            and route.key_shard_rule == "defaults.key_shard"
        ):
            groups.setdefault((route.logical_db, route.logical_table), []).append(route)
    out: list[MappingWarning] = []
    for (db, table), found in groups.items():
        if len(found) < 2:
            continue
        shown = ", ".join(f"{r.physical_db}.{r.physical_table}" for r in found[:3])
        more = f" and {len(found) - 3} more" if len(found) > 3 else ""
        maps = f"maps {len(found)} physical tables ({shown}{more}), i.e."
        path = found[0].rule.removesuffix(".unclaimed_tables") + ".key_shard"
        out.append(MappingWarning(path, collapse_problem(f"logical table {db}.{table}", maps)))
    return tuple(out)


def _ambiguity(kind: str, shown: str, name: str, claimants: list[Claimant]) -> MappingError:
    first, second = claimants[0], claimants[1]
    one, two = first_match(first.patterns, name), first_match(second.patterns, name)
    assert one is not None and two is not None  # both were found by matching ``name``
    return MappingError(
        one.path,
        f"physical {kind} {shown!r} is claimed by both {first.path} (pattern {quoted(one.pattern)}) and "
        f"{second.path} (pattern {quoted(two.pattern)}); make the patterns disjoint",
    )


def _db_dict(db: LogicalDb) -> dict[str, Any]:
    out: dict[str, Any] = {"physical": list(db.physical)}
    for key in ("topic", "codec", "unclaimed_tables", "key_shard"):
        if getattr(db, key) is not None:
            out[key] = getattr(db, key)
    if db.columns is not None:
        out["columns"] = columns_dict(db.columns)
    if db.tables:
        out["tables"] = {t.name: _table_dict(t) for t in db.tables}
    return out


def _table_dict(table: LogicalTable) -> dict[str, Any]:
    out: dict[str, Any] = {"physical": list(table.physical)}
    if table.topic is not None:
        out["topic"] = table.topic
    if table.key is not None:
        out["key"] = list(table.key)
    if table.key_shard is not None:
        out["key_shard"] = table.key_shard
    if table.tag is not None:
        out["tag"] = table.tag
    if table.codec is not None:
        out["codec"] = table.codec
    if table.columns is not None:
        out["columns"] = columns_dict(table.columns)
    return out


def columns_dict(controls: ColumnControls) -> dict[str, Any]:
    """A ``columns`` section as plain data (what ``dump_mapping`` writes)."""
    out: dict[str, Any] = {}
    if controls.include is not None:
        out["include"] = list(controls.include)
    if controls.exclude:
        out["exclude"] = list(controls.exclude)
    for name in ("hash", "mask", "truncate"):
        if getattr(controls, name):
            out[name] = dict(getattr(controls, name))
    if controls.salt_env is not None:
        out["salt_env"] = controls.salt_env
    return out
