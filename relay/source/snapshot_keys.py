"""Snapshots of given keys (``relay snapshot run --keys``, ``relay verify --repair``): the keys' rows as they
are now, and a DELETE for each key the table no longer has.

A key request names, per physical table, key columns (the record key's: the PRIMARY KEY, or the
mapping's ``key`` columns, and a ``column:`` shard column) and the keys' canal text values. The snapshot
reads them in batches with ``WHERE (cols) IN (…)`` between two binlog positions, exactly as it reads
chunks (``relay.source.snapshot``): a key the binlog changed in the window is dropped (its change carries
its state), the rest is put as ONE entry at the chunk's place. A key with no row becomes a delete row in
that entry (a before image holding the key columns, the other columns NULL): published as a DELETE
marked as a snapshot read (a tombstone follows on a compacted topic), so a topic or mirror holding a row
the source deleted without a binlog record converges too. Progress is checkpointed as the number of keys
done (``after`` = ``["<n>"]``). Pure helpers; the snapshot reader threads call them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from relay.errors import SourceError
from relay.source.snapshot_tables import TableSpec, quote_name

MAX_KEYS = 10_000  # keys per request (they travel in every checkpoint until done); more: snapshot the table
KeyValues = tuple[str | None, ...]


def check_request(keys: Any) -> str | None:
    """Why ``keys`` is not a key request (``{"db.table": {"columns": [...], "values": [[...], ...]}}``; a
    table given as null is snapshotted whole)."""
    if not isinstance(keys, dict) or not keys:
        return "keys: expected an object naming physical tables"
    total = 0
    for name, item in keys.items():
        if not isinstance(name, str) or "." not in name:
            return f"keys: {name!r} is not a physical db.table"
        if item is None:  # the whole table (one without a key)
            continue
        if not isinstance(item, dict):
            return f"keys.{name}: expected columns and values"
        columns, values = item.get("columns"), item.get("values")
        if not isinstance(columns, list) or not columns or not all(isinstance(c, str) for c in columns):
            return f"keys.{name}.columns: expected a list of column names"
        if not isinstance(values, list) or not values:
            return f"keys.{name}.values: expected a list of keys"
        for value in values:
            if not isinstance(value, list) or len(value) != len(columns):
                return f"keys.{name}.values: every key has {len(columns)} value(s)"
            if not all(v is None or isinstance(v, str) for v in value):
                return f"keys.{name}.values: values are canal text (strings) or null"
        total += len(values)
    if total > MAX_KEYS:
        return f"keys: {total} keys, more than {MAX_KEYS}: snapshot the table instead"
    return None


def key_spec(spec: TableSpec, columns: Sequence[str]) -> TableSpec:
    """``spec`` with the request's columns as its key (the chunk key of a key snapshot)."""
    index = {c.name.lower(): i for i, c in enumerate(spec.columns)}
    missing = [c for c in columns if c.lower() not in index]
    if missing:
        raise SourceError(f"snapshot of keys: {spec.name} has no column {', '.join(missing)}")
    return replace(spec, key=tuple(index[c.lower()] for c in columns))


def key_query(spec: TableSpec, keys: Sequence[KeyValues]) -> tuple[str, list[Any]]:
    """The SELECT of the rows of ``keys`` (``spec.key`` columns)."""
    names = ", ".join(quote_name(spec.columns[i].name) for i in spec.key).replace("%", "%%")
    one = "(" + ", ".join(["%s"] * len(spec.key)) + ")"
    params: list[Any] = []
    for key in keys:
        params.extend(spec.key_param(j, key[j]) for j in range(len(spec.key)))
    sql = f"SELECT {spec.select_list()} FROM {spec.qualified}".replace("%", "%%")
    sql += f" WHERE ({names}) IN ({', '.join([one] * len(keys))})"
    return sql, params


def absent(
    spec: TableSpec, keys: Sequence[KeyValues], rows: Sequence[Sequence[str | None]]
) -> list[KeyValues]:
    """The keys none of ``rows`` has."""
    found = {tuple(str(v) if v is not None else None for v in spec.key_of(r)) for r in rows}
    return [k for k in keys if tuple(k) not in found]


def delete_image(spec: TableSpec, key: KeyValues) -> tuple[str | None, ...]:
    """The before image of a key's delete row: its key columns, every other column NULL."""
    image: list[str | None] = [None] * len(spec.columns)
    for i, value in zip(spec.key, key, strict=True):
        image[i] = value
    return tuple(image)
