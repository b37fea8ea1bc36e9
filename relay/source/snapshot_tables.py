"""What a snapshot reads: the captured tables, their chunk keys, and rows as canal text.

Owned here: discovering the tables a snapshot covers (``information_schema``, filtered by the caller's
``captures(db, table)`` — the mapping and the sink filters), the key a table is read in chunks by (the
PRIMARY KEY, else a UNIQUE key over NOT NULL columns, else none: the table is read in one chunk),
the column metadata (``ColumnMeta``, built as a TABLE_MAP with full metadata would describe the
column, so snapshot rows and binlog rows of a table share ``sqlType``/``mysqlType``/``pkNames``), the
chunk ``SELECT`` and the conversion of its text-protocol values into canal's text forms (the same text
``relay.binlog.rows`` decodes from the binlog). Plain SELECTs only: no locks, no writes.

Runs on the snapshot reader threads (``relay.source.snapshot``), each on its own connection.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from functools import cached_property
from typing import Any

from relay.binlog import types as t
from relay.binlog.column_types import (
    FIXED_BINARY,
    INT_CODES,
    SPATIAL,
    TEMPORAL_CODES,
    table_map_meta,
    table_map_type,
)
from relay.binlog.events import ColumnMeta
from relay.errors import NoSuchTableError, SourceError
from relay.source.snapshot_rows import (
    K_BINARY,
    K_BIT,
    K_DECIMAL,
    K_DOUBLE,
    K_FLOAT,
    K_INT,
    K_TEXT,
    Row,
    query_rows,
)

# DATA_TYPE → the kind of value a SELECT gives (the rest: text, or bytes where the charset is binary)
_VALUE_KINDS = {
    **dict.fromkeys(INT_CODES, K_INT),
    "decimal": K_DECIMAL, "float": K_FLOAT, "double": K_DOUBLE, "bit": K_BIT,
}  # fmt: skip
_MEMBERS = re.compile(r"'((?:[^']|'')*)'")
_PADDED = frozenset({K_INT, K_DECIMAL})  # ZEROFILL pads these in SELECT's text (FLOAT is cast to DOUBLE)


def quote_name(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


@dataclass(frozen=True)
class TableSpec:
    """One physical table to snapshot."""

    db: str
    table: str
    columns: tuple[ColumnMeta, ...]
    kinds: tuple[int, ...]  # value kind per column
    key: tuple[int, ...]  # column indexes of the chunk key, in key order; () when none
    key_name: str  # PRIMARY, the unique index's name, or "" (no usable key)
    estimated_rows: int = 0
    zerofill: frozenset[int] = frozenset()  # indexes of ZEROFILL integer and DECIMAL columns

    @property
    def name(self) -> str:
        return f"{self.db}.{self.table}"

    @property
    def qualified(self) -> str:
        return f"{quote_name(self.db)}.{quote_name(self.table)}"

    @cached_property
    def timestamps(self) -> tuple[int, ...]:
        """Indexes of the TIMESTAMP columns: their instants are selected too (``select_list``)."""
        return tuple(i for i, c in enumerate(self.columns) if c.type_code in (t.TIMESTAMP, t.TIMESTAMP2))

    def select_list(self) -> str:
        out = []
        for i, (c, kind) in enumerate(zip(self.columns, self.kinds, strict=True)):
            col = quote_name(c.name)
            if kind == K_FLOAT:
                col = f"CAST({col} AS DOUBLE)"  # the float32 exactly; its text may round it
            elif kind == K_BIT or i in self.zerofill:
                # BIT: the number; ZEROFILL: the number without the padding SELECT adds (the binlog
                # holds the number: both paths publish ``42`` for an INT(5) ZEROFILL 42, as canal does).
                col = f"{col}+0"
            out.append(col)
        # A TIMESTAMP's text is in the session's zone, ambiguous in the hour a DST change repeats: its
        # instant comes along (seconds since the epoch, with the fraction), as the binlog gives it.
        out.extend(f"UNIX_TIMESTAMP({quote_name(self.columns[i].name)})" for i in self.timestamps)
        return ", ".join(out)

    def chunk_query(
        self, after: Sequence[str | None] | None, limit: int, where: str = ""
    ) -> tuple[str, list[Any]]:
        """The SELECT of the chunk after key ``after`` (None: the first), ``limit`` rows, in key order.
        Executed with ``params`` (also when empty): every ``%`` of the text is doubled, placeholders aside."""
        names = [quote_name(self.columns[i].name).replace("%", "%%") for i in self.key]
        conds: list[str] = []
        params: list[Any] = []
        if after is not None:
            ors = []
            for n in range(len(names)):
                ands = [f"{names[j]} = %s" for j in range(n)] + [f"{names[n]} > %s"]
                ors.append("(" + " AND ".join(ands) + ")")
                params.extend(self.key_param(j, after[j]) for j in range(n + 1))
            conds.append("(" + " OR ".join(ors) + ")")
        if where:
            conds.append(f"({where.replace('%', '%%')})")
        sql = f"SELECT {self.select_list()} FROM {self.qualified}".replace("%", "%%")
        if conds:
            sql += " WHERE " + " AND ".join(conds)
        sql += " ORDER BY " + ", ".join(names) + f" LIMIT {int(limit)}"
        return sql, params

    def whole_query(self, limit: int, where: str = "") -> str:
        """The SELECT of a table without a usable key: every row (meeting ``where``), at most ``limit``."""
        sql = f"SELECT {self.select_list()} FROM {self.qualified}"
        if where:
            sql += f" WHERE ({where})"
        return sql + f" LIMIT {int(limit)}"

    def key_param(self, key_index: int, text: str | None) -> Any:
        """A key value's canal text as a query parameter compared exactly (never as a double)."""
        kind = self.kinds[self.key[key_index]]
        if text is None:  # not in a chunk key (its columns are NOT NULL); kept for the type
            return None
        if kind in (K_INT, K_BIT):
            return int(text)
        if kind == K_DECIMAL:
            return Decimal(text)
        if kind in (K_FLOAT, K_DOUBLE):
            return float(text)
        if kind == K_BINARY:
            return text.encode("latin-1")
        return text

    def read(self, conn: Any, sql: str, params: Sequence[Any] | None = None) -> list[Row]:
        """Run this table's SELECT ``sql`` (``params`` filled in as a cursor would) on ``conn``: its rows in
        canal's text forms; a TIMESTAMP value is an ``Instant`` that also holds its epoch microseconds."""
        if params is not None:
            with conn.cursor() as cur:
                sql = cur.mogrify(sql, params)
        return query_rows(conn, sql, self.kinds, self.timestamps)

    def key_of(self, row: Sequence[str | None]) -> tuple[str | None, ...]:
        return tuple(row[i] for i in self.key)


