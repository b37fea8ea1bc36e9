"""The ``relay`` command line: the parser and the ``run``, ``status``, ``entries`` and ``demo`` commands.

The CLI is the only code that handles signals, and the only production code that prints for people (the
demo and the benchmarks in ``relay.dev`` print their own progress). Command groups live beside it:
``mapping``/``replay`` (``relay.cli.mapping``), ``positions``, ``dev``, ``spark``, ``bench``, ``instance``,
``cluster``, ``console``; ``relay run``'s body is ``relay.cli.running``'s (a cluster node's children
run it too).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Sequence
from types import FrameType
from typing import Any

from relay import __version__, _native
from relay.canal.entry import Entry, EntryType, RowChange
from relay.cli import values
from relay.cli.running import EXIT_LEADERSHIP_LOST, _JsonFormatter, run_relay
from relay.cli.running import setup_logging as _setup_logging
from relay.common.redact import RedactingFormatter, redact, redact_value
from relay.config.sections import InstanceConfig, SinkConfig, SourceConfig, StartConfig
from relay.errors import ConfigError, InvalidConfigError, RelayError

__all__ = ["EXIT_LEADERSHIP_LOST", "_JsonFormatter", "_setup_logging", "main", "run_relay"]

log = logging.getLogger("relay")

EXIT_OK = 0
EXIT_FAILED = 1  # the command's answer is "no": not running (status), a check failed (check), …
EXIT_ERROR = 2  # an error, said in one line: a bad option or value, config or mapping, a refusal
EXIT_INTERNAL = 70  # an unexpected error: a bug (EX_SOFTWARE); one line, --debug shows the traceback
EXIT_INTERRUPTED = 130  # SIGINT / SIGTERM outside `relay run` (128 + SIGINT)
EXIT_PIPE_CLOSED = 141  # the reader of the output went away (128 + SIGPIPE); nothing is printed

EXIT_STATUSES = """\
exit status:
  0    success (status: the relay is running; check: every check passed; verify: equal, every key
       compared)
  1    the answer is no: status: the relay is not running; check: a check failed; verify: differences;
       mapping resolve --all: an ambiguous table; snapshot --follow: the snapshot failed or was
       cancelled; schema resync without --yes: nothing written; dev status: a service is not answering
  2    an error, in one line on stderr: a bad option or value, a bad config or mapping (every problem,
       one line each), a refused edit or request, a server that refused, a relay that stopped on an error
  3    relay run: HA leadership lost or the producer fenced (let the supervisor restart it: it stands by);
       dev status: no development service recorded; verify: not verified (no difference found, but keys
       not compared: changing in every pass, or a target that did not apply them within --wait)
  4    cluster child (a node's instance process): its node went away, it stopped itself
  5    cluster child: stopped on a schema error (held until relay schema resync --instance)
  70   an internal error (a bug), in one line on stderr; run again with --debug for the traceback
  130  interrupted (SIGINT, or SIGTERM outside relay run)
  141  the output's reader went away (relay mapping show | head -1): the command stopped quietly
"""


def format_entry(entry: Entry) -> list[str]:
    """Human-readable lines for one entry, in the spirit of canal's example client."""
    h = entry.header
    where = f"{h.logfile_name}:{h.logfile_offset}"
    gtid = f" gtid={h.gtid}" if h.gtid else ""
    if entry.entry_type == EntryType.TRANSACTIONBEGIN:
        return [f"BEGIN  {where}{gtid}"]
    if entry.entry_type == EntryType.TRANSACTIONEND:
        xid = getattr(entry.store_value, "transaction_id", "")
        return [f"END    {where} xid={xid}"]
    value = entry.store_value
    assert isinstance(value, RowChange)
    table = f"{h.schema_name}.{h.table_name}" if h.table_name else h.schema_name
    if value.is_ddl:
        return [f"DDL    {where} {value.event_type.name} {table}: {value.sql}"]
    count = len(value.rows)
    lines = [f"{value.event_type.name:<6} {where} {table} ({count} row{'' if count == 1 else 's'})"]
    for row_data in value.row_datas():
        for label, cols in (("before", row_data.before_columns), ("after", row_data.after_columns)):
            if cols:
                shown = ", ".join(
                    f"{c.name}={'NULL' if c.is_null else c.value!r}{'*' if c.updated else ''}" for c in cols
                )
                lines.append(f"         {label}: {shown}")
    return lines


def _entry_json(entry: Entry) -> str:
    h = entry.header
    out: dict[str, object] = {
        "type": EntryType(entry.entry_type).name,
        "file": h.logfile_name,
        "offset": h.logfile_offset,
        "gtid": h.gtid,
        "executeTime": h.execute_time,
        "schema": h.schema_name,
        "table": h.table_name,
    }
    value = entry.store_value
    if isinstance(value, RowChange):
        out["eventType"] = value.event_type.name
        out["isDdl"] = value.is_ddl
        out["sql"] = value.sql
        out["columns"] = [c.name for c in value.columns]
        out["rows"] = [{"before": r.before, "after": r.after} for r in value.rows]
    return json.dumps(out, ensure_ascii=False)


def _parse_start(args: argparse.Namespace) -> StartConfig:
    """The start the options name (each already checked by its ``relay.cli.values`` type)."""
    journal, offset = args.start_position if args.start_position else (None, None)
    return StartConfig(gtid=args.start_gtid, journal=journal, offset=offset, timestamp=args.start_timestamp)


def cmd_entries(args: argparse.Namespace) -> int:
    from relay.dev.services import MySQLService

    service = MySQLService.parse(args.mysql)
    source = SourceConfig(
        host=service.host,
        port=service.port,
        user=service.user,
        password=service.password,
        server_id=args.server_id,
        start=_parse_start(args),
        origin="--mysql",
    )
    from relay.wiring import canal_instance, position_file_or_memory  # the composition root, only here

    instance = canal_instance(
        InstanceConfig(source=source, sink=SinkConfig(filter=args.filter, black_filter=args.black_filter)),
        position_file_or_memory(args.positions),
    )
    instance.start()
    shown = 0
    idle_since = time.monotonic()
    try:
        while args.limit == 0 or shown < args.limit:
            message = instance.get_without_ack(args.batch_size, timeout=0.5)
            if not message.entries:
                if args.idle_exit and time.monotonic() - idle_since > args.idle_exit:
                    break
                continue
            idle_since = time.monotonic()
            for entry in message.entries:
                if args.json:
                    print(_entry_json(entry))
                else:
                    print("\n".join(format_entry(entry)))
                shown += 1
            instance.ack(message.batch_id)
    finally:
        instance.stop()
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from relay.config.load import load_config

    config = load_config(args.config)
    return run_relay(config, args.verbose)


def cmd_status(args: argparse.Namespace) -> int:
    from relay.cli.remote import target
    from relay.config.load import load_config
    from relay.ops.status import status_report

    remote = target(args)
    if remote is not None:
        from relay.cluster.operate import instance_status

        with remote:
            found = instance_status(remote)
            if found is None:
                print(f"relay: {remote.where()}: no node runs it (`relay cluster status`)", file=sys.stderr)
                return EXIT_FAILED
    else:
        found = status_report(load_config(args.config))
    report = redact_value(found)
    if args.json:
        print(json.dumps(report, indent=2, sort_keys=True))
    else:
        width = max(len(k) for k in report)
        for key, value in report.items():
            if isinstance(value, dict):  # snapshot_tables, mapping_refused: a line each
                print(f"{key:<{width}}  {'-' if not value else ''}")
                for name, line in value.items():
                    print(f"  {name:<{width - 2}}  {_one_line(line)}")
                continue
            print(f"{key:<{width}}  {_one_line(value) if value is not None else '-'}")
    return 0 if report.get("running") else 1


def _one_line(value: object) -> str:
    """A value on one line of ``relay status``: a text of several lines (every problem of a refused
    mapping) joined with " | "."""
    return " | ".join(part.strip() for part in str(value).splitlines() if part.strip())


def cmd_check(args: argparse.Namespace) -> int:
    from relay.ops.check import run_checks

    return 0 if run_checks(args.config, lambda check: print(check.line(), flush=True)) else 1


def cmd_demo(args: argparse.Namespace) -> int:
    from relay.dev.demo import run_demo

    return run_demo(keep=args.keep, orders=args.orders)


class _Version(argparse.Action):
    """``--version``: the version and which build of the hot modules runs (``relay._native``), unwrapped."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=kwargs.get("help"))

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        print(f"relay {__version__}\nhot modules: {_native.describe()}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = values.RelayParser(
        prog="relay",
        description="canal's binlog parser and ring store in Python; relays MySQL changes durably to Kafka.",
        epilog=EXIT_STATUSES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action=_Version, help="show the version and which build runs, then exit")
    parser.add_argument(
        "-v", "--verbose", action="count", default=0, help="more logging (-v info, -vv debug)"
    )
    parser.add_argument(
        "--debug",
        action="store_true",
        help="on an error, also print its traceback (and every cause) after the one line",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = sub.add_parser(
        "demo",
        help="the whole relay on throwaway local services: sharded MySQL in, logical Kafka topics out",
        description="Starts MariaDB and Apache Kafka (one KRaft broker) in a temp dir, writes a sharded "
        "sample (shop_00..03 x orders_00..03 -> shop.orders, plus shop_00.customers -> shop: inserts, "
        "updates, deletes, one ALTER), runs the relay with the demo's relay.yaml and mapping.yaml until "
        "its saved position reaches the binlog end, shows what landed in each topic, checks that the "
        "topic rebuilds the table (exit 1 if not), then stops everything and removes the temp dir.",
    )
    demo.add_argument(
        "--keep",
        action="store_true",
        help="leave MariaDB, the broker and the relay (a `relay run` process) running; print how to "
        "connect, read a topic, see `relay status` and stop them",
    )
    demo.add_argument(
        "--orders", type=values.positive_int, default=600, help="orders in the sample workload (default 600)"
    )
    demo.set_defaults(func=cmd_demo)

    ent = sub.add_parser(
        "entries",
        help="read a server's binlog as canal entries and print them",
        description="Connects as a replica and prints canal entries (BEGIN / row changes / END / DDL) "
        "until stopped (Ctrl-C), --limit or --idle-exit. "
        "Start: --start-gtid, --start-position, --start-timestamp, or the current end of the binlog.",
    )
    ent.add_argument(
        "--mysql",
        required=True,
        type=values.mysql_url,
        help="mysql://user:password@host:port of a replication account",
    )
    ent.add_argument(
        "--server-id", type=values.server_id, default=6544, help="our replica server id (default 6544)"
    )
    ent.add_argument(
        "--start-gtid", type=values.gtid_set, help="GTID set to start after (MySQL uuid:1-5 or MariaDB 0-1-5)"
    )
    ent.add_argument(
        "--start-position",
        type=values.binlog_place,
        help="binlog FILE[:OFFSET] to start at (OFFSET default 4)",
    )
    ent.add_argument(
        "--start-timestamp",
        type=values.instant_ms,
        help="ISO time (2026-11-20T08:00:00+00:00; no offset: local time) or epoch milliseconds: start at "
        "the first transaction at or after it",
    )
    ent.add_argument(
        "--positions", help="position file: resume from it and save acknowledged positions to it"
    )
    ent.add_argument(
        "--filter",
        type=values.regexes,
        default=".*\\..*",
        help="canal filter: comma-separated schema\\.table regexes",
    )
    ent.add_argument(
        "--black-filter",
        type=values.regexes,
        default="",
        help="canal black filter: regexes of tables to drop",
    )
    ent.add_argument(
        "--batch-size", type=values.positive_int, default=100, help="entries per batch (default 100)"
    )
    ent.add_argument("--limit", type=values.count, default=0, help="stop after this many entries (0: never)")
    ent.add_argument(
        "--idle-exit", type=values.seconds, default=0.0, help="stop after this many seconds with nothing new"
    )
    ent.add_argument("--json", action="store_true", help="one JSON object per entry")
    ent.set_defaults(func=cmd_entries)

    run = sub.add_parser(
        "run",
        help="run the relay: binlog → canal store → logical Kafka topics, acking only what Kafka accepted",
        description="The long-running relay. Reads the config (every key is documented in conf/relay.yaml) "
        "and the mapping it names, refuses bad values naming the key, then publishes until SIGTERM/SIGINT, "
        "which stops at a batch boundary, saves the position and exits 0. A start that fails on something "
        "that may come back (the broker, the source or ZooKeeper not answering) is tried again with "
        "publish.retry's backoff, one warning line per attempt, until it starts or is stopped; what a "
        "person must fix (a refused login, a bad mapping, a missing topic with topics.create: false) ends "
        "it with exit status 2.",
    )
    run.add_argument("-c", "--config", required=True, help="relay config file (YAML), e.g. conf/relay.yaml")
    run.set_defaults(func=cmd_run)

    check = sub.add_parser(
        "check",
        help="check everything a start would check, writing nothing (exit 0: all fine, 1: a check failed)",
        description="Runs, without starting anything or writing anywhere, what `relay run` checks before it "
        "publishes: the config (every problem), the state directory (and state an upgrade left at the old "
        "place), a relay already holding the instance, the mapping and its warnings, the source server (its "
        "settings one by one, binary logs, REPLICATION SLAVE, SELECT on the captured tables, the mapping "
        "against its real tables, where the relay would start), Kafka (reachable; every topic present with "
        "the mapping's settings, or absent and creatable), ZooKeeper when the config uses it, and the "
        "metrics port. One line per check: ok, warn, FAIL or skip. What only a write could prove (the "
        "exactly-once probe; a topic creation where the broker does not report the account's rights) is "
        "said to be unproven. Exit status 0 when no check failed, 1 otherwise.",
    )
    check.add_argument("-c", "--config", required=True, help="the relay's config file")
    check.set_defaults(func=cmd_check)

    status = sub.add_parser(
        "status",
        help="show a relay's position, lag, store fill and publish rate",
        description="Reads the running relay's status file (in its state directory) and the saved position, "
        "and asks the MySQL server how far its binlog has moved on. Shows the mapping version in use, the "
        "store's current one, one waiting for the switch and the last version refused, with why. With "
        "--instance NAME (from any host): the cluster instance's status as its node publishes it in "
        "ZooKeeper (the same fields, plus its node, process, epoch and a hold after a schema error); the "
        "server is asked when this environment sets the source's ${NAME} secrets. Exit status 0 when the "
        "relay is running, 1 when not (an instance no node runs: one line on stderr saying why).",
    )
    from relay.cli.remote import add_target_options

    add_target_options(status)
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.set_defaults(func=cmd_status)

    from relay.cli.dev import add_dev_parser
    from relay.cli.mapping import add_mapping_parser, add_replay_parser

    add_dev_parser(sub)
    add_mapping_parser(sub)
    add_replay_parser(sub)
    from relay.cli.bench import add_bench_parser

    add_bench_parser(sub)
    from relay.cli.spark import add_spark_parser

    add_spark_parser(sub)
    from relay.cli.positions import add_positions_parser

    add_positions_parser(sub)
    from relay.cli.schema import add_schema_parser

    add_schema_parser(sub)

    from relay.cli.snapshot import add_snapshot_parser

    add_snapshot_parser(sub)
    from relay.cli.verify import add_verify_parser

    add_verify_parser(sub)
    from relay.cli.instance import add_instance_parser

    add_instance_parser(sub)
    from relay.cli.cluster import add_cluster_parser

    add_cluster_parser(sub)
    from relay.cli.console import add_console_parser

    add_console_parser(sub)
    return parser


def _runs_relays(args: argparse.Namespace) -> bool:
    """A cluster node or its child: a long-running process whose logs are its record."""
    return args.command == "cluster" and getattr(args, "cluster_command", "") in ("run", "child")


def _on_signal(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def error_text(exc: RelayError) -> str:
    """An error as the command prints it, secrets redacted — in a configuration error only the problem,
    never the key path: ``source.password: environment variable … is not set`` must stay readable."""
    if isinstance(exc, InvalidConfigError):
        lines = "\n".join(f"  - {error_text(e)}" for e in exc.errors)
        return f"{exc.key}: {len(exc.errors)} problems:\n{lines}"
    if isinstance(exc, ConfigError):
        return f"{exc.key}: {redact(exc.problem)}"
    return redact(str(exc))


def _stdout_gone() -> int:
    """The reader of our output went away (``relay mapping show | head -1``): stop quietly. Point stdout
    at /dev/null so the interpreter's last flush does not complain either."""
    with contextlib.suppress(OSError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return EXIT_PIPE_CLOSED


def main(argv: Sequence[str] | None = None) -> int:
    """The ``relay`` command; its exit statuses are ``EXIT_STATUSES``."""
    try:
        args = build_parser().parse_args(argv)  # a bad value: one line, status 2 (relay.cli.values)
    except BrokenPipeError:
        return _stdout_gone()
    level = logging.DEBUG if args.debug else logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for handler in logging.getLogger().handlers:  # secrets never reach a log line (relay.redact)
        handler.setFormatter(RedactingFormatter(handler.formatter or logging.Formatter()))
    if args.command != "run" and not _runs_relays(args) and args.verbose == 0 and not args.debug:
        # kazoo logs every failed connection attempt as a warning (15 of them while `relay status`
        # waited for an unreachable ZooKeeper); the command says what it could not reach in one line
        logging.getLogger("kazoo").setLevel(logging.ERROR)
    signal.signal(signal.SIGTERM, _on_signal)  # `relay run` installs its own graceful handlers
    try:
        code = int(args.func(args))
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        return _stdout_gone()
    except RelayError as exc:
        print(f"relay: error: {error_text(exc)}", file=sys.stderr)
        _traceback(args)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except OSError as exc:  # a file or socket the command was given: its name and what the OS said
        print(f"relay: error: {redact(os_error_text(exc))}", file=sys.stderr)
        _traceback(args)
        return EXIT_ERROR
    except Exception as exc:
        # Not an error the command knows: a bug. One line all the same; the traceback with --debug.
        print(
            f"relay: internal error: {type(exc).__name__}: {redact(str(exc))} (a bug: run again with "
            "--debug and report the traceback)",
            file=sys.stderr,
        )
        _traceback(args)
        return EXIT_INTERNAL


def os_error_text(exc: OSError) -> str:
    """``[Errno 13] Permission denied: '/etc/relay.yaml'`` as ``/etc/relay.yaml: permission denied``."""
    what = (exc.strerror or str(exc)).rstrip(".")
    where = exc.filename if exc.filename is not None else None
    return f"{where}: {what[:1].lower()}{what[1:]}" if where is not None else what


def _traceback(args: argparse.Namespace) -> None:
    if getattr(args, "debug", False):
        import traceback

        traceback.print_exc()


if __name__ == "__main__":
    sys.exit(main())
