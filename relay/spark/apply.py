"""Change rows → latest-state tables (and SCD type 2 histories) in Delta Lake or Iceberg, by key bucket.

Owns the merge of a batch (``relay.spark.decode.changes``; e.g. one ``foreachBatch`` micro-batch) on the
Spark driver (the thread calling it, e.g. Spark's foreachBatch thread): the changes are typed per
logical table and turned into upserts and deletes by key; Spark tasks (``relay.spark.tasks``, one per key
bucket the batch touches) read the bucket's current files, merge (``relay.spark.merge``) and write new
files through pyarrow's file systems; the driver then commits them in ONE transaction of the table format
(``relay.spark.delta`` / ``relay.spark.iceberg``): the new files added, the replaced ones removed. A
batch costs what it touches, wherever the table lives (local disk, S3, GCS, ADLS, HDFS).

Buckets: a key that is one integer (the usual AUTO_INCREMENT id) goes to the range bucket
``r<id div 100000>``, any other key to one of 64 hash buckets ``h<n>``; ``relay_bucket`` is the tables'
partition column. OLTP changes cluster on recent ids, hence range buckets. A bucket is always written
whole (one file per million rows), so a table holds about one file per bucket however many batches
ran: the files of replaced versions stay for time travel until the periodic maintenance removes them.

Rules: the change with the highest (sequence, part) per key wins; a DELETE (or an UPDATE that moved a row
to a new key) removes the row and leaves a tombstone in the table's tombstone table (``relay.spark.tables``),
so a replayed older INSERT cannot bring it back; repeated records carry the same identity and change
nothing — a bucket whose rows do not change is not rewritten, a batch that changes nothing commits
nothing. TRUNCATE or DROP TABLE of a physical table removes its rows (by ``_source``) older than the
statement, and a watermark (kept in the relay's state) keeps replayed older rows out; rows written after a
re-CREATE come back normally. Sequences order the changes of ONE source binlog: a key's changes must come
from one MySQL server (true for sharded tables, where each key lives on one shard).

Exactly once: with a micro-batch id (``foreachBatch``), the commit records it (Delta's application
transaction ``txn``, and the relay's state in every commit: Iceberg table property / Delta commit info) with
the batch's Kafka offsets and highest sequence; a re-run of that batch is skipped. A kill between the
tasks' writes and the commit leaves files no version references; the next apply deletes them
(``MirrorTable.recover``). Schema drift: a new column is the format's schema evolution (older rows read
null; no file rewritten); a changed type rewrites every bucket once, in the same commit as the schema
change (values cast, null where they do not convert); a dropped column stays, null for rows changed after.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F  # noqa: N812 (pyspark's convention)

from relay.spark.decode import typed
from relay.spark.layout import BUCKET, HASH_BUCKETS, RANGE_SPAN, MirrorState, Written, file_schema
from relay.spark.tables import MirrorTable, MirrorTarget, target_of
from relay.spark.tasks import WRITTEN_DDL, BucketJob, PartSpec

log = logging.getLogger(__name__)

_CLEARING = ("TRUNCATE", "ERASE")  # TRUNCATE TABLE, DROP TABLE (canal's ERASE)
Location = str | Path | MirrorTarget


@dataclass(frozen=True)
class BatchId:
    """A micro-batch: the application (one mirror query: its checkpoint) and the batch number."""

    app_id: str
    batch_id: int


def bucket_of(key: Column) -> Column:
    """The bucket of a ``_key`` (JSON array text): ``r<n>`` for one integer, ``h<n>`` otherwise."""
    number = F.regexp_extract(key, r'^\["(-?[0-9]{1,18})"\]$', 1)
    ranged = F.concat(F.lit("r"), F.floor(number.cast("long") / RANGE_SPAN).cast("string"))
    hashed = F.concat(F.lit("h"), F.pmod(F.xxhash64(key), F.lit(HASH_BUCKETS)).cast("string"))
    return F.when(number != "", ranged).otherwise(hashed)


def _columns(
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


def _batch_facts(changes_df: DataFrame) -> tuple[dict[str, dict[str, int]], int | None]:
    """The batch's last offset per topic partition, and its highest sequence."""
    rows = (
        changes_df.groupBy("topic", "partition")
        .agg(F.max("offset").alias("o"), F.max("sequence").alias("s"))
        .collect()
    )
    offsets: dict[str, dict[str, int]] = {}
    for r in rows:
        offsets.setdefault(r["topic"], {})[str(r["partition"])] = int(r["o"])
    top = max((int(r["s"]) for r in rows if r["s"] is not None), default=None)
    return offsets, top


