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
(``MirrorTable.recover``). Schema drift in the rows: a new column is the format's schema evolution (older
rows read null; no file rewritten); a changed type rewrites every bucket once, in the same commit as the
schema change (values cast, null where they do not convert). ALTER TABLE records (``relay.spark.ddl``):
applied as MySQL applies them — a default given to the rows older than the statement, a dropped column
removed, a renamed one's values moved, a widened type cast — by rewriting every bucket once, in the
batch's one commit; what cannot be applied exactly raises ``MirrorDdlError`` before anything is written.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F  # noqa: N812 (pyspark's convention)

from relay.spark.altering import check_ddl, follow_ddl
from relay.spark.ddl import merged_columns
from relay.spark.decode import TXN_COLUMNS, typed
from relay.spark.layout import BUCKET, HASH_BUCKETS, RANGE_SPAN, MirrorState, RowAction, Written, file_schema
from relay.spark.survey import Survey, survey
from relay.spark.tables import MirrorTable, MirrorTarget, target_of
from relay.spark.tasks import WRITTEN_DDL, BucketJob, PartSpec

log = logging.getLogger(__name__)

Location = str | Path | MirrorTarget
# The columns of ``changes`` rows the merge reads: the batch is cached as this projection only.
_USED = (
    "topic", "partition", "offset", "key", "database", "table", "type", "is_ddl", "sequence", "part",
    "source_id", "es", "mysql_type", "sql", "before", "after", "snapshot", "instants", *TXN_COLUMNS,
)  # fmt: skip


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


@dataclass
class _Plan:
    """One table's batch, ready for the tasks."""

    mirror: MirrorTable
    kind: str
    state: MirrorState
    events: DataFrame  # the batch's upserts and deletes of the table, by bucket
    rewrite: bool = False  # a column changed its type, or a schema change: every bucket is written again
    actions: tuple[RowAction, ...] = ()  # what the batch's ALTER TABLEs do to stored rows (relay.spark.ddl)
    clear_all: bool = False  # a new TRUNCATE/DROP watermark: every bucket is filtered again
    changed_state: bool = False


def _plan(
    changes_df: DataFrame,
    target: MirrorTarget,
    table: str,
    kind: str,
    batch: BatchId | None,
    facts: Survey,
    cut: dict[str, Any] | None = None,
) -> _Plan | None:
    mirror = MirrorTable(target, table, kind)
    mirror.recover()
    old = mirror.rows.state() if mirror.rows.exists() else None
    if batch is not None and old is not None and old.batches.get(batch.app_id, -1) >= batch.batch_id:
        log.info("%s: micro-batch %d of %s is already applied", mirror.where, batch.batch_id, batch.app_id)
        return None
    rows = typed(changes_df, table, facts.columns.get(table, []))
    batch_columns = [(c, t) for c, t in rows.dtypes if not c.startswith("_")]
    columns, added, retyped = merged_columns(old.columns if old else [], batch_columns)
    cleared = dict(old.cleared) if old else {}
    clear_all = False
    state = MirrorState(columns, cleared, dict(old.batches) if old else {}, commits=old.commits if old else 0)
    actions: list[RowAction] = []
    if old is not None:
        state.types, state.sources, state.dropped, state.altered = (
            old.types,
            old.sources,
            old.dropped,
            old.altered,
        )
    if kind == "latest":
        for p, s in facts.clearings.get(table, {}).items():
            if s > cleared.get(p, -1):
                cleared[p], clear_all = s, True
        rows, actions = follow_ddl(rows, state, old, facts, table)
        before = {c: t for c, t in old.columns} if old else {}
        added = [c for c, _ in state.columns if c not in before]
        retyped = any(before.get(c, t) != t for c, t in state.columns)
        removed = before.keys() - {c for c, _ in state.columns}
        retyped = retyped or bool(removed) or bool(actions)
    plan = _Plan(mirror, kind, state, _events(rows, state.columns), actions=tuple(actions))
    plan.rewrite = old is not None and retyped
    plan.clear_all = clear_all
    # A cut batch commits every table it names, a change or not: its commit says the table holds the batch.
    state.cut = dict(cut) if cut is not None else {}
    plan.changed_state = old is None or bool(added) or retyped or clear_all or cut is not None
    plan.changed_state = plan.changed_state or state.altered != (old.altered if old else {})
    if table not in facts.rows and not plan.changed_state:
        return None  # a TRUNCATE/DROP or ALTER TABLE replayed: older than the watermark kept
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
        evolved = MirrorState(
            plan.state.columns, old.cleared, old.batches, old.offsets, old.max_sequence, old.commits
        )
        evolved.cut = {"schema_only": True} if plan.state.cut else {}  # no data: not a version of a cut
        mirror.rows.add_columns([schema.field(c) for c in added], evolved)


