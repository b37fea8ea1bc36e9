"""ALTER TABLE statements on a mirror's topics → what the mirror does to its schema and its stored rows.

Owns ``follow``: given a table's columns as the mirror keeps them (``Columns``) and the ALTER TABLE records
of a batch not applied yet (``Statement``: the physical table, the change sequence, the SQL), the new
columns and the ``RowAction``s that make the rows equal what ``SELECT`` shows right after each statement
(MySQL changes existing rows without writing them to the binlog):

* ``ADD COLUMN c … DEFAULT literal`` (or ``NOT NULL`` without a default: MySQL's implicit one, 0 or '')
  — rows of that physical table last changed before the statement get the value; ``ADD`` without a default
  (or ``DEFAULT NULL``) — the column, null;
* ``DROP COLUMN c`` — its value is removed from the rows of that physical table; the column leaves the
  table's schema once every physical table the mirror has rows of has dropped it (one, unless sharded);
* ``RENAME COLUMN a TO b`` / ``CHANGE a b type`` — values kept under the new name (the same rule for ``a``);
* ``MODIFY`` / ``CHANGE`` to a type that holds every value of the old one (integers wider, DECIMAL with as
  many integer and fraction digits, FLOAT→DOUBLE, longer CHAR/VARCHAR/TEXT) — values kept, cast once.

Anything that would leave rows different from MySQL's — an expression default (CURRENT_TIMESTAMP, (1+2)),
a default of a type whose value the mirror cannot spell exactly (TIMESTAMP, TIME, BIT, binary), a
narrowing or other type change MySQL converts values for — raises ``MirrorDdlError`` naming the table
and the statement: the mirror stops rather than hold wrong rows. Statements that change no column (indexes,
keys, table options, SET/DROP DEFAULT, which MySQL applies to later rows only) change nothing. Pure (sqlglot
and the relay's DDL dialect), run on the Spark driver before a batch is merged.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from relay.errors import MirrorDdlError
from relay.schema.ddl.columns import column_from_type
from relay.schema.ddl.dialect import DIALECT
from relay.schema.model import ColumnDef
from relay.spark.layout import MirrorState, RowAction
from relay.spark.types import spark_type_sql


@dataclass(frozen=True)
class Statement:
    """One ALTER TABLE record of a logical table: its physical table ("db.table"), sequence and SQL."""

    source: str
    sequence: int
    sql: str


@dataclass
class Columns:
    """What the mirror keeps of a table's schema (``MirrorState``): [name, Spark type] in order, each
    column's MySQL type, the physical tables it has rows of, and per column the physical tables that
    dropped it (while others still have it)."""

    columns: list[list[str]]
    types: dict[str, str] = field(default_factory=dict)
    sources: set[str] = field(default_factory=set)
    dropped: dict[str, set[str]] = field(default_factory=dict)

    def index(self, name: str) -> int | None:
        return next((i for i, c in enumerate(self.columns) if c[0].lower() == name.lower()), None)


def follow(table: str, cols: Columns, statements: list[Statement]) -> list[RowAction]:
    """Apply ``statements`` (sequence order) to ``cols`` in place; the row actions, in order."""
    actions: list[RowAction] = []
    for st in sorted(statements, key=lambda s: s.sequence):
        try:
            for change in _changes(st.sql):
                actions += _apply(cols, st, change)
        except MirrorDdlError:
            raise
        except (SqlglotError, ValueError, KeyError, AttributeError) as exc:
            raise _refuse(table, st, str(exc) or type(exc).__name__) from exc
        except _InexactError as exc:
            raise _refuse(table, st, str(exc)) from exc
    return actions


class _InexactError(Exception):
    """A column change the mirror cannot apply exactly (the reason)."""


def _refuse(table: str, st: Statement, why: str) -> MirrorDdlError:
    return MirrorDdlError(
        f"mirror of {table}: cannot apply {st.sql!r} (on {st.source}, sequence {st.sequence}) exactly: "
        f"{why}; the mirror stopped before writing anything of it (see 'Schema changes' in "
        "docs/concepts/spark-mirror.md)"
    )


@dataclass(frozen=True)
class _Change:
    kind: str  # add | drop | rename | modify
    column: str
    new_name: str | None = None
    declared: ColumnDef | None = None
    default: str | None = None  # add: canal text every existing row gets; None: NULL
    if_missing: bool = False  # ADD COLUMN IF NOT EXISTS (MariaDB)


def _changes(sql: str) -> list[_Change]:
    nodes = [n for n in sqlglot.parse(sql, dialect=DIALECT) if n is not None]
    node = nodes[0] if len(nodes) == 1 else None
    if isinstance(node, exp.Command) and sql.split(None, 2)[:2] == ["ALTER", "TABLE"]:
        raise ValueError("the SQL parser does not understand this ALTER TABLE")
    if not isinstance(node, exp.Alter) or str(node.args.get("kind") or "").upper() != "TABLE":
        return []  # not an ALTER TABLE (CREATE INDEX, ALTER TABLE … partitions): no column changes
    out: list[_Change] = []
    for action in node.args.get("actions") or []:
        if isinstance(action, exp.ColumnDef):
            declared = _declared(action)
            default = _default(action, declared)
            out.append(
                _Change(
                    "add",
                    action.name,
                    declared=declared,
                    default=default,
                    if_missing=bool(action.args.get("exists")),
                )
            )
        elif isinstance(action, exp.Drop) and str(action.args.get("kind") or "").upper() == "COLUMN":
            out += [_Change("drop", t.name) for t in action.args.get("tables") or []]
        elif isinstance(action, exp.RenameColumn):
            out.append(_Change("rename", action.this.name, new_name=action.args["to"].name))
        elif isinstance(action, exp.ModifyColumn):
            cdef = action.this
            old = action.args.get("rename_from")
            name = old.name if old is not None else cdef.name
            out.append(_Change("modify", name, new_name=cdef.name, declared=_declared(cdef)))
    return out


def _declared(cdef: exp.ColumnDef) -> ColumnDef:
    dtype = cdef.args.get("kind")
    if not isinstance(dtype, exp.DataType):
        raise ValueError(f"column {cdef.name}: no type")
    return column_from_type(cdef.name, dtype.sql(DIALECT), None)


def _constraints(cdef: exp.ColumnDef) -> list[Any]:
    return [c.kind for c in cdef.args.get("constraints") or [] if isinstance(c, exp.ColumnConstraint)]


_NUMERIC = {"tinyint", "smallint", "mediumint", "int", "bigint", "decimal", "float", "double"}
_TEXT = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set"}


def _default(cdef: exp.ColumnDef, col: ColumnDef) -> str | None:
    """The canal text MySQL gives existing rows, None for NULL; ``_InexactError`` for an expression."""
    kinds = _constraints(cdef)
    not_null = any(isinstance(k, exp.NotNullColumnConstraint) and not k.args.get("allow_null") for k in kinds)
    given = next((k.this for k in kinds if isinstance(k, exp.DefaultColumnConstraint)), None)
    if given is None:
        if not not_null:
            return None
        if col.kind in _NUMERIC:
            return "0"
        if col.kind == "enum" and col.members:
            return col.members[0]
        if col.kind in _TEXT:
            return ""
        raise _InexactError(
            f"NOT NULL {col.type_text()} without a DEFAULT: MySQL's implicit value is not followed"
        )
    if isinstance(given, exp.Null):
        return None
    if isinstance(given, exp.Boolean):
        return "1" if given.this else "0"
    if isinstance(given, exp.Neg) and isinstance(given.this, exp.Literal) and not given.this.is_string:
        return f"-{given.this.this}"
    if isinstance(given, exp.Literal) and col.kind in ("enum", "set") and not given.is_string:
        raise _InexactError(f"the {col.kind} default {given.this} is a member's number: not followed")
    if isinstance(given, exp.Literal):
        return str(given.this)
    raise _InexactError(f"the default {given.sql(DIALECT)} is an expression: what each row got is not known")


def typed_default(col: ColumnDef, text: str) -> tuple[str, Any]:
    """(Spark type, Python value) of a column's literal default as MySQL stores it."""
    spark = spark_type_sql(col.type_text())
    try:
        if col.kind in ("tinyint", "smallint", "mediumint", "int", "bigint"):
            value: Any = int(Decimal(text).to_integral_value(ROUND_HALF_UP))
            low, high = _int_range(col)
            if not low <= value <= high:
                raise _InexactError(f"the default {text} does not fit {col.type_text()}")
            return spark, (Decimal(value) if spark.startswith("decimal") else value)
        if col.kind == "decimal" and spark != "string":
            scale = col.params[1] if len(col.params) > 1 else 0
            return spark, Decimal(text).quantize(Decimal(1).scaleb(-scale), ROUND_HALF_UP)
        if col.kind in ("float", "double"):
            return spark, float(text)
        if col.kind in _TEXT:
            return spark, text.rstrip(" ") if col.kind == "char" else text
        if col.kind == "date":
            return spark, dt.date.fromisoformat(text)
        if col.kind == "datetime":
            return spark, dt.datetime.fromisoformat(text)
    except (InvalidOperation, ValueError) as exc:
        raise _InexactError(
            f"the default {text!r} is not a {col.type_text()} value the mirror can spell"
        ) from exc
    raise _InexactError(
        f"a DEFAULT of type {col.type_text()} is not followed (only numbers, text, DATE, DATETIME)"
    )


