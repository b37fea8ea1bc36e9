"""``relay bench``: the command line of the benchmark (``relay.dev.bench``). Prints progress to stderr and the
results table (or ``--json``) to stdout; runs on the main thread."""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from relay.cli import values
from relay.dev.bench.cluster import ClusterOptions, run_cluster_bench
from relay.dev.bench.cluster_stats import ClusterResult, render_cluster
from relay.dev.bench.common import DEFAULT_ROWS, QUICK_ROWS, BenchOptions
from relay.dev.bench.peers import PEER_NAMES, UNAVAILABLE
from relay.dev.bench.runner import BenchReport, run_bench
from relay.dev.bench.sidebyside_stats import render_side_by_side
from relay.dev.bench.snapshot import render_snapshot
from relay.dev.bench.stats import render_stall, render_table, render_targets
from relay.dev.bench.verify import render_verify
from relay.dev.services import MySQLService
from relay.errors import ArgumentError, BenchError

WORKLOADS = ("W1", "W2", "W3", "W4", "W5")


def add_bench_parser(subparsers: Any) -> None:
    bench = subparsers.add_parser(
        "bench",
        help="measure the relay end to end against the stock python-mysql-replication reader",
        description="Starts MariaDB and Apache Kafka (or uses --mysql/--kafka), writes each "
        "workload's binlog backlog once (W1 single-row INSERT/UPDATE/DELETE, W2 100-row INSERT "
        "transactions, W3 1,000-row UPDATEs, W4 ~4 KB rows, W5 ONE transaction: an INSERT ... SELECT of N "
        "rows and an UPDATE of 40 % of them), and on that same binlog measures: the relay "
        "end to end (rows/s until Kafka acknowledged every row and the position is saved), the stock "
        "reader parse-only, a naive relay (stock reader -> JSON -> produce -> flush per transaction) and "
        "the produce-only ceiling (the relay's records, pre-encoded), each --repeat times in a fresh "
        "process (the table shows medians; W5 has no produce-only ceiling: it would keep every record in "
        "memory); then latency commit -> Kafka ack at a fixed offered rate (W1-W4), the relay's peak RSS "
        "against its bound (store budget + 200 MB; a target for W5), and the relay's peak RSS while a "
        "dedicated broker is SIGSTOPped under a large backlog. The "
        "embedded broker's topics are emptied before every measured Kafka run (DeleteRecords; Tansu, "
        "which slows as it holds more, is restarted empty); a --kafka broker is used as it is. Cleans up "
        "everything it started.",
    )
    bench.add_argument(
        "--quick", action="store_true", help="small backlogs, 1 repetition, 128 MB stall (~1 min)"
    )
    bench.add_argument(
        "--workloads",
        type=values.subset(WORKLOADS, "workloads", extra=("none",)),
        default=",".join(WORKLOADS),
        help="comma-separated subset of W1,W2,W3,W4,W5; none: only the snapshot (S) and verify (V) workloads",
    )
    bench.add_argument(
        "--repeat", type=values.positive_int, help="repetitions per figure (default 3; --quick 1)"
    )
    for name in WORKLOADS:
        bench.add_argument(
            f"--{name.lower()}-rows",
            type=int,
            help=(
                f"row changes in the {name} backlog"
                if name != "W5"
                else "rows of W5's INSERT ... SELECT (its UPDATE changes 40 %% of them again)"
            )
            + f" (default {DEFAULT_ROWS[name]:,}; --quick {QUICK_ROWS[name]:,})",
        )
    bench.add_argument(
        "--snapshot-rows",
        type=int,
        help="existing rows for the snapshot workload S (snapshot -> Kafka acked vs a plain streaming "
        "SELECT) and the verify workload V (relay verify of that table against its topic vs the same SELECT) "
        "(default 100,000; --quick 20,000; 0 skips both)",
    )
    bench.add_argument("--no-baselines", action="store_true", help="measure the relay only")
    bench.add_argument(
        "--peers",
        type=values.subset((*PEER_NAMES, *UNAVAILABLE), "peers"),
        help="comma-separated peers to run beside the relay on W1-W4 and S, each installed by the bench "
        f"(pinned jars from Maven Central, resolved once): {', '.join(PEER_NAMES)} (canal was looked for: "
        "--peers canal says why it does not install). Each runs on the same "
        "backlog and broker as the relay, one after the other on an empty broker, measured the same way from "
        "outside (rows/s first to last record by the broker's clock, CPU per row of all its processes, peak "
        "RSS, latency at the fixed rate) and its topics checked against SELECT; one table per workload with "
        "the produce-only ceiling and the ratios relay/peer",
    )
    bench.add_argument(
        "--latency-rate",
        type=values.positive_float,
        default=1000.0,
        help="offered rows/s for the latency figure",
    )
    bench.add_argument(
        "--latency-seconds", type=float, help="how long to offer it (default 8; --quick 3; 0 skips)"
    )
    bench.add_argument(
        "--stall-mb", type=int, help="backlog written while the broker is stopped (default 1024; 0 skips)"
    )
    bench.add_argument(
        "--mysql",
        type=values.mysql_url,
        help="mysql://user:password@host:port with REPLICATION SLAVE (default: embedded MariaDB)",
    )
    bench.add_argument(
        "--kafka", help="bootstrap host:port of a Kafka cluster to use (default: an embedded one, --broker)"
    )
    bench.add_argument(
        "--broker",
        choices=("kafka", "tansu"),
        default="kafka",
        help="the embedded broker: kafka (Apache Kafka, one KRaft broker from the jars scripts/bootstrap "
        "resolved; the default) or tansu (the Tansu broker, Kafka protocol, memory storage)",
    )
    bench.add_argument(
        "--set",
        type=values.dotted_setting,
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override a relay setting of conf/relay.yaml for the relay runs, e.g. publish.batch_size=512 "
        "(the value is read as YAML); repeatable",
    )
    bench.add_argument(
        "--profile",
        metavar="DIR",
        help="sample each relay run with py-spy (pip install py-spy; else cProfile) into "
        "DIR/<workload>-<n>.txt and print its top functions",
    )
    bench.add_argument("--json", action="store_true", help="the report as JSON on stdout")
    _add_cluster_options(bench)
    bench.set_defaults(func=cmd_bench)


