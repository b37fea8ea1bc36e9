"""What a batch of change rows holds, found in ONE Spark job: its tables, columns, watermarks and offsets.

Owns the survey that ``relay.spark.apply`` runs before it merges a batch: one aggregation over the (cached)
``changes`` rows gives the logical tables with row changes or a TRUNCATE/DROP TABLE, each table's columns
and their ``mysqlType`` (from the latest change naming each column, as ``relay.spark.decode.column_types``
finds them), the TRUNCATE/DROP sequence per physical table, the last Kafka offset per topic partition and
the highest sequence. Grouping by the distinct ``mysqlType`` maps (a batch holds a handful: one per table
schema seen; grouped as their entries, made JSON text on the driver) keeps the collected result small,
instead of one job per question and table. Runs on the Spark driver (the thread calling
``apply_changes``); the aggregation runs in Spark tasks.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from pyspark.sql import DataFrame
from pyspark.sql import functions as F  # noqa: N812 (pyspark's convention)

CLEARING = ("TRUNCATE", "ERASE")  # TRUNCATE TABLE, DROP TABLE (canal's ERASE)
ROW_TYPES = ("INSERT", "UPDATE", "DELETE")


@dataclass(frozen=True)
class Survey:
    """A batch's facts: see the module docstring."""

    rows: frozenset[str] = frozenset()  # logical tables with row changes
    clearings: dict[str, dict[str, int]] = field(default_factory=dict)  # table → physical → sequence
    columns: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # table → [(name, mysqlType)]
    offsets: dict[str, dict[str, int]] = field(default_factory=dict)  # topic → partition → last offset
    max_sequence: int | None = None
    sources: dict[str, frozenset[str]] = field(default_factory=dict)  # table → physical tables of its rows
    # table → its ALTER TABLE records, once each (a DDL barrier is on every partition): (physical, seq, SQL)
    alters: dict[str, list[tuple[str, int, str]]] = field(default_factory=dict)
    variants: dict[str, dict[str, int]] = field(default_factory=dict)  # table → mysqlType JSON → latest seq

    @property
    def tables(self) -> list[str]:
        """The logical tables ("db.table") with row changes, a TRUNCATE/DROP or an ALTER TABLE, sorted."""
        return sorted(self.rows | self.clearings.keys() | self.alters.keys())


def survey(changes_df: DataFrame) -> Survey:
    """The facts of ``changes_df`` (``changes`` rows of a batch DataFrame), in one Spark job."""
    ddl, kind = F.col("is_ddl"), F.col("type")
    what = (
        F.when(~ddl & kind.isin(*ROW_TYPES), F.lit("row"))
        .when(ddl & kind.isin(*CLEARING), F.lit("clear"))
        .when(ddl & (kind == "ALTER"), F.lit("alter"))
    )
    physical = F.concat_ws(".", F.col("source.database"), F.col("source.table"))
    found = (
        changes_df.select(
            "topic",
            "partition",
            "offset",
            "sequence",
            F.concat_ws(".", "database", "table").alias("t"),
            what.alias("k"),
            F.when(what.isNotNull(), physical).alias("p"),
            F.when(what == "row", F.map_entries("mysql_type")).alias("types"),  # to_json: 1.6x the time
            F.when(what == "alter", F.col("sql")).alias("sql"),
        )
        .groupBy("topic", "partition", "t", "k", "p", "types", "sql")
        .agg(F.max("offset").alias("o"), F.max("sequence").alias("s"))
        .collect()
    )
    offsets: dict[str, dict[str, int]] = {}
    rows: set[str] = set()
    clearings: dict[str, dict[str, int]] = {}
    variants: dict[str, dict[str, int]] = {}  # table → mysqlType JSON → its latest sequence
    sources: dict[str, set[str]] = {}
    alters: dict[str, set[tuple[str, int, str]]] = {}
    for r in found:
        part = offsets.setdefault(r["topic"], {})
        part[str(r["partition"])] = max(int(r["o"]), part.get(str(r["partition"]), int(r["o"])))
        seq = -1 if r["s"] is None else int(r["s"])
        if r["k"] == "row":
            rows.add(r["t"])
            sources.setdefault(r["t"], set()).add(r["p"])
            if r["types"] is not None:
                text = json.dumps({e["key"]: e["value"] for e in r["types"]}, separators=(",", ":"))
                seen = variants.setdefault(r["t"], {})
                seen[text] = max(seq, seen.get(text, seq))
        elif r["k"] == "clear":
            marks = clearings.setdefault(r["t"], {})
            marks[r["p"]] = max(seq, marks.get(r["p"], seq))
        elif r["k"] == "alter":
            alters.setdefault(r["t"], set()).add((r["p"], seq, r["sql"]))
    top = max((int(r["s"]) for r in found if r["s"] is not None), default=None)
    columns = {t: latest_columns(v) for t, v in variants.items()}
    return Survey(
        frozenset(rows),
        clearings,
        columns,
        offsets,
        top,
        {t: frozenset(p) for t, p in sources.items()},
        {t: sorted(a, key=lambda x: x[1]) for t, a in alters.items()},
        variants,
    )


def latest_columns(variants: dict[str, int]) -> list[tuple[str, str]]:
    """(column, mysqlType) from the ``mysqlType`` maps of a table (JSON text → latest sequence carrying
    it): each column's type from the latest map naming it; in the order of the latest map, then the
    others (columns of shards not altered yet, or dropped) by position — ``decode.column_types``' rule."""
    best: dict[str, tuple[int, str, int]] = {}  # name → (sequence, type, position)
    for text, seq in variants.items():
        for pos, (name, mysql) in enumerate(json.loads(text).items()):
            if name not in best or seq > best[name][0]:
                best[name] = (seq, mysql, pos)
    top = max((s for s, _, _ in best.values()), default=None)
    order = sorted(best, key=lambda n: (best[n][0] != top, best[n][2], n))
    return [(n, best[n][1]) for n in order]