def _members(column_type: str) -> tuple[str, ...]:
    inner = column_type[column_type.index("(") + 1 : column_type.rindex(")")]
    return tuple(m.replace("''", "'") for m in _MEMBERS.findall(inner))


def column_meta(index: int, row: dict[str, Any], is_key: bool) -> tuple[ColumnMeta, int]:
    """(ColumnMeta, value kind) of one ``information_schema.COLUMNS`` row (with ``COLLATION_ID``). A
    spatial column is read as bytes: SELECT sends the value the binlog holds (SRID + WKB). MariaDB's
    INET4 / INET6 / UUID are refused: SELECT sends their text, the binlog their binary storage."""
    data_type = str(row["DATA_TYPE"]).lower()
    column_type = str(row["COLUMN_TYPE"]).lower()
    charset = int(row["COLLATION_ID"]) if row.get("COLLATION_ID") is not None else None
    enum_values = _members(column_type) if data_type == "enum" else None
    set_values = _members(column_type) if data_type == "set" else None
    try:
        if data_type in FIXED_BINARY:
            raise ValueError(data_type)
        real, size = table_map_type(  # the one mapping, shared with the schema history
            data_type,
            length=int(row["CHARACTER_OCTET_LENGTH"] or 0),
            precision=int(row["NUMERIC_PRECISION"]) if data_type == "decimal" else 0,
            scale=int(row["NUMERIC_SCALE"]) if data_type == "decimal" else 0,
            fsp=int(row["DATETIME_PRECISION"] or 0) if data_type in TEMPORAL_CODES else 0,
            bits=int(row["NUMERIC_PRECISION"] or 1) if data_type == "bit" else 1,
            members=len(enum_values or set_values or ()),
        )
    except ValueError:
        raise SourceError(unsupported(str(row["COLUMN_NAME"]), column_type)) from None
    code, meta = table_map_meta(real, size)
    if data_type in ("binary", "varbinary") or data_type in SPATIAL or data_type.endswith("blob"):
        charset = 63
    kind = _VALUE_KINDS.get(data_type, K_TEXT)
    if kind == K_TEXT and charset == 63:
        kind = K_BINARY
    return t.column_meta(
        index,
        code,
        meta,
        str(row["IS_NULLABLE"]).upper() == "YES",
        name=str(row["COLUMN_NAME"]),
        unsigned=" unsigned" in column_type,
        charset=charset if code in (t.VARCHAR, t.STRING, t.BLOB) else None,
        is_key=is_key,
        enum_values=enum_values,
        set_values=set_values,
    ), kind


