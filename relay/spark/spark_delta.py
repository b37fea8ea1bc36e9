"""The mirror's apply through Spark's own Delta connector: ``MERGE INTO`` by delta-spark, no driver commit.

Owns the ``writer="spark"`` path of a Delta latest-state table (``MirrorTarget.writer``; histories, type
changes and Iceberg keep the driver path of ``relay.spark.apply``). The same rules as ``relay.spark.merge``,
said as SQL over the batch's events (``apply._events``: upserts and deletes by key, bucketed):

1. the batch's winner per key: the highest (``_sequence``, ``_part``), a delete before an upsert of the
   same identity;
2. kept only where it beats what is stored — a stored row by a higher identity (or the same identity, as a
   delete), a tombstone by a higher identity — found by joining the batch's keys with the stored ones of
   the buckets it touches (a literal ``relay_bucket IN (…)``: Delta skips the other buckets' files);
3. one ``MERGE`` into the tombstones (a fresh delete is inserted or replaces the key's tombstone; a fresh
   upsert removes it), then one into the rows (delete, update, insert); TRUNCATE/DROP watermarks first
   delete the older rows of their physical table.

Exactly once: both MERGEs run with Delta's idempotent-DML settings (``txnAppId`` = the mirror's app id,
``txnVersion`` = the micro-batch), so a re-run of a committed batch is skipped by Delta itself; the relay's
state (``relay.state``) rides in the rows commit's ``userMetadata`` (``DeltaPart.state`` reads it). Files are
written by Spark's executors through Hadoop's file systems (``s3a://`` with ``relay.spark.session``'s s3a
settings). Runs on the driver (the thread calling ``apply_changes``); the MERGEs run as Spark jobs.
"""

from __future__ import annotations

import json
import logging
import uuid
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F  # noqa: N812 (pyspark's convention)

from relay.spark.layout import BUCKET, MirrorState

log = logging.getLogger(__name__)

_META = ("_key", "_sequence", "_part", "_source_id", "_es", "_source")
_TXN = ("spark.databricks.delta.write.txnAppId", "spark.databricks.delta.write.txnVersion")
_USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"


def spark_path(uri: str) -> str:
    """A table URI as Hadoop reads it: ``s3a://`` for ``s3://`` (the path deltalake and pyarrow use)."""
    return "s3a://" + uri[len("s3://") :] if uri.startswith("s3://") else uri


def winners(events: DataFrame) -> DataFrame:
    """The batch's winning change per key (rule 1), every column of ``events`` kept."""
    order = F.struct("_sequence", "_part", F.col("_deleted").cast("int"))
    best = F.max_by(F.struct(*[F.col(c) for c in events.columns]), order)
    return events.groupBy("_key").agg(best.alias("_w")).select("_w.*")


def _beats(fresh: str, stored: str, tie_wins: bool) -> str:
    newer = (
        f"({fresh}._sequence > {stored}._sequence OR "
        f"({fresh}._sequence = {stored}._sequence AND {fresh}._part > {stored}._part))"
    )
    if not tie_wins:
        return newer
    same = f"({fresh}._sequence = {stored}._sequence AND {fresh}._part = {stored}._part)"
    return f"({newer} OR ({same} AND {fresh}._deleted))"


def fresh_changes(
    spark: Any, events: DataFrame, rows_path: str, tombs_path: str
) -> tuple[DataFrame, list[str]]:
    """The winners that beat what is stored (rule 2), and the buckets they touch."""
    best = winners(events)
    buckets = sorted(r[0] for r in best.select(BUCKET).distinct().collect())
    touched = F.col(BUCKET).isin(buckets)
    stored = spark.read.format("delta").load(rows_path).where(touched).select("_key", "_sequence", "_part")
    tombs = spark.read.format("delta").load(tombs_path).where(touched).select("_key", "_sequence", "_part")
    joined = (
        best.alias("f")
        .join(stored.alias("r"), F.col("f._key") == F.col("r._key"), "left")
        .join(tombs.alias("t"), F.col("f._key") == F.col("t._key"), "left")
        .where(
            f"(r._key IS NULL OR {_beats('f', 'r', True)}) AND (t._key IS NULL OR {_beats('f', 't', False)})"
        )
        .select("f.*")
    )
    return joined, buckets