def _job(plan: _Plan, write_id: str, dirs: tuple[str, str]) -> tuple[BucketJob, list[str]]:
    """The tasks' job (every stored file by bucket: a task opens those of its bucket only), and the
    buckets to rewrite even without events (all of them for a type change or a new watermark)."""
    mirror, target = plan.mirror, plan.mirror.target
    narrow = target.format == "delta"
    rows_schema = file_schema(plan.state.columns, plan.kind, "rows", narrow_ints=narrow)
    tomb_schema = file_schema([], plan.kind, "tombs")
    stored = mirror.rows.files()
    rows = PartSpec(
        rows_schema, stored, dirs[0], mirror.rows.bucket_in_file, mirror.rows.file_schema(rows_schema)
    )
    tombs = PartSpec(
        tomb_schema,
        mirror.tombs.files(),
        dirs[1],
        mirror.tombs.bucket_in_file,
        mirror.tombs.file_schema(tomb_schema),
    )
    job = BucketJob(
        target.storage, plan.kind, rows, tombs, plan.state.cleared, plan.clear_all, plan.rewrite, plan.actions
    )
    return job, sorted(stored) if plan.rewrite or plan.clear_all else []


def _by_spark(plan: _Plan) -> bool:
    """Whether Spark's Delta connector applies this batch (``MirrorTarget.writer`` "spark"): a Delta
    latest-state table without a column type change (those, histories and Iceberg go the driver's way)."""
    target = plan.mirror.target
    spark_writes = target.writer == "spark" and target.format == "delta"
    return spark_writes and plan.kind == "latest" and not plan.rewrite


def _run_spark(plan: _Plan, batch: BatchId | None, facts: Survey) -> int:
    """``relay.spark.spark_delta.merge_batch`` with the batch's state; the number of fresh changes."""
    from relay.spark.spark_delta import merge_batch

    state = plan.state
    if batch is not None:
        state.batches[batch.app_id] = batch.batch_id
    state.offsets, state.max_sequence = facts.offsets, facts.max_sequence
    state.commits += 1
    mirror = plan.mirror
    paths = (mirror.rows.uri, mirror.tombs.uri)  # type: ignore[attr-defined]  # DeltaPart's
    app = (batch.app_id, batch.batch_id) if batch is not None else None
    events = plan.events.drop("_op") if "_op" in plan.events.columns else plan.events
    spark = events.sparkSession
    storage = mirror.target.storage
    if storage.scheme in ("s3", "s3a"):
        from relay.spark.session import configure_s3a

        configure_s3a(spark, storage.options)  # Hadoop's s3a reaches the same endpoint as pyarrow
    fresh = merge_batch(spark, events, paths, [c for c, _ in state.columns], state, app)
    every = mirror.target.maintain_every
    if every and state.commits % every == 0:
        maintain(mirror)
    return fresh


