"""``relay snapshot run|status|cancel``: on-demand snapshots of a running relay (``relay.ops.snapshot``)."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any


def add_snapshot_parser(sub: Any) -> None:
    snap = sub.add_parser(
        "snapshot",
        help="re-read a logical table while the relay streams, or show / cancel the snapshot",
        description="Asks the running relay (through its request file, snapshot.request_file) to snapshot "
        "every shard of one logical table with the watermark rules of the initial snapshot, without "
        "stopping the live stream.",
    )
    cmds = snap.add_subparsers(dest="snapshot_command", required=True, metavar="ACTION")
    run = cmds.add_parser("run", help="snapshot one logical table (all its shards) now")
    run.add_argument("-c", "--config", required=True, help="the relay's config file")
    run.add_argument("--table", required=True, help="the logical db.table, e.g. shop.orders")
    run.add_argument("--where", default="", help="an SQL condition the rows must meet (optional)")
    run.add_argument("--follow", action="store_true", help="print a progress line until it is done")
    run.set_defaults(func=cmd_snapshot_run)
    status = cmds.add_parser("status", help="the snapshot's progress per table")
    status.add_argument("-c", "--config", required=True, help="the relay's config file")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.add_argument("--follow", action="store_true", help="print a progress line until it is done")
    status.set_defaults(func=cmd_snapshot_status)
    cancel = cmds.add_parser("cancel", help="cancel the running snapshot (what is published stays)")
    cancel.add_argument("-c", "--config", required=True, help="the relay's config file")
    cancel.set_defaults(func=cmd_snapshot_cancel)


def _ask(args: argparse.Namespace, action: str, table: str = "", where: str = "") -> int:
    from relay.config.load import load_config
    from relay.ops.snapshot import await_answer, send_request

    config = load_config(args.config)
    request_id = send_request(config, action, table, where)
    answer = await_answer(config, request_id)
    if not answer.get("accepted"):
        print(f"refused: {answer.get('reason')}")
        return 1
    print(f"{action}: accepted ({request_id})")
    return 0


def cmd_snapshot_run(args: argparse.Namespace) -> int:
    code = _ask(args, "run", args.table, args.where)
    if code == 0 and args.follow:
        return _follow(args)
    return code


def cmd_snapshot_cancel(args: argparse.Namespace) -> int:
    return _ask(args, "cancel")


def cmd_snapshot_status(args: argparse.Namespace) -> int:
    from relay.config.load import load_config
    from relay.ops.snapshot import progress

    config = load_config(args.config)
    if args.follow:
        return _follow(args)
    report = progress(config)
    if args.json:
        print(json.dumps(report, indent=2, sort_keys=True))
        return 0
    print(report["snapshot"] or "no snapshot")
    for name, line in (report["snapshot_tables"] or {}).items():
        print(f"  {name}  {line}")
    return 0


def _follow(args: argparse.Namespace) -> int:
    """One progress line, rewritten every second, until the snapshot is done (or no relay runs)."""
    from relay.config.load import load_config
    from relay.ops.snapshot import progress

    config = load_config(args.config)
    while True:
        report = progress(config)
        print(f"\r{report['snapshot'] or 'no snapshot'}\033[K", end="", flush=True)
        if report["done"] is not False:
            print()
            return 0
        time.sleep(1.0)
