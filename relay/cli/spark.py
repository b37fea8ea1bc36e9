"""``relay spark mirror``: the long-running Spark job mirroring logical tables into Delta Lake or Iceberg;
``relay spark cut``: a mirror's latest consistent cut (``relay.spark.cut``; no Spark).

Runs the query on the CLI's main thread (waits for it; Ctrl-C / SIGTERM stop it between micro-batches —
the checkpoint makes the next start continue exactly where it stopped). ``relay spark bench`` runs the
decode/apply benchmark (``relay.spark.bench``). Imports pyspark only when a subcommand runs.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import signal
import threading
from pathlib import Path
from typing import Any

from relay.cli import values

EXIT_INTERRUPTED = 130  # relay.cli.main's: stopped by SIGTERM/SIGINT


def add_spark_parser(subparsers: Any) -> None:
    """Add ``spark mirror`` and ``spark bench`` to the ``relay`` command."""
    spark = subparsers.add_parser(
        "spark",
        help="Spark jobs reading the relay topics (needs the 'spark' extra)",
        description="PySpark jobs over the relay topics, on a local Spark (local[2] unless --master) or a "
        "cluster (--master, or spark-submit).",
    )
    actions = spark.add_subparsers(dest="spark_action", metavar="{mirror,cut,bench}", required=True)
    mirror = actions.add_parser(
        "mirror",
        help="mirror logical tables from the topics into Delta Lake or Iceberg tables",
        description="Reads the topics as a stream, decodes every change (canal-json or canal-protobuf) and "
        "keeps one latest-state table per logical table (last change per key by sequence; deletes remove "
        "rows) as a Delta Lake table under --out (default) or an Iceberg table in a catalog "
        "(--format iceberg), on a local disk or an object store (s3://, gs://, abfss://, hdfs://). "
        "Keeps running until stopped; --available-now stops when caught up. Offsets live in "
        "--checkpoint and every commit records its micro-batch: a restart neither loses nor re-applies "
        "a change.",
    )
    mirror.add_argument("--bootstrap-servers", required=True, help="Kafka bootstrap servers host:port[,…]")
    mirror.add_argument("--topics", required=True, help="comma-separated topics to read")
    mirror.add_argument(
        "--out",
        required=True,
        help="root of the tables: a path or URI (s3://bucket/prefix, gs://, abfss://…)",
    )
    mirror.add_argument(
        "--checkpoint", help="Spark checkpoint directory (default: OUT/_checkpoint; a local or HDFS path)"
    )
    mirror.add_argument(
        "--format", default="delta", choices=("delta", "iceberg"), help="table format (default delta)"
    )
    mirror.add_argument(
        "--storage-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="object-store setting, e.g. AWS_ENDPOINT_URL=http://…, AWS_REGION=… (repeatable; unset ones "
        "come from the environment)",
    )
    mirror.add_argument(
        "--writer",
        default="driver",
        choices=("driver", "spark"),
        help="driver (default): Spark tasks write the touched buckets, the driver commits them (deltalake / "
        "pyiceberg); spark: Spark's Delta connector MERGEs each batch (Delta only)",
    )
    mirror.add_argument("--catalog-name", default="relay", help="Iceberg catalog name (default relay)")
    mirror.add_argument(
        "--catalog-type", help="Iceberg catalog type: sql (default), rest, glue, hive, dynamodb…"
    )
    mirror.add_argument(
        "--catalog-uri",
        help="Iceberg catalog URI (default for local --out: a SQLite catalog OUT/_relay_catalog.sqlite)",
    )
    mirror.add_argument("--catalog-warehouse", help="Iceberg warehouse location (default: --out)")
    mirror.add_argument(
        "--catalog-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any other pyiceberg catalog property (repeatable)",
    )
    mirror.add_argument(
        "--source",
        default="kafka",
        choices=("kafka", "relay-kafka"),
        help="kafka (default: Spark's kafka source, its jars from scripts/bootstrap's .jars/) or relay-kafka "
        "(the relay's Python source, for a Spark without the connector jar)",
    )
    mirror.add_argument(
        "--starting-offsets",
        type=values.offsets,
        default="earliest",
        help="earliest (default), latest or JSON",
    )
    mirror.add_argument(
        "--max-offsets-per-trigger", type=values.positive_int, help="records per micro-batch at most"
    )
    mirror.add_argument("--available-now", action="store_true", help="stop once caught up")
    _add_connect_timeout(mirror)
    mirror.add_argument(
        "--trigger-seconds", type=values.positive_float, default=5.0, help="micro-batch interval (default 5)"
    )
    mirror.add_argument(
        "--tables", type=values.tables, help="comma-separated logical tables db.table (default: all)"
    )
    mirror.add_argument("--codec", default="auto", choices=("auto", "canal-json", "canal-protobuf"))
    mirror.add_argument(
        "--master",
        help="Spark master: local[N], spark://host:7077, yarn, k8s://… (default local[2]; under "
        "spark-submit, its own --master)",
    )
    mirror.add_argument(
        "--driver-memory",
        help="the Spark driver's heap, e.g. 4g (local mode: it holds each cached micro-batch)",
    )
    mirror.add_argument(
        "--retention-hours",
        type=float,
        default=168.0,
        help="versions younger than this stay readable by time travel; maintenance removes the files "
        "only older ones need (default 168: 7 days)",
    )
    mirror.add_argument(
        "--maintain-every",
        type=int,
        default=100,
        help="commits of a table between two maintenance runs (Delta vacuum and log clean-up; Iceberg "
        "snapshot expiry and the files it frees); 0: never (default 100)",
    )
    mirror.add_argument(
        "--history",
        action="store_true",
        help="also keep each table's SCD type 2 history (OUT/db.table.history)",
    )
    mirror.add_argument(
        "--transaction-topic",
        metavar="TOPIC",
        help="the relays' kafka.transaction_topic: each micro-batch applies whole source transactions only "
        "(the rest waits for a later one) and every commit records them, so relay spark cut finds "
        "consistent cuts across the tables; without it tables are committed one by one and no cut exists",
    )
    mirror.add_argument(
        "--kafka-option",
        type=values.setting,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra consumer setting (repeatable)",
    )
    mirror.set_defaults(func=cmd_mirror)
    _add_cut_parser(actions)
    bench = actions.add_parser("bench", help="measure decode + apply throughput against a from_json baseline")
    bench.add_argument("--records", type=values.positive_int, default=200_000)
    bench.add_argument("--runs", type=values.positive_int, default=5)
    bench.add_argument(
        "--small", type=values.positive_int, default=10_000, help="rows of the small mirrored table"
    )
    bench.add_argument(
        "--large", type=values.positive_int, default=10_000_000, help="rows of the large mirrored table"
    )
    bench.add_argument(
        "--batch", type=values.positive_int, default=5_000, help="changes applied to both tables"
    )
    bench.add_argument(
        "--load", type=values.positive_int, default=10_000_000, help="rows of the initial load measured"
    )
    bench.add_argument(
        "--load-batch", type=values.positive_int, default=1_000_000, help="records per initial-load batch"
    )
    bench.add_argument("--driver-memory", default="4g", help="the Spark driver's heap (default 4g)")
    bench.add_argument("--batches", type=values.count, default=100, help="batches before counting files")
    bench.add_argument(
        "--formats",
        default="delta,iceberg,delta-spark",
        help="table formats measured (delta-spark: Delta written by Spark's connector, MERGE)",
    )
    bench.add_argument(
        "--root",
        help="where the measured tables go (default: a local temporary directory; Iceberg on an object "
        "store: with a SQLite catalog of the bench's own in a local temporary directory)",
    )
    bench.add_argument("--storage-option", action="append", default=[], metavar="KEY=VALUE")
    bench.add_argument("--json", action="store_true", help="print one JSON object")
    bench.add_argument(
        "--bootstrap-servers",
        help="a Kafka broker: also compare Spark's kafka source with relay-kafka, rows/s into changes()",
    )
    bench.add_argument("--source-records", type=values.positive_int, default=1_000_000)
    bench.add_argument("--skip-decode", action="store_true", help="leave out the decode steps")
    _add_connect_timeout(bench)
    bench.set_defaults(func=cmd_spark_bench)


def _add_connect_timeout(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--connect-timeout",
        type=values.positive_float,
        default=10.0,
        metavar="SECONDS",
        help="how long the checks made before Spark starts wait for the brokers and the object store "
        "(default 10)",
    )


def _add_cut_parser(actions: Any) -> None:
    cut = actions.add_parser(
        "cut",
        help="the latest consistent cut of a mirror: one source transaction, a version per table",
        description="Prints the latest source transaction that every table of the mirror has applied whole "
        "(a mirror run with --transaction-topic), with per table the Delta version or Iceberg snapshot id "
        "that holds exactly the source's changes up to it, and how engines read that version. Reads "
        "only the tables' commit metadata. A cut is per source: a mirror fed by several sources needs "
        "--source. Exit 2 (one line) when no cut can be given, saying why.",
    )
    cut.add_argument("--out", required=True, help="the mirror's root (as given to relay spark mirror)")
    cut.add_argument("--format", default="delta", choices=("delta", "iceberg"), help="default delta")
    cut.add_argument("--source", help="the source id (the relay's source.id) to cut at; needed for several")
    cut.add_argument(
        "--at",
        help="the newest cut at or before: an ISO time (2026-01-02T03:04:05Z; the source's commit time), "
        "a binlog position file:offset, or a transaction id (GTID)",
    )
    cut.add_argument("--json", action="store_true", help="one JSON object, with each table's data files")
    cut.add_argument("--storage-option", action="append", default=[], metavar="KEY=VALUE")
    cut.add_argument("--catalog-name", default="relay", help="Iceberg catalog name (default relay)")
    cut.add_argument("--catalog-type", help="Iceberg catalog type (default sql)")
    cut.add_argument("--catalog-uri", help="Iceberg catalog URI (default: OUT/_relay_catalog.sqlite)")
    cut.add_argument("--catalog-warehouse", help="Iceberg warehouse location")
    cut.add_argument("--catalog-option", action="append", default=[], metavar="KEY=VALUE")
    cut.set_defaults(func=cmd_cut)


def cmd_cut(args: argparse.Namespace) -> int:
    from relay.spark.cut import data_files, find_cut
    from relay.spark.guide import cut_json, cut_text
    from relay.spark.storage import Storage, parse_options

    storage = Storage(args.out, parse_options(args.storage_option, "--storage-option"))
    if not storage.is_local:  # an object store that does not answer: one line naming its setting
        from relay.cli.spark_checks import check_storage

        check_storage(storage, "--out", args.format, _catalog(args), 10.0, read_only=True)
    found = find_cut(
        storage.root,
        format=args.format,
        source=args.source,
        at=args.at,
        storage_options=storage.options,
        catalog=_catalog(args),
    )
    if args.json:
        print(json.dumps(cut_json(found, data_files(found)), indent=2), flush=True)
    else:
        print(cut_text(found), flush=True)
    return 0


def _quiet_query_failure(spark: Any) -> None:
    """A micro-batch that fails (a schema change the mirror refuses, a table it cannot write) ends the command
    with its one line (``relay: error: …``, below). Without this, py4j logged the Python traceback of the
    failed callback and Spark's stream execution the query's termination with the JVM's stack, ~150 lines
    before that one. ``-v`` keeps them."""
    logging.getLogger("py4j.clientserver").setLevel(logging.CRITICAL)
    jvm = spark.sparkContext._jvm
    off = jvm.org.apache.logging.log4j.Level.OFF
    for name in ("MicroBatchExecution", "AsyncProgressTrackingMicroBatchExecution"):
        logger = f"org.apache.spark.sql.execution.streaming.runtime.{name}"
        jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(logger, off)


def _quiet_stop(spark: Any) -> None:
    """Asked to stop (SIGTERM/SIGINT): the query is stopped between micro-batches and the command ends with
    its progress line. Stopping interrupts Spark's stream thread, and the JVM then wrote an
    ``InterruptedException`` with its stack to stderr now and then (a thread join interrupted, after
    "Failed to cancel job group"): nothing is wrong, so no more of the JVM's output is shown; -v shows it."""
    jvm = spark.sparkContext._jvm
    jvm.org.apache.logging.log4j.core.config.Configurator.setRootLevel(jvm.org.apache.logging.log4j.Level.OFF)
    jvm.java.lang.System.setErr(jvm.java.io.PrintStream(jvm.java.io.OutputStream.nullOutputStream()))


