"""Benchmark: decode + apply throughput of the Spark helpers on local Spark, next to a plain ``from_json``.

``python -m relay.spark.bench [--records N] [--runs R] [--master local[2]] [--small 10000]
[--large 10000000] [--batch 5000] [--json]`` (or ``relay spark bench``) builds N canal-json records of a
sharded ``bench.orders`` table (inserts, updates, deletes; 10 % of them repeated), caches them as a
DataFrame in Spark's ``kafka`` schema, then times, R times each:

- ``from_json``: the baseline — ``from_json`` of the value with the FlatMessage schema, nothing else;
- ``changes(json)``: ``changes(df, codec="canal-json")`` (from_json + the change-row projection);
- ``changes(auto)``: ``changes(df)`` with per-record codec detection (the protobuf UDF in the plan);
- ``typed``: ``typed(changes(df), "bench.orders")`` (Spark types from mysqlType);
- ``apply``: ``apply_changes`` into an empty Delta table (dedup by key/sequence, files, commit).

Every step but ``apply`` ends in Spark's ``noop`` sink, so the figure is the work itself. Then, for each
of ``--formats`` (Delta, Iceberg): the apply growth — two mirrored tables, ``--small`` and ``--large``
rows (built in Spark from ``spark.range`` and published with ``write_table``), each get the SAME batch of
``--batch`` changes (60 % updates, 30 % inserts, 10 % deletes on ids 5000 and up: recent rows of the
small table, a range both tables hold), R times: ``<fmt>_apply_growth_ratio`` is the large table's median
over the small one's; the same with ``--batch`` UPDATEs spread uniformly over all ids
(``<fmt>_apply_growth_ratio_uniform``); the initial load of ``--load`` INSERTs (built in Spark) through
``apply_changes`` (``<fmt>_load_rows_per_second``); and the table's data files after ``--batches``
batches (``<fmt>_files_after_N_batches``: current version; ``…_on_storage…``: every file kept for time
travel). Prints the median seconds of each (``--json``: one JSON object). A measurement tool for
people, not a test: it prints.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

TABLE = "bench.orders"
MYSQL_TYPES = {
    "id": "bigint",
    "status": "varchar(16)",
    "amount": "decimal(12,2)",
    "note": "text",
    "at": "datetime(3)",
}
LOAD_CHUNK = 250_000  # records per micro-batch of the initial load (a 1 GB driver heap holds them)
SQL_TYPES = {"id": -5, "status": 12, "amount": 3, "note": 2005, "at": 93}


def _value(seq: int, kind: str, row: dict[str, str | None], old: dict[str, str | None] | None) -> bytes:
    shard = int(row["id"] or 0) % 16
    message = {
        "id": seq,
        "database": "bench",
        "table": "orders",
        "pkNames": ["id"],
        "isDdl": False,
        "type": kind,
        "es": 1_700_000_000_000 + seq,
        "ts": 1_700_000_000_000 + seq,
        "sql": "",
        "sqlType": SQL_TYPES,
        "mysqlType": MYSQL_TYPES,
        "data": [row],
        "old": [old] if old else None,
        "gtid": "",
        "source": {
            "server": "127.0.0.1:3306",
            "serverId": 1,
            "serverUuid": "",
            "database": f"bench_{shard:02d}",
            "table": f"orders_{shard:02d}",
            "file": "mysql-bin.000001",
            "offset": seq,
            "gtid": "",
            "rowIndex": 0,
        },
        "sequence": seq,
    }
    return json.dumps(message, separators=(",", ":")).encode()


def records(n: int, seed: int = 7) -> list[tuple[bytes, bytes, str, int, int]]:
    """(key, value, topic, partition, offset) of ``n`` canal-json changes, ~10 % repeated."""
    rng = random.Random(seed)
    live: dict[int, dict[str, str | None]] = {}
    out: list[tuple[bytes, bytes, str, int, int]] = []
    next_id, seq = 1, 1 << 32
    while len(out) < n:
        seq += 1
        op = rng.random()
        if op < 0.5 or len(live) < 100:
            row = {
                "id": str(next_id),
                "status": "NEW",
                "amount": f"{rng.randint(0, 99999)}.25",
                "note": rng.choice([None, "", "note ü"]),
                "at": "2024-05-01 10:00:00.123",
            }
            live[next_id], kind, old = row, "INSERT", None
            next_id += 1
        elif op < 0.85:
            ident = rng.choice(list(live))
            old = {"status": live[ident]["status"]}
            row = {**live[ident], "status": rng.choice(["PAID", "SHIPPED"])}
            live[ident], kind = row, "UPDATE"
        else:
            ident = rng.choice(list(live))
            row, kind, old = live.pop(ident), "DELETE", None
        key = json.dumps({"id": row["id"]}).encode()
        rec = (key, _value(seq, kind, row, old), "bench.orders", int(row["id"] or 0) % 4, len(out))
        out.append(rec)
        if rng.random() < 0.1 and len(out) < n:
            out.append((*rec[:4], len(out)))
    return out[:n]


def batch_records(
    n: int, first_id: int = 5000, seq: int = 1 << 40
) -> list[tuple[bytes, bytes, str, int, int]]:
    """``n`` changes on ids ``first_id`` and up: updates, inserts (ids past the updated ones), deletes."""
    out = []
    for i in range(n):
        ident = first_id + i
        row: dict[str, str | None] = {
            "id": str(ident),
            "status": "PAID",
            "amount": f"{i}.25",
            "note": "batch",
            "at": "2024-05-01 10:00:00.123",
        }
        kind = "UPDATE" if i % 10 < 6 else "INSERT" if i % 10 < 9 else "DELETE"
        key = json.dumps({"id": row["id"]}).encode()
        out.append((key, _value(seq + i, kind, row, None), "bench.orders", ident % 4, i))
    return out


def _table(spark: Any, rows: int) -> Any:
    """A mirrored ``bench.orders`` of ``rows`` rows, ids 0..rows-1, built in Spark."""
    from pyspark.sql import functions as F  # noqa: N812 (pyspark's convention)

    ident = F.col("id")
    return spark.range(rows).select(
        ident,
        F.lit("NEW").alias("status"),
        (ident % 100000 + F.lit(0.25)).cast("decimal(12,2)").alias("amount"),
        F.when(ident % 7 == 0, F.lit("note ü")).alias("note"),
        F.lit("2024-05-01 10:00:00.123").cast("timestamp_ntz").alias("at"),
        F.concat(F.lit('["'), ident.cast("string"), F.lit('"]')).alias("_key"),
        ident.alias("_sequence"),
        F.lit(1_700_000_000_000).alias("_es"),
        F.concat(F.lit("bench_"), F.lpad((ident % 16).cast("string"), 2, "0")).alias("_source"),
    )


def uniform_records(n: int, rows: int, seq: int = 1 << 41) -> list[tuple[bytes, bytes, str, int, int]]:
    """``n`` UPDATEs spread uniformly over ids 0..``rows``-1 (every range bucket of the table)."""
    step = max(1, rows // n)
    out = []
    for i in range(n):
        ident = (i * step) % rows
        row: dict[str, str | None] = {
            "id": str(ident),
            "status": "PAID",
            "amount": f"{i}.25",
            "note": "spread",
            "at": "2024-05-01 10:00:00.123",
        }
        key = json.dumps({"id": row["id"]}).encode()
        out.append((key, _value(seq + i, "UPDATE", row, None), "bench.orders", ident % 4, i))
    return out


def _frame(spark: Any, rows: list[tuple[bytes, bytes, str, int, int]]) -> Any:
    from pyspark.sql import functions as F  # noqa: N812 (pyspark's convention)

    df = spark.createDataFrame(rows, "key binary, value binary, topic string, partition int, offset long")
    df = df.withColumn("timestamp", F.current_timestamp()).withColumn("timestampType", F.lit(0)).cache()
    df.count()
    return df


def _target(fmt: str, out: str) -> Any:
    from relay.spark.tables import target_of

    return target_of(out, format=fmt)


def apply_growth(spark: Any, fmt: str, sizes: tuple[int, int], batch: int, runs: int) -> dict[str, Any]:
    """Median apply seconds of the same batch (recent keys; spread uniformly) on tables of ``sizes``
    rows in format ``fmt``; the ratios large/small."""
    from relay.spark.apply import apply_changes, write_table
    from relay.spark.decode import changes

    figures: dict[str, Any] = {}
    medians: dict[str, list[float]] = {"recent": [], "uniform": []}
    recent = _frame(spark, batch_records(batch))
    for size in sizes:
        uniform = _frame(spark, uniform_records(batch, size))
        for kind, df in (("recent", recent), ("uniform", uniform)):
            with tempfile.TemporaryDirectory() as out:
                target = _target(fmt, out)
                begin = time.perf_counter()
                write_table(_table(spark, size), target, TABLE)
                figures[f"{fmt}_build_{size}_seconds"] = round(time.perf_counter() - begin, 3)
                apply_changes(changes(df, codec="canal-json"), target)  # warm-up (and the first apply)
                seconds = _time(lambda t=target, d=df: apply_changes(changes(d, codec="canal-json"), t), runs)  # type: ignore[misc]
            suffix = "" if kind == "recent" else "_uniform"
            figures[f"{fmt}_apply_{size}_rows{suffix}_seconds"] = round(seconds, 3)
            medians[kind].append(seconds)
    figures[f"{fmt}_apply_growth_ratio"] = round(medians["recent"][1] / medians["recent"][0], 3)
    figures[f"{fmt}_apply_growth_ratio_uniform"] = round(medians["uniform"][1] / medians["uniform"][0], 3)
    return figures


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


def load_and_files(spark: Any, fmt: str, rows: int, batches: int, batch: int) -> dict[str, Any]:
    """The initial load rate of ``rows`` changes through ``apply_changes``, then the table's data files
    (current version, and all on storage) after ``batches`` batches of ``batch`` recent-key changes."""
    from relay.spark.apply import apply_changes
    from relay.spark.decode import changes
    from relay.spark.tables import MirrorTable

    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as out:
        target = _target(fmt, out)
        begin = time.perf_counter()
        for first in range(0, rows, LOAD_CHUNK):  # as micro-batches with maxOffsetsPerTrigger bring them
            chunk = load_records(spark, first, min(first + LOAD_CHUNK, rows))
            apply_changes(changes(chunk, codec="canal-json"), target)
        seconds = time.perf_counter() - begin
        figures[f"{fmt}_load_{rows}_rows_seconds"] = round(seconds, 3)
        figures[f"{fmt}_load_rows_per_second"] = round(rows / seconds)
        for i in range(batches):
            first = rows - 10 * batch + (i * batch) % (10 * batch)
            df = _frame(spark, batch_records(batch, first_id=max(first, 0), seq=(1 << 40) + i * batch))
            apply_changes(changes(df, codec="canal-json"), target)
            df.unpersist()
        mirror = MirrorTable(target, TABLE)
        live = sum(len(f) for f in mirror.rows.files().values())
        figures[f"{fmt}_files_after_{batches}_batches"] = live
        from pathlib import Path

        figures[f"{fmt}_files_on_storage_after_{batches}_batches"] = len(list(Path(out).rglob("*.parquet")))
    return figures


def _time(action: Callable[[], Any], runs: int) -> float:
    took = []
    for _ in range(runs):
        begin = time.perf_counter()
        action()
        took.append(time.perf_counter() - begin)
    return statistics.median(took)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m relay.spark.bench", description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--small", type=int, default=10_000, help="rows of the small mirrored table")
    parser.add_argument("--large", type=int, default=10_000_000, help="rows of the large mirrored table")
    parser.add_argument("--batch", type=int, default=5_000, help="changes in the batch applied to both")
    parser.add_argument("--load", type=int, default=10_000_000, help="rows of the initial load measured")
    parser.add_argument("--batches", type=int, default=100, help="batches applied before counting files")
    parser.add_argument("--formats", default="delta,iceberg", help="table formats measured")
    parser.add_argument("--json", action="store_true", help="print one JSON object of every figure")
    args = parser.parse_args(argv)

    from pyspark.sql import functions as F  # noqa: N812 (pyspark's convention)

    from relay.spark.apply import apply_changes
    from relay.spark.decode import CANAL_JSON_TYPE, changes, typed
    from relay.spark.mirror import local_session

    spark = local_session(args.master, "relay-spark-bench")
    spark.sparkContext.setLogLevel("ERROR")
    rows = records(args.records)
    df = spark.createDataFrame(rows, "key binary, value binary, topic string, partition int, offset long")
    df = df.withColumn("timestamp", F.current_timestamp()).withColumn("timestampType", F.lit(0)).cache()
    df.count()
    columns = list(MYSQL_TYPES.items())

    def noop(frame: Any) -> Callable[[], None]:
        return lambda: frame.write.format("noop").mode("overwrite").save()

    def apply() -> None:
        with tempfile.TemporaryDirectory() as out:
            apply_changes(changes(df, codec="canal-json"), out)  # a path: a Delta table

    steps: list[tuple[str, Callable[[], Any]]] = [
        (
            "from_json (baseline)",
            noop(df.select(F.from_json(F.col("value").cast("string"), CANAL_JSON_TYPE))),
        ),
        ("changes(canal-json)", noop(changes(df, codec="canal-json"))),
        ("changes(auto)", noop(changes(df))),
        ("typed", noop(typed(changes(df, codec="canal-json"), TABLE, columns))),
        ("apply_changes", apply),
    ]
    figures: dict[str, Any] = {"records": args.records, "master": args.master, "runs": args.runs}
    if not args.json:
        print(
            f"{args.records} canal-json records, {args.master}, "
            f"median of {args.runs} runs (after one warm-up)"
        )
    for name, action in steps:
        action()  # warm-up: code generation, Python workers
        seconds = _time(action, args.runs)
        figures[f"{name.split()[0]}_seconds"] = round(seconds, 3)
        if not args.json:
            print(f"  {name:<22} {seconds:7.3f} s  {args.records / seconds:>10,.0f} records/s", flush=True)
    figures["changes_vs_from_json"] = round(
        figures["changes(canal-json)_seconds"] / figures["from_json_seconds"], 3
    )
    for fmt in args.formats.split(","):
        growth = apply_growth(spark, fmt, (args.small, args.large), args.batch, args.runs)
        growth.update(load_and_files(spark, fmt, args.load, args.batches, args.batch))
        figures.update(growth)
        if not args.json:
            print(f"{fmt}: apply of the same {args.batch} changes, median of {args.runs} runs:")
            for size in (args.small, args.large):
                recent = growth[f"{fmt}_apply_{size}_rows_seconds"]
                spread = growth[f"{fmt}_apply_{size}_rows_uniform_seconds"]
                print(f"  {size:>12,} rows  recent keys {recent:7.3f} s  uniform {spread:7.3f} s")
            print(f"  apply_growth_ratio {growth[f'{fmt}_apply_growth_ratio']:.2f}", end="")
            print(f"  apply_growth_ratio_uniform {growth[f'{fmt}_apply_growth_ratio_uniform']:.2f}")
            print(f"  load {growth[f'{fmt}_load_rows_per_second']:,} rows/s", end="")
            print(
                f"  files after {args.batches} batches {growth[f'{fmt}_files_after_{args.batches}_batches']}"
            )
    spark.stop()
    if args.json:
        print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
