"""The mapping's YAML format: parse (reporting every problem at once), load, dump, save.

Owns the file format documented in ``conf/mapping.yaml`` and the translation of YAML and file-system
errors into ``MappingError`` (syntax errors carry ``file:line:column``). Runs on whichever thread
loads a mapping (CLI, relay startup, a reload watcher); hands on a ``mapping.model.Mapping``, which is
valid by construction. ``dump_mapping`` writes the canonical form: ``parse_mapping(dump_mapping(m)) == m``.
Comments are not kept by a dump; ``mapping.document`` keeps them when a store writes an edit.

Parsing never stops at the first problem: unknown keys (with a "did you mean"), wrong types, bad
regexes, overlaps, unknown logical dbs in the flat ``tables`` section… are all collected and raised
together as one ``InvalidMappingError`` whose ``errors`` name each YAML key path.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from mapping.model import (
    ColumnControls,
    DebeziumSettings,
    Defaults,
    LogicalDb,
    LogicalTable,
    Mapping,
    TopicSettings,
    UnmappedRule,
)
from mapping.names import name_path
from relay.common.atomic import atomic_write_text
from relay.common.strict_yaml import load_strict
from relay.errors import InvalidMappingError, MappingError

TOP_KEYS = ("version", "defaults", "topics", "debezium", "unmapped", "logical_dbs", "tables")
DEBEZIUM_KEYS = ("schemas_enable", "decimal_handling_mode", "tombstones_on_delete", "schema_change_topic")
DEFAULTS_KEYS = ("codec", "topic", "unclaimed_tables", "key_shard")
TOPICS_KEYS = ("partitions", "replication_factor", "retention_ms", "create", "config")
UNMAPPED_KEYS = ("action", "topic")
DB_KEYS = ("physical", "topic", "codec", "unclaimed_tables", "key_shard", "columns", "tables")
TABLE_KEYS = ("physical", "topic", "key", "key_shard", "tag", "codec", "columns")
COLUMNS_KEYS = ("exclude", "include", "hash", "mask", "truncate", "salt_env")

Section = dict[str, Any]

# An empty text is refused rather than read as "every table under its physical names": it is what a
# truncated write, a wrong path or an unfinished copy leaves, and a relay that hot-reloaded it would
# start publishing every table of the server to topics nobody asked for.
_EMPTY = (
    "the mapping is empty (no keys): an empty or truncated file is refused. A mapping with no logical "
    "dbs must say what happens to every table, e.g. unmapped: {action: topic, topic: '{db}'}"
)


def load_mapping(path: str | os.PathLike[str], setting: str = "the mapping file") -> Mapping:
    """Read and validate a mapping file; raises ``MappingError`` (``InvalidMappingError`` when invalid).
    ``setting``: the key or flag that named the file (``mapping.file``, ``--file``), for the message."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        why = (exc.strerror or str(exc)).lower()
        raise MappingError(os.fspath(path), f"cannot read the mapping file ({setting}): {why}") from exc
    except UnicodeDecodeError as exc:
        raise MappingError(os.fspath(path), f"the mapping file ({setting}) is not UTF-8 text: {exc}") from exc
    return parse_mapping(text, source=os.fspath(path))


def parse_mapping(data: str | dict[str, Any], source: str = "<string>") -> Mapping:
    """A mapping from YAML text or an already-parsed dict; raises ``InvalidMappingError`` listing
    every problem, each ``MappingError`` naming its key path (or ``source:line:column`` for syntax)."""
    reader = _Reader()
    tree = _parse_yaml(data, source, reader) if isinstance(data, str) else data
    if isinstance(data, str) and not tree:
        raise InvalidMappingError(source, [*reader.errors, MappingError("(top level)", _EMPTY)])
    top = reader.section(tree, "", TOP_KEYS)
    if top is None:
        raise InvalidMappingError(source, reader.errors)
    fields: dict[str, Any] = {}
    version = reader.integer(top, "version", "version")
    if version is not None:
        fields["version"] = version
    fields["defaults"] = _defaults(reader, top)
    fields["topics"] = _topics(reader, top)
    fields["debezium"] = _debezium(reader, top)
    fields["unmapped"] = _unmapped(reader, top)
    fields["logical_dbs"] = _logical_dbs(reader, top)
    if isinstance(data, str):
        fields["text"] = data
    try:
        mapping = Mapping(**fields)
    except InvalidMappingError as exc:
        raise InvalidMappingError(source, [*reader.errors, *exc.errors], version=version) from None
    if reader.errors:
        raise InvalidMappingError(source, reader.errors, version=version)
    return mapping