def _catalog(args: argparse.Namespace) -> dict[str, str]:
    from relay.spark.storage import parse_options

    catalog = parse_options(args.catalog_option, "--catalog-option")
    named = {"name": args.catalog_name, "type": args.catalog_type, "uri": args.catalog_uri}
    named["warehouse"] = args.catalog_warehouse
    return {**catalog, **{k: v for k, v in named.items() if v}}


def _mirror_config(args: argparse.Namespace) -> Any:
    """The mirror's config from the options, checked — before Spark starts (its start and retries took
    ~40 s, then a traceback): the programs, the catalog settings, the object store's endpoint, the
    brokers, the topics (``relay.cli.spark_checks``)."""
    from relay.cli.spark_checks import mirror_preflight
    from relay.errors import OptionError
    from relay.spark.mirror import MirrorConfig
    from relay.spark.storage import Storage, parse_options

    extra = parse_options(args.kafka_option, "--kafka-option")
    storage = Storage(args.out, parse_options(args.storage_option, "--storage-option"))
    if args.checkpoint is None and not storage.is_local:
        raise OptionError(f"--out {args.out} is not a local path: give --checkpoint (a local or HDFS path)")
    config = MirrorConfig(
        bootstrap_servers=args.bootstrap_servers,
        topics=tuple(t.strip() for t in args.topics.split(",") if t.strip()),
        out=storage.root,
        checkpoint=args.checkpoint or str(Path(storage.root) / "_checkpoint"),
        source=args.source,
        starting_offsets=args.starting_offsets,
        max_offsets_per_trigger=args.max_offsets_per_trigger,
        available_now=args.available_now,
        trigger_seconds=args.trigger_seconds,
        codec=args.codec,
        tables=tuple(args.tables.split(",")) if args.tables else None,
        kafka_options=extra,
        history=args.history,
        format=args.format,
        storage_options=storage.options,
        catalog=_catalog(args),
        retention_hours=args.retention_hours,
        maintain_every=args.maintain_every,
        writer=args.writer,
        transaction_topic=args.transaction_topic,
    )
    config.target()
    mirror_preflight(
        bootstrap_servers=args.bootstrap_servers,
        topics=config.topics + ((config.transaction_topic,) if config.transaction_topic else ()),
        kafka_options=extra,
        storage=storage,
        format=args.format,
        catalog=config.catalog,
        timeout=args.connect_timeout,
    )
    return config


