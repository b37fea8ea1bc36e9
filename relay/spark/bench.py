"""Benchmark: decode + apply throughput of the Spark helpers on local Spark, next to a plain ``from_json``.

``python -m relay.spark.bench [--records N] [--runs R] [--master local[2]]`` (or ``relay spark bench``)
builds N canal-json records of a sharded ``bench.orders`` table (inserts, updates, deletes; 10 % of them
repeated), caches them as a DataFrame in Spark's ``kafka`` schema, then times, R times each:

- ``from_json``: the baseline — ``from_json`` of the value with the FlatMessage schema, nothing else;
- ``changes(json)``: ``changes(df, codec="canal-json")`` (from_json + the change-row projection);
- ``changes(auto)``: ``changes(df)`` with per-record codec detection (the protobuf UDF in the plan);
- ``typed``: ``typed(changes(df), "bench.orders")`` (Spark types from mysqlType);
- ``apply``: ``apply_changes`` into an empty directory (dedup by key/sequence, parquet write).

Every step but ``apply`` ends in Spark's ``noop`` sink, so the figure is the work itself. Prints the median
seconds and records per second of each. A measurement tool for people, not a test: it prints.
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
    print(f"{args.records} canal-json records, {args.master}, median of {args.runs} runs (after one warm-up)")
    for name, action in steps:
        action()  # warm-up: code generation, Python workers
        seconds = _time(action, args.runs)
        print(f"  {name:<22} {seconds:7.3f} s  {args.records / seconds:>10,.0f} records/s", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
