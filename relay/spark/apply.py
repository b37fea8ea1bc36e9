"""Change rows → latest-state tables: one parquet directory per logical table, kept by ``apply_changes``.

Owns the merge: the changes of a batch (``relay.spark.decode.changes``; e.g. one ``foreachBatch``
micro-batch) are typed per logical table, turned into upserts and deletes by key, merged with the stored
state and written back. Runs on the Spark driver (the thread calling it, e.g. Spark's foreachBatch
thread); the work runs in Spark tasks.

Layout under ``out``: ``<db>.<table>/`` — the live rows (table columns plus ``_key``, ``_sequence``,
``_source_id``, ``_es``), readable with ``spark.read.parquet``; ``_relay_state/<db>.<table>/tombstones/``
— the keys deleted and the identity of their delete.

Rules: records are de-duplicated by their change identity (source id, sequence, part); the change with the
highest sequence per key wins; a DELETE (or an UPDATE that moved a row to a new key, as records of older
relays have it; the relay now publishes such a change as a DELETE under the old key and an INSERT under the
new one, both with the row's sequence and parts 0 and 1) removes the row and leaves a tombstone, so a
replayed older INSERT cannot bring it back; the key includes the record key's ``_shard`` where the mapping
puts the shard identity into keys, so equal ids of two shards are two rows; repeated records carry the same
identity and change nothing. A snapshot read is an INSERT: an upsert at its sequence (the rows of a snapshot
chunk share one sequence and are told apart by part). Applying the same records twice gives the same table,
which is what makes a re-run micro-batch (or a replay from the start) harmless. A key's sequences stay
ordered across the relay's MySQL failover, ``relay positions set`` and HA takeover (the generation in their
top bits); a key's changes must come from one source id (true for sharded tables, where each key lives on
one shard).

Each table is rewritten whole every batch (parquet has no in-place update): written next to the old
directory, then swapped by rename; a crash between the renames is repaired on the next call.
Tombstones are kept forever. New columns appear in the table as the data brings them (older rows null);
a column dropped by a DDL stays, null for rows changed after the drop.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F  # noqa: N812 (pyspark's convention)

from relay.spark.decode import typed

log = logging.getLogger(__name__)

STATE_DIR = "_relay_state"
_META_LIVE = ("_key", "_sequence", "_part", "_source_id", "_es")


def table_path(out: str | Path, table: str) -> Path:
    return Path(out) / table


def tombstone_path(out: str | Path, table: str) -> Path:
    return Path(out) / STATE_DIR / table / "tombstones"


def _recover(path: Path) -> None:
    """Finish or undo a swap a crash interrupted."""
    prev, nxt = path.with_name(path.name + ".prev"), path.with_name(path.name + ".next")
    if not path.exists() and prev.exists():
        prev.rename(path)
    shutil.rmtree(prev, ignore_errors=True)
    shutil.rmtree(nxt, ignore_errors=True)


def _has_parquet(path: Path) -> bool:
    return path.is_dir() and any(path.glob("*.parquet"))


def _read(spark: object, path: Path) -> DataFrame | None:
    if not _has_parquet(path):
        return None
    return spark.read.parquet(str(path))  # type: ignore[attr-defined,no-any-return]


def _write_next(df: DataFrame, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    df.write.mode("overwrite").parquet(str(path.with_name(path.name + ".next")))


def _commit(path: Path) -> None:
    """Swap the written ``.next`` directory in (only after every new directory is written, so no
    Spark job still needs the old files)."""
    nxt, prev = path.with_name(path.name + ".next"), path.with_name(path.name + ".prev")
    if path.exists():
        path.rename(prev)
    nxt.rename(path)
    shutil.rmtree(prev, ignore_errors=True)


def _events(rows: DataFrame, columns: list[str]) -> DataFrame:
    """Upserts (``_deleted`` false, the row's values) and deletes (true, key only) by key."""
    upserts = rows.where(F.col("_op").isin("INSERT", "UPDATE")).select(
        *columns, "_key", "_sequence", "_part", "_source_id", "_es", F.lit(False).alias("_deleted")
    )
    moved = (F.col("_op") == "UPDATE") & (F.col("_old_key") != F.col("_key"))
    deletes = rows.where((F.col("_op") == "DELETE") | moved).select(
        F.col("_old_key").alias("_key"),
        "_sequence",
        "_part",
        "_source_id",
        "_es",
        F.lit(True).alias("_deleted"),
    )
    return upserts.unionByName(deletes, allowMissingColumns=True)


def _align(old: DataFrame, new: DataFrame) -> DataFrame:
    """``old`` with columns whose type changed (ALTER … MODIFY) cast to the new type."""
    new_types = dict(new.dtypes)
    casts = [
        F.col(c).try_cast(new_types[c]).alias(c) if c in new_types and new_types[c] != t else F.col(c)
        for c, t in old.dtypes
    ]
    return old.select(*casts)


def apply_table(changes_df: DataFrame, out: str | Path, table: str) -> None:
    """Merge the changes of logical ``table`` ("db.table") in ``changes_df`` into its state under ``out``."""
    spark = changes_df.sparkSession
    live_path, tomb_path = table_path(out, table), tombstone_path(out, table)
    _recover(live_path)
    _recover(tomb_path)
    # One row per change identity (source id, sequence): a re-published record changes nothing.
    # One row per change identity (source id, sequence, part): a re-published record changes nothing. A
    # snapshot read is an INSERT: an upsert ordered by its sequence.
    rows = typed(changes_df, table).dropDuplicates(["_source_id", "_sequence", "_part"])
    columns = [c for c in rows.columns if not c.startswith("_")]
    events = _events(rows, columns)
    live, tombs = _read(spark, live_path), _read(spark, tomb_path)
    merged = events
    if live is not None:
        merged = (
            _align(live, events)
            .withColumn("_deleted", F.lit(False))
            .unionByName(merged, allowMissingColumns=True)
        )
    if tombs is not None:
        merged = merged.unionByName(tombs.withColumn("_deleted", F.lit(True)), allowMissingColumns=True)
    # State written before source ids existed has none: "" (what changes() gives such records).
    merged = merged.withColumn("_source_id", F.coalesce(F.col("_source_id"), F.lit(""))).withColumn(
        "_part", F.coalesce(F.col("_part"), F.lit(0).cast("long"))
    )
    # (sequence, part) orders a key's changes; part tells apart the rows of one transaction payload.
    latest = Window.partitionBy("_key").orderBy(
        F.col("_sequence").desc(), F.col("_part").desc(), F.col("_deleted").desc(), F.col("_source_id").desc()
    )
    winners = merged.withColumn("_rank", F.row_number().over(latest)).where("_rank = 1").drop("_rank")
    winners = winners.persist()
    try:
        data_columns = [c for c in winners.columns if not c.startswith("_")]
        _write_next(winners.where(~F.col("_deleted")).select(*data_columns, *_META_LIVE), live_path)
        tombstones = winners.where(F.col("_deleted")).select(
            "_key", "_sequence", "_part", "_source_id", "_es"
        )
        _write_next(tombstones, tomb_path)
        _commit(tomb_path)
        _commit(live_path)
    finally:
        winners.unpersist()


def tables_in(changes_df: DataFrame) -> list[str]:
    """The logical tables ("db.table") with row changes in ``changes_df``."""
    found = (
        changes_df.where(~F.col("is_ddl") & F.col("type").isin("INSERT", "UPDATE", "DELETE"))
        .select("database", "table")
        .distinct()
        .collect()
    )
    return sorted(f"{r['database']}.{r['table']}" for r in found)


def apply_changes(changes_df: DataFrame, out: str | Path, tables: list[str] | None = None) -> list[str]:
    """Merge every logical table's changes in ``changes_df`` (a batch DataFrame of ``changes()`` rows,
    e.g. a foreachBatch micro-batch) into its latest-state table under ``out``; returns the tables.

    ``tables`` limits the merge to those tables. Idempotent: see the module docstring.
    """
    cached = changes_df.persist()
    try:
        present = tables_in(cached)
        chosen = [t for t in present if tables is None or t in tables]
        for table in chosen:
            apply_table(cached, out, table)
            log.info("applied changes of %s to %s", table, table_path(out, table))
        return chosen
    finally:
        cached.unpersist()
