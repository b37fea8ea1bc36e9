"""Column types and column definitions of a DDL statement, as the binlog's TABLE_MAP will describe them.

Owns ``column_from_type`` (a type text, as information_schema's COLUMN_TYPE or a DDL says it, →
``ColumnDef``; ZEROFILL and display widths dropped: the binlog knows neither), ``column_def`` (a column
of a CREATE / ALTER statement, its collation resolved: its own, its CHARACTER SET's default, the
table's; MariaDB's JSON as LONGTEXT COLLATE utf8mb4_bin) and
``primary_key`` (the key columns a constraint declares). Pure functions, run on the thread applying the
statement (``relay.schema.ddl.apply``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sqlglot import exp
from sqlglot.errors import SqlglotError

from relay.schema.ddl.dialect import DIALECT, unsigned_float
from relay.schema.model import BINARY, CHARACTER, FIXED_BINARY, KNOWN, NUMERIC, SPATIAL, Catalog, ColumnDef

_DTYPE_NAMES = {
    "TINYINT": "tinyint", "UTINYINT": "tinyint", "SMALLINT": "smallint", "USMALLINT": "smallint",
    "MEDIUMINT": "mediumint", "UMEDIUMINT": "mediumint", "INT": "int", "UINT": "int", "BIGINT": "bigint",
    "UBIGINT": "bigint", "BOOLEAN": "tinyint", "DECIMAL": "decimal", "UDECIMAL": "decimal",
    "FLOAT": "float", "UFLOAT": "float", "DOUBLE": "double", "UDOUBLE": "double", "DATE": "date",
    "DATETIME": "datetime", "TIMESTAMP": "timestamp", "TIMESTAMPTZ": "timestamp",
    "TIMESTAMPLTZ": "timestamp", "TIME": "time", "YEAR": "year", "CHAR": "char", "NCHAR": "char",
    "VARCHAR": "varchar", "NVARCHAR": "varchar", "BINARY": "binary", "VARBINARY": "varbinary",
    "TINYTEXT": "tinytext", "TEXT": "text", "MEDIUMTEXT": "mediumtext", "LONGTEXT": "longtext",
    "TINYBLOB": "tinyblob", "BLOB": "blob", "MEDIUMBLOB": "mediumblob", "LONGBLOB": "longblob",
    "ENUM": "enum", "SET": "set", "BIT": "bit", "JSON": "json", "GEOMETRY": "geometry", "UUID": "uuid",
}  # fmt: skip
# Named (user-defined, to sqlglot) types: the spatial subtypes are GEOMETRY in the binlog; MariaDB's
# INET4 / INET6 are their own kinds (BINARY(4) / BINARY(16) in the binlog).
_NAMED = {**dict.fromkeys(SPATIAL, "geometry"), "inet4": "inet4", "inet6": "inet6"}
# Types whose numbers are not part of what the binlog stores (display widths).
_NO_PARAMS = frozenset({"tinyint", "smallint", "mediumint", "int", "bigint", "year", "float", "double"})


def _literal_int(node: exp.Expression) -> int:
    inner = node.this if isinstance(node, exp.DataTypeParam) else node
    if isinstance(inner, exp.Literal) and not inner.is_string:
        return int(inner.this)
    raise ValueError(f"not a number: {node.sql(DIALECT)}")


def _column_type(dtype: exp.DataType, name: str) -> ColumnDef:
    """A sqlglot DataType → ColumnDef without a collation (the caller resolves it)."""
    tname = dtype.this.name
    if dtype.this == exp.DataType.Type.USERDEFINED:
        kind = _NAMED.get(str(dtype.args.get("kind") or "").lower())
    else:
        kind = _DTYPE_NAMES.get(tname)
    if kind is None:
        raise ValueError(f"column {name}: type {dtype.sql(DIALECT)} is not supported by the schema history")
    unsigned = (tname.startswith("U") and kind in NUMERIC) or (kind == "float" and unsigned_float(dtype))
    members: tuple[str, ...] | None = None
    params: tuple[int, ...] = ()
    if kind in ("enum", "set"):
        members = tuple(str(m.this) for m in dtype.expressions if isinstance(m, exp.Literal))
    elif kind not in _NO_PARAMS:
        params = tuple(_literal_int(p) for p in dtype.expressions)
    elif kind == "float" and len(dtype.expressions) == 1 and _literal_int(dtype.expressions[0]) > 24:
        kind = "double"  # FLOAT(p) with p > 24 is a DOUBLE (FLOAT(p, s) stays a FLOAT)
    if tname == "BOOLEAN":
        params = ()
    return ColumnDef(name, kind, params, unsigned, None, members)


def column_from_type(name: str, type_text: str, collation: str | None) -> ColumnDef:
    """A column from its type text as information_schema.COLUMNS.COLUMN_TYPE says it."""
    text = type_text.lower().strip()
    if text.endswith(" zerofill") and " unsigned" not in text:
        text = text.replace(" zerofill", " unsigned")  # ZEROFILL makes a number UNSIGNED
    text = text.replace(" zerofill", "")
    if text in _NAMED:  # a named type alone: sqlglot builds no data type from its bare name
        col = ColumnDef(name, _NAMED[text])
    else:
        try:
            dtype = exp.DataType.build(text, dialect=DIALECT)
        except (SqlglotError, ValueError) as exc:
            raise ValueError(f"column {name}: cannot parse type {type_text!r}: {exc}") from exc
        col = _column_type(dtype, name)
    if col.kind in BINARY or col.kind in FIXED_BINARY:
        return replace(col, collation="binary")
    return replace(col, collation=collation if col.kind in CHARACTER else None)


# --- columns of a statement ---------------------------------------------------------------------------


def _constraint_kinds(cdef: exp.ColumnDef) -> list[Any]:
    kinds: list[Any] = []
    for c in cdef.args.get("constraints") or []:
        if isinstance(c, exp.ColumnConstraint):
            kinds.append(c.kind)
    return kinds


def column_def(catalog: Catalog, cdef: exp.ColumnDef, table_collation: str | None) -> tuple[ColumnDef, bool]:
    """A column definition of a statement → (ColumnDef, declared PRIMARY KEY inline)."""
    name = cdef.name
    dtype = cdef.args.get("kind")
    if not isinstance(dtype, exp.DataType):
        raise ValueError(f"column {name}: no type")
    col = _column_type(dtype, name)
    charset = collate = None
    inline_key = False
    for kind in _constraint_kinds(cdef):
        if isinstance(kind, exp.CharacterSetColumnConstraint):
            charset = kind.this.name.lower()
        elif isinstance(kind, exp.CollateColumnConstraint):
            collate = kind.this.name.lower()
        elif isinstance(kind, exp.PrimaryKeyColumnConstraint):
            inline_key = True
        elif isinstance(kind, exp.ZeroFillColumnConstraint) and col.kind in NUMERIC:
            col = replace(col, unsigned=True)  # ZEROFILL makes a number UNSIGNED (both manuals)
    if col.kind == "json" and catalog.mariadb:
        col, collate = replace(col, kind="longtext"), "utf8mb4_bin"
    if col.kind in BINARY or col.kind in FIXED_BINARY:
        return replace(col, collation="binary"), inline_key
    if col.kind not in CHARACTER:
        return col, inline_key
    if charset == "binary":  # CHAR(4) CHARACTER SET binary is BINARY(4)
        binary_kind = {"char": "binary", "varchar": "varbinary"}.get(
            col.kind, col.kind.replace("text", "blob")
        )
        return replace(col, kind=binary_kind, collation="binary"), inline_key
    collation = collate or (catalog.default_collation(charset) if charset else None) or table_collation
    if collation is None:
        raise ValueError(f"column {name}: no collation known")
    return replace(col, collation=collation), inline_key


def _key_names(node: exp.Expression) -> tuple[str, ...]:
    names = []
    for part in node.expressions:
        target = part.this if isinstance(part, exp.Ordered) else part
        names.append(target.name)
    return tuple(names)


def primary_key(node: exp.Expression) -> tuple[str, ...] | None:
    """The key columns when ``node`` (a constraint of CREATE / ALTER ADD) is a PRIMARY KEY."""
    if isinstance(node, exp.PrimaryKey):
        return _key_names(node)
    if isinstance(node, exp.Constraint | exp.AddConstraint):
        for inner in node.expressions:
            found = primary_key(inner)
            if found is not None:
                return found
    return None


def check_known(col: ColumnDef) -> None:
    if col.kind not in KNOWN:
        raise ValueError(f"column {col.name}: type {col.kind} is not supported")
