"""The shards of a logical table as ``relay verify`` compares them: columns, digest rules, keys, method.

A shard is one physical table of the source that the mapping routes to the logical table and the sink
filters keep (``relay.wiring.snapshot_captures``). Each is compared by one of three methods:

- ``range``: digests of key-range chunks computed by MySQL, rows only where a chunk's digest differs.
  Needs a row identity on the target equal to the chunk key (the record key is the table's PRIMARY
  KEY) whose order Python can reproduce (integers, DECIMAL, BIT, floating point, dates and datetimes,
  binary strings); string keys are ordered by their collation, which only MySQL knows.
- ``rows``: per-row digests (key and hash, computed by MySQL) of every chunk, compared key by key: a
  record key that is not the chunk key (the mapping's ``key`` columns), or a key MySQL orders by collation.
- ``multiset``: a table without a PRIMARY KEY or UNIQUE key over NOT NULL columns is compared as a
  multiset of full rows per hash bucket (equal rows are not told apart); so is a table the target keys
  by all its values (the mirror, for any table the record key does not name columns of).

The join key — what pairs a source row with the target's row — is the record key the codec builds
(``relay.kafka.codec``): the ``_shard`` value first (the physical name, or a column's value) then the key
columns in key order. A table whose records are keyed by its physical name (no key columns, no PRIMARY
KEY) but that has a UNIQUE NOT NULL key is joined on the topic by (physical name, that key's values),
taken from each record's data (``by_data``). Pure, any thread.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from functools import cached_property
from typing import Any

from mapping.key_shard import KEY_SHARD_PHYSICAL, SHARD_FIELD
from mapping.model import Route
from relay.binlog import types as t
from relay.ops.verify.digest import STR_CONVERTERS, HashKind, hash_kind
from relay.source.snapshot_rows import K_BINARY, K_BIT, K_DECIMAL, K_DOUBLE, K_FLOAT, K_INT
from relay.source.snapshot_tables import TableSpec

RANGE, ROWS, MULTISET = "range", "rows", "multiset"
JoinKey = tuple[str | None, ...]
_SORTABLE_TEXT = frozenset({t.DATE, t.NEWDATE, t.DATETIME, t.DATETIME2, t.YEAR})


def _as_int(text: str | None) -> Any:
    return (0, 0) if text is None else (1, int(text))


_NULL_FIRST = float("-inf")  # MySQL orders NULL before every number


def _int_order(key: JoinKey) -> Any:
    """The order of a one-integer-column chunk key: its value (NULL first)."""
    value = key[0]
    return _NULL_FIRST if value is None else int(value)


def _as_decimal(text: str | None) -> Any:
    try:
        return (0, Decimal(0)) if text is None else (1, Decimal(text))
    except InvalidOperation:
        return (1, Decimal(0))


def _as_float(text: str | None) -> Any:
    return (0, 0.0) if text is None else (1, float(text))


def _as_bytes(text: str | None) -> Any:
    return (0, b"") if text is None else (1, text.encode("latin-1", "replace"))


def _as_text(text: str | None) -> Any:
    return (0, "") if text is None else (1, text)


def sort_key_of(spec: TableSpec, index: int) -> Callable[[str | None], Any] | None:
    """How Python orders a key column's canal text as MySQL orders the column; None when it cannot."""
    kind, column = spec.kinds[index], spec.columns[index]
    if kind in (K_INT, K_BIT):
        return _as_int
    if kind == K_DECIMAL:
        return _as_decimal
    if kind in (K_FLOAT, K_DOUBLE):
        return _as_float
    if kind == K_BINARY and column.type_code != t.BLOB:
        return _as_bytes
    if column.type_code in _SORTABLE_TEXT:  # fixed-width text: its order is the value's
        return _as_text
    return None


