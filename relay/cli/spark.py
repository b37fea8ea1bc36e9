"""``relay spark mirror``: the long-running Spark job mirroring logical tables into parquet.

Runs the query on the CLI's main thread (waits for it; Ctrl-C / SIGTERM stop it between micro-batches —
the checkpoint makes the next start continue exactly where it stopped). ``relay spark bench`` runs the
decode/apply benchmark (``relay.spark.bench``). Imports pyspark only when a subcommand runs.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def add_spark_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``spark mirror`` and ``spark bench`` to the ``relay`` command."""
    spark = subparsers.add_parser(
        "spark",
        help="Spark jobs reading the relay topics (needs the 'spark' extra)",
        description="PySpark jobs over the relay topics, on a local Spark (local[2] unless --master).",
    )
    actions = spark.add_subparsers(dest="spark_action", metavar="{mirror,bench}", required=True)
    mirror = actions.add_parser(
        "mirror",
        help="mirror logical tables from the topics into latest-state parquet tables",
        description="Reads the topics as a stream, decodes every change (canal-json or canal-protobuf) and "
        "keeps one parquet directory per logical table under --out (last change per key by sequence; "
        "deletes remove rows). Keeps running until stopped; --available-now stops when caught up. "
        "Offsets live in --checkpoint: a restart neither loses nor re-applies a change.",
    )
    mirror.add_argument("--bootstrap-servers", required=True, help="Kafka bootstrap servers host:port[,…]")
    mirror.add_argument("--topics", required=True, help="comma-separated topics to read")
    mirror.add_argument("--out", required=True, type=Path, help="directory of the latest-state tables")
    mirror.add_argument("--checkpoint", type=Path, help="checkpoint directory (default: OUT/_checkpoint)")
    mirror.add_argument(
        "--source", default="relay-kafka", help="relay-kafka (default) or kafka (Spark's jar)"
    )
    mirror.add_argument("--starting-offsets", default="earliest", help="earliest (default), latest or JSON")
    mirror.add_argument("--max-offsets-per-trigger", type=int, help="records per micro-batch at most")
    mirror.add_argument("--available-now", action="store_true", help="stop once caught up")
    mirror.add_argument("--trigger-seconds", type=float, default=5.0, help="micro-batch interval (default 5)")
    mirror.add_argument("--tables", help="comma-separated logical tables db.table (default: all)")
    mirror.add_argument("--codec", default="auto", choices=("auto", "canal-json", "canal-protobuf"))
    mirror.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    mirror.add_argument(
        "--history",
        action="store_true",
        help="also keep each table's SCD type 2 history (OUT/db.table.history)",
    )
    mirror.add_argument(
        "--kafka-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra consumer setting (repeatable)",
    )
    mirror.set_defaults(func=cmd_mirror)
    bench = actions.add_parser("bench", help="measure decode + apply throughput against a from_json baseline")
    bench.add_argument("--records", type=int, default=200_000)
    bench.add_argument("--runs", type=int, default=5)
    bench.add_argument("--small", type=int, default=10_000, help="rows of the small mirrored table")
    bench.add_argument("--large", type=int, default=10_000_000, help="rows of the large mirrored table")
    bench.add_argument("--batch", type=int, default=5_000, help="changes applied to both tables")
    bench.add_argument("--json", action="store_true", help="print one JSON object")
    bench.set_defaults(func=cmd_spark_bench)


def cmd_mirror(args: argparse.Namespace) -> int:
    from relay.spark.mirror import MirrorConfig, local_session, start

    extra = dict(item.split("=", 1) for item in args.kafka_option)
    config = MirrorConfig(
        bootstrap_servers=args.bootstrap_servers,
        topics=tuple(t.strip() for t in args.topics.split(",") if t.strip()),
        out=args.out,
        checkpoint=args.checkpoint or args.out / "_checkpoint",
        source=args.source,
        starting_offsets=args.starting_offsets,
        max_offsets_per_trigger=args.max_offsets_per_trigger,
        available_now=args.available_now,
        trigger_seconds=args.trigger_seconds,
        codec=args.codec,
        tables=tuple(args.tables.split(",")) if args.tables else None,
        kafka_options=extra,
        history=args.history,
    )
    spark = local_session(args.master)
    query = start(spark, config)
    print(f"relay spark mirror: query {query.id} running; tables under {config.out}", flush=True)
    try:
        query.awaitTermination()
    finally:
        if query.isActive:
            query.stop()
        progress = query.lastProgress
        if progress:
            print(json.dumps({"batchId": progress["batchId"], "sources": progress["sources"]}), flush=True)
    return 0


def cmd_spark_bench(args: argparse.Namespace) -> int:
    from relay.spark.bench import main as bench_main

    sizes = ["--small", str(args.small), "--large", str(args.large), "--batch", str(args.batch)]
    return bench_main(
        ["--records", str(args.records), "--runs", str(args.runs), *sizes, *(["--json"] * args.json)]
    )
