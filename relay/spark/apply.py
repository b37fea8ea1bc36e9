"""Change rows → latest-state tables (and SCD type 2 histories), applied incrementally by key bucket.

Owns the merge: the changes of a batch (``relay.spark.decode.changes``; e.g. one ``foreachBatch``
micro-batch) are typed per logical table, turned into upserts and deletes by key, merged with the stored
rows of the key buckets they touch, and published as a new table version. Runs on the Spark driver (the
thread calling it, e.g. Spark's foreachBatch thread); the work runs in Spark tasks.

Layout under ``out`` (plain parquet, readable by Spark, pyarrow, polars, DuckDB…):

- ``<db>.<table>`` — a symbolic link to the current version, ``_relay_state/<db>.<table>/v<N>/``: the live
  rows (table columns plus ``_key``, ``_sequence``, ``_es``, ``_source``), Hive-partitioned by
  ``relay_bucket`` (no leading ``_``: pyarrow, like Hadoop tools, skips paths starting with ``_``); read it
  with ``spark.read.parquet(out + "/shop.orders")``.
- ``_relay_state/<db>.<table>/v<N>.tombstones/`` — the deleted keys and the sequence of their delete;
  ``v<N>.json`` — the version's columns and truncation watermarks.

Buckets: a key that is one integer (the usual AUTO_INCREMENT id) goes to the range bucket
``r<id div 100000>``, any other key to one of 64 hash buckets ``h<n>``. A batch reads and rewrites only
the buckets it touches; the others are hard-linked into the new version (no data copied), so the cost of
a batch grows with the batch (and the buckets it touches), not with the table. OLTP changes cluster on
recent ids, hence range buckets; keys spread by hash touch up to 64 buckets per batch.

Rules: the change with the highest sequence per key wins; a DELETE (or an UPDATE that moved a row to a
new key) removes the row and leaves a tombstone, so a replayed older INSERT cannot bring it back;
repeated records carry the same sequence and change nothing: a re-run micro-batch or a replay from the
start leaves the table as it is. TRUNCATE or DROP TABLE of a physical table removes its rows (by
``_source``) older than the statement, and a watermark keeps replayed older rows out; rows written after
a re-CREATE come back normally. Sequences order the changes of ONE source binlog: a key's changes must
come from one MySQL server (true for sharded tables, where each key lives on one shard).

Crash safety: a version is written whole (new directories), then published by atomically replacing the
symbolic link; readers see the old or the new version, never a mix. A kill before the switch leaves the
last good version in place and the next call deletes the leftovers. The version before the current one is
kept for readers still scanning it. Needs a POSIX file system (hard links, atomic rename); object stores
want a MERGE-capable format (Delta, Iceberg: see the AutoCDC example). Schema drift: a new column, or a
changed type, rewrites every bucket once (older rows null, values cast with ``try_cast``); a dropped
column stays, null for rows changed after the drop.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F  # noqa: N812 (pyspark's convention)

from relay.errors import SparkSourceError
from relay.spark.decode import typed

log = logging.getLogger(__name__)

STATE_DIR = "_relay_state"
BUCKET = "relay_bucket"
RANGE_SPAN = 100_000
HASH_BUCKETS = 64
_META_LIVE = ("_key", "_sequence", "_part", "_source_id", "_es", "_source")
_META_HISTORY = ("_key", "_start_sequence", "_end_sequence", "_es", "_source")
_CLEARING = ("TRUNCATE", "ERASE")  # TRUNCATE TABLE, DROP TABLE (canal's ERASE)


def table_path(out: str | Path, table: str) -> Path:
    """The latest-state table of logical ``table`` ("db.table"): a link to its current version."""
    return Path(out) / table


def history_path(out: str | Path, table: str) -> Path:
    """The SCD type 2 history of logical ``table`` kept by ``apply_history``."""
    return Path(out) / f"{table}.history"


def bucket_of(key: Column) -> Column:
    """The bucket of a ``_key`` (JSON array text): ``r<n>`` for one integer, ``h<n>`` otherwise."""
    number = F.regexp_extract(key, r'^\["(-?[0-9]{1,18})"\]$', 1)
    ranged = F.concat(F.lit("r"), F.floor(number.cast("long") / RANGE_SPAN).cast("string"))
    hashed = F.concat(F.lit("h"), F.pmod(F.xxhash64(key), F.lit(HASH_BUCKETS)).cast("string"))
    return F.when(number != "", ranged).otherwise(hashed)


# -- versions -----------------------------------------------------------------------------------------


@dataclass
class Version:
    """What ``v<N>.json`` records beside the data of version N."""

    number: int
    columns: list[list[str]]  # [name, Spark SQL type] of the table columns, in order
    cleared: dict[str, int] = field(default_factory=dict)  # physical "db.table" → TRUNCATE/DROP sequence


def _state(out: str | Path, name: str) -> Path:
    return Path(out) / STATE_DIR / name


def _live_dir(out: str | Path, name: str, n: int) -> Path:
    return _state(out, name) / f"v{n:012d}"


def _tomb_dir(out: str | Path, name: str, n: int) -> Path:
    return _state(out, name) / f"v{n:012d}.tombstones"


def current(out: str | Path, name: str) -> Version | None:
    """The published version of table ``name`` under ``out`` (None: none yet)."""
    link = Path(out) / name
    if not link.is_symlink():
        if link.exists():
            raise SparkSourceError(
                f"{link} is a directory of the former layout (one rewritten parquet directory): "
                "replay the topics into a new output directory (or move it away)"
            )
        return None
    number = int(os.readlink(link).rsplit("/v", 1)[1])
    meta = json.loads((_state(out, name) / f"v{number:012d}.json").read_text())
    return Version(**meta)


def _repair(out: str | Path, name: str, keep: int | None) -> None:
    """Delete every version but ``keep`` and the one before it: what a crash left, or what is superseded."""
    state = _state(out, name)
    if not state.is_dir():
        return
    kept = {f"v{n:012d}" for n in ((keep, keep - 1) if keep else ())}
    for entry in state.iterdir():
        if entry.name.split(".", 1)[0] not in kept:
            if entry.is_dir():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)


def _publish(out: str | Path, name: str, n: int) -> None:
    """Make version ``n`` current: one atomic replace of the link."""
    link = Path(out) / name
    tmp = link.with_name(f".{name}.v{n}.link")
    tmp.unlink(missing_ok=True)
    os.symlink(os.path.relpath(_live_dir(out, name, n), link.parent), tmp)
    os.replace(tmp, link)


def _read(spark: Any, path: Path, buckets: list[str] | None) -> DataFrame | None:
    if not any(path.rglob("*.parquet")):
        return None
    df: DataFrame = spark.read.parquet(str(path))
    return df if buckets is None else df.where(F.col(BUCKET).isin(buckets))


def _write(df: DataFrame, path: Path, link_from: Path | None, touched: list[str] | None) -> None:
    """Write ``df`` by bucket to ``path``; hard-link the buckets not touched from ``link_from``."""
    df.write.mode("overwrite").partitionBy(BUCKET).parquet(str(path))
    if link_from is not None and touched is not None and link_from.is_dir():
        for bucket in link_from.glob(f"{BUCKET}=*"):
            if bucket.name.split("=", 1)[1] in touched:
                continue
            target = path / bucket.name
            target.mkdir(parents=True, exist_ok=True)
            for part in bucket.iterdir():
                if part.suffix == ".parquet":
                    os.link(part, target / part.name)
    if not any(path.rglob("*.parquet")):  # no rows: one empty file keeps the schema readable
        df.sparkSession.createDataFrame([], df.schema).coalesce(1).write.mode("overwrite").parquet(str(path))


def _save(
    out: str | Path,
    name: str,
    cur: Version | None,
    parts: tuple[DataFrame, DataFrame],
    touched: list[str] | None,
    version: Version,
) -> None:
    live, tombs = parts
    n = version.number
    old = cur.number if cur else 0
    _write(live, _live_dir(out, name, n), _live_dir(out, name, old) if cur else None, touched)
    _write(tombs, _tomb_dir(out, name, n), _tomb_dir(out, name, old) if cur else None, touched)
    (_state(out, name) / f"v{n:012d}.json").write_text(json.dumps(asdict(version)))
    _publish(out, name, n)
    _repair(out, name, n)


# -- one batch ----------------------------------------------------------------------------------------


def _columns(stored: list[list[str]], batch: list[tuple[str, str]]) -> tuple[list[list[str]], bool]:
    """The table's columns after this batch, and whether any was added or changed its type."""
    merged = [list(c) for c in stored]
    index = {c[0]: i for i, c in enumerate(merged)}
    changed = False
    for name, kind in batch:
        if name not in index:
            index[name] = len(merged)
            merged.append([name, kind])
            changed = True
        elif merged[index[name]][1] != kind:
            merged[index[name]][1] = kind
            changed = True
    return merged, changed