def cmd_mirror(args: argparse.Namespace) -> int:
    from relay.errors import MirrorDdlError, SparkSourceError
    from relay.spark.guide import how_to_read
    from relay.spark.mirror import local_session, start

    config = _mirror_config(args)
    target = config.target()

    def announce(table: str) -> None:  # Spark's stream thread, once per table: where it is, how to read it
        kinds = ("latest", "history") if config.history else ("latest",)
        print("\n".join(how_to_read(target, table, kind) for kind in kinds), flush=True)

    # SIGTERM/SIGINT only ask to stop: raised inside a call into the JVM (Spark's start takes seconds) a
    # KeyboardInterrupt printed py4j's traceback; the query is stopped between micro-batches instead.
    stopping = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: stopping.set())
    spark = local_session(
        args.master,
        driver_memory=args.driver_memory,
        connectors=config.connectors(),
        storage_options=config.storage_options,
    )
    if not getattr(args, "verbose", 0) and not getattr(args, "debug", False):
        _quiet_query_failure(spark)
    query = None if stopping.is_set() else start(spark, config, announce)
    if query is None:
        return EXIT_INTERRUPTED
    print(
        f"relay spark mirror: query {query.id} running; {args.format} tables under {config.out} "
        f"(checkpoint {config.checkpoint}); each table is listed with how to read it once it is written",
        flush=True,
    )
    try:
        while not stopping.is_set() and not query.awaitTermination(1.0):
            pass
    except Exception as exc:  # the query failed (pyspark's StreamingQueryException): its first line
        if type(exc).__name__ != "StreamingQueryException":
            raise
        refused = re.search(r"MirrorDdlError: ([^\n]+)", str(exc))  # a schema change it cannot follow
        if refused:
            raise MirrorDdlError(refused.group(1).strip()) from exc
        first = next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
        raise SparkSourceError(f"the mirror query stopped: {first.strip()}") from exc
    finally:
        if query.isActive:
            if stopping.is_set() and not getattr(args, "verbose", 0) and not getattr(args, "debug", False):
                _quiet_stop(spark)
            query.stop()
        progress = query.lastProgress
        if progress:
            print(json.dumps({"batchId": progress["batchId"], "sources": progress["sources"]}), flush=True)
    return EXIT_INTERRUPTED if stopping.is_set() else 0