@dataclass(frozen=True)
class Shard:
    """One physical table, how its rows are hashed, keyed and compared."""

    spec: TableSpec
    route: Route
    kinds: tuple[HashKind, ...]
    join: tuple[int, ...]  # column indexes of the join key's columns, in key order
    shard_value: str | int | None  # the join key's first part: a constant, a column index, or none
    by_data: bool  # the topic keys this table by its physical name: join on the chunk key from the data
    method: str  # RANGE, ROWS or MULTISET (against the target it is built for)
    reason: str  # why this method, for the report
    # Column -> its literal default as canal text (None: NULL) where the source declares one
    # (SourceReader.defaults): a record published before ``ADD COLUMN`` lacks the column, and MySQL gave the
    # existing row that default, so the two agree while the row still holds it.
    defaults: Mapping[str, str | None] = field(default_factory=dict, compare=False, hash=False)

    @property
    def name(self) -> str:
        return self.spec.name

    @cached_property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.spec.columns)

    @cached_property
    def names_set(self) -> frozenset[str]:
        return frozenset(self.names)

    @cached_property
    def converted(self) -> tuple[int, ...]:
        """Columns whose digest text is not their canal text (``digest.column_text`` converts them)."""
        return tuple(i for i, k in enumerate(self.kinds) if k not in (HashKind.TEXT, HashKind.BIT))

    @cached_property
    def values_of(self) -> Callable[[dict[str, Any]], tuple[Any, ...]]:
        """A record's ``data`` as its values in column order, in one C-level call (``KeyError`` when a
        column is missing)."""
        getter = operator.itemgetter(*self.names)
        if len(self.names) == 1:
            return lambda data: (getter(data),)
        return getter

    @cached_property
    def str_converters(self) -> tuple[tuple[int, Callable[[str], str]], ...]:
        """(column, conversion of a str value) of the ``converted`` columns."""
        return tuple((i, STR_CONVERTERS[self.kinds[i]]) for i in self.converted)

    @cached_property
    def native_spec(self) -> tuple[tuple[bytes, ...], bytes, tuple[Callable[[str], str] | None, ...]]:
        """The arguments after ``values`` of the C helper's ``data_digests`` (``relay.ops.verify.topic``):
        the column names as UTF-8, the kinds one byte each, the DOUBLE/FLOAT converters."""
        names = tuple(n.encode("utf-8", "surrogatepass") for n in self.names)
        convert = tuple(
            STR_CONVERTERS[k] if k in (HashKind.DOUBLE, HashKind.FLOAT) else None for k in self.kinds
        )
        return names, bytes(int(k) for k in self.kinds), convert

    @cached_property
    def textual(self) -> tuple[int, ...]:
        return tuple(i for i, k in enumerate(self.kinds) if k in (HashKind.TEXT, HashKind.BIT))

    @cached_property
    def key_names(self) -> tuple[str, ...]:
        return tuple(self.spec.columns[i].name for i in self.join)

    def join_key(self, row: Sequence[str | None]) -> JoinKey:
        """The join key of a source row (canal text values in table order)."""
        head: tuple[str | None, ...] = ()
        if isinstance(self.shard_value, str):
            head = (self.shard_value,)
        elif isinstance(self.shard_value, int):
            head = (row[self.shard_value],)
        return head + tuple(row[i] for i in self.join)

    def key_values(self, key: JoinKey) -> JoinKey:
        """The key columns' values of a join key (its shard part dropped)."""
        return key[1:] if self.shard_value is not None else key

    def key_dict(self, key: JoinKey) -> dict[str, str | None]:
        """A join key as ``{column: value}`` (the shard column included): what a repair asks for."""
        out: dict[str, str | None] = {}
        if isinstance(self.shard_value, int):
            out[self.spec.columns[self.shard_value].name] = key[0]
        out.update(zip(self.key_names, self.key_values(key), strict=True))
        return out

    def join_of(self, values: dict[str, Any]) -> JoinKey:
        """The join key of ``key_dict``'s output (a report's key)."""
        head: tuple[str | None, ...] = ()
        if isinstance(self.shard_value, str):
            head = (self.shard_value,)
        elif isinstance(self.shard_value, int):
            head = (values.get(self.spec.columns[self.shard_value].name),)
        return head + tuple(values.get(n) for n in self.key_names)

    def describe_key(self, key: JoinKey) -> str:
        values = self.key_values(key)
        return ", ".join(f"{n}={v!r}" for n, v in zip(self.key_names, values, strict=True)) or "(whole row)"

    def sort_key(self) -> Callable[[JoinKey], Any]:
        """Orders chunk keys (a join key's ``key_values``) of this shard as MySQL orders them (RANGE only)."""
        keys = [sort_key_of(self.spec, i) for i in self.join]
        fns: list[Callable[[str | None], Any]] = [k for k in keys if k is not None]
        assert len(fns) == len(keys)
        if fns == [_as_int]:
            return _int_order  # one integer column (an AUTO_INCREMENT id): the int itself, no tuples
        if len(fns) == 1:
            one = fns[0]
            return lambda key: (one(key[0]),)

        def order(key: JoinKey) -> Any:
            return tuple([f(v) for f, v in zip(fns, key, strict=True)])

        return order


