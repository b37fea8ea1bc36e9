"""The Spark mirror of records read from a topic, compared with SELECT over the shards (issue 13).

``mirror_records`` builds a DataFrame with Spark's kafka-source schema from the records a test read
(``relay_harness.Rec``: tombstones included, ``changes`` drops them), runs
``apply_changes(changes(df), out)`` (a Delta table per logical table under ``out``) and reads the mirrored
table back with ``read_mirror`` (``deltalake``, not the code that wrote it) — the ONE place that knows how
a mirrored table is stored: change it there if the table format changes. ``select_rows``
is SELECT * over physical tables; ``assert_mirror_equals`` compares every column of every row, by key.

Row identity on the mirror side is its ``_key`` column (the key columns' values in key-name order, with
the record key's ``_shard`` where the mapping puts the shard identity into keys; see
``relay.spark.decode``); on the SELECT side the same tuple is built from the primary key columns and the
physical ``db.table``. Values are compared as text (``as_text``): ``None`` stays ``None`` (NULL), decimals
in plain notation with their scale, datetimes in ISO form (UTC for aware ones), bytes as hex.

pyspark is imported lazily, so importing this module starts nothing.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any, Protocol

SHARD = "_shard"
Key = tuple[str | None, ...]
Row = dict[str, str | None]


class Record(Protocol):
    """What a record read from the broker has (``relay_harness.Rec``)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int
    timestamp_type: int


# confluent_kafka's timestamp types → Spark's kafka-source timestampType (Kafka's TimestampType id).
_SPARK_TIMESTAMP_TYPE = {0: -1, 1: 0, 2: 1}  # not available, create time, log-append time


def kafka_frame(spark: Any, records: Iterable[Record]) -> Any:
    """The records as a DataFrame with Spark's kafka-source schema (``relay.spark.schema.KAFKA_SCHEMA``)."""
    from relay.spark.schema import KAFKA_SCHEMA

    rows = [
        (
            r.key,
            r.value,
            r.topic,
            r.partition,
            r.offset,
            dt.datetime.fromtimestamp(max(r.timestamp_ms, 0) / 1000, dt.UTC),
            _SPARK_TIMESTAMP_TYPE.get(r.timestamp_type, -1),
        )
        for r in records
    ]
    return spark.createDataFrame(rows, KAFKA_SCHEMA)


def apply_records(spark: Any, records: Iterable[Record], out: Path) -> list[str]:
    """``apply_changes(changes(df), out)`` over the records' frame; returns the tables merged."""
    from relay.spark.apply import apply_changes
    from relay.spark.decode import changes

    return list(apply_changes(changes(kafka_frame(spark, records)), out))


def read_mirror(spark: Any, out: Path, table: str) -> list[dict[str, Any]]:
    """Every row of the mirrored logical ``table`` ("db.table") under ``out``, all columns, as dicts.

    The one place that reads a mirror back: the Delta table ``out/db.table`` (the README's layout) read
    by ``deltalake``, the format's own library, not by the code that wrote it."""
    from deltalake import DeltaTable

    rows = DeltaTable(str(Path(out) / table)).to_pyarrow_table()
    return rows.drop_columns([c for c in rows.column_names if c == "relay_bucket"]).to_pylist()


def mirror_records(spark: Any, records: Iterable[Record], out: Path, table: str) -> list[dict[str, Any]]:
    """Apply the records to the mirror under ``out`` and read ``table`` back."""
    apply_records(spark, records, out)
    return read_mirror(spark, out, table)