def _bucket_list(buckets: list[str]) -> str:
    return ", ".join("'" + b.replace("'", "''") + "'" for b in buckets)


def _table(path: str) -> str:
    return "delta.`" + path.replace("`", "``") + "`"


def _names(columns: list[str]) -> list[str]:
    return ["`" + c.replace("`", "``") + "`" for c in columns]


def merge_batch(
    spark: Any,
    events: DataFrame,
    paths: tuple[str, str],
    columns: list[str],
    state: MirrorState,
    app: tuple[str, int] | None,
) -> int:
    """Apply ``events`` to the rows and tombstone tables at ``paths`` (rule 3); returns the fresh changes."""
    rows_path, tombs_path = (spark_path(p) for p in paths)
    fresh, buckets = fresh_changes(spark, events, rows_path, tombs_path)
    # Materialized once, cut from the tables it was computed from: evaluated again after the tombstone MERGE,
    # a delete would no longer beat its own new tombstone and the rows MERGE would keep the row.
    fresh = fresh.localCheckpoint(eager=True)
    view = f"relay_fresh_{uuid.uuid4().hex[:12]}"
    try:
        count = fresh.count()
        fresh.createOrReplaceTempView(view)
        within = f"t.relay_bucket IN ({_bucket_list(buckets)})" if buckets else "false"
        meta = _names([*_META, BUCKET])
        with _delta_settings(spark, app, None):
            spark.sql(
                f"MERGE INTO {_table(tombs_path)} t USING {view} f ON {within} AND t._key = f._key "
                "WHEN MATCHED AND NOT f._deleted THEN DELETE "
                f"WHEN MATCHED AND f._deleted THEN UPDATE SET {', '.join(f't.{c} = f.{c}' for c in meta)} "
                f"WHEN NOT MATCHED AND f._deleted THEN INSERT ({', '.join(meta)}) "
                f"VALUES ({', '.join(f'f.{c}' for c in meta)})"
            )
        _clear(spark, rows_path, state)
        data = _names([*columns, *_META, BUCKET])
        info = json.dumps({"relay.state": state.to_json()}, separators=(",", ":"))
        with _delta_settings(spark, app, info):
            spark.sql(
                f"MERGE INTO {_table(rows_path)} t USING {view} f ON {within} AND t._key = f._key "
                "WHEN MATCHED AND f._deleted THEN DELETE "
                f"WHEN MATCHED THEN UPDATE SET {', '.join(f't.{c} = f.{c}' for c in data)} "
                f"WHEN NOT MATCHED AND NOT f._deleted THEN INSERT ({', '.join(data)}) "
                f"VALUES ({', '.join(f'f.{c}' for c in data)})"
            )
        return int(count)
    finally:
        spark.catalog.dropTempView(view)
        fresh.unpersist()


def _clear(spark: Any, rows_path: str, state: MirrorState) -> None:
    """Delete the rows older than their physical table's TRUNCATE/DROP (idempotent: nothing left twice)."""
    for source, mark in state.cleared.items():
        quoted = source.replace("'", "''")
        spark.sql(f"DELETE FROM {_table(rows_path)} WHERE _source = '{quoted}' AND _sequence < {int(mark)}")


class _delta_settings:  # noqa: N801 (a context manager used like a function)
    """Delta's idempotent-DML and commit-metadata session settings for one statement, then restored."""

    def __init__(self, spark: Any, app: tuple[str, int] | None, user_metadata: str | None) -> None:
        self.conf = spark.conf
        self.values: dict[str, str | None] = {_USER_METADATA: user_metadata}
        self.values[_TXN[0]] = app[0] if app else None
        self.values[_TXN[1]] = str(app[1]) if app else None
        self.saved: dict[str, str | None] = {}

    def __enter__(self) -> None:
        for key, value in self.values.items():
            self.saved[key] = self.conf.get(key, None)
            if value is None:
                self.conf.unset(key)
            else:
                self.conf.set(key, value)

    def __exit__(self, *exc: object) -> None:
        for key, value in self.saved.items():
            if value is None:
                self.conf.unset(key)
            else:
                self.conf.set(key, value)