def record_key_columns(route: Route, spec: TableSpec) -> tuple[int, ...] | None:
    """Column indexes of the record key (the mapping's ``key`` columns, else the PRIMARY KEY), in key
    order, as ``relay.kafka.codec`` builds keys; None when records are keyed by the physical name."""
    names = [c.name for c in spec.columns]
    checked = route.check_columns(names)  # MappingError when the mapping names a missing column
    if checked is None:
        primary = tuple(c.index for c in spec.columns if c.is_key)
        return primary or None
    index = {n: i for i, n in enumerate(names)}
    return tuple(index[n] for n in checked)


def _shard_value(route: Route, spec: TableSpec) -> str | int | None:
    if route.key_shard == KEY_SHARD_PHYSICAL:
        return f"{route.physical_db}.{route.physical_table}"
    column = route.check_shard_column([c.name for c in spec.columns])
    return None if column is None else next(i for i, c in enumerate(spec.columns) if c.name == column)


def build_shard(spec: TableSpec, route: Route, *, mirror: bool, digests_exact: bool, where: str) -> Shard:
    """The shard of ``spec`` routed by ``route``, compared against a topic (``mirror`` False) or a mirror."""
    kinds = tuple(
        HashKind.BIT if i in spec.zerofill else hash_kind(c, k)  # ``c+0``: the number, unpadded
        for i, (c, k) in enumerate(zip(spec.columns, spec.kinds, strict=True))
    )
    record = record_key_columns(route, spec)
    physical = f"{spec.db}.{spec.table}"
    if record is not None:
        shard_value = _shard_value(route, spec)
        if any(spec.columns[i].name.lower() == SHARD_FIELD for i in record) and shard_value is not None:
            shard_value = None  # the codec refuses this table; compare by the key alone
        join, by_data = record, False
    elif spec.key and not mirror:
        join, shard_value, by_data = spec.key, physical, True
    else:
        why = "no PRIMARY KEY and no UNIQUE key over NOT NULL columns"
        if spec.key:
            why = "records are keyed by the physical table name: the mirror identifies rows by all values"
        return Shard(spec, route, kinds, (), None, False, MULTISET, f"{why}: compared as a multiset of rows")
    orderable = all(sort_key_of(spec, i) is not None for i in join)
    if join != spec.key:
        method, reason = ROWS, "record key is not the chunk key: per-row digests"
    elif not orderable:
        method, reason = ROWS, "key ordered by collation: per-row digests"
    elif not digests_exact and any(k in (HashKind.DOUBLE, HashKind.FLOAT) for k in kinds):
        method, reason = ROWS, "the server writes DOUBLE in another layout: per-row digests"
    elif where:
        method, reason = ROWS, "--where: per-row digests"
    else:
        method, reason = RANGE, "chunk digests"
    return Shard(spec, route, kinds, join, shard_value, by_data, method, reason)
