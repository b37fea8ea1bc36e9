"""The merge of one key bucket, in Arrow: stored rows + a batch's changes → the bucket's new rows.

Owns the rules of the mirror, as pure functions on ``pyarrow`` tables (no Spark, no I/O): the change
with the highest (``_sequence``, ``_part``) per key wins, a delete beats an upsert of the same identity,
a stored row beats a repeat of itself (so a replay reports "unchanged" and writes nothing), deletes
become tombstones, TRUNCATE/DROP watermarks drop older rows of their physical table, SCD type 2
versions get their end sequence from the next change of their key. Only the stored rows whose key the
batch names take part; every other row passes through untouched (no sort, no shuffle), so the cost of
a bucket is reading and writing its files. Called by ``relay.spark.bucket_task`` in Spark tasks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from relay.spark.layout import RowAction, arrow_type

_ORIGIN = "_origin"  # 0: stored, 1: this batch


@dataclass(frozen=True)
class Merged:
    """A bucket after a batch: its rows and tombstones (None where that part did not change)."""

    rows: pa.Table | None
    tombs: pa.Table | None


def _cast(column: Any, target: pa.DataType) -> Any:
    """``column`` as ``target``; values that do not convert become null (Spark's ``try_cast``)."""
    if column.type == target:
        return column
    try:
        return pc.cast(column, target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        out = []
        for value in column.to_pylist():
            try:
                out.append(pa.scalar(value).cast(target).as_py() if value is not None else None)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
                out.append(None)
        return pa.array(out, target)


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with exactly ``schema``'s columns: by name, cast where the type differs, null where
    missing (a column added after the file was written)."""
    names = set(table.column_names)
    arrays = [
        _cast(table.column(f.name), f.type) if f.name in names else pa.nulls(table.num_rows, f.type)
        for f in schema
    ]
    return pa.Table.from_arrays(arrays, schema=schema)


def act(table: pa.Table, actions: Sequence[RowAction]) -> pa.Table:
    """``table`` (a file's rows, its own columns) after the ``actions`` of schema changes, in order: a
    column set (or copied from another) where the row's ``_source`` and ``_sequence`` say the change
    found it; a column the file lacks is added first (null)."""
    for a in actions:
        kind = arrow_type(a.spark_type)
        names = table.column_names
        hit = pc.fill_null(
            pc.and_(
                pc.equal(table.column("_source"), a.source), pc.less(table.column("_sequence"), a.sequence)
            ),
            False,
        )
        if a.copy_from is not None:
            new: Any = (
                _cast(table.column(a.copy_from), kind)
                if a.copy_from in names
                else pa.nulls(table.num_rows, kind)
            )
        else:
            new = pa.scalar(a.value, kind)
        current = _cast(table.column(a.column), kind) if a.column in names else pa.nulls(table.num_rows, kind)
        value = pc.if_else(hit, new, current)
        if a.column in names:
            table = table.set_column(names.index(a.column), a.column, value)
        else:
            table = table.append_column(a.column, value)
    return table


def _first_per_key(table: pa.Table, keys: list[str]) -> pa.Table:
    """The first row of each run of equal ``keys`` in a sorted ``table``."""
    if table.num_rows <= 1:
        return table
    same: Any = None
    for name in keys:
        col = table.column(name).combine_chunks()
        equal = pc.fill_null(pc.equal(col.slice(1), col.slice(0, len(col) - 1)), False)
        same = equal if same is None else pc.and_(same, equal)
    first = pa.concat_arrays([pa.array([True]), pc.invert(same)])
    return table.filter(first)


def kept(table: pa.Table, cleared: Mapping[str, int], sequence: str = "_sequence") -> pa.Table:
    """``table`` without the rows older than the TRUNCATE/DROP of their physical table (``_source``)."""
    if not cleared or table.num_rows == 0:
        return table
    drop: Any = None
    for source, mark in cleared.items():
        hit = pc.and_(pc.equal(table.column("_source"), source), pc.less(table.column(sequence), mark))
        drop = hit if drop is None else pc.or_(drop, hit)
    return table.filter(pc.invert(pc.fill_null(drop, False)))


def _split(stored: pa.Table, keys: Any) -> tuple[pa.Table, pa.Table]:
    """(rows whose ``_key`` is in ``keys``, the others)."""
    hit = pc.fill_null(pc.is_in(stored.column("_key"), value_set=keys), False)
    return stored.filter(hit), stored.filter(pc.invert(hit))


def _tagged(table: pa.Table, schema: pa.Schema, deleted: bool, origin: int) -> pa.Table:
    out = conform(table, schema)
    out = out.append_column("_deleted", pa.array([deleted] * out.num_rows, pa.bool_()))
    return out.append_column(_ORIGIN, pa.array([origin] * out.num_rows, pa.int8()))


def _events(events: pa.Table, schema: pa.Schema) -> pa.Table:
    out = conform(events, schema).append_column("_deleted", events.column("_deleted").cast(pa.bool_()))
    return out.append_column(_ORIGIN, pa.array([1] * out.num_rows, pa.int8()))


def merge_latest(
    events: pa.Table,
    rows: pa.Table,
    tombs: pa.Table,
    cleared: Mapping[str, int],
    clear_all: bool = False,
) -> Merged:
    """The latest state of a bucket: ``rows`` (stored live rows) and ``tombs`` (stored tombstones, with
    ``rows``' bookkeeping columns) merged with ``events`` (upserts and deletes: ``_deleted``).

    ``clear_all``: a new watermark arrived, so the stored rows are filtered by ``cleared`` too."""
    schema, tomb_schema = rows.schema, tombs.schema
    events = kept(events.filter(pc.is_valid(events.column("_key"))), cleared)
    cleared_rows = kept(rows, cleared) if clear_all else rows
    truncated = cleared_rows.num_rows != rows.num_rows
    if events.num_rows == 0:
        return Merged(cleared_rows if truncated else None, None)
    if cleared_rows.num_rows == 0 and tombs.num_rows == 0 and _unique(events.column("_key")):
        return _first_state(events, schema, tomb_schema, cleared_rows if truncated else None)
    keys = pc.unique(events.column("_key"))
    row_hit, row_rest = _split(cleared_rows, keys)
    tomb_hit, tomb_rest = _split(tombs, keys)
    candidates = pa.concat_tables(
        [
            _tagged(row_hit, schema, False, 0),
            _tagged(tomb_hit, schema, True, 0),
            _events(events, schema),
        ]
    )
    order = [
        ("_key", "ascending"),
        ("_sequence", "descending"),
        ("_part", "descending"),
        ("_deleted", "descending"),
        (_ORIGIN, "ascending"),
    ]
    winners = _first_per_key(candidates.sort_by(order), ["_key"])
    fresh = winners.filter(pc.equal(winners.column(_ORIGIN), 1))
    if fresh.num_rows == 0:
        return Merged(cleared_rows if truncated else None, None)
    moved = fresh.column("_key")
    deleted = fresh.column("_deleted")
    rows_changed = truncated or pc.any(pc.invert(deleted)).as_py() or _any_in(row_hit, moved)
    tombs_changed = pc.any(deleted).as_py() or _any_in(tomb_hit, moved)
    live_winners = winners.filter(pc.invert(winners.column("_deleted"))).select(schema.names)
    dead_winners = winners.filter(winners.column("_deleted")).select(tomb_schema.names)
    new_rows = pa.concat_tables([row_rest, conform(live_winners, schema)]) if rows_changed else None
    new_tombs = pa.concat_tables([tomb_rest, conform(dead_winners, tomb_schema)]) if tombs_changed else None
    return Merged(new_rows, new_tombs)


def _unique(keys: Any) -> bool:
    return bool(pc.count_distinct(keys).as_py() == len(keys))


def _first_state(
    events: pa.Table, schema: pa.Schema, tomb_schema: pa.Schema, empty: pa.Table | None
) -> Merged:
    """A bucket with nothing stored (an initial load) and one change per key: the changes are its state,
    no sort needed. ``empty``: the bucket's rows were all truncated (write it empty unless rows come)."""
    deleted = pc.fill_null(events.column("_deleted").cast(pa.bool_()), False)
    live = events.filter(pc.invert(deleted))
    dead = events.filter(deleted)
    rows = conform(live, schema) if live.num_rows else empty
    return Merged(rows, conform(dead, tomb_schema) if dead.num_rows else None)


def _any_in(stored: pa.Table, keys: Any) -> bool:
    return stored.num_rows > 0 and bool(pc.any(pc.is_in(stored.column("_key"), value_set=keys)).as_py())


def merge_history(events: pa.Table, versions: pa.Table, markers: pa.Table) -> Merged:
    """The SCD type 2 history of a bucket: ``versions`` (one row per version of a key:
    ``_start_sequence``, ``_end_sequence`` null while current) and ``markers`` (the deletes, which end a
    version and start none) merged with ``events``. A version is identified by (key, sequence, part),
    so re-runs and replays change nothing and late changes are put in their place."""
    schema, marker_schema = versions.schema, markers.schema
    events = events.filter(pc.is_valid(events.column("_key")))
    if events.num_rows == 0:
        return Merged(None, None)
    keys = pc.unique(events.column("_key"))
    version_hit, version_rest = _split(versions, keys)
    marker_hit, marker_rest = _split(markers, keys)
    work = schema.remove(schema.get_field_index("_end_sequence"))
    work = work.set(work.get_field_index("_start_sequence"), pa.field("_sequence", pa.int64()))
    stored_versions = version_hit.rename_columns(
        ["_sequence" if n == "_start_sequence" else n for n in version_hit.column_names]
    )
    candidates = pa.concat_tables(
        [
            _tagged(stored_versions, work, False, 0),
            _tagged(marker_hit, work, True, 0),
            _events(events, work),
        ]
    )
    identity = [("_key", "ascending"), ("_sequence", "ascending"), ("_part", "ascending")]
    ranked = candidates.sort_by([*identity, (_ORIGIN, "ascending"), ("_deleted", "descending")])
    unique = _first_per_key(ranked, ["_key", "_sequence", "_part"])
    if not pc.any(pc.equal(unique.column(_ORIGIN), 1)).as_py():
        return Merged(None, None)
    ends = _next_in_key(unique)
    with_end = unique.append_column("_end_sequence", ends)
    alive = with_end.filter(pc.invert(with_end.column("_deleted")))
    alive = alive.rename_columns(["_start_sequence" if n == "_sequence" else n for n in alive.column_names])
    dead = with_end.filter(with_end.column("_deleted"))
    return Merged(
        pa.concat_tables([version_rest, conform(alive, schema)]),
        pa.concat_tables([marker_rest, conform(dead, marker_schema)]),
    )


def _next_in_key(table: pa.Table) -> Any:
    """For rows sorted by key and sequence: the next row's ``_sequence`` within the same key, else null."""
    n = table.num_rows
    if n == 0:
        return pa.array([], pa.int64())
    keys = table.column("_key").combine_chunks()
    seqs = table.column("_sequence").combine_chunks()
    same = pc.fill_null(pc.equal(keys.slice(1), keys.slice(0, n - 1)), False)
    following = seqs.slice(1)
    nxt = pc.if_else(same, following, pa.nulls(n - 1, pa.int64()))
    return pa.concat_arrays([nxt, pa.nulls(1, pa.int64())])
