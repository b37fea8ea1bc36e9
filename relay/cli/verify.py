"""``relay verify``: prove that a topic's latest state, or a Spark mirror table, equals the source.

Parses the command, builds the run (``relay.ops.verify.setup``; the mirror side from ``relay.spark`` —
the one place the two meet), draws a progress bar with ETA on a terminal (stderr), prints the report
(text or ``--json``), writes the ``relay_verify_*`` metrics (``--metrics-file`` for node_exporter's
textfile collector, ``--pushgateway``), and with ``--repair`` asks the running relay to snapshot the
differing keys again and checks them once more. Exit status: 0 equal, 3 not verified (no difference, but keys
not compared), 1 differences (also when a repair
left some), 2 a usage or run error. Runs on the CLI's main thread.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import threading
import time
from typing import Any

from relay.errors import VerifyError


def add_verify_parser(sub: Any) -> None:
    verify = sub.add_parser(
        "verify",
        help="prove that a logical table's topic (or its Spark mirror) equals the source, under live writes",
        description="Compares every shard of a logical table on the source with the latest state of its "
        "topic (--against topic, the default) or a Delta/Iceberg mirror table (--against mirror:PATH), "
        "while writes go on: key chunks are read with plain SELECTs between two binlog positions (as a "
        "snapshot reads; no locks, nothing written), MySQL computes each chunk's digest over the rows' "
        "canal text, and rows are read only where digests differ. A key is compared only once the target "
        "has applied the change stream up to the read for that key; a key that changed meanwhile is "
        "re-checked in later passes and reported as skipped only if it keeps changing; a difference is "
        "reported after two reads agree; a target that has not applied a key's latest change (a mirror "
        "job behind or stopped) is waited for up to --wait, and keys left are not verified. A record "
        "beyond the relay's position (forged, foreign) is a difference; --repair first moves the relay "
        "above it. Exit status 0: equal (every key compared); 1: differences; 3: not verified (none "
        "found, keys not compared); 2: usage or run error.",
    )
    verify.add_argument("-c", "--config", required=True, help="the relay's config file")
    verify.add_argument("--table", required=True, help="the logical db.table, e.g. shop.orders")
    verify.add_argument(
        "--against",
        default="topic",
        metavar="topic|mirror:PATH",
        help="the topic's latest state (default), or the mirror table under PATH (local or s3://…)",
    )
    verify.add_argument("--where", default="", help="compare only the source rows meeting this SQL condition")
    verify.add_argument(
        "--chunk-rows", type=int, default=10_000, help="rows per chunk digest (default 10000)"
    )
    verify.add_argument(
        "--max-rows-per-second",
        type=float,
        default=None,
        help="source rows read per second at most (default: snapshot.max_rows_per_second; 0: no limit)",
    )
    verify.add_argument(
        "--passes", type=int, default=6, help="re-check passes for keys that changed (default 6)"
    )
    verify.add_argument(
        "--wait",
        type=float,
        default=60.0,
        help="seconds the relay, and a mirror job, may take to apply what a read saw; keys a mirror still "
        "has not applied then are not verified (exit 3) (default 60)",
    )
    verify.add_argument("--json", action="store_true", help="print the report as one JSON object")
    verify.add_argument(
        "--repair", action="store_true", help="re-snapshot the differing keys, then check them"
    )
    verify.add_argument(
        "--repair-timeout", type=float, default=300.0, help="seconds a repair may take to land (default 300)"
    )
    verify.add_argument("--metrics-file", help="write relay_verify_* metrics here (Prometheus text format)")
    verify.add_argument("--pushgateway", help="push relay_verify_* metrics to this Prometheus Pushgateway")
    verify.add_argument("--no-progress", action="store_true", help="no progress bar, even on a terminal")
    mirror = verify.add_argument_group("mirror tables (--against mirror:PATH)")
    mirror.add_argument("--format", default="delta", choices=("delta", "iceberg"), help="table format")
    mirror.add_argument(
        "--storage-option", action="append", default=[], metavar="KEY=VALUE", help="object-store setting"
    )
    mirror.add_argument("--catalog-name", default="relay", help="Iceberg catalog name (default relay)")
    mirror.add_argument("--catalog-type", help="Iceberg catalog type (default sql)")
    mirror.add_argument("--catalog-uri", help="Iceberg catalog URI")
    mirror.add_argument("--catalog-warehouse", help="Iceberg warehouse location")
    mirror.add_argument("--catalog-option", action="append", default=[], metavar="KEY=VALUE")
    verify.set_defaults(func=cmd_verify)


class _Bar:
    """A progress bar with rate and ETA on stderr, redrawn at most 5 times a second."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.began = time.monotonic()
        self._drawn = 0.0
        self._width = 0

    def __call__(self, what: str, done: int, total: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._drawn < 0.2 and done < total:
            return
        self._drawn = now
        from relay.ops.snapshot import progress_bar

        share = 100.0 * done / total if total else 0.0
        rate = done / max(now - self.began, 1e-3)
        eta = f"ETA {max(total - done, 0) / rate:.0f} s" if rate > 0 and done < total else ""
        line = f"{progress_bar(min(share, 100.0))} {done:,}/{total:,} rows {rate:,.0f}/s {eta} {what}"
        sys.stderr.write("\r" + line[:150] + " " * max(0, self._width - len(line)))
        sys.stderr.flush()
        self._width = len(line)

    def end(self) -> None:
        if self.enabled and self._width:
            sys.stderr.write("\r" + " " * self._width + "\r")
            sys.stderr.flush()


def _mirror_target(args: argparse.Namespace, config: Any, shards: list[Any], location: str) -> Any:
    from relay.cli.spark import _catalog
    from relay.ops.verify.mirror import MirrorTarget
    from relay.ops.verify.topic import TopicIndex
    from relay.spark.storage import parse_options
    from relay.spark.verify_mirror import MirrorReader

    reader = MirrorReader(
        location,
        format=args.format,
        storage_options=parse_options(args.storage_option, "--storage-option"),
        catalog=_catalog(args) if args.format == "iceberg" else {},
    )
    index = TopicIndex(
        {"bootstrap.servers": config.kafka.bootstrap_servers, **dict(config.kafka.settings)},
        sorted({s.route.topic for s in shards}),
        args.table,
        config.source_id,
        shards,
        parse_values=False,
        connect_timeout=config.kafka.connect_timeout_seconds,
    )
    target = MirrorTarget(reader, index, args.table, config.source_id, config.source.timezone)
    target.use(shards)
    return target


def _check_mirror(args: argparse.Namespace, location: str, timeout: float) -> None:
    """The mirror's location, catalog and object store, before the source is read."""
    from relay.cli.spark import _catalog
    from relay.cli.spark_checks import check_storage
    from relay.spark.storage import Storage, parse_options

    if not location:
        raise VerifyError("--against mirror:PATH: give the mirror table's PATH (local or s3://…)")
    storage = Storage(location, parse_options(args.storage_option, "--storage-option"))
    catalog = _catalog(args) if args.format == "iceberg" else {}
    check_storage(storage, "--against", args.format, catalog, timeout, read_only=True)


def cmd_verify(args: argparse.Namespace) -> int:
    from relay.config.load import load_config
    from relay.errors import VerifyError
    from relay.ops.verify.engine import VerifyOptions
    from relay.ops.verify.metrics import write_metrics
    from relay.ops.verify.repair import repair
    from relay.ops.verify.setup import plan_shards, session, topic_target, verify
    from relay.wiring import mapping_store

    if args.chunk_rows < 1 or args.passes < 1:
        raise VerifyError("--chunk-rows and --passes must be at least 1")
    against = str(args.against)
    if against != "topic" and not against.startswith("mirror:"):
        raise VerifyError(f"--against must be topic or mirror:PATH, got {against!r}")
    config = load_config(args.config)
    if against.startswith("mirror:"):
        _check_mirror(args, against[7:], config.kafka.connect_timeout_seconds)
    store = mapping_store(config)
    try:
        mapping = store.read()
    finally:
        store.close()
    rate = (
        config.snapshot.max_rows_per_second if args.max_rows_per_second is None else args.max_rows_per_second
    )
    options = VerifyOptions(args.table, args.chunk_rows, args.where, args.passes, args.wait)
    bar = _Bar(sys.stderr.isatty() and not args.no_progress)
    stop = threading.Event()
    with session(config, rate, args.where) as (reader, published):
        mirror = against.startswith("mirror:")
        shards = plan_shards(config, mapping, args.table, reader, mirror=mirror, where=args.where)
        target = (
            _mirror_target(args, config, shards, against[7:])
            if mirror
            else topic_target(config, mapping, args.table, shards)
        )
        try:
            report = verify(
                reader, published, target, shards, options, config=config, progress=bar, stop=stop
            )
            bar.end()
            if args.repair and report.differences:
                repair(config, report, reader, published, target, shards, options, args.repair_timeout, stop)
        finally:
            bar.end()
            target.close()
    if args.metrics_file or args.pushgateway:
        write_metrics(report, args.metrics_file, args.pushgateway, instance=config.instance)
    print(json.dumps(report.to_json(), indent=2, ensure_ascii=False) if args.json else report.text())
    code = exit_status(report)
    if mirror:
        _exit_now(code)
    return code


EXIT_NOT_VERIFIED = 3  # no difference found, but keys not compared (relay --help: exit statuses)


def exit_status(report: Any) -> int:
    """0 equal; 1 differences (left after a repair); 3 not verified: no difference, keys not compared."""
    if report.repair is not None:
        differ, unsettled = report.repair.get("differ", 0), report.repair.get("not_verified", 0)
    else:
        differ, unsettled = len(report.differences), len(report.skipped)
    return 1 if differ else EXIT_NOT_VERIFIED if unsettled else 0


def _exit_now(code: int) -> None:
    """End the process without the interpreter's teardown once a mirror was read: the native thread
    pools of the table readers (Arrow's C++ pools, delta-rs) can still hold a joinable thread when the
    interpreter finalizes, and their destructors then abort the process (SIGABRT, "terminate called
    without an active exception", after the report was printed; seen once in a full test run; the
    same abort is reported against apache/arrow and delta-rs). Everything the command owes is written
    and flushed first, so its exit status is the report's."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