def _add_cluster_options(bench: Any) -> None:
    g = bench.add_argument_group(
        "the cluster figures (--cluster: instead of the workloads above)",
        "Starts ZooKeeper, MariaDB and a broker (or uses --zookeeper/--mysql/--kafka) and runs `relay "
        "cluster run` nodes as real processes. Load: one node with 0, then N idle instances: ZooKeeper's "
        "znodes, watches, sessions and writes/s (its own mntr/srvr) and the node's memory (RSS and PSS "
        "summed over the node and its instance processes), per instance, and writes/s while their server "
        "writes rows none captures. Hand-over: two nodes with K "
        "instances each, rows written into each; --repeat times a node is SIGKILLed: seconds from the "
        "signal to each of its instances' first acknowledged batch on the other node (its position "
        "written under the new epoch, by ZooKeeper's clock), median and max. Only --repeat, --quick, "
        "--json and the service addresses apply to it.",
    )
    g.add_argument("--cluster", action="store_true", help="measure the cluster figures")
    g.add_argument(
        "--cluster-instances",
        type=values.positive_int,
        metavar="N",
        help="idle instances on one node (default 8; --quick 4)",
    )
    g.add_argument(
        "--cluster-kill",
        type=values.positive_int,
        metavar="K",
        help="instances on the node that is SIGKILLed (default 3; --quick 2)",
    )
    g.add_argument(
        "--cluster-session",
        type=values.positive_float,
        metavar="SECONDS",
        help="the nodes' zookeeper.session_timeout_seconds (default 10, node.yaml's default; ZooKeeper "
        "grants at least 2 ticks: 4 s with tickTime=2000)",
    )
    g.add_argument(
        "--cluster-rows",
        type=values.positive_float,
        metavar="ROWS_PER_S",
        help="rows/s written into each instance during the hand-overs, and into a table no instance captures "
        "for the idle instances on a busy server (default 20)",
    )
    g.add_argument(
        "--zookeeper",
        metavar="HOSTS",
        help="a ZooKeeper to use (its 4lw whitelist must allow "
        "mntr, srvr); default: an embedded standalone server",
    )


def options_from_args(args: argparse.Namespace) -> BenchOptions:
    names = tuple(n.strip().upper() for n in args.workloads.split(",") if n.strip() and n.strip() != "none")
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown or (not names and args.workloads.strip() != "none"):
        raise ArgumentError("--workloads", f"unknown workloads {unknown}; choose from {', '.join(WORKLOADS)}")
    base = BenchOptions.quick() if args.quick else BenchOptions()
    rows = dict(base.rows)
    for name in WORKLOADS:
        given = getattr(args, f"{name.lower()}_rows")
        if given is not None:
            rows[name] = given
    kw: dict[str, Any] = {"workloads": names, "rows": rows, "baselines": not args.no_baselines}
    kw["peers"] = tuple(dict.fromkeys(p.strip().lower() for p in (args.peers or "").split(",") if p.strip()))
    for name in kw["peers"]:
        if name in UNAVAILABLE:
            raise ArgumentError("--peers", f"{name}: it does not install here: {UNAVAILABLE[name]}")
    kw["latency_rate"] = args.latency_rate
    kw["settings"] = parse_settings(args.set)
    for key, value in (
        ("repeat", args.repeat),
        ("latency_seconds", args.latency_seconds),
        ("stall_mb", args.stall_mb),
        ("snapshot_rows", args.snapshot_rows),
    ):
        if value is not None:
            kw[key] = value
    if kw.get("repeat", base.repeat) < 1:
        raise ArgumentError("--repeat", "must be at least 1")
    kw["profile"] = str(Path(args.profile).resolve()) if args.profile else None
    return BenchOptions(
        **{**base.__dict__, **kw, "mysql": args.mysql, "kafka": args.kafka, "broker": args.broker}
    )