def _conform(df: DataFrame, columns: list[list[str]]) -> list[Column]:
    """``df``'s table columns as ``columns`` (missing → null; a changed type → try_cast)."""
    have = dict(df.dtypes)
    return [
        (F.col(c) if have[c] == t else F.col(c).try_cast(t)).alias(c)
        if c in have
        else F.lit(None).cast(t).alias(c)
        for c, t in columns
    ]


def _clearings(changes_df: DataFrame, table: str) -> dict[str, int]:
    """physical "db.table" → sequence of its latest TRUNCATE/DROP TABLE in this batch."""
    db, _, name = table.partition(".")
    found = (
        changes_df.where(F.col("is_ddl") & F.col("type").isin(*_CLEARING))
        .where((F.col("database") == db) & (F.col("table") == name))
        .groupBy(F.concat_ws(".", "source.database", "source.table").alias("p"))
        .agg(F.max("sequence").alias("s"))
        .collect()
    )
    return {r["p"]: int(r["s"]) for r in found}


def _kept(df: DataFrame, cleared: dict[str, int], sequence: str = "_sequence") -> DataFrame:
    """``df`` without rows older than the TRUNCATE/DROP of their physical table."""
    if not cleared:
        return df
    marks = F.create_map(*[x for p, s in cleared.items() for x in (F.lit(p), F.lit(s))])
    return df.where(F.coalesce(F.col(sequence) >= marks[F.col("_source")], F.lit(True)))


