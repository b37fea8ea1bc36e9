"""Column controls against a live source: ``relay mapping validate`` (and edits) check the names a
mapping's ``columns`` sections write against the real tables' columns.

Owns the query of the source's columns (``information_schema.columns``) and the problems found with
them (``mapping.columns.check_columns`` per published table; a db-level name no table of its db has).
Runs on the CLI's main thread.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from mapping.columns import ColumnInfo, check_columns, unused_db_names
from mapping.key_shard import shard_column
from mapping.model import Mapping, Route
from mapping.names import name_path
from relay.errors import MappingError

LiveColumns = dict[tuple[str, str], list[ColumnInfo]]


def live_columns(cur: Any, system_schemas: Sequence[str]) -> LiveColumns:
    """Every column of the server's tables outside ``system_schemas``, per (db, table), in table order."""
    marks = ", ".join(["%s"] * len(system_schemas))
    cur.execute(
        "SELECT table_schema, table_name, column_name, column_key, column_type "
        "FROM information_schema.columns "
        f"WHERE table_schema NOT IN ({marks}) ORDER BY table_schema, table_name, ordinal_position",
        tuple(system_schemas),
    )
    out: LiveColumns = {}
    for db, table, column, key, kind in cur.fetchall():
        info = ColumnInfo(_text(column), _text(key) == "PRI", _text(kind))
        out.setdefault((_text(db), _text(table)), []).append(info)
    return out


def column_problems(mapping: Mapping, routes: Iterable[Route], columns: LiveColumns) -> list[MappingError]:
    """The problems of the mapping's column controls on the real tables it publishes."""
    errors: list[MappingError] = []
    seen: set[str] = set()
    by_db: dict[str, list[list[ColumnInfo]]] = {}
    for route in routes:
        found = columns.get((route.physical_db, route.physical_table))
        if route.columns is None or found is None or not route.mapped:
            continue
        by_db.setdefault(route.logical_db, []).append(found)
        where = f"{route.physical_db}.{route.physical_table}"
        for error in check_columns(
            route.columns, where, found, route.key_columns, shard_column(route.key_shard)
        ):
            if str(error) not in seen:
                seen.add(str(error))
                errors.append(error)
    for db in mapping.logical_dbs:
        if db.columns is not None and db.name in by_db:
            errors.extend(
                unused_db_names(db.columns, f"{name_path('logical_dbs', db.name)}.columns", by_db[db.name])
            )
    return errors


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
