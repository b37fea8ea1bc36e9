"""Static checks of a mapping value: names, regexes, overlaps, templates, codecs, topic settings.

Owns the walk that makes a ``mapping.model.Mapping`` valid by construction (``check_mapping``) and the
settings' choices (codecs, ``unclaimed_tables``, ``unmapped.action``). Pure functions, called by
``Mapping.__post_init__`` on whatever thread builds a mapping; they hand back the list of problems (never
stopping at the first) and the compiled pattern index ``resolve`` uses.

The rules it applies live in rooms of their own: ``mapping.names`` (YAML key paths, Kafka's topic-name
rules, the topic-template language), ``mapping.patterns`` (regexes and their overlaps),
``mapping.key_shard`` (the shard identity in keys) and ``mapping.topic_codecs`` (one codec per topic).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from mapping.columns import check_controls, check_keys, check_salt, merge
from mapping.key_shard import key_shard_problem, shard_column
from mapping.names import (
    LOGICAL_NAME,
    db_topic_path,
    expand_topic,
    has_physical_placeholder,
    name_path,
    table_path,
    template_problem,
    topic_problem,
)
from mapping.parts import DebeziumSettings, LogicalDb, LogicalTable, MappingFields
from mapping.patterns import Claimant, check_overlaps, compile_patterns
from mapping.topic_codecs import codec_conflicts, static_topics
from relay.errors import MappingError

CODECS = ("canal-json", "canal-protobuf", "debezium-json")
DECIMAL_HANDLING_MODES = ("precise", "string", "double")  # Debezium's decimal.handling.mode
UNCLAIMED_CHOICES = ("own_name", "unmapped", "drop")
UNMAPPED_ACTIONS = ("topic", "drop")
MAX_NAME_LENGTH = 64  # MySQL's identifier limit; logical names follow it


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
        _check_db_columns(mapping, db, f"{path}.columns", errors)
        tables = _check_tables(mapping, db, errors)
        index.append(Claimant(db, path, patterns, tables))
    check_overlaps(index, "db", errors)
    for claimant in index:
        check_overlaps(claimant.tables, "table", errors)
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
    _check_debezium(mapping.debezium, errors)


def _check_debezium(settings: DebeziumSettings, errors: list[MappingError]) -> None:
    """The debezium-json codec's settings: a known decimal mode, a schema change topic template whose only
    placeholder is ``{source_id}`` ("" for none)."""
    path = "debezium.decimal_handling_mode"
    _check_choice(settings.decimal_handling_mode, DECIMAL_HANDLING_MODES, path, errors)
    template = settings.schema_change_topic
    if template:
        unknown = [f for f in re.findall(r"\{([^{}]*)\}", template) if f != "source_id"]
        problem = (
            f"unknown placeholder {{{unknown[0]}}} (only {{source_id}})"
            if unknown
            else topic_problem(template.replace("{source_id}", "source"))
        )
        if problem is not None:
            errors.append(MappingError("debezium.schema_change_topic", problem))


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
        _check_table_columns(mapping, db, table, path, errors)
        out.append(Claimant(table, path, patterns))
    return tuple(out)


def _check_db_columns(mapping: MappingFields, db: LogicalDb, path: str, errors: list[MappingError]) -> None:
    """A db's column controls: on their own, a hash's salt, the db's ``key_shard`` column."""
    check_controls(db.columns, path, errors)
    merged = merge(db.columns, path, None, "")
    check_salt(merged, path, errors)
    errors.extend(check_keys(merged, None, shard_column(db.key_shard or mapping.defaults.key_shard)))


def _check_table_columns(
    mapping: MappingFields, db: LogicalDb, table: LogicalTable, path: str, errors: list[MappingError]
) -> None:
    """A table's column controls: on their own, merged with its db's against the key it writes."""
    if table.columns is None and db.columns is None:
        return
    check_controls(table.columns, f"{path}.columns", errors)
    merged = merge(
        db.columns, name_path("logical_dbs", db.name) + ".columns", table.columns, f"{path}.columns"
    )
    if table.columns is not None:
        check_salt(merged, f"{path}.columns", errors)
    shard = shard_column(table.key_shard or db.key_shard or mapping.defaults.key_shard)
    known = {str(e) for e in errors}
    errors.extend(e for e in check_keys(merged, table.key, shard) if str(e) not in known)


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


def _check_name(name: str, path: str, what: str, seen: set[str], errors: list[MappingError]) -> None:
    if not LOGICAL_NAME.fullmatch(name) or len(name) > MAX_NAME_LENGTH:
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