def cdc_rows(rows: DataFrame, columns: list[str]) -> DataFrame:
    """``typed`` rows as upserts and deletes by key: what a MERGE (or AutoCDC) applies.

    Columns: the table ``columns``, ``_key`` (the logical key: the record key's values as a JSON array),
    ``_sequence``, ``_part``, ``_source_id``, ``_es``, ``_source``, ``_deleted``. (``_sequence``, ``_part``)
    orders a key's changes. An INSERT/UPDATE is an upsert of its key; a DELETE
    is a delete; an UPDATE that changed the key is also a delete of the old key. Never analyses ``rows``
    (works on streaming DataFrames and inside pipeline query functions).
    """
    meta = ("_sequence", "_part", "_source_id", "_es", "_source")
    upserts = rows.where(F.col("_op").isin("INSERT", "UPDATE")).select(
        *columns, "_key", *meta, F.lit(False).alias("_deleted")
    )
    moved = (F.col("_op") == "UPDATE") & (F.col("_old_key") != F.col("_key"))
    deletes = rows.where((F.col("_op") == "DELETE") | moved).select(
        *columns, F.col("_old_key").alias("_key"), *meta, F.lit(True).alias("_deleted")
    )
    return upserts.unionByName(deletes)


def _events(rows: DataFrame, columns: list[list[str]]) -> DataFrame:
    """``cdc_rows`` of ``rows`` conformed to the table's ``columns``, bucketed."""
    conformed = rows.select(
        *_conform(rows, columns),
        "_op",
        "_key",
        "_old_key",
        "_sequence",
        "_part",
        "_source_id",
        "_es",
        "_source",
    )
    return cdc_rows(conformed, [c for c, _ in columns]).withColumn(BUCKET, bucket_of(F.col("_key")))