def as_text(value: Any) -> str | None:
    """A column value as comparable text, whether it came from PyMySQL or from a Spark row."""
    if value is None:
        return None
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, dt.datetime):
        naive: dt.datetime = value if value.tzinfo is None else value.astimezone(dt.UTC).replace(tzinfo=None)
        return naive.isoformat(sep=" ")
    if isinstance(value, (dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if isinstance(value, float):
        return repr(value)
    return str(value)


def rows_by_key(rows: Iterable[dict[str, Any]]) -> dict[Key, Row]:
    """Mirror rows by their row identity (``_key``), table columns only (the ``_``-prefixed ones are the
    mirror's bookkeeping), values as text; fails on two rows with one key."""
    out: dict[Key, Row] = {}
    for row in rows:
        key = tuple(json.loads(row["_key"]))
        assert key not in out, f"the mirror holds two rows under key {key}: {out[key]} and {row}"
        out[key] = {c: as_text(v) for c, v in row.items() if not c.startswith("_")}
    return out


def select_rows(
    conn: Any, tables: Iterable[str], key: Sequence[str] = ("id",), key_shard: bool = False
) -> dict[Key, Row]:
    """SELECT * over the physical ``tables`` ("db.table"), by the key the mirror should give each row:
    the ``key`` columns' values, plus the physical table as ``_shard`` when ``key_shard``, in name order."""
    names = sorted([*key, *([SHARD] if key_shard else [])])
    out: dict[Key, Row] = {}
    with conn.cursor() as cur:
        for table in tables:
            cur.execute(f"SELECT * FROM {table}")
            columns = [d[0] for d in cur.description]
            for values in cur.fetchall():
                row = {c: as_text(v) for c, v in zip(columns, values, strict=True)}
                ident = tuple(table if n == SHARD else row[n] for n in names)
                assert ident not in out, f"two SELECT rows under key {ident}: {out[ident]} and {row}"
                out[ident] = row
    return out


def assert_mirror_equals(got: dict[Key, Row], want: dict[Key, Row], what: str = "mirror") -> None:
    """Same keys, and for each key the same columns with the same text; the message lists every
    difference (key, mirror row, SELECT row). An empty SELECT fails: it would prove nothing."""
    assert want, "SELECT found no rows: nothing to compare the mirror with"
    missing = sorted(want.keys() - got.keys(), key=str)
    extra = sorted(got.keys() - want.keys(), key=str)
    differ = [(k, got[k], want[k]) for k in sorted(got.keys() & want.keys(), key=str) if got[k] != want[k]]
    if missing or extra or differ:
        lines = [f"{what} != SELECT: {len(missing)} missing, {len(extra)} extra, {len(differ)} different"]
        lines += [f"  missing {k}: SELECT {want[k]}" for k in missing[:20]]
        lines += [f"  extra {k}: mirror {got[k]}" for k in extra[:20]]
        lines += [f"  differs {k}: mirror {g} SELECT {w}" for k, g, w in differ[:20]]
        raise AssertionError("\n".join(lines))


def canonical(rows: Iterable[dict[str, Any]]) -> list[dict[str, str | None]]:
    """Every column of every mirror row (bookkeeping included) as text, sorted: to compare two mirrors."""
    return sorted(({c: as_text(v) for c, v in row.items()} for row in rows), key=lambda r: str(r.get("_key")))


def assert_rebuilds_the_same(
    spark: Any, records: Sequence[Record], out: Path, fresh: Path, table: str, rows: list[dict[str, Any]]
) -> None:
    """Idempotence: the records applied once more to the mirror under ``out`` (whose ``table`` read back
    as ``rows``) change nothing, and a mirror rebuilt under ``fresh`` in two batches (each partition's
    first half, then the rest, as two micro-batches would bring them) is the same, bookkeeping included."""
    want = canonical(rows)
    assert canonical(mirror_records(spark, records, out, table)) == want, "applying the records again changed"
    ends: dict[tuple[str, int], list[int]] = {}
    for r in records:
        ends.setdefault((r.topic, r.partition), []).append(r.offset)
    cut = {tp: (min(offsets) + max(offsets) + 1) // 2 for tp, offsets in ends.items()}
    first = [r for r in records if r.offset < cut[(r.topic, r.partition)]]
    rest = [r for r in records if r.offset >= cut[(r.topic, r.partition)]]
    assert first and rest
    apply_records(spark, first, fresh)
    assert canonical(mirror_records(spark, rest, fresh, table)) == want, "a rebuild in two batches differs"