def _run(plan: _Plan, batch: BatchId | None, facts: Survey) -> list[Written]:
    """The tasks, then the commits (tombstones first, then the rows with the state); the files written."""
    mirror = plan.mirror
    narrow = mirror.target.format == "delta"
    rows_schema = file_schema(plan.state.columns, plan.kind, "rows", narrow_ints=narrow)
    tomb_schema = file_schema([], plan.kind, "tombs")
    mirror.rows.begin(rows_schema)
    mirror.tombs.begin(tomb_schema)
    write_id, rows_dir, tombs_dir = mirror.begin_write()
    job, full = _job(plan, write_id, (rows_dir, tombs_dir))
    frame = plan.events
    if full:
        markers = frame.sparkSession.createDataFrame([(b,) for b in full], f"{BUCKET} string")
        frame = frame.unionByName(markers, allowMissingColumns=True)
    written = _bucket_tasks(frame, job)
    rows = [w for w in written if w.part == "rows"]
    tombs = [w for w in written if w.part == "tombs"]
    if tombs:
        mirror.tombs.commit(tombs, {w.bucket for w in tombs}, tomb_schema, state=None, write_id=write_id)
    if rows or plan.changed_state:
        state = plan.state
        if batch is not None:
            state.batches[batch.app_id] = batch.batch_id
        state.offsets = facts.offsets
        state.max_sequence = facts.max_sequence
        state.commits += 1
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
        every = mirror.target.maintain_every
        if every and state.commits % every == 0:
            maintain(mirror)
    mirror.finish_write()
    return written


def _bucket_tasks(frame: DataFrame, job: BucketJob) -> list[Written]:
    """``job`` run on each bucket of ``frame`` in Spark tasks; the files they wrote. The rows are spread
    over twice as many tasks as Spark has cores, by bucket: a bucket's work is reading and writing its
    files, whatever few changes it gets, and Spark's adaptive execution would otherwise coalesce a small
    batch's shuffle into ONE task that rewrites every bucket in turn (5,000 uniform updates of a
    2M-row table: 20 buckets in one task, 2.0 s, where two tasks take half)."""
    tasks = 2 * frame.sparkSession.sparkContext.defaultParallelism
    spread = frame.repartition(tasks, BUCKET)  # a number of partitions: adaptive execution keeps it
    return [
        Written(**r.asDict())
        for r in spread.groupBy(BUCKET).applyInArrow(job.function(), WRITTEN_DDL).collect()
    ]


def maintain(mirror: MirrorTable) -> None:
    """Remove what no version younger than the target's ``retention_hours`` needs, in both tables of
    ``mirror`` (Delta: vacuum and log clean-up; Iceberg: snapshot expiry and the files it frees). Run
    every ``maintain_every`` commits of a table by the apply itself; callable on its own."""
    for part in (mirror.rows, mirror.tombs):
        part.maintain(mirror.target.retention_hours)


def apply_table(
    changes_df: DataFrame,
    out: Location,
    table: str,
    *,
    kind: str = "latest",
    batch: BatchId | None = None,
    facts: Survey | None = None,
    cut: dict[str, Any] | None = None,
) -> None:
    """Merge the changes of logical ``table`` ("db.table") in ``changes_df`` into its mirror table.

    ``facts``: the batch's ``survey`` when the caller has it (``apply_changes`` surveys once for all).
    ``cut``: what the commit records for consistent cuts (``MirrorState.cut``; ``apply_changes`` makes it)."""
    begin = time.perf_counter()
    facts = survey(changes_df) if facts is None else facts
    plan = _plan(changes_df, target_of(out), table, kind, batch, facts, cut)
    if plan is not None and _by_spark(plan):
        fresh = _run_spark(plan, batch, facts)
        took = time.perf_counter() - begin
        log.info("%s: %d changes merged by Spark in %.2f s", plan.mirror.where, fresh, took)
    elif plan is not None:
        written = _run(plan, batch, facts)
        log.info(
            "%s: %d buckets merged, %d files written (%d rows) in %.2f s",
            plan.mirror.where,
            len({w.bucket for w in written}),
            len([w for w in written if w.path]),
            sum(w.rows for w in written if w.part == "rows"),
            time.perf_counter() - begin,
        )


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
    written = _bucket_tasks(rows.withColumn(BUCKET, bucket_of(F.col("_key"))), job)
    mirror.rows.commit(
        [w for w in written if w.path],
        set(),
        schema,
        state=MirrorState(columns),
        write_id=write_id,
        overwrite=True,
    )
    mirror.finish_write()


