"""Static checks of a mapping value: names, regexes, overlaps, templates, codecs, topic settings.

Owns the rules that make a ``mapping.model.Mapping`` valid by construction, the topic-template
language, Kafka's topic-name rules and the YAML key paths every ``MappingError`` names. Pure
functions, called by ``Mapping.__post_init__`` on whatever thread builds a mapping; they hand back
the list of problems (never stopping at the first) and the compiled pattern index ``resolve`` uses.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from mapping.parts import Defaults, LogicalDb, LogicalTable, TopicSettings, UnmappedRule
from mapping.samples import examples
from relay.errors import MappingError


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


CODECS = ("canal-json", "canal-protobuf")
KEY_SHARD_NONE = "none"
KEY_SHARD_PHYSICAL = "physical"
KEY_SHARD_COLUMN = "column:"
KEY_SHARD_HELP = "none, physical or column:<name>"
SHARD_FIELD = "_shard"  # the record key's field holding the shard identity (mapping.model.Route)
UNCLAIMED_CHOICES = ("own_name", "unmapped", "drop")
UNMAPPED_ACTIONS = ("topic", "drop")
PLACEHOLDERS = ("db", "table", "logical_db", "logical_table")
MAX_TOPIC_LENGTH = 249  # Kafka's limit (topic names become directory names plus a partition suffix)
MAX_NAME_LENGTH = 64  # MySQL's identifier limit; logical names follow it

_FIELD = re.compile(r"\{([^{}]*)\}")
_TOPIC_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
_LOGICAL_NAME = re.compile(r"[A-Za-z0-9_-]+")
_REGEX_META = frozenset(".^$*+?{}[]|()")


# --- key paths -------------------------------------------------------------------------------


def name_path(prefix: str, name: str) -> str:
    """``prefix.name``, or ``prefix["a.b"]`` when the name would not read back as one key."""
    if _LOGICAL_NAME.fullmatch(name):
        return f"{prefix}.{name}" if prefix else name
    return f"{prefix}[{json.dumps(name)}]"


def table_path(db_name: str, table: LogicalTable) -> str:
    """Where a logical table is written: its ``origin`` (flat ``tables`` section) or the nested path."""
    return table.origin or name_path(f"{name_path('logical_dbs', db_name)}.tables", table.name)


# --- topics and templates --------------------------------------------------------------------


def topic_problem(topic: str) -> str | None:
    """Why Kafka would refuse ``topic`` as a name, or None."""
    if not topic:
        return "empty topic name"
    if topic in (".", ".."):
        return "'.' and '..' are not allowed as topic names"
    if len(topic) > MAX_TOPIC_LENGTH:
        return f"longer than {MAX_TOPIC_LENGTH} characters ({len(topic)})"
    bad = sorted(set(topic) - _TOPIC_CHARS)
    if bad:
        return f"characters {''.join(bad)!r} are not allowed in topic names (only a-z A-Z 0-9 . _ -)"
    return None


def template_problem(template: str) -> str | None:
    """Why a topic template can never expand to a valid topic, or None."""
    names = _FIELD.findall(template)
    unknown = [n for n in names if n not in PLACEHOLDERS]
    if unknown:
        known = ", ".join("{" + p + "}" for p in PLACEHOLDERS)
        return f"unknown placeholder {{{unknown[0]}}} in {template!r} (known: {known})"
    literal = _FIELD.sub("", template)
    if "{" in literal or "}" in literal:
        return f"unbalanced brace in {template!r}"
    if not names:
        return topic_problem(template)
    bad = sorted(set(literal) - _TOPIC_CHARS)
    if bad:
        return f"characters {''.join(bad)!r} are not allowed in topic names (only a-z A-Z 0-9 . _ -)"
    return None


def expand_topic(template: str, db: str, table: str, logical_db: str, logical_table: str) -> str:
    values = {"db": db, "table": table, "logical_db": logical_db, "logical_table": logical_table}
    return _FIELD.sub(lambda m: values[m.group(1)], template)


def has_physical_placeholder(template: str) -> bool:
    return any(n in ("db", "table") for n in _FIELD.findall(template))


# --- compiled pattern index ------------------------------------------------------------------


# --- shard identity in keys ------------------------------------------------------------------


@dataclass(frozen=True)
class MappingWarning:
    """Something valid but probably wrong (``path``: the YAML key to change); never stops anything."""

    path: str
    problem: str

    def __str__(self) -> str:
        return f"{self.path}: {self.problem}"


def key_shard_problem(value: str) -> str | None:
    """Why ``value`` is not a ``key_shard`` setting, or None."""
    if value in (KEY_SHARD_NONE, KEY_SHARD_PHYSICAL):
        return None
    if value.startswith(KEY_SHARD_COLUMN):
        column = value[len(KEY_SHARD_COLUMN) :]
        if not column.strip() or column != column.strip():
            return f"{value!r}: expected column:<name> with a column name (no surrounding spaces)"
        if column.lower() == SHARD_FIELD:
            return f"{value!r}: {SHARD_FIELD} names the key's shard field itself; name a real column"
        return None
    return f"{value!r} is not one of {KEY_SHARD_HELP}"


def shard_column(value: str) -> str | None:
    """The column of a ``column:<name>`` setting, else None."""
    return value[len(KEY_SHARD_COLUMN) :] if value.startswith(KEY_SHARD_COLUMN) else None


def may_match_several(patterns: Sequence[str]) -> bool:
    """Whether these patterns can match more than one physical name (not one plain literal)."""
    return len(patterns) != 1 or literal_of(patterns[0]) is None


def key_warnings(mapping: MappingFields) -> list[MappingWarning]:
    """Logical tables whose record key may not be unique: they can map several physical tables (by
    their patterns or their db's) and their key holds no shard identity because ``key_shard`` is
    inherited from ``defaults`` as ``none``. Writing ``key_shard: none`` on the table (or its db) says
    the key values are unique across the shards, and silences the warning."""
    out: list[MappingWarning] = []
    rule = mapping.unmapped
    if not mapping.logical_dbs and not rule.drops and rule.topic is not None:
        problem = "no logical dbs: every table is published under its physical names"
        problem += f" (unmapped.topic {rule.topic!r})"
        out.append(MappingWarning("logical_dbs", problem))
    if mapping.defaults.key_shard != KEY_SHARD_NONE:
        return out
    for db in mapping.logical_dbs:
        if db.key_shard is not None:  # an explicit db setting: shard identity, or "ids are unique"
            continue
        many_dbs = may_match_several(db.physical)
        for table in db.tables:
            if table.key_shard is None and (many_dbs or may_match_several(table.physical)):
                problem = collapse_problem(f"{db.name}.{table.name}", "may map")
                out.append(MappingWarning(f"{table_path(db.name, table)}.key_shard", problem))
        unclaimed = db.unclaimed_tables or mapping.defaults.unclaimed_tables
        if unclaimed == "own_name" and many_dbs:
            problem = collapse_problem(f"each unclaimed table of {db.name} (own_name)", "may map")
            out.append(MappingWarning(f"{name_path('logical_dbs', db.name)}.key_shard", problem))
    return out


def collapse_problem(what: str, maps: str) -> str:
    """The text of a key-collision warning: ``what`` ``maps`` several physical tables…"""
    return (
        f"{what} {maps} several physical tables and its record key holds no shard identity (key_shard "
        "inherited from defaults: none): rows of different shards with the same key share one Kafka key, "
        "and a keyed consumer or a compacted topic keeps only one of them; set key_shard: physical (or "
        "column:<name>), or key_shard: none here if the key values are unique across all shards"
    )


@dataclass(frozen=True)
class Pattern:
    pattern: str
    regex: re.Pattern[str]
    path: str


@dataclass(frozen=True)
class Claimant:
    """A logical db or table with its compiled patterns (``tables`` only for a db)."""

    item: LogicalDb | LogicalTable
    path: str
    patterns: tuple[Pattern, ...]
    tables: tuple[Claimant, ...] = ()


def quoted(pattern: str) -> str:
    """A regex as the user wrote it, in quotes (``repr`` would double every backslash)."""
    return f"'{pattern}'"


def first_match(patterns: Sequence[Pattern], name: str) -> Pattern | None:
    for pat in patterns:
        if pat.regex.fullmatch(name):
            return pat
    return None


def literal_of(pattern: str) -> str | None:
    """The one name ``pattern`` matches when it is a plain (possibly escaped) literal, else None."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            if i + 1 >= len(pattern) or pattern[i + 1].isalnum():
                return None  # \d, \w, \1 ... are classes or references, not literals
            out.append(pattern[i + 1])
            i += 2
            continue
        if char in _REGEX_META:
            return None
        out.append(char)
        i += 1
    return "".join(out)


# --- the checks ------------------------------------------------------------------------------


def check_mapping(mapping: MappingFields) -> tuple[list[MappingError], tuple[Claimant, ...]]:
    """Every problem of ``mapping`` (empty when valid) and the compiled index of its logical dbs."""
    errors: list[MappingError] = []
    _check_globals(mapping, errors)
    index: list[Claimant] = []
    seen: set[str] = set()
    for db in mapping.logical_dbs:
        path = name_path("logical_dbs", db.name)
        _check_name(db.name, path, "logical db", seen, errors)
        patterns = compile_patterns(db.physical, f"{path}.physical", errors)
        _check_optional(db.topic, db.codec, path, errors)
        if db.unclaimed_tables is not None:
            _check_choice(db.unclaimed_tables, UNCLAIMED_CHOICES, f"{path}.unclaimed_tables", errors)
        _check_key_shard(db.key_shard, f"{path}.key_shard", errors)
        _check_expanded(db.topic or mapping.defaults.topic, db_topic_path(db), db.name, None, errors)
        tables = _check_tables(mapping, db, errors)
        index.append(Claimant(db, path, patterns, tables))
    _check_overlaps(index, "db", errors)
    for claimant in index:
        _check_overlaps(claimant.tables, "table", errors)
    errors.extend(codec_conflicts(static_topics(mapping)))
    if not mapping.logical_dbs and mapping.unmapped.action == "drop":
        errors.append(
            MappingError(
                "unmapped.action",
                "drop with no logical_dbs: the relay would publish nothing; add logical dbs, or publish "
                "every table under its physical names with unmapped: {action: topic, topic: '{db}'}",
            )
        )
    return errors, tuple(index)


# --- one codec per topic ----------------------------------------------------------------------


@dataclass(frozen=True)
class TopicUse:
    """A topic that a rule of the mapping publishes to, with the codec it uses there and the key paths
    of the rule and of the codec setting it inherits (``defaults.codec`` when none is written)."""

    topic: str
    codec: str
    rule: str
    codec_path: str


def static_topics(mapping: MappingFields) -> list[TopicUse]:
    """The topics the mapping's rules name without physical names ({db}/{table}), with their codecs."""
    d = mapping.defaults
    out: list[TopicUse] = []
    for db in mapping.logical_dbs:
        path = name_path("logical_dbs", db.name)
        db_codec, db_codec_path = (db.codec, f"{path}.codec") if db.codec else (d.codec, "defaults.codec")
        own = db.topic or d.topic
        unclaimed = db.unclaimed_tables or d.unclaimed_tables
        fixed = template_problem(own) is None and not has_physical_placeholder(own)
        if unclaimed == "own_name" and fixed and "{logical_table}" not in own:
            topic = expand_topic(own, "", "", db.name, "")
            out.append(TopicUse(topic, db_codec, f"{path} (its unclaimed tables)", db_codec_path))
        for table in db.tables:
            template = table.topic or db.topic or d.topic
            if has_physical_placeholder(template) or template_problem(template) is not None:
                continue
            tpath = table_path(db.name, table)
            codec, codec_path = (table.codec, f"{tpath}.codec") if table.codec else (db_codec, db_codec_path)
            out.append(
                TopicUse(expand_topic(template, "", "", db.name, table.name), codec, tpath, codec_path)
            )
    rule = mapping.unmapped
    if rule.topic is not None and not rule.drops and not _FIELD.search(rule.topic):  # names decide the rest
        out.append(TopicUse(rule.topic, d.codec, "unmapped", "defaults.codec"))
    return out


def codec_conflicts(uses: Sequence[TopicUse]) -> list[MappingError]:
    """A topic given two codecs: its consumers decode every record with one (canal's client, Spark's
    ``--codec``), so the records of the other would be unreadable. The error names the later rule's
    codec setting and the earlier rule."""
    first: dict[str, TopicUse] = {}
    errors: list[MappingError] = []
    for use in uses:
        seen = first.setdefault(use.topic, use)
        if seen.codec != use.codec:
            errors.append(
                MappingError(
                    use.codec_path,
                    f"topic {use.topic!r} would carry {use.codec} records from {use.rule} and {seen.codec} "
                    f"records from {seen.rule}: one topic, one codec (a consumer decodes a topic with one); "
                    "give them the same codec or different topics",
                )
            )
    return errors


def _check_globals(mapping: MappingFields, errors: list[MappingError]) -> None:
    if isinstance(mapping.version, bool) or not isinstance(mapping.version, int) or mapping.version < 0:
        errors.append(MappingError("version", f"must be an integer >= 0, not {mapping.version!r}"))
    defaults = mapping.defaults
    _check_choice(defaults.codec, CODECS, "defaults.codec", errors)
    _check_template(defaults.topic, "defaults.topic", errors)
    _check_choice(defaults.unclaimed_tables, UNCLAIMED_CHOICES, "defaults.unclaimed_tables", errors)
    _check_key_shard(defaults.key_shard, "defaults.key_shard", errors)
    topics = mapping.topics
    if topics.partitions < 1:
        errors.append(MappingError("topics.partitions", f"must be >= 1, not {topics.partitions}"))
    if topics.replication_factor < 1 and topics.replication_factor != -1:
        problem = f"must be >= 1, or -1 for the broker's default, not {topics.replication_factor}"
        errors.append(MappingError("topics.replication_factor", problem))
    if topics.retention_ms is not None and topics.retention_ms < -1:
        problem = f"must be >= 0, or -1 to keep forever, not {topics.retention_ms}"
        errors.append(MappingError("topics.retention_ms", problem))
    for name, _value in topics.config:
        if name == "retention.ms":
            errors.append(MappingError("topics.config.retention.ms", "set topics.retention_ms instead"))
        elif not name:
            errors.append(MappingError("topics.config", "empty config name"))
    rule = mapping.unmapped
    _check_choice(rule.action, UNMAPPED_ACTIONS, "unmapped.action", errors)
    if rule.action == "drop" and rule.topic is not None:
        errors.append(MappingError("unmapped.topic", "not used with action: drop; remove it"))
    elif rule.action == "topic":
        if rule.topic is None:
            errors.append(MappingError("unmapped.topic", "required with action: topic"))
        else:
            _check_template(rule.topic, "unmapped.topic", errors)


def _check_tables(mapping: MappingFields, db: LogicalDb, errors: list[MappingError]) -> tuple[Claimant, ...]:
    out: list[Claimant] = []
    seen: set[str] = set()
    for table in db.tables:
        path = table_path(db.name, table)
        _check_name(table.name, path, f"logical table of {db.name}", seen, errors)
        patterns = compile_patterns(table.physical, f"{path}.physical", errors)
        _check_optional(table.topic, table.codec, path, errors)
        _check_key(table.key, f"{path}.key", errors)
        _check_key_shard(table.key_shard, f"{path}.key_shard", errors)
        if table.tag is not None and not table.tag:
            errors.append(MappingError(f"{path}.tag", "empty tag; omit it for none"))
        where = f"{path}.topic" if table.topic else db_topic_path(db)
        _check_expanded(table.topic or db.topic or mapping.defaults.topic, where, db.name, table.name, errors)
        out.append(Claimant(table, path, patterns))
    return tuple(out)


def db_topic_path(db: LogicalDb) -> str:
    """The key path of the template a logical db's topic comes from."""
    return f"{name_path('logical_dbs', db.name)}.topic" if db.topic else "defaults.topic"


def _check_expanded(
    template: str, where: str, db_name: str, table_name: str | None, errors: list[MappingError]
) -> None:
    """Check a template's topic for a logical table (or, with ``table_name`` None, for a logical db)
    when the logical names alone decide it; other expansions are checked by ``resolve``."""
    if has_physical_placeholder(template) or template_problem(template) is not None:
        return
    if table_name is None and "{logical_table}" in template:
        return
    topic = expand_topic(template, "", "", db_name, table_name or "")
    problem = topic_problem(topic)
    if problem is not None:
        shown = db_name if table_name is None else f"{db_name}.{table_name}"
        errors.append(MappingError(where, f"topic {topic!r} of {shown}: {problem}"))


def compile_patterns(patterns: Sequence[str], path: str, errors: list[MappingError]) -> tuple[Pattern, ...]:
    if not patterns:
        errors.append(MappingError(path, "empty list: give at least one regex"))
    out: list[Pattern] = []
    seen: set[str] = set()
    for i, pattern in enumerate(patterns):
        where = f"{path}[{i}]"
        if not pattern:
            errors.append(MappingError(where, "empty pattern"))
            continue
        if pattern in seen:
            errors.append(MappingError(where, f"duplicate pattern {quoted(pattern)}"))
            continue
        seen.add(pattern)
        try:
            out.append(Pattern(pattern, re.compile(pattern), where))
        except re.error as exc:
            errors.append(
                MappingError(where, f"bad regex {quoted(pattern)}: {exc.msg} at position {exc.pos}")
            )
    return tuple(out)


def _check_overlaps(claimants: Sequence[Claimant], kind: str, errors: list[MappingError]) -> None:
    for i, first in enumerate(claimants):
        for second in claimants[i + 1 :]:
            for one in first.patterns:
                for two in second.patterns:
                    why = _overlap(one, two)
                    if why is not None:
                        problem = (
                            f"{kind} pattern {quoted(two.pattern)} of {second.path} overlaps pattern "
                            f"{quoted(one.pattern)} of {first.path}: {why}"
                        )
                        errors.append(MappingError(two.path, problem))


def _overlap(one: Pattern, two: Pattern) -> str | None:
    """Why a physical name can match both patterns (an example of one the other matches), or None
    when none was found here: ``resolve`` and ``validate_against`` then judge real names."""
    if one.pattern == two.pattern:
        return "identical patterns"
    for lit, other in ((_literal(one.pattern), two), (_literal(two.pattern), one)):
        if lit is not None and other.regex.fullmatch(lit):
            return f"{lit!r} matches both"
    for first, other in ((one, two), (two, one)):
        for name in _examples(first.pattern):
            if other.regex.fullmatch(name):
                return f"{name!r} matches both"
    return None


# Each pattern meets every other one of its level: its literal and examples are worked out once, not once a
# pair (a mapping of 300 tables took 52 s to validate when they were).
@functools.lru_cache(maxsize=8192)
def _literal(pattern: str) -> str | None:
    return literal_of(pattern)


@functools.lru_cache(maxsize=8192)
def _examples(pattern: str) -> tuple[str, ...]:
    return tuple(examples(pattern))


def _check_name(name: str, path: str, what: str, seen: set[str], errors: list[MappingError]) -> None:
    if not _LOGICAL_NAME.fullmatch(name) or len(name) > MAX_NAME_LENGTH:
        problem = f"{what} name {name!r} must be 1-{MAX_NAME_LENGTH} characters of a-z A-Z 0-9 _ -"
        errors.append(MappingError(path, problem))
    if name in seen:
        errors.append(MappingError(path, f"duplicate {what} {name!r}"))
    seen.add(name)


def _check_optional(topic: str | None, codec: str | None, path: str, errors: list[MappingError]) -> None:
    if topic is not None:
        _check_template(topic, f"{path}.topic", errors)
    if codec is not None:
        _check_choice(codec, CODECS, f"{path}.codec", errors)


def _check_template(template: str, path: str, errors: list[MappingError]) -> None:
    problem = template_problem(template)
    if problem is not None:
        errors.append(MappingError(path, problem))


def _check_choice(value: str, choices: Sequence[str], path: str, errors: list[MappingError]) -> None:
    if value not in choices:
        errors.append(MappingError(path, f"{value!r} is not one of {', '.join(choices)}"))


def _check_key_shard(value: str | None, path: str, errors: list[MappingError]) -> None:
    problem = None if value is None else key_shard_problem(value)
    if problem is not None:
        errors.append(MappingError(path, problem))


def _check_key(key: Sequence[str] | None, path: str, errors: list[MappingError]) -> None:
    if key is None:
        return
    if not key:
        errors.append(MappingError(path, "empty list: omit key to use the primary key"))
    seen: set[str] = set()
    for i, column in enumerate(key):
        if not column:
            errors.append(MappingError(f"{path}[{i}]", "empty column name"))
        elif column.lower() in seen:  # MySQL column names are case-insensitive
            errors.append(MappingError(f"{path}[{i}]", f"duplicate key column {column!r}"))
        seen.add(column.lower())
