"""Reading table definitions from the live server (information_schema), for a snapshot or a resync.

Owned here: ``read_catalog(conn, mariadb)`` — every base table outside the system schemas, with the
charset facts (collation ids, database defaults, collation_server) — and ``read_table`` for one
table. Types come from ``COLUMNS.COLUMN_TYPE`` read with the same parser as the DDL
(``relay.schema.ddl.column_from_type``), keys from ``STATISTICS`` (index ``PRIMARY``, in key order),
the table's default collation from ``TABLES.TABLE_COLLATION``. Runs on the thread that starts the
relay (or the CLI's); the caller makes the read consistent with a binlog place
(``relay.source.schema_start``).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from relay.schema.ddl import SYSTEM_SCHEMAS, column_from_type
from relay.schema.history import server_key
from relay.schema.model import Catalog, Collation, ColumnDef, TableDef

_GEOMETRIC = frozenset({"point", "linestring", "polygon", "multipoint", "multilinestring", "multipolygon",
                        "geometrycollection", "geomcollection"})  # fmt: skip
_SYSTEM = ", ".join(f"'{s}'" for s in sorted(SYSTEM_SCHEMAS))


def _rows(conn: Any, sql: str, args: Any = None) -> list[tuple[Any, ...]]:
    with conn.cursor() as cur:
        cur.execute(sql, args)
        return list(cur.fetchall())


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def read_facts(conn: Any, mariadb: bool) -> Catalog:
    collations = {
        _text(n): Collation(_text(n), _text(cs), int(i), _text(d).upper() == "YES")
        for n, cs, i, d in _rows(
            conn,
            "SELECT COLLATION_NAME, CHARACTER_SET_NAME, ID, IS_DEFAULT FROM information_schema.COLLATIONS "
            "WHERE ID IS NOT NULL",
        )
    }
    databases = {
        _text(s): _text(c)
        for s, c in _rows(
            conn,
            f"SELECT SCHEMA_NAME, DEFAULT_COLLATION_NAME FROM information_schema.SCHEMATA "
            f"WHERE SCHEMA_NAME NOT IN ({_SYSTEM})",
        )
    }
    server = _text(_rows(conn, "SELECT @@collation_server")[0][0])
    return Catalog(mariadb=mariadb, databases=databases, server_collation=server, collations=collations)


def _column(name: str, data_type: str, column_type: str, collation: Any) -> ColumnDef:
    if data_type.lower() in _GEOMETRIC:
        column_type = "geometry"
    return column_from_type(name, column_type, _text(collation) if collation is not None else None)


def _tables(conn: Any, where: str, args: Any) -> list[TableDef]:
    table_rows = _rows(
        conn,
        "SELECT TABLE_SCHEMA, TABLE_NAME, TABLE_COLLATION FROM information_schema.TABLES "
        f"WHERE TABLE_TYPE = 'BASE TABLE' AND {where}",
        args,
    )
    columns: dict[tuple[str, str], list[ColumnDef]] = defaultdict(list)
    unsupported: dict[tuple[str, str], str] = {}
    for s, t, n, dt, ct, co in _rows(
        conn,
        "SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, COLLATION_NAME "
        f"FROM information_schema.COLUMNS WHERE {where} ORDER BY TABLE_SCHEMA, TABLE_NAME, ORDINAL_POSITION",
        args,
    ):
        key = (_text(s), _text(t))
        try:
            columns[key].append(_column(_text(n), _text(dt), _text(ct), co))
        except ValueError as exc:
            # A type the history does not model stops nothing here: the table is kept as broken (its
            # definition unknown), which matters only if the relay captures it (relay.schema.tracker).
            unsupported.setdefault(key, f"read from the server: {exc}")
    keys: dict[tuple[str, str], list[str]] = defaultdict(list)
    for s, t, n in _rows(
        conn,
        "SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME FROM information_schema.STATISTICS "
        f"WHERE INDEX_NAME = 'PRIMARY' AND {where} ORDER BY TABLE_SCHEMA, TABLE_NAME, SEQ_IN_INDEX",
        args,
    ):
        keys[(_text(s), _text(t))].append(_text(n))
    out = []
    for s, t, collation in table_rows:
        key = (_text(s), _text(t))
        out.append(TableDef(key[0], key[1], tuple(columns[key]), tuple(keys[key]),
                            _text(collation) if collation is not None else None,
                            unsupported.get(key, "")))  # fmt: skip
    return out


def read_catalog(conn: Any, mariadb: bool) -> Catalog:
    """Every base table outside the system schemas, with the charset facts."""
    catalog = read_facts(conn, mariadb)
    for table in _tables(conn, f"TABLE_SCHEMA NOT IN ({_SYSTEM})", None):
        catalog.tables[(table.schema, table.name)] = table
    return catalog


def read_table(conn: Any, schema: str, name: str) -> TableDef | None:
    """One table's live definition (None when the server has no such base table)."""
    found = _tables(conn, "TABLE_SCHEMA = %s AND TABLE_NAME = %s", (schema, name))
    return found[0] if found else None


def read_server_key(conn: Any) -> str:
    """Whose binlog this server writes (``relay.schema.history.server_key``): its UUID, else its id."""
    found = {
        _text(n).lower(): _text(v)
        for n, v in _rows(conn, "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('server_id', 'server_uuid')")
    }
    return server_key(int(found.get("server_id", "0")), found.get("server_uuid", ""))
