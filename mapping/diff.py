"""What changes between two mappings: the YAML text, the logical rules, and the physical tables that move.

Owns the comparisons ``relay mapping diff``, ``--dry-run``, ``history`` and the reload log show.
Pure functions over ``Mapping`` values, run on the caller's thread; they hand back text lines and
``Move`` values (a physical table whose topic, logical names, key, tag or codec change).
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable
from dataclasses import dataclass

from mapping.load import dump_mapping
from mapping.model import ColumnControls, LogicalDb, LogicalTable, Mapping, Route, columns_dict
from relay.errors import MappingError

__all__ = ["Move", "codec_moves", "logical_changes", "moves", "summary", "text_diff"]


@dataclass(frozen=True)
class Move:
    """One physical table whose route changes. ``None`` route: dropped (or in error: ``error``)."""

    db: str
    table: str
    old: Route | None
    new: Route | None
    error: str | None = None

    def describe(self) -> str:
        name = f"{self.db}.{self.table}"
        if self.error is not None:
            return f"{name}: ERROR {self.error}"
        return f"{name}: {_route_text(self.old)} -> {_route_text(self.new)}"


def text_diff(old: Mapping, new: Mapping, old_label: str = "old", new_label: str = "new") -> str:
    """A unified diff of the two canonical YAML texts ("" when equal)."""
    a = dump_mapping(old).splitlines(keepends=True)
    b = dump_mapping(new).splitlines(keepends=True)
    return "".join(difflib.unified_diff(a, b, old_label, new_label))


def logical_changes(old: Mapping, new: Mapping) -> list[str]:
    """One line per logical db/table (or global setting) added, removed or changed."""
    lines: list[str] = []
    for section in ("defaults", "unmapped", "topics", "debezium"):
        if getattr(old, section) != getattr(new, section):
            lines.append(f"~ {section}: {getattr(old, section)} -> {getattr(new, section)}")
    olds = {d.name: d for d in old.logical_dbs}
    news = {d.name: d for d in new.logical_dbs}
    for name in sorted(olds.keys() | news.keys()):
        a, b = olds.get(name), news.get(name)
        if a is None:
            assert b is not None
            lines.append(f"+ logical db {name}: physical {list(b.physical)}, topic {_db_topic(new, b)}")
        elif b is None:
            lines.append(f"- logical db {name}")
        else:
            lines.extend(_db_changes(old, new, a, b))
    return lines


def moves(old: Mapping, new: Mapping, tables: Iterable[tuple[str, str]]) -> list[Move]:
    """The physical tables (from a live server's list) whose route differs between the two mappings."""
    out: list[Move] = []
    for db, table in tables:
        try:
            a = old.resolve(db, table)
        except MappingError:
            a = None
        try:
            b = new.resolve(db, table)
        except MappingError as exc:
            out.append(Move(db, table, a, None, str(exc)))
            continue
        if _essence(a) != _essence(b):
            out.append(Move(db, table, a, b))
    return out


def codec_moves(old: Mapping, new: Mapping) -> list[str]:
    """The logical tables (and dbs, for their other tables) whose topic and codec both change: a relay
    that copies a moved table's history (``mapping.move: copy``) refuses such a version, its history
    being in the old codec. Decided on the logical rules, before any physical table is known."""
    out: list[str] = []
    olds = {d.name: d for d in old.logical_dbs}
    for b in new.logical_dbs:
        a = olds.get(b.name)
        if a is None:
            continue
        if _db_topic(old, a) != _db_topic(new, b) and _db_codec(old, a) != _db_codec(new, b):
            out.append(f"logical db {b.name} (the tables it routes without a rule of their own)")
        tables = {t.name: t for t in a.tables}
        for tb in b.tables:
            ta = tables.get(tb.name)
            if ta is None:
                continue
            moved = _table_topic(old, a, ta) != _table_topic(new, b, tb)
            if moved and (ta.codec or _db_codec(old, a)) != (tb.codec or _db_codec(new, b)):
                out.append(f"logical table {b.name}.{tb.name}")
    return out


def summary(old: Mapping | None, new: Mapping) -> str:
    """A short description of what a version changed (for ``history``)."""
    if old is None:
        return "first stored version"
    changes = logical_changes(old, new)
    if not changes:
        return "no change"
    text = "; ".join(line.split(":", 1)[0] for line in changes)
    return text if len(text) <= 100 else text[:97] + "..."


# --- internals -------------------------------------------------------------------------------


def _essence(route: Route | None) -> tuple[object, ...] | None:
    if route is None:
        return None
    return (
        route.topic,
        route.logical_db,
        route.logical_table,
        route.key_columns,
        route.key_shard,
        route.tag,
        route.codec,
    )


def _route_text(route: Route | None) -> str:
    if route is None:
        return "(dropped)"
    extra = []
    if route.key_columns is not None:
        extra.append(f"key {','.join(route.key_columns)}")
    if route.key_shard != "none":
        extra.append(f"key_shard {route.key_shard}")
    if route.tag is not None:
        extra.append(f"tag {route.tag}")
    more = f" [{'; '.join(extra)}]" if extra else ""
    return f"topic {route.topic} as {route.logical_db}.{route.logical_table}{more}"


def _db_topic(mapping: Mapping, db: LogicalDb) -> str:
    return db.topic or mapping.defaults.topic


def _db_codec(mapping: Mapping, db: LogicalDb) -> str:
    return db.codec or mapping.defaults.codec


def _table_topic(mapping: Mapping, db: LogicalDb, table: LogicalTable) -> str:
    return table.topic or _db_topic(mapping, db)


def _db_changes(old: Mapping, new: Mapping, a: LogicalDb, b: LogicalDb) -> list[str]:
    lines: list[str] = []
    for key in ("physical", "topic", "codec", "unclaimed_tables", "key_shard"):
        x, y = getattr(a, key), getattr(b, key)
        if x != y:
            lines.append(f"~ logical db {a.name} {key}: {_show(x)} -> {_show(y)}")
    if a.columns != b.columns:
        lines.append(f"~ logical db {a.name} columns: {_controls(a.columns)} -> {_controls(b.columns)}")
    atables = {t.name: t for t in a.tables}
    btables = {t.name: t for t in b.tables}
    for name in sorted(atables.keys() | btables.keys()):
        ta, tb = atables.get(name), btables.get(name)
        full = f"{a.name}.{name}"
        if ta is None:
            assert tb is not None
            lines.append(
                f"+ logical table {full}: physical {list(tb.physical)}, topic {_table_topic(new, b, tb)}"
            )
        elif tb is None:
            lines.append(f"- logical table {full} (its tables follow {a.name}'s unclaimed_tables rule)")
        else:
            for key in ("physical", "topic", "key", "key_shard", "tag", "codec"):
                x, y = getattr(ta, key), getattr(tb, key)
                if x != y:
                    lines.append(f"~ logical table {full} {key}: {_show(x)} -> {_show(y)}")
            if ta.columns != tb.columns:
                was, now = _controls(ta.columns), _controls(tb.columns)
                lines.append(f"~ logical table {full} columns: {was} -> {now}")
            ea, eb = _table_topic(old, a, ta), _table_topic(new, b, tb)
            if ea != eb and ta.topic == tb.topic:
                lines.append(f"~ logical table {full} topic (inherited): {ea} -> {eb}")
    return lines


def _controls(controls: ColumnControls | None) -> str:
    return "(none)" if controls is None else json.dumps(columns_dict(controls), sort_keys=True)


def _show(value: object) -> str:
    if value is None:
        return "(inherited/default)"
    if isinstance(value, tuple):
        return str(list(value))
    return str(value)
