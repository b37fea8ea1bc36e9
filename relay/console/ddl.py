"""The DDL audit: every DDL the relay saw, per logical table, from its schema history.

Owns reading the history (``relay.wiring.open_schema_history``, the store ``relay schema show`` reads:
the file, ZooKeeper node or compacted topic beside the positions) into rows: per DDL record and each
physical table it created, changed or dropped — the logical table the current mapping routes that table
to, the binlog time of the DDL, its place (the end of its QUERY event), the statement, and the schema
version it produced (the table's definitions numbered in the history's order: its first snapshot is
version 1), with the columns of that version, or why it could not be applied. Runs on request threads.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from mapping.model import Mapping
from relay.config.load import RelayConfig
from relay.errors import MappingError
from relay.schema.history import place_key
from relay.wiring import open_schema_history

__all__ = ["DdlRow", "ddl_audit"]


@dataclass(frozen=True)
class DdlRow:
    logical: str
    physical: str
    when: str
    at: str
    statement: str
    version: int
    definition: str
    broken: str
    server: str


def ddl_audit(config: RelayConfig, mapping: Mapping) -> tuple[list[DdlRow], str]:
    """Every DDL row, newest first, and where the history was read."""
    rows: list[DdlRow] = []
    with open_schema_history(config) as history:
        where = history.describe()
        order = sorted(enumerate(history.records), key=lambda p: (p[1].server, place_key(p[1].at), p[0]))
        versions: dict[tuple[str, str, str], int] = {}
        for _, record in order:
            for (db, table), definition in record.changes:
                key = (record.server, db, table)
                versions[key] = versions.get(key, 0) + 1
                if record.kind != "ddl":
                    continue
                rows.append(
                    DdlRow(
                        _logical(mapping, db, table),
                        f"{db}.{table}",
                        _time(record.when),
                        f"{record.at[0]}:{record.at[1]}",
                        record.sql,
                        versions[key],
                        "(dropped)" if definition is None else _columns(definition),
                        definition.broken if definition is not None and definition.broken else record.broken,
                        record.server,
                    )
                )
    rows.reverse()
    return rows, where


def _logical(mapping: Mapping, db: str, table: str) -> str:
    try:
        route = mapping.resolve(db, table)
    except MappingError as exc:
        return f"(mapping error: {exc.problem})"
    if route is None or not route.mapped:
        return "(not published)"
    return f"{route.logical_db}.{route.logical_table}"


def _columns(definition: object) -> str:
    columns = getattr(definition, "columns", ())
    keys = set(getattr(definition, "primary_key", ()) or ())
    return ", ".join(f"{c.name}{' (key)' if c.name in keys else ''} {c.type_text()}" for c in columns)


def _time(when: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(when)) if when else "-"