def unsupported(column: str, column_type: str) -> str:
    """Why a column stops its table's snapshot (and capture): one line naming it and what to do."""
    if column_type in FIXED_BINARY:
        return (
            f"column {column!r}: type {column_type} (MariaDB) is not captured: SELECT gives its text and the "
            "binlog its binary storage, so no one value can be published for both; leave the table out "
            "(filter.exclude or the mapping), or store the value in a BINARY or VARCHAR column"
        )
    return f"column {column!r}: type {column_type} cannot be snapshotted"


def _dicts(conn: Any, sql: str, args: Sequence[Any] = ()) -> list[dict[str, Any]]:
    with conn.cursor() as cur:
        cur.execute(sql, args)
        names = [d[0].upper() for d in cur.description]
        return [dict(zip(names, _plain(r), strict=True)) for r in cur.fetchall()]


def _plain(row: Sequence[Any]) -> list[Any]:
    return [v.decode("utf-8") if isinstance(v, bytes) else v for v in row]


def list_tables(conn: Any, captures: Callable[[str, str], bool]) -> list[tuple[str, str, int]]:
    """(db, table, estimated rows) of the base tables ``captures`` keeps, in name order."""
    rows = _dicts(
        conn,
        "SELECT TABLE_SCHEMA, TABLE_NAME, TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_TYPE = "
        "'BASE TABLE' AND TABLE_SCHEMA NOT IN ('mysql', 'information_schema', 'performance_schema', 'sys')",
    )
    out = [(str(r["TABLE_SCHEMA"]), str(r["TABLE_NAME"]), int(r["TABLE_ROWS"] or 0)) for r in rows]
    return sorted(x for x in out if captures(x[0], x[1]))


def describe_table(conn: Any, db: str, table: str, estimated_rows: int = 0) -> TableSpec:
    """The ``TableSpec`` of one table: columns as a full-metadata TABLE_MAP would describe them, and the
    chunk key (PRIMARY, else the first UNIQUE key over NOT NULL columns, else none)."""
    cols = _dicts(
        conn,
        "SELECT c.COLUMN_NAME, c.DATA_TYPE, c.COLUMN_TYPE, c.IS_NULLABLE, c.CHARACTER_OCTET_LENGTH, "
        "c.NUMERIC_PRECISION, c.NUMERIC_SCALE, c.DATETIME_PRECISION, l.ID AS COLLATION_ID "
        "FROM information_schema.COLUMNS c LEFT JOIN information_schema.COLLATIONS l "
        "ON l.COLLATION_NAME = c.COLLATION_NAME WHERE c.TABLE_SCHEMA = %s AND c.TABLE_NAME = %s "
        "ORDER BY c.ORDINAL_POSITION",
        (db, table),
    )
    if not cols:
        raise NoSuchTableError(f"{db}.{table}: no such table (dropped or renamed?)")
    stats = _dicts(
        conn,
        "SELECT INDEX_NAME, COLUMN_NAME, SEQ_IN_INDEX, NON_UNIQUE, SUB_PART "
        "FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s "
        "ORDER BY INDEX_NAME = 'PRIMARY' DESC, INDEX_NAME, SEQ_IN_INDEX",
        (db, table),
    )
    index_of = {str(c["COLUMN_NAME"]): i for i, c in enumerate(cols)}
    nullable = {str(c["COLUMN_NAME"]) for c in cols if str(c["IS_NULLABLE"]).upper() == "YES"}
    indexes: dict[str, list[str]] = {}
    prefixed: set[str] = set()
    for s in stats:
        if int(s["NON_UNIQUE"]) == 0:
            indexes.setdefault(str(s["INDEX_NAME"]), []).append(str(s["COLUMN_NAME"]))
            if s["SUB_PART"] is not None:
                prefixed.add(str(s["INDEX_NAME"]))
    primary = set(indexes.get("PRIMARY", ()))
    key_name, key_cols = "", []
    for name, names in indexes.items():  # PRIMARY first
        if name not in prefixed and not (set(names) & nullable):
            key_name, key_cols = name, names
            break
    metas, kinds = [], []
    for i, c in enumerate(cols):
        try:
            meta, kind = column_meta(i, c, str(c["COLUMN_NAME"]) in primary)
        except SourceError as exc:
            raise SourceError(f"{db}.{table}: {exc}") from exc
        metas.append(meta)
        kinds.append(kind)
    key = tuple(index_of[n] for n in key_cols)
    zerofill = frozenset(
        i for i, c in enumerate(cols) if "zerofill" in str(c["COLUMN_TYPE"]).lower() and kinds[i] in _PADDED
    )
    return TableSpec(db, table, tuple(metas), tuple(kinds), key, key_name, estimated_rows, zerofill)