@dataclass
class _Plan:
    """One table's batch, ready for the tasks."""

    mirror: MirrorTable
    kind: str
    state: MirrorState
    events: DataFrame
    touched: list[str]
    full: list[str] = field(default_factory=list)  # buckets to rewrite without events
    rewrite: bool = False
    clear_all: bool = False
    changed_state: bool = False


def _plan(
    changes_df: DataFrame, target: MirrorTarget, table: str, kind: str, batch: BatchId | None
) -> _Plan | None:
    mirror = MirrorTable(target, table, kind)
    mirror.recover()
    old = mirror.rows.state() if mirror.rows.exists() else None
    if batch is not None and old is not None and old.batches.get(batch.app_id, -1) >= batch.batch_id:
        log.info("%s: micro-batch %d of %s is already applied", mirror.where, batch.batch_id, batch.app_id)
        return None
    rows = typed(changes_df, table)
    batch_columns = [(c, t) for c, t in rows.dtypes if not c.startswith("_")]
    columns, added, retyped = _columns(old.columns if old else [], batch_columns)
    cleared = dict(old.cleared) if old else {}
    clear_all = False
    if kind == "latest":
        for p, s in _clearings(changes_df, table).items():
            if s > cleared.get(p, -1):
                cleared[p], clear_all = s, True
    events = _events(rows, columns).persist()
    touched = sorted(r[0] for r in events.select(BUCKET).distinct().collect())
    state = MirrorState(columns, cleared, dict(old.batches) if old else {})
    plan = _Plan(mirror, kind, state, events, touched, rewrite=retyped and old is not None)
    plan.clear_all = clear_all
    plan.changed_state = old is None or bool(added) or retyped or clear_all
    if old is not None and (plan.rewrite or clear_all):
        plan.full = sorted(set(mirror.rows.files()) - set(touched))
    if not touched and not plan.full and not plan.changed_state:
        events.unpersist()
        return None
    _prepare_tables(plan, old, added)
    return plan


def _prepare_tables(plan: _Plan, old: MirrorState | None, added: list[str]) -> None:
    """Create the tables, or add the new columns (Delta: a commit of its own, harmless to readers)."""
    mirror, narrow = plan.mirror, plan.mirror.target.format == "delta"
    schema = file_schema(plan.state.columns, plan.kind, "rows", narrow_ints=narrow)
    if old is None and not mirror.rows.exists():
        if not mirror.tombs.exists():
            mirror.tombs.create(file_schema([], plan.kind, "tombs"), None)
        mirror.rows.create(schema, None)
    elif added and not plan.rewrite and old is not None:
        evolved = MirrorState(plan.state.columns, old.cleared, old.batches, old.offsets, old.max_sequence)
        mirror.rows.add_columns([schema.field(c) for c in added], evolved)


def _run(plan: _Plan, batch: BatchId | None, facts: tuple[dict[str, dict[str, int]], int | None]) -> int:
    """The tasks, then the commits (tombstones first, then the rows with the state); files written."""
    mirror, target = plan.mirror, plan.mirror.target
    narrow = target.format == "delta"
    rows_schema = file_schema(plan.state.columns, plan.kind, "rows", narrow_ints=narrow)
    tomb_schema = file_schema([], plan.kind, "tombs")
    buckets = [*plan.touched, *plan.full]
    mirror.rows.begin(rows_schema)
    mirror.tombs.begin(tomb_schema)
    write_id, rows_dir, tombs_dir = mirror.begin_write()
    job = BucketJob(
        target.storage,
        plan.kind,
        PartSpec(
            rows_schema,
            mirror.rows.files(buckets),
            rows_dir,
            mirror.rows.bucket_in_file,
            mirror.rows.file_schema(rows_schema),
        ),
        PartSpec(
            tomb_schema,
            mirror.tombs.files(buckets),
            tombs_dir,
            mirror.tombs.bucket_in_file,
            mirror.tombs.file_schema(tomb_schema),
        ),
        plan.state.cleared,
        plan.clear_all,
        plan.rewrite,
    )
    frame = plan.events
    if plan.full:
        markers = frame.sparkSession.createDataFrame([(b,) for b in plan.full], f"{BUCKET} string")
        frame = frame.unionByName(markers, allowMissingColumns=True)
    written = [
        Written(**r.asDict())
        for r in frame.groupBy(BUCKET).applyInArrow(job.function(), WRITTEN_DDL).collect()
    ]
    plan.events.unpersist()
    rows = [w for w in written if w.part == "rows"]
    tombs = [w for w in written if w.part == "tombs"]
    if tombs:
        mirror.tombs.commit(tombs, {w.bucket for w in tombs}, tomb_schema, state=None, write_id=write_id)
    if rows or plan.changed_state:
        state = plan.state
        offsets, top = facts
        if batch is not None:
            state.batches[batch.app_id] = batch.batch_id
        state.offsets = offsets
        state.max_sequence = top
        app = (batch.app_id, batch.batch_id) if batch is not None else None
        mirror.rows.commit(
            rows,
            {w.bucket for w in rows},
            rows_schema,
            state=state,
            write_id=write_id,
            overwrite=plan.rewrite,
            app=app,
        )
        _maintain(mirror)
    mirror.finish_write()
    return len([w for w in written if w.path])