@dataclass
class _Batch:
    """One table's batch, ready to merge: events, the stored parts of the buckets it touches."""

    cur: Version | None
    version: Version
    events: DataFrame
    touched: list[str] | None  # None: every bucket (first version, schema change, truncation)
    live: DataFrame | None
    tombs: DataFrame | None


def _prepare(changes_df: DataFrame, out: str | Path, name: str, table: str) -> _Batch | None:
    spark = changes_df.sparkSession
    cur = current(out, name)
    _repair(out, name, cur.number if cur else None)
    rows = typed(changes_df, table)
    batch_columns = [(c, t) for c, t in rows.dtypes if not c.startswith("_")]
    clearing = _clearings(changes_df, table)
    cleared = dict(cur.cleared) if cur else {}
    for p, s in clearing.items():
        cleared[p] = max(s, cleared.get(p, s))
    columns, changed = _columns(cur.columns if cur else [], batch_columns)
    events = _kept(_events(rows, columns), cleared)
    full = cur is None or changed or bool(clearing)
    touched = None if full else sorted(r[0] for r in events.select(BUCKET).distinct().collect())
    if touched == [] and not clearing:
        return None
    live = tombs = None
    if cur:
        live = _read(spark, _live_dir(out, name, cur.number), touched)
        tombs = _read(spark, _tomb_dir(out, name, cur.number), touched)
    version = Version((cur.number if cur else 0) + 1, columns, cleared)
    return _Batch(cur, version, events, touched, live, tombs)


def apply_table(changes_df: DataFrame, out: str | Path, table: str) -> None:
    """Merge the changes of logical ``table`` ("db.table") in ``changes_df`` into its state under ``out``."""
    b = _prepare(changes_df, out, table, table)
    if b is None:
        return
    columns = b.version.columns
    merged = b.events
    if b.live is not None:
        stored = b.live.select(
            *_conform(b.live, columns), *_META_LIVE, BUCKET, F.lit(False).alias("_deleted")
        )
        merged = merged.unionByName(_kept(stored, b.version.cleared))
    if b.tombs is not None:
        merged = merged.unionByName(b.tombs.withColumn("_deleted", F.lit(True)), allowMissingColumns=True)
    # (sequence, part) orders a key's changes: part tells apart the rows of a transaction payload or a
    # snapshot chunk, which share one sequence. Repeats (the same identity) tie and one of them stays.
    latest = Window.partitionBy("_key").orderBy(
        F.col("_sequence").desc(), F.col("_part").desc(), F.col("_deleted").desc()
    )
    winners = merged.withColumn("_rank", F.row_number().over(latest)).where("_rank = 1").drop("_rank")
    winners = winners.persist()
    try:
        data = [c for c, _ in columns]
        live = winners.where(~F.col("_deleted")).select(*data, *_META_LIVE, BUCKET)
        tombs = winners.where(F.col("_deleted")).select(*_META_LIVE, BUCKET)
        _save(out, table, b.cur, (live, tombs), b.touched, b.version)
    finally:
        winners.unpersist()