def _int_range(col: ColumnDef) -> tuple[int, int]:
    bits = {"tinyint": 8, "smallint": 16, "mediumint": 24, "int": 32, "bigint": 64}[col.kind]
    return (0, 2**bits - 1) if col.unsigned else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)


def _apply(cols: Columns, st: Statement, change: _Change) -> list[RowAction]:
    at = cols.index(change.column)
    if change.kind == "add":  # ADD COLUMN IF NOT EXISTS of a column there: MySQL leaves it
        return [] if change.if_missing and at is not None else _add(cols, st, change)
    if at is None:
        if change.kind == "drop":
            return []  # a column the mirror never held (no row had it): nothing to remove
        raise _InexactError(f"column {change.column} is not in the mirror table")
    name, spark = cols.columns[at]
    if change.kind == "drop":
        return _drop(cols, st, name, spark)
    new = change.new_name or name
    if change.kind == "modify" and change.declared is not None:
        spark = _widened(cols.types.get(name), change.declared)
        cols.types[name] = change.declared.type_text()
        cols.columns[at][1] = spark
    if new == name:
        return []
    if new.lower() == name.lower():
        raise _InexactError("a rename that only changes the letter case is not followed")
    moved = _add(cols, st, _Change("add", new, declared=None), spark=spark, mysql=cols.types.get(name))
    copy = RowAction(st.source, st.sequence, new, spark, copy_from=name)
    return [*moved, copy, *_drop(cols, st, name, spark)]


