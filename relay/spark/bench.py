"""Benchmark: decode + apply throughput of the Spark helpers on local Spark, next to a plain ``from_json``.

``python -m relay.spark.bench [--records N] [--runs R] [--master local[2]] [--small 10000]
[--large 10000000] [--batch 5000] [--json]`` (or ``relay spark bench``) builds N canal-json records of a
sharded ``bench.orders`` table (inserts, updates, deletes; 10 % of them repeated), caches them as a
DataFrame in Spark's ``kafka`` schema, then times, R times each:

- ``from_json``: the baseline — ``from_json`` of the value with the FlatMessage schema, nothing else;
- ``changes(json)``: ``changes(df, codec="canal-json")`` (from_json + the change-row projection);
- ``changes(auto)``: ``changes(df)`` with per-record codec detection (the protobuf UDF in the plan);
- ``typed``: ``typed(changes(df), "bench.orders")`` (Spark types from mysqlType);
- ``apply``: ``apply_changes`` into an empty directory (dedup by key/sequence, parquet write).

Every step but ``apply`` ends in Spark's ``noop`` sink, so the figure is the work itself. Then the apply
growth: two mirrored tables, ``--small`` and ``--large`` rows (built in Spark from ``spark.range`` and
published with ``write_table``), each get the SAME batch of ``--batch`` changes (60 % updates, 30 %
inserts, 10 % deletes on ids 5000 and up: recent rows of the small table, a range both tables hold), R
times; ``apply_growth_ratio`` is the large table's median over the small one's. Prints the median
seconds of each (``--json``: one JSON object). A measurement tool for people, not a test: it prints.
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


def apply_growth(spark: Any, sizes: tuple[int, int], batch: int, runs: int) -> dict[str, Any]:
    """Median apply seconds of the same batch on tables of ``sizes`` rows; their ratio."""
    from pyspark.sql import functions as F  # noqa: N812 (pyspark's convention)

    from relay.spark.apply import apply_changes, write_table
    from relay.spark.decode import changes

    df = spark.createDataFrame(
        batch_records(batch), "key binary, value binary, topic string, partition int, offset long"
    )
    df = df.withColumn("timestamp", F.current_timestamp()).withColumn("timestampType", F.lit(0)).cache()
    df.count()
    figures: dict[str, Any] = {"batch_changes": batch}
    medians = []
    for size in sizes:
        with tempfile.TemporaryDirectory() as out:
            begin = time.perf_counter()
            write_table(_table(spark, size), out, TABLE)
            figures[f"build_{size}_seconds"] = round(time.perf_counter() - begin, 3)
            apply_changes(changes(df, codec="canal-json"), out)  # warm-up
            seconds = _time(lambda out=out: apply_changes(changes(df, codec="canal-json"), out), runs)  # type: ignore[misc]
        figures[f"apply_{size}_rows_seconds"] = round(seconds, 3)
        medians.append(seconds)
    figures["apply_growth_ratio"] = round(medians[1] / medians[0], 3)
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
            apply_changes(changes(df, codec="canal-json"), out)

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
    growth = apply_growth(spark, (args.small, args.large), args.batch, args.runs)
    figures.update(growth)
    spark.stop()
    if args.json:
        print(json.dumps(figures))
    else:
        print(f"apply of the same {args.batch} changes, median of {args.runs} runs:")
        for size in (args.small, args.large):
            print(f"  {size:>12,} rows  {growth[f'apply_{size}_rows_seconds']:7.3f} s")
        print(f"  apply_growth_ratio {growth['apply_growth_ratio']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