def check_servers(options: BenchOptions, timeout: float = 10.0) -> None:
    """The servers given by --kafka and --mysql answer (and the account logs in) before the embedded ones
    start and the workloads run."""
    if options.kafka:
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        from relay.common.kafka_log import quiet

        try:
            AdminClient(quiet({"bootstrap.servers": options.kafka})).list_topics(timeout=timeout)
        except KafkaException as exc:
            raise ArgumentError(
                "--kafka", f"{options.kafka}: kafka did not answer within {timeout:g} s ({exc.args[0].str()})"
            ) from exc
    if options.mysql:
        from relay.common import mysql

        s = MySQLService.parse(options.mysql)
        mysql.connect(
            s.host, s.port, s.user, s.password, tls=None, connect_timeout=timeout, origin="--mysql"
        ).close()


def parse_settings(items: list[str]) -> dict[str, Any]:
    """``["publish.batch_size=512"]`` → ``{"publish.batch_size": 512}`` (values read as YAML scalars)."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or "." not in key:
            raise ArgumentError("--set", f"wants SECTION.KEY=VALUE, got {item!r}")
        out[key.strip()] = yaml.safe_load(value)
    return out


def render_report(report: BenchReport) -> str:
    m = report.machine
    lines = [
        f"relay bench — {m['date']}, {m['cpus']} CPUs ({m['cpu']}), Python {m['python']}, "
        f"MySQL {m['mysql']}, Kafka {m['kafka']}",
        f"hot modules: {m.get('build', 'not recorded')}",
        f"medians of {report.options['repeat']} run(s); rows/s end to end = Kafka acknowledged every row and "
        "the position is saved; latency = commit -> Kafka ack at "
        f"{report.options['latency_rate']:,.0f} rows/s offered; ceiling = the same records, pre-encoded, "
        "produced and acked alone",
        "",
        render_table(report.workloads),
        "",
        render_targets(report.workloads),
    ]
    if report.stall is not None:
        lines += ["", render_stall(report.stall)]
    if report.snapshot is not None:
        lines += ["", render_snapshot(report.snapshot)]
    if report.verify is not None:
        lines += ["", render_verify(report.verify)]
    if report.side_by_side:
        peers = "; ".join(f"{name}: {label}" for name, label in m.get("peers", {}).items())
        lines += [
            "",
            f"Side by side ({peers}); each system measured from outside on the same backlog and an empty "
            "broker: rows/s = row changes / (last record's append - first's, broker clock); CPU = all its "
            "processes between those records; latency = commit -> append time at the fixed rate; medians",
            "",
            render_side_by_side(report.side_by_side),
        ]
    lines += report.notes
    return "\n".join(lines)


def cluster_options_from_args(args: argparse.Namespace) -> ClusterOptions:
    base = (
        ClusterOptions(repeat=1, kill=2, instances=4, window_seconds=5.0) if args.quick else ClusterOptions()
    )
    kw: dict[str, Any] = {}
    for key, value in (
        ("instances", args.cluster_instances),
        ("kill", args.cluster_kill),
        ("repeat", args.repeat),
        ("session_seconds", args.cluster_session),
        ("rows_per_s", args.cluster_rows),
    ):
        if value is not None:
            kw[key] = value
    return replace(base, **kw, mysql=args.mysql, kafka=args.kafka, zookeeper=args.zookeeper)


def render_cluster_report(result: ClusterResult, machine: dict[str, Any]) -> str:
    return "\n".join(
        [
            f"relay bench --cluster — {machine['date']}, {machine['cpus']} CPUs ({machine['cpu']}), Python "
            f"{machine['python']}, MySQL {machine['mysql']}, Kafka {machine['kafka']}, ZooKeeper "
            f"{machine['zookeeper']}",
            f"command: {machine['command']}",
            "",
            render_cluster(result),
        ]
    )


def cmd_bench(args: argparse.Namespace) -> int:
    began = time.monotonic()

    def progress(text: str) -> None:
        print(f"[{time.monotonic() - began:6.1f}s] {text}", file=sys.stderr, flush=True)

    if args.cluster:
        result, machine = run_cluster_bench(cluster_options_from_args(args), progress)
        if args.json:
            print(json.dumps({"machine": machine, "cluster": result.to_json()}, indent=2))
        else:
            print(render_cluster_report(result, machine))
        return 0
    if args.zookeeper or any(
        getattr(args, f"cluster_{k}") is not None for k in ("instances", "kill", "session", "rows")
    ):
        given = " ".join(
            f"--{k.replace('_', '-')} {v}"
            for k, v in vars(args).items()
            if (k == "zookeeper" or k.startswith("cluster_")) and v is not None and k != "cluster"
        )
        raise ArgumentError(given, "--zookeeper and --cluster-* apply only with --cluster")
    options = options_from_args(args)
    check_servers(options)  # before anything starts: a given server that cannot serve is one line
    import pymysql

    try:
        report = run_bench(options, progress)
    except pymysql.err.MySQLError as exc:
        where = "--mysql" if options.mysql else "the embedded MariaDB"
        raise BenchError(
            f"{where}: {exc.args[-1]} (the account needs all privileges on relay_bench)"
        ) from exc
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        print(render_report(report))
    return 0