def _add(
    cols: Columns, st: Statement, change: _Change, spark: str | None = None, mysql: str | None = None
) -> list[RowAction]:
    declared = change.declared
    if declared is not None:
        spark, mysql = spark_type_sql(declared.type_text()), declared.type_text()
    assert spark is not None
    at = cols.index(change.column)
    if at is None:
        cols.columns.append([change.column, spark])
    elif cols.columns[at][1] != spark:
        _widened(cols.types.get(cols.columns[at][0]), declared)  # re-added with another type
        cols.columns[at][1] = spark
    if mysql is not None:
        cols.types[change.column] = mysql
    cols.dropped.get(change.column, set()).discard(st.source)
    if change.default is None or declared is None:
        return [RowAction(st.source, st.sequence, change.column, spark)] if at is not None else []
    spark, value = typed_default(declared, change.default)
    return [RowAction(st.source, st.sequence, change.column, spark, value)]


def _drop(cols: Columns, st: Statement, name: str, spark: str) -> list[RowAction]:
    gone = cols.dropped.setdefault(name, set())
    gone.add(st.source)
    if gone >= cols.sources | {st.source}:
        at = cols.index(name)
        if at is not None:
            cols.columns.pop(at)
        cols.dropped.pop(name, None)
        cols.types.pop(name, None)
    return [RowAction(st.source, st.sequence, name, spark)]


_INT_RANK = {"tinyint": 1, "smallint": 2, "mediumint": 3, "int": 4, "bigint": 5}
_TEXT_SIZE = {"tinytext": 255, "text": 65_535, "mediumtext": 16_777_215, "longtext": 4_294_967_295}