def cmd_spark_bench(args: argparse.Namespace) -> int:
    from relay.cli.spark_checks import check_programs
    from relay.spark.bench import main as bench_main

    check_programs()  # before Spark starts: the programs, the object store, the brokers
    from relay.cli.spark_checks import check_storage
    from relay.errors import OptionError
    from relay.spark.storage import Storage, parse_options

    root = Storage(args.root or ".", parse_options(args.storage_option, "--storage-option"))
    if args.storage_option and root.is_local:
        raise OptionError(
            "--storage-option: the settings of an object store, for --root s3://…; the tables go to a local "
            "folder here (give --root, or leave the options out)"
        )
    if args.root:
        check_storage(root, "--root", "delta", {}, args.connect_timeout)
    if args.bootstrap_servers:
        from relay.cli.spark_checks import check_kafka

        check_kafka(args.bootstrap_servers, [], {}, args.connect_timeout)
    sizes = ["--small", str(args.small), "--large", str(args.large), "--batch", str(args.batch)]
    sizes += ["--load", str(args.load), "--batches", str(args.batches), "--formats", args.formats]
    sizes += ["--load-batch", str(args.load_batch), "--driver-memory", args.driver_memory]
    if args.bootstrap_servers:
        sizes += ["--bootstrap-servers", args.bootstrap_servers, "--source-records", str(args.source_records)]
    sizes += ["--skip-decode"] * args.skip_decode
    sizes += ["--root", args.root] if args.root else []
    sizes += [f"--storage-option={o}" for o in args.storage_option]
    return bench_main(
        ["--records", str(args.records), "--runs", str(args.runs), *sizes, *(["--json"] * args.json)]
    )
