"""The records of the bench's table ``bench.orders``, built in Spark: what ``relay spark bench`` loads.

``load_records`` builds canal-json INSERTs in Spark's ``kafka`` schema; ``stage_records`` writes them as
Parquet, one directory per micro-batch, so the bench's initial load (``relay.spark.bench.load_and_files``)
reads each micro-batch back as a ``foreachBatch`` query gets one from its source, with the building of
the records' JSON (2.4 s a 1M records here: the same for every mirror, and no part of one) done before
the clock starts. Used by ``relay.spark.bench`` and ``relay.spark.bench_source``. A measurement tool.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

TABLE = "bench.orders"
MYSQL_TYPES = {
    "id": "bigint",
    "status": "varchar(16)",
    "amount": "decimal(12,2)",
    "note": "text",
    "at": "datetime(3)",
}


def load_records(spark: Any, first: int, end: int) -> Any:
    """The canal-json INSERTs of ids ``first``..``end``-1 of ``bench.orders``, built in Spark."""
    from pyspark.sql import functions as F  # noqa: N812 (pyspark's convention)

    ident = F.col("id")
    data = F.create_map(
        F.lit("id"), ident.cast("string"),
        F.lit("status"), F.lit("NEW"),
        F.lit("amount"), F.concat((ident % 100000).cast("string"), F.lit(".25")),
        F.lit("note"), F.lit("note ü"),
        F.lit("at"), F.lit("2024-05-01 10:00:00.123"),
    )  # fmt: skip
    types = F.create_map(*[x for k, v in MYSQL_TYPES.items() for x in (F.lit(k), F.lit(v))])
    message = F.struct(
        ident.alias("id"), F.lit("bench").alias("database"), F.lit("orders").alias("table"),
        F.array(F.lit("id")).alias("pkNames"), F.lit(False).alias("isDdl"), F.lit("INSERT").alias("type"),
        F.lit(1_700_000_000_000).alias("es"), F.lit(1_700_000_000_000).alias("ts"), F.lit("").alias("sql"),
        types.alias("mysqlType"), F.array(data).alias("data"),
        F.struct(
            F.concat(F.lit("bench_"), F.lpad((ident % 16).cast("string"), 2, "0")).alias("database"),
            F.lit("orders").alias("table"),
        ).alias("source"),
        (ident + F.lit(1 << 32)).alias("sequence"),
    )  # fmt: skip
    return spark.range(first, end).select(
        F.to_json(F.struct(ident.cast("string").alias("id"))).cast("binary").alias("key"),
        F.to_json(message).cast("binary").alias("value"),
        F.lit("bench.orders").alias("topic"),
        (ident % 4).cast("int").alias("partition"),
        ident.alias("offset"),
        F.current_timestamp().alias("timestamp"),
        F.lit(0).alias("timestampType"),
    )


def stage_records(spark: Any, rows: int, chunk: int, folder: str) -> list[str]:
    """``rows`` INSERTs (``load_records``) written as Parquet under ``folder``: one directory per ``chunk``
    records, in id order; their paths."""
    paths = []
    for first in range(0, rows, chunk):
        path = str(Path(folder) / f"batch-{first:012d}")
        load_records(spark, first, min(first + chunk, rows)).write.parquet(path)
        paths.append(path)
    return paths
