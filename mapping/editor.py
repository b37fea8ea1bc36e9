"""Mapping edits: add/set/remove logical dbs, logical tables, topics, tags and key columns.

Owns the edit operations the ``relay mapping`` CLI offers. Each one is a pure function from a
``Mapping`` to a new ``Mapping`` (same version number: the store raises it when it saves): it edits the
canonical dict form and parses it back, so the result passes every check a loaded file passes, and a
refused edit raises ``InvalidMappingError`` whose ``errors`` name the offending key paths
(``logical_dbs.shop.tables.orders.topic``). Runs on the CLI's thread; hands the new value to a store.

``UNSET`` means "leave as it is"; ``None`` means "clear it" (inherit / primary key / no tag).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

from mapping.load import parse_mapping
from mapping.model import Mapping
from mapping.names import name_path
from relay.errors import InvalidMappingError, MappingError

__all__ = [
    "UNSET",
    "add_db",
    "add_key",
    "add_table",
    "add_tag",
    "add_topic",
    "remove_db",
    "remove_key",
    "remove_table",
    "remove_tag",
    "remove_topic",
    "set_db",
    "set_key",
    "set_table",
    "set_tag",
    "set_topic",
    "split_target",
]


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Final = _Unset()

Tree = dict[str, Any]
DB_FIELDS = ("physical", "topic", "codec", "unclaimed_tables", "key_shard")
TABLE_FIELDS = ("physical", "topic", "key", "key_shard", "tag", "codec")


def split_target(target: str) -> tuple[str, str | None]:
    """``shop`` → (shop, None); ``shop.orders`` → (shop, orders). Logical names hold no dot."""
    db, dot, table = target.partition(".")
    if not db or (dot and not table):
        raise MappingError(target, "expected <logical_db> or <logical_db>.<logical_table>")
    return db, table or None


# --- logical dbs -----------------------------------------------------------------------------


def add_db(mapping: Mapping, name: str, **fields: Any) -> Mapping:
    """A new logical db (``physical`` defaults to its own name); refused if it exists."""

    def edit(tree: Tree) -> None:
        dbs = tree.setdefault("logical_dbs", {})
        if name in dbs:
            raise MappingError(name_path("logical_dbs", name), "logical db already exists (use `db set`)")
        dbs[name] = {}
        _assign(dbs[name], fields, DB_FIELDS)

    return _edit(mapping, edit)


def set_db(mapping: Mapping, name: str, **fields: Any) -> Mapping:
    return _edit(mapping, lambda tree: _assign(_db(tree, name), fields, DB_FIELDS))


def remove_db(mapping: Mapping, name: str) -> Mapping:
    return _edit(mapping, lambda tree: _db(tree, name) and tree["logical_dbs"].pop(name))


# --- logical tables --------------------------------------------------------------------------


def add_table(mapping: Mapping, db: str, table: str, **fields: Any) -> Mapping:
    """A new logical table of ``db`` (``physical`` defaults to its own name); refused if it exists."""

    def edit(tree: Tree) -> None:
        tables = _db(tree, db).setdefault("tables", {})
        if table in tables:
            path = name_path(f"{name_path('logical_dbs', db)}.tables", table)
            raise MappingError(path, "logical table already exists (use `table set`)")
        tables[table] = {}
        _assign(tables[table], fields, TABLE_FIELDS)

    return _edit(mapping, edit)


def set_table(mapping: Mapping, db: str, table: str, **fields: Any) -> Mapping:
    return _edit(mapping, lambda tree: _assign(_table(tree, db, table), fields, TABLE_FIELDS))


def remove_table(mapping: Mapping, db: str, table: str) -> Mapping:
    def edit(tree: Tree) -> None:
        _table(tree, db, table)
        tables = tree["logical_dbs"][db]["tables"]
        del tables[table]
        if not tables:
            del tree["logical_dbs"][db]["tables"]

    return _edit(mapping, edit)


# --- topics, tags, key columns ---------------------------------------------------------------


def add_topic(mapping: Mapping, target: str, topic: str) -> Mapping:
    """Give a logical db or table its own topic; refused if it already has one (use ``set_topic``)."""
    return _field(mapping, target, "topic", lambda old: _must_be_unset(old, "a topic", topic))


def set_topic(mapping: Mapping, target: str, topic: str) -> Mapping:
    return _field(mapping, target, "topic", lambda old: topic)


def remove_topic(mapping: Mapping, target: str) -> Mapping:
    """Back to the inherited topic (the db's, or ``defaults.topic``)."""
    return _field(mapping, target, "topic", lambda old: _must_be_set(old, "no own topic"))


def add_tag(mapping: Mapping, target: str, tag: str) -> Mapping:
    return _field(mapping, _table_only(target), "tag", lambda old: _must_be_unset(old, "a tag", tag))


def set_tag(mapping: Mapping, target: str, tag: str) -> Mapping:
    return _field(mapping, _table_only(target), "tag", lambda old: tag)


def remove_tag(mapping: Mapping, target: str) -> Mapping:
    return _field(mapping, _table_only(target), "tag", lambda old: _must_be_set(old, "no tag"))


def add_key(mapping: Mapping, target: str, columns: Sequence[str]) -> Mapping:
    """Append key columns (a table keyed by its primary key gets exactly these)."""

    def new(old: Any) -> Any:
        have = list(old or [])
        twice = [c for c in columns if c.lower() in {h.lower() for h in have}]
        if twice:
            raise ValueError(f"already key columns: {', '.join(twice)}")
        return have + list(columns)

    return _field(mapping, _table_only(target), "key", new)


def set_key(mapping: Mapping, target: str, columns: Sequence[str]) -> Mapping:
    return _field(mapping, _table_only(target), "key", lambda old: list(columns))


def remove_key(mapping: Mapping, target: str, columns: Sequence[str] = ()) -> Mapping:
    """Remove some key columns, or all of them (back to the primary key) when none are named."""

    def new(old: Any) -> Any:
        _must_be_set(old, "no key columns (it is keyed by its primary key)")
        if not columns:
            return None
        lower = {c.lower() for c in columns}
        missing = [c for c in columns if c.lower() not in {o.lower() for o in old}]
        if missing:
            raise ValueError(f"not key columns: {', '.join(missing)} (key: {', '.join(old)})")
        left = [c for c in old if c.lower() not in lower]
        return left or None

    return _field(mapping, _table_only(target), "key", new)


# --- internals -------------------------------------------------------------------------------


def _edit(mapping: Mapping, edit: Callable[[Tree], Any]) -> Mapping:
    tree = mapping.to_dict()
    edit(tree)
    return parse_mapping(tree, source="the edited mapping")


def _field(mapping: Mapping, target: str, key: str, new: Callable[[Any], Any]) -> Mapping:
    db, table = split_target(target)

    def edit(tree: Tree) -> None:
        node = _db(tree, db) if table is None else _table(tree, db, table)
        where = name_path("logical_dbs", db) if table is None else _table_key(db, table)
        try:
            value = new(node.get(key))
        except ValueError as exc:
            raise MappingError(f"{where}.{key}", str(exc)) from None
        if value is None:
            node.pop(key, None)
        else:
            node[key] = value

    return _edit(mapping, edit)


def _assign(node: Tree, fields: dict[str, Any], allowed: Sequence[str]) -> None:
    for key, value in fields.items():
        if key not in allowed:
            raise MappingError(key, f"unknown field (allowed: {', '.join(allowed)})")
        if value is UNSET:
            continue
        if value is None:
            node.pop(key, None)
        else:
            node[key] = list(value) if isinstance(value, tuple) else value


def _db(tree: Tree, name: str) -> Tree:
    dbs = tree.get("logical_dbs") or {}
    if name not in dbs:
        known = ", ".join(dbs) or "none"
        raise MappingError(name_path("logical_dbs", name), f"no such logical db (known: {known})")
    node: Tree = dbs[name]
    return node


def _table(tree: Tree, db: str, table: str) -> Tree:
    tables = _db(tree, db).get("tables") or {}
    if table not in tables:
        known = ", ".join(tables) or "none"
        raise MappingError(_table_key(db, table), f"no such logical table (tables of {db}: {known})")
    node: Tree = tables[table]
    return node


def _table_key(db: str, table: str) -> str:
    return name_path(f"{name_path('logical_dbs', db)}.tables", table)


def _table_only(target: str) -> str:
    if split_target(target)[1] is None:
        raise MappingError(target, "tags and key columns belong to a logical table: write <db>.<table>")
    return target


def _must_be_unset(old: Any, what: str, value: Any) -> Any:
    if old is not None:
        raise ValueError(f"already has {what} ({old!r}); use `set` to replace it")
    return value


def _must_be_set(old: Any, problem: str) -> Any:
    if old is None:
        raise ValueError(f"has {problem}; nothing to remove")
    return None


def refusal(exc: MappingError) -> InvalidMappingError:
    """Any edit error as the one type the CLI reports (a list of key paths and problems)."""
    return exc if isinstance(exc, InvalidMappingError) else InvalidMappingError("edit", [exc])