def _maintain(mirror: MirrorTable) -> None:
    every = mirror.target.maintain_every
    if every and mirror.rows.version() % every == 0:
        for part in (mirror.rows, mirror.tombs):
            part.maintain(mirror.target.retention_hours)


def apply_table(
    changes_df: DataFrame,
    out: Location,
    table: str,
    *,
    kind: str = "latest",
    batch: BatchId | None = None,
    facts: tuple[dict[str, dict[str, int]], int | None] = ({}, None),
) -> None:
    """Merge the changes of logical ``table`` ("db.table") in ``changes_df`` into its mirror table."""
    plan = _plan(changes_df, target_of(out), table, kind, batch)
    if plan is not None:
        files = _run(plan, batch, facts)
        log.info("%s: %d buckets merged, %d files written", plan.mirror.where, len(plan.touched), files)


def apply_history(changes_df: DataFrame, out: Location, table: str, batch: BatchId | None = None) -> None:
    """Keep the SCD type 2 history of logical ``table``: one row per version of a key — the table
    columns, ``_key``, ``_start_sequence`` (the change that made it), ``_end_sequence`` (the next change
    of the key, null while current), ``_part``, ``_source_id``, ``_es``, ``_source``. A DELETE ends the
    current version and starts none (as AutoCDC's ``stored_as_scd_type=2``); its marker stays in the
    history's tombstone table. Versions are identified by (key, sequence, part): idempotent under
    re-runs and replays, and changes arriving late are put in their place. TRUNCATE/DROP are not
    applied to histories (the history of a truncated row ends at its last change)."""
    apply_table(changes_df, out, table, kind="history", batch=batch)


def write_table(rows: DataFrame, out: Location, table: str) -> None:
    """Replace ``table``'s mirror by ``rows`` (table columns plus ``_key``, ``_sequence``, ``_part``,
    ``_source_id``, ``_es``, ``_source``): an initial load (e.g. from a snapshot), or a rebuild."""
    target = target_of(out)
    mirror = MirrorTable(target, table)
    mirror.recover()
    columns = [[c, t] for c, t in rows.dtypes if not c.startswith("_")]
    narrow = target.format == "delta"
    schema = file_schema(columns, "latest", "rows", narrow_ints=narrow)
    tomb_schema = file_schema([], "latest", "tombs")
    if not mirror.rows.exists():
        if not mirror.tombs.exists():
            mirror.tombs.create(tomb_schema, None)
        mirror.rows.create(schema, None)
    mirror.rows.begin(schema)
    write_id, rows_dir, tombs_dir = mirror.begin_write()
    job = BucketJob(
        target.storage,
        "load",
        PartSpec(schema, {}, rows_dir, mirror.rows.bucket_in_file, mirror.rows.file_schema(schema)),
        PartSpec(tomb_schema, {}, tombs_dir),
    )
    frame = rows.withColumn(BUCKET, bucket_of(F.col("_key")))
    written = [
        Written(**r.asDict())
        for r in frame.groupBy(BUCKET).applyInArrow(job.function(), WRITTEN_DDL).collect()
    ]
    mirror.rows.commit(
        [w for w in written if w.path],
        set(),
        schema,
        state=MirrorState(columns),
        write_id=write_id,
        overwrite=True,
    )
    mirror.finish_write()


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
    changes_df: DataFrame,
    out: Location,
    tables: list[str] | None = None,
    *,
    history: bool = False,
    batch: BatchId | None = None,
) -> list[str]:
    """Merge every logical table's changes in ``changes_df`` (a batch DataFrame of ``changes()`` rows,
    e.g. a foreachBatch micro-batch) into its mirror table under ``out`` (a path or URI: Delta tables; or
    a ``MirrorTarget`` naming the format, storage settings and catalog); returns the tables.

    ``tables`` limits the merge to those tables; ``history`` also keeps each table's SCD type 2 history
    (``apply_history``); ``batch`` makes a re-run of that micro-batch a no-op. See the module docstring."""
    target = target_of(out)
    cached = changes_df.persist()
    try:
        present = tables_in(cached)
        chosen = [t for t in present if tables is None or t in tables]
        facts = _batch_facts(cached) if chosen else ({}, None)
        for table in chosen:
            apply_table(cached, target, table, batch=batch, facts=facts)
            if history:
                apply_table(cached, target, table, kind="history", batch=batch, facts=facts)
        return chosen
    finally:
        cached.unpersist()


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