def apply_history(changes_df: DataFrame, out: str | Path, table: str) -> None:
    """Keep the SCD type 2 history of logical ``table`` under ``history_path(out, table)``.

    One row per version of a key: the table columns, ``_key``, ``_start_sequence`` (the change that made
    it), ``_end_sequence`` (the next change of the key, null while current), ``_es``, ``_source``. A
    DELETE ends the current version and starts none (as AutoCDC's ``stored_as_scd_type=2``). Versions are
    identified by (key, sequence): idempotent under re-runs and replays, and changes arriving late are
    put in their place. Incremental and crash-safe like ``apply_table``. TRUNCATE/DROP are not applied to
    histories (the history of a truncated row ends at its last change).
    """
    name = history_path(out, table).name
    b = _prepare(changes_df, out, name, table)
    if b is None:
        return
    columns = b.version.columns
    parts = [b.events]
    if b.live is not None:
        stored = b.live.withColumnRenamed("_start_sequence", "_sequence")
        parts.append(
            stored.select(
                *_conform(stored, columns),
                "_key",
                "_sequence",
                "_es",
                "_source",
                BUCKET,
                F.lit(False).alias("_deleted"),
            )
        )
    if b.tombs is not None:
        parts.append(b.tombs.withColumn("_deleted", F.lit(True)))
    merged = parts[0]
    for part in parts[1:]:
        merged = merged.unionByName(part, allowMissingColumns=True)
    # A version is identified by (key, sequence, part): the rows of one transaction payload share a sequence.
    merged = merged.withColumn("_part", F.coalesce(F.col("_part"), F.lit(0).cast("long")))
    one = Window.partitionBy("_key", "_sequence", "_part").orderBy(F.col("_deleted").desc())
    merged = merged.withColumn("_rank", F.row_number().over(one)).where("_rank = 1").drop("_rank")
    ends = F.lead("_sequence").over(Window.partitionBy("_key").orderBy("_sequence", "_part"))
    history = merged.withColumn("_end_sequence", ends).persist()
    try:
        data = [c for c, _ in columns]
        versions = history.where(~F.col("_deleted")).withColumnRenamed("_sequence", "_start_sequence")
        markers = history.where(F.col("_deleted")).select("_key", "_sequence", "_es", "_source", BUCKET)
        _save(
            out, name, b.cur, (versions.select(*data, *_META_HISTORY, BUCKET), markers), b.touched, b.version
        )
    finally:
        history.unpersist()


def write_table(rows: DataFrame, out: str | Path, table: str) -> None:
    """Publish ``rows`` (table columns plus ``_key``, ``_sequence``, ``_es``, ``_source``) as a new version
    of ``table`` holding exactly those rows: an initial load (e.g. from a snapshot), or a rebuild."""
    cur = current(out, table)
    _repair(out, table, cur.number if cur else None)
    columns = [[c, t] for c, t in rows.dtypes if not c.startswith("_")]
    version = Version((cur.number if cur else 0) + 1, columns)
    live = rows.select(*[c for c, _ in columns], *_META_LIVE, bucket_of(F.col("_key")).alias(BUCKET))
    tombs = live.where(F.lit(False)).select(*_META_LIVE, BUCKET)
    _save(out, table, cur, (live, tombs), None, version)


def tables_in(changes_df: DataFrame) -> list[str]:
    """The logical tables ("db.table") with row changes, or a TRUNCATE/DROP TABLE, in ``changes_df``."""
    rows = ~F.col("is_ddl") & F.col("type").isin("INSERT", "UPDATE", "DELETE")
    found = (
        changes_df.where(rows | (F.col("is_ddl") & F.col("type").isin(*_CLEARING)))
        .select("database", "table")
        .distinct()
        .collect()
    )
    return sorted(f"{r['database']}.{r['table']}" for r in found)


def apply_changes(
    changes_df: DataFrame, out: str | Path, tables: list[str] | None = None, *, history: bool = False
) -> list[str]:
    """Merge every logical table's changes in ``changes_df`` (a batch DataFrame of ``changes()`` rows,
    e.g. a foreachBatch micro-batch) into its latest-state table under ``out``; returns the tables.

    ``tables`` limits the merge to those tables; ``history`` also keeps each table's SCD type 2 history
    (``apply_history``). Idempotent and crash-safe: see the module docstring.
    """
    cached = changes_df.persist()
    try:
        present = tables_in(cached)
        chosen = [t for t in present if tables is None or t in tables]
        for table in chosen:
            apply_table(cached, out, table)
            if history:
                apply_history(cached, out, table)
            log.info("applied changes of %s to %s", table, table_path(out, table))
        return chosen
    finally:
        cached.unpersist()