def apply_changes(
    changes_df: DataFrame,
    out: Location,
    tables: list[str] | None = None,
    *,
    history: bool = False,
    batch: BatchId | None = None,
    cut: dict[str, Any] | None = None,
) -> list[str]:
    """Merge every logical table's changes in ``changes_df`` (a batch DataFrame of ``changes()`` rows,
    e.g. a foreachBatch micro-batch) into its mirror table under ``out`` (a path or URI: Delta tables; or
    a ``MirrorTarget`` naming the format, storage settings and catalog); returns the tables.

    ``tables`` limits the merge to those tables; ``history`` also keeps each table's SCD type 2 history
    (``apply_history``); ``batch`` makes a re-run of that micro-batch a no-op. ``cut`` (with ``batch``;
    ``relay.spark.holdback.Step.cut``: the source transactions the batch completes) is recorded in every
    table's commit, with the batch and the tables it commits, and every table of the batch commits (a
    change or not): what ``relay.spark.cut`` finds consistent cuts by. See the module docstring."""
    target = target_of(out)
    # foreachBatch re-reads its source on every action: cache what the survey and the tasks read.
    used = F.struct(F.col("source.database").alias("database"), F.col("source.table").alias("table"))
    cached = changes_df.select(*_USED, used.alias("source")).persist()
    try:
        facts = survey(cached)
        chosen = [t for t in facts.tables if (tables is None or t in tables) and _held(target, t, facts)]
        recorded = None
        if cut is not None and batch is not None:
            recorded = {**cut, "app": batch.app_id, "batch": batch.batch_id, "tables": chosen}
        for table in chosen:  # a schema change it cannot apply stops the batch before any table commits
            if facts.alters.get(table):
                check_ddl(target, table, facts)
        for table in chosen:
            apply_table(cached, target, table, batch=batch, facts=facts, cut=recorded)
            if history:
                apply_table(cached, target, table, kind="history", batch=batch, facts=facts, cut=recorded)
        return chosen
    finally:
        cached.unpersist()


def _held(target: MirrorTarget, table: str, facts: Survey) -> bool:
    """Whether the batch has something for ``table``: rows, a TRUNCATE/DROP, or ALTER TABLE statements of a
    table the mirror holds (those of a table it has no rows of yet change nothing)."""
    return table in facts.rows or table in facts.clearings or MirrorTable(target, table).rows.exists()


def _conform(df: DataFrame, columns: list[list[str]]) -> list[Column]:
    """``df``'s table columns as ``columns`` (missing → null; a changed type → try_cast)."""
    have = dict(df.dtypes)
    return [
        (F.col(c) if have[c] == t else F.col(c).try_cast(t)).alias(c)
        if c in have
        else F.lit(None).cast(t).alias(c)
        for c, t in columns
    ]


def cdc_rows(rows: DataFrame, columns: list[str]) -> DataFrame:
    """``typed`` rows as upserts and deletes by key: what a MERGE (or AutoCDC) applies.

    Columns: the table ``columns``, ``_key`` (the logical key: the record key's values as a JSON array),
    ``_sequence``, ``_part``, ``_source_id``, ``_es``, ``_source``, ``_deleted``. (``_sequence``, ``_part``)
    orders a key's changes. An INSERT/UPDATE is an upsert of its key; a DELETE
    is a delete; an UPDATE that changed the key is also a delete of the old key. Never analyses ``rows``
    (works on streaming DataFrames and inside pipeline query functions).
    """
    meta = [F.col(c) for c in ("_sequence", "_part", "_source_id", "_es", "_source")]
    data = [F.col(c) for c in columns]
    upsert = F.struct(*data, F.col("_key"), *meta, F.lit(False).alias("_deleted"))
    delete = F.struct(*data, F.col("_old_key").alias("_key"), *meta, F.lit(True).alias("_deleted"))
    op = F.col("_op")
    moved = (op == "UPDATE") & (F.col("_old_key") != F.col("_key"))
    # One projection and explode, not a union of two selects: a union computes its input twice.
    events = (
        F.when(moved, F.array(upsert, delete))
        .when(op.isin("INSERT", "UPDATE"), F.array(upsert))
        .when(op == "DELETE", F.array(delete))
    )
    return rows.select(F.explode(events).alias("_e")).select("_e.*")


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