def _widened(old_text: str | None, new: ColumnDef | None) -> str:
    """The Spark type of ``new`` when it holds every value of ``old_text`` exactly; else ``_InexactError``."""
    if new is None:
        raise _InexactError("the column's type is not known")
    spark = spark_type_sql(new.type_text())
    if old_text is None:
        raise _InexactError(
            f"the column's former MySQL type is not known: cannot tell {new.type_text()} is wider"
        )
    old = column_from_type(new.name, old_text, None)
    if not _holds(old, new):
        raise _InexactError(
            f"{old.type_text()} → {new.type_text()} is not a widening: MySQL converted the values"
        )
    return spark


def _holds(old: ColumnDef, new: ColumnDef) -> bool:
    """Whether every value of type ``old`` is the same value of type ``new``."""
    if (old.kind, old.params, old.unsigned, old.members) == (new.kind, new.params, new.unsigned, new.members):
        return True
    if old.kind in _INT_RANK and new.kind in _INT_RANK:
        (low, high), (new_low, new_high) = _int_range(old), _int_range(new)
        return new_low <= low and high <= new_high
    signs = old.unsigned or not new.unsigned
    if old.kind == "decimal" and new.kind == "decimal":
        (p, s), (p2, s2) = _precision(old), _precision(new)
        return signs and s2 >= s and p2 - s2 >= p - s
    if old.kind == "float" and new.kind == "double":
        return signs
    return _same_family(old, new) and _capacity(new) >= _capacity(old)


_VARIABLE = {"varchar", *_TEXT_SIZE}


def _same_family(old: ColumnDef, new: ColumnDef) -> bool:
    return (old.kind == new.kind == "char") or (old.kind in _VARIABLE and new.kind in _VARIABLE)


def _precision(col: ColumnDef) -> tuple[int, int]:
    params = col.params or (10, 0)
    return params[0], params[1] if len(params) > 1 else 0


def _capacity(col: ColumnDef) -> int:
    return _TEXT_SIZE.get(col.kind) or (col.params[0] if col.params else 1)


@dataclass
class Followed:
    """A table's schema after the batch's ALTER TABLE statements (``schema_of``)."""

    columns: Columns
    actions: list[RowAction]
    altered: dict[str, int]  # physical table → sequence of the last ALTER TABLE applied


def schema_of(
    table: str,
    stored: MirrorState | None,
    columns: list[list[str]],
    alters: list[tuple[str, int, str]],
    variants: dict[str, int],
    sources: frozenset[str],
) -> Followed:
    """``columns`` (the stored ones with the batch's) after the batch's ``alters`` ((physical, sequence,
    SQL), from ``relay.spark.survey``) not applied yet. The MySQL types a statement finds are the stored
    ones updated with the batch's ``variants`` (mysqlType JSON → latest sequence) older than the first
    statement; those newer than the last one then follow."""
    altered = dict(stored.altered) if stored else {}
    pending = [Statement(p, s, sql) for p, s, sql in alters if s > altered.get(p, -1)]
    first = min((s.sequence for s in pending), default=None)
    last = max((s.sequence for s in pending), default=None)
    types = dict(stored.types) if stored else {}
    later: dict[str, str] = {}
    for text, seq in sorted(variants.items(), key=lambda v: v[1]):
        if first is None or seq < first:
            types.update(json.loads(text))
        elif last is not None and seq > last:
            later.update(json.loads(text))
    cols = Columns(
        [list(c) for c in columns],
        types,
        set(stored.sources if stored else ()) | set(sources) | {s.source for s in pending},
        {c: set(p) for c, p in (stored.dropped if stored else {}).items()},
    )
    actions = follow(table, cols, pending)
    names = {c[0] for c in cols.columns}
    cols.types = {c: t for c, t in {**cols.types, **later}.items() if c in names}
    for st in pending:
        altered[st.source] = max(st.sequence, altered.get(st.source, -1))
    return Followed(cols, actions, altered)


def merged_columns(
    stored: list[list[str]], batch: list[tuple[str, str]]
) -> tuple[list[list[str]], list[str], bool]:
    """The table's columns after this batch, the added ones, and whether any changed its type."""
    merged = [list(c) for c in stored]
    index = {c[0]: i for i, c in enumerate(merged)}
    added: list[str] = []
    retyped = False
    for name, kind in batch:
        if name not in index:
            index[name] = len(merged)
            merged.append([name, kind])
            added.append(name)
        elif merged[index[name]][1] != kind:
            merged[index[name]][1] = kind
            retyped = True
    return merged, added, retyped