def dump_mapping(mapping: Mapping) -> str:
    """The canonical YAML text of ``mapping`` (nested form, every global setting spelled out)."""
    return yaml.safe_dump(mapping.to_dict(), sort_keys=False, allow_unicode=True, default_flow_style=False)


def save_mapping(mapping: Mapping, path: str | os.PathLike[str]) -> None:
    """Write ``mapping`` atomically: a reader sees the old file or the new one, never a torn write."""
    target = Path(path)
    text = dump_mapping(mapping)
    try:
        atomic_write_text(target, text)
    except OSError as exc:
        raise MappingError(os.fspath(path), f"cannot write the mapping file: {exc}") from exc


# --- YAML ------------------------------------------------------------------------------------


def _parse_yaml(text: str, source: str, reader: _Reader) -> Any:
    """The YAML tree; a key written twice is one of the reader's problems (``relay.common.strict_yaml``)."""
    try:
        data, duplicates = load_strict(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark is not None else source
        problem = " ".join(p for p in (exc.context, exc.problem) if p)
        raise InvalidMappingError(source, [MappingError(where, f"YAML error: {problem}")]) from None
    except yaml.YAMLError as exc:
        raise InvalidMappingError(source, [MappingError(source, f"YAML error: {exc}")]) from None
    for dup in duplicates:
        reader.fail(f"{source}:{dup.line}:{dup.column}", f"YAML error: {dup.problem()}")
    return data


# --- sections --------------------------------------------------------------------------------


def _defaults(reader: _Reader, top: Section) -> Defaults:
    sec = reader.section(top.get("defaults"), "defaults", DEFAULTS_KEYS) or {}
    base = Defaults()
    return Defaults(
        codec=reader.string(sec, "codec", "defaults.codec") or base.codec,
        topic=reader.string(sec, "topic", "defaults.topic") or base.topic,
        unclaimed_tables=reader.string(sec, "unclaimed_tables", "defaults.unclaimed_tables")
        or base.unclaimed_tables,
        key_shard=reader.string(sec, "key_shard", "defaults.key_shard") or base.key_shard,
    )


def _topics(reader: _Reader, top: Section) -> TopicSettings:
    sec = reader.section(top.get("topics"), "topics", TOPICS_KEYS) or {}
    base = TopicSettings()
    partitions = reader.integer(sec, "partitions", "topics.partitions")
    factor = reader.integer(sec, "replication_factor", "topics.replication_factor")
    create = reader.boolean(sec, "create", "topics.create")
    return TopicSettings(
        partitions=base.partitions if partitions is None else partitions,
        replication_factor=base.replication_factor if factor is None else factor,
        retention_ms=reader.integer(sec, "retention_ms", "topics.retention_ms"),
        create=base.create if create is None else create,
        config=tuple(_topic_config(reader, sec.get("config")).items()),
    )


def _debezium(reader: _Reader, top: Section) -> DebeziumSettings:
    sec = reader.section(top.get("debezium"), "debezium", DEBEZIUM_KEYS) or {}
    base = DebeziumSettings()
    schemas = reader.boolean(sec, "schemas_enable", "debezium.schemas_enable")
    tombstones = reader.boolean(sec, "tombstones_on_delete", "debezium.tombstones_on_delete")
    topic = reader.string(sec, "schema_change_topic", "debezium.schema_change_topic")
    return DebeziumSettings(
        schemas_enable=base.schemas_enable if schemas is None else schemas,
        decimal_handling_mode=reader.string(sec, "decimal_handling_mode", "debezium.decimal_handling_mode")
        or base.decimal_handling_mode,
        tombstones_on_delete=base.tombstones_on_delete if tombstones is None else tombstones,
        schema_change_topic=base.schema_change_topic if topic is None else topic,
    )


def _topic_config(reader: _Reader, node: Any) -> dict[str, str]:
    sec = reader.section(node, "topics.config", None) or {}
    out: dict[str, str] = {}
    for name, value in sec.items():
        if isinstance(value, bool):
            out[name] = "true" if value else "false"
        elif isinstance(value, str | int | float):
            out[name] = str(value)
        else:
            reader.fail(f"topics.config.{name}", f"expected a text or number value, got {_kind(value)}")
    return out


def _unmapped(reader: _Reader, top: Section) -> UnmappedRule:
    sec = reader.section(top.get("unmapped"), "unmapped", UNMAPPED_KEYS) or {}
    action = reader.string(sec, "action", "unmapped.action") or "topic"
    topic = reader.string(sec, "topic", "unmapped.topic")
    if topic is None and action == "topic":
        topic = UnmappedRule().topic
    return UnmappedRule(action=action, topic=topic)


def _logical_dbs(reader: _Reader, top: Section) -> tuple[LogicalDb, ...]:
    sec = reader.section(top.get("logical_dbs"), "logical_dbs", None) or {}
    dbs: dict[str, tuple[dict[str, Any], list[LogicalTable]]] = {}
    for name, node in sec.items():
        path = name_path("logical_dbs", name)
        db = reader.section(node, path, DB_KEYS)
        tables: list[LogicalTable] = []
        if db is not None:
            for tname, tnode in (reader.section(db.get("tables"), f"{path}.tables", None) or {}).items():
                table = _table(reader, tname, tnode, name_path(f"{path}.tables", tname))
                if table is not None:
                    tables.append(table)
        dbs[name] = (db or {}, tables)  # a broken db still counts as known for the flat section
    _flat_tables(reader, top, dbs)
    out: list[LogicalDb] = []
    for name, (db, tables) in dbs.items():
        path = name_path("logical_dbs", name)
        physical = reader.strings(db, "physical", f"{path}.physical")
        out.append(
            LogicalDb(
                name=name,
                physical=(re.escape(name),) if physical is None else physical,
                topic=reader.string(db, "topic", f"{path}.topic"),
                codec=reader.string(db, "codec", f"{path}.codec"),
                unclaimed_tables=reader.string(db, "unclaimed_tables", f"{path}.unclaimed_tables"),
                tables=tuple(tables),
                key_shard=reader.string(db, "key_shard", f"{path}.key_shard"),
                columns=_columns(reader, db, f"{path}.columns"),
            )
        )
    return tuple(out)


def _flat_tables(
    reader: _Reader, top: Section, dbs: dict[str, tuple[dict[str, Any], list[LogicalTable]]]
) -> None:
    """The flat section ``tables: {"<logical_db>.<logical_table>": {...}}``, merged into its db."""
    for key, node in (reader.section(top.get("tables"), "tables", None) or {}).items():
        path = name_path("tables", key)
        db_name, _, table_name = key.partition(".")
        if not db_name or not table_name:
            reader.fail(path, "expected a key of the form '<logical_db>.<logical_table>'")
            continue
        if db_name not in dbs:
            hint = _did_you_mean(db_name, list(dbs))
            known = ", ".join(dbs) or "none"
            reader.fail(path, f"unknown logical db {db_name!r} (known: {known}){hint}")
            continue
        tables = dbs[db_name][1]
        if any(t.name == table_name for t in tables):
            where = name_path(f"{name_path('logical_dbs', db_name)}.tables", table_name)
            reader.fail(path, f"logical table {db_name}.{table_name} is also defined at {where}")
            continue
        table = _table(reader, table_name, node, path)
        if table is not None:
            tables.append(table)


def _table(reader: _Reader, name: str, node: Any, path: str) -> LogicalTable | None:
    sec = reader.section(node, path, TABLE_KEYS)
    if sec is None:
        return None
    physical = reader.strings(sec, "physical", f"{path}.physical")
    return LogicalTable(
        name=name,
        physical=(re.escape(name),) if physical is None else physical,
        topic=reader.string(sec, "topic", f"{path}.topic"),
        key=reader.strings(sec, "key", f"{path}.key"),
        tag=reader.string(sec, "tag", f"{path}.tag"),
        codec=reader.string(sec, "codec", f"{path}.codec"),
        origin=path if path.startswith("tables") else None,
        key_shard=reader.string(sec, "key_shard", f"{path}.key_shard"),
        columns=_columns(reader, sec, f"{path}.columns"),
    )


def _columns(reader: _Reader, parent: Section, path: str) -> ColumnControls | None:
    """A ``columns`` section (column controls, ``mapping.columns``); None when absent."""
    if parent.get("columns") is None:
        return None
    sec = reader.section(parent["columns"], path, COLUMNS_KEYS) or {}
    return ColumnControls(
        exclude=reader.strings(sec, "exclude", f"{path}.exclude") or (),
        include=reader.strings(sec, "include", f"{path}.include"),
        hash=tuple(_pairs(reader, sec, "hash", path, str).items()),
        mask=tuple(_pairs(reader, sec, "mask", path, int).items()),
        truncate=tuple(_pairs(reader, sec, "truncate", path, int).items()),
        salt_env=reader.string(sec, "salt_env", f"{path}.salt_env"),
    )


def _pairs(reader: _Reader, sec: Section, key: str, path: str, kind: type) -> dict[str, Any]:
    """``{column: value}`` of one control, each value of ``kind`` (text, or an integer)."""
    out: dict[str, Any] = {}
    for column, value in (reader.section(sec.get(key), f"{path}.{key}", None) or {}).items():
        if isinstance(value, kind) and not isinstance(value, bool):
            out[column] = value
        else:
            wanted = "an integer N" if kind is int else "an algorithm name"
            reader.fail(f"{path}.{key}.{column}", f"expected {wanted}, got {_kind(value)} {value!r}")
    return out


# --- typed access with collected errors ------------------------------------------------------


class _Reader:
    """Reads typed values out of the parsed YAML, recording a ``MappingError`` for each misfit and
    answering None for it, so parsing goes on and every problem is reported together."""

    def __init__(self) -> None:
        self.errors: list[MappingError] = []

    def fail(self, path: str, problem: str) -> None:
        self.errors.append(MappingError(path or "(top level)", problem))

    def section(self, node: Any, path: str, allowed: Sequence[str] | None) -> Section | None:
        """A YAML mapping with string keys (``allowed`` ones only, when given); null = empty."""
        if node is None:
            return {}
        if not isinstance(node, dict):
            self.fail(path, f"expected a mapping of keys, got {_kind(node)}")
            return None
        out: Section = {}
        for key, value in node.items():
            if not isinstance(key, str):
                self.fail(name_path(path, str(key)), f"key {key!r} must be text, not {_kind(key)}")
            elif allowed is not None and key not in allowed:
                hint = _did_you_mean(key, allowed)
                self.fail(name_path(path, key), f"unknown key{hint} (allowed: {', '.join(allowed)})")
            else:
                out[key] = value
        return out

    def string(self, sec: Section, key: str, path: str) -> str | None:
        value = sec.get(key)
        if value is None or isinstance(value, str):
            return value
        self.fail(path, f"expected text, got {_kind(value)} {value!r}")
        return None

    def integer(self, sec: Section, key: str, path: str) -> int | None:
        value = sec.get(key)
        if value is None or (isinstance(value, int) and not isinstance(value, bool)):
            return value
        self.fail(path, f"expected an integer, got {_kind(value)} {value!r}")
        return None

    def boolean(self, sec: Section, key: str, path: str) -> bool | None:
        value = sec.get(key)
        if value is None or isinstance(value, bool):
            return value
        self.fail(path, f"expected true or false, got {_kind(value)} {value!r}")
        return None

    def strings(self, sec: Section, key: str, path: str) -> tuple[str, ...] | None:
        value = sec.get(key)
        if value is None:
            return None
        if not isinstance(value, list):
            self.fail(path, f"expected a list of text, got {_kind(value)} {value!r}")
            return None
        bad = [i for i, item in enumerate(value) if not isinstance(item, str)]
        for i in bad:
            self.fail(f"{path}[{i}]", f"expected text, got {_kind(value[i])} {value[i]!r}")
        return None if bad else tuple(value)


def _did_you_mean(word: str, choices: Sequence[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {dict: "a mapping", list: "a list", str: "text", bool: "a boolean"}.get(
        type(value), type(value).__name__
    )
