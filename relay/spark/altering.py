"""The ALTER TABLE records of a batch on the Spark driver: ``relay.spark.ddl``'s plan applied to a table's
state and to the batch's typed rows (``follow_ddl``), checked for every table before any commits
(``check_ddl``).

Owns the Spark side of schema changes: each ``RowAction`` becomes a column expression over the batch's rows
(rows of the action's physical table older than its sequence get the default, null, or another column's
value); the Spark tasks do the same to the stored rows (``relay.spark.merge.act``). Runs on the thread
calling ``relay.spark.apply.apply_changes``.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F  # noqa: N812 (pyspark's convention)

from relay.spark.ddl import merged_columns, schema_of
from relay.spark.layout import MirrorState, RowAction
from relay.spark.survey import Survey
from relay.spark.tables import MirrorTable, MirrorTarget
from relay.spark.types import spark_type_sql


def follow_ddl(
    rows: DataFrame, state: MirrorState, old: MirrorState | None, facts: Survey, table: str
) -> tuple[DataFrame, list[RowAction]]:
    """The batch's ALTER TABLE statements (``relay.spark.ddl``) applied to ``state`` (its columns and
    schema bookkeeping) and to the batch's ``rows``; what they do to rows (the tasks do the same to the
    stored ones: ``relay.spark.merge.act``)."""
    followed = schema_of(
        table,
        old,
        state.columns,
        facts.alters.get(table, []),
        facts.variants.get(table, {}),
        facts.sources.get(table, frozenset()),
    )
    cols = followed.columns
    state.columns, state.types, state.altered = cols.columns, cols.types, followed.altered
    state.sources = sorted(cols.sources)
    state.dropped = {c: sorted(p) for c, p in cols.dropped.items() if p}
    for a in followed.actions:
        when = (F.col("_source") == a.source) & (F.col("_sequence") < a.sequence)
        have = set(rows.columns)
        if a.copy_from is not None:
            new = F.col(a.copy_from) if a.copy_from in have else F.lit(None)
        else:
            new = F.lit(a.value)
        current = F.col(a.column) if a.column in have else F.lit(None)
        rows = rows.withColumn(
            a.column, F.when(when, new.cast(a.spark_type)).otherwise(current.cast(a.spark_type))
        )
    return rows, followed.actions


def check_ddl(target: MirrorTarget, table: str, facts: Survey) -> None:
    """``MirrorDdlError`` when the batch's ALTER TABLE statements of ``table`` cannot be applied exactly
    (what ``follow_ddl`` would raise once other tables of the batch have committed)."""
    mirror = MirrorTable(target, table)
    old = mirror.rows.state() if mirror.rows.exists() else None
    batch = [(c, spark_type_sql(m)) for c, m in facts.columns.get(table, [])]
    columns, _, _ = merged_columns(old.columns if old else [], batch)
    alters, variants = facts.alters.get(table, []), facts.variants.get(table, {})
    schema_of(table, old, columns, alters, variants, facts.sources.get(table, frozenset()))
