"""``relay snapshot run|status|cancel``: on-demand snapshots of a running relay (``relay.ops.snapshot``).

``cancel`` with no relay running marks the unfinished snapshot in the saved position cancelled, so
the next start does not continue it (held like ``relay positions set``: refused while a relay holds
the instance). With ``--instance NAME`` (a cluster instance, from any host) the request goes through
ZooKeeper to the node running it (``relay.cluster.remote``, ``relay.cluster.requests``) and the
progress comes from the status its node publishes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from relay.cli import values
from relay.cli.remote import add_target_options, target
from relay.config.state import STATUS_FILE

if TYPE_CHECKING:
    from relay.cluster.remote import RemoteInstance
    from relay.config.load import RelayConfig
    from relay.positions.store import PositionStore


def add_snapshot_parser(sub: Any) -> None:
    snap = sub.add_parser(
        "snapshot",
        help="re-read a logical table while the relay streams, or show / cancel the snapshot",
        description="Asks the running relay (through the request file in its state directory) to snapshot "
        "every shard of one logical table with the watermark rules of the initial snapshot, without "
        "stopping the live stream. An unfinished snapshot is continued after a restart whatever "
        "snapshot.mode says; `cancel` ends it (with the relay stopped too). With --instance NAME, from any "
        "host: the request is a node in ZooKeeper (ROOT/destinations/NAME/requests/) that the node "
        "running the instance hands to its relay; the answer names that node. A request made while the "
        "instance moves waits for its next node; one no node takes before --answer-timeout is withdrawn "
        "(nothing done).",
    )
    cmds = snap.add_subparsers(dest="snapshot_command", required=True, metavar="ACTION")
    run = cmds.add_parser(
        "run",
        help="snapshot one logical table (all its shards) now",
        description="Snapshot every shard of one logical table of the current mapping while the relay "
        "streams; --where first runs SELECT 1 ... WHERE (COND) LIMIT 0 on every shard, and a condition "
        "that fails is refused naming the shard.",
    )
    add_target_options(run)
    _answer_option(run)
    run.add_argument(
        "--table", required=True, type=values.db_table, help="the logical db.table, e.g. shop.orders"
    )
    run.add_argument(
        "--where",
        default="",
        help="an SQL condition the rows must meet (optional); checked on every shard before it starts",
    )
    run.add_argument(
        "--keys",
        metavar="FILE",
        help='snapshot only these keys (\'-\': stdin): a JSON list of {"shard": "db.table", "key": '
        "{column: value}} (what `relay verify --json` lists under differences); a key the table no longer "
        "has is published as a DELETE",
    )
    run.add_argument("--follow", action="store_true", help="show a progress bar until it is done")
    run.set_defaults(func=cmd_snapshot_run)
    status = cmds.add_parser(
        "status",
        help="the snapshot's progress per table",
        description="The snapshot's progress: rows, share read, acked rows, rate and ETA, and per table its "
        "chunk and rows of the estimate (from the running relay, else the saved checkpoint). --follow "
        "redraws a bar until it is done: exit status 0, or 1 if it failed, was cancelled or the relay "
        "stopped.",
    )
    add_target_options(status)
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.add_argument("--follow", action="store_true", help="show a progress bar until it is done")
    status.set_defaults(func=cmd_snapshot_status)
    cancel_help = (
        "cancel the running snapshot (what is published stays); with the relay stopped, the "
        "unfinished one in the saved position (so a start does not continue it)"
    )
    cancel = cmds.add_parser("cancel", help=cancel_help, description=cancel_help)
    add_target_options(cancel)
    _answer_option(cancel)
    cancel.set_defaults(func=cmd_snapshot_cancel)


_SHOW_WITHIN = 60.0  # seconds for an accepted snapshot to appear in the relay's status


def _answer_option(parser: Any) -> None:
    parser.add_argument(
        "--answer-timeout",
        type=values.positive_float,
        metavar="SECONDS",
        help="how long to wait for the relay's answer (default 30; with --instance 60: a node takes the "
        "request at its next pass)",
    )


def _ask(
    args: argparse.Namespace,
    action: str,
    table: str = "",
    where: str = "",
    keys: dict[str, Any] | None = None,
) -> tuple[int, str | None]:
    """Exit status 0 and the accepted request's id (a snapshot run's id), or 1 and None (refused)."""
    from relay.config.load import load_config
    from relay.ops.snapshot import await_answer, send_request

    remote = target(args)
    if remote is not None:
        with remote:
            return _ask_node(remote, args, action, table, where, keys)
    config = load_config(args.config)
    request_id = send_request(config, action, table, where, keys)
    answer = await_answer(config, request_id, args.answer_timeout or 30.0)
    if not answer.get("accepted"):
        print(f"refused: {answer.get('reason')}")
        return 1, None
    print(f"{action}: accepted ({request_id})")
    return 0, request_id


def _ask_node(
    remote: RemoteInstance,
    args: argparse.Namespace,
    action: str,
    table: str,
    where: str,
    keys: dict[str, Any] | None,
) -> tuple[int, str | None]:
    """The request through ZooKeeper to the node running the instance (``relay.cluster.remote``)."""
    body: dict[str, Any] = {"action": action, "table": table, "where": where}
    if keys is not None:
        body["keys"] = keys
    answer = remote.ask(body, args.answer_timeout or 60.0)
    node = answer.get("node")
    if not answer.get("accepted"):
        print(f"refused by the relay of {remote.name} on node {node}: {answer.get('reason')}")
        return 1, None
    again = " (already under way: continued after a move)" if answer.get("continued") else ""
    print(f"{action}: accepted by the relay of {remote.name} on node {node} ({answer.get('id')}){again}")
    return 0, str(answer.get("id") or "") or None


def read_keys(path: str) -> dict[str, Any]:
    """A ``--keys`` file as a key request (``relay.source.snapshot_keys``)."""
    import sys

    from relay.errors import SnapshotRequestError
    from relay.ops.snapshot import key_request

    try:
        text = sys.stdin.read() if path == "-" else open(path, encoding="utf-8").read()  # noqa: SIM115
        items = json.loads(text)
    except (OSError, ValueError) as exc:
        raise SnapshotRequestError(f"--keys {path}: {exc}") from exc
    if isinstance(items, dict):
        items = items.get("repair_keys", items.get("differences"))
    return key_request(items, f"--keys {path}")


def cmd_snapshot_run(args: argparse.Namespace) -> int:
    keys = read_keys(args.keys) if args.keys else None
    code, accepted = _ask(args, "run", args.table, args.where, keys)
    if code == 0 and args.follow:
        return _follow(args, accepted)
    return code


def cmd_snapshot_cancel(args: argparse.Namespace) -> int:
    from relay.config.load import load_config
    from relay.daemon.status import pid_running, read_status

    remote = target(args)
    if remote is not None:
        from relay.cluster.operate import is_active

        with remote:
            if is_active(remote.record()):
                return _ask_node(remote, args, "cancel", "", "", None)[0]
            snapshot_id = cancel_saved(remote.config()[0])
        print(
            f"cancel: snapshot {snapshot_id} marked cancelled in the saved position (no relay of "
            f"{args.instance} is active)"
        )
        return 0
    config = load_config(args.config)
    status = read_status(config.state_path(STATUS_FILE)) or {}
    pid = status.get("pid")
    if isinstance(pid, int) and pid_running(pid) and status.get("state") not in ("stopped", "failed"):
        return _ask(args, "cancel")[0]
    snapshot_id = cancel_saved(config)
    print(f"cancel: snapshot {snapshot_id} marked cancelled in the saved position")
    return 0


def cancel_saved(config: RelayConfig) -> str:
    """With no relay running: mark the unfinished snapshot of the saved position cancelled; its id.
    ``SnapshotRequestError`` when a relay holds the instance or there is no unfinished snapshot."""
    from relay.cli.positions import active_holders
    from relay.errors import SnapshotRequestError
    from relay.source.snapshot_checkpoint import EXTRA_KEY, compacted
    from relay.wiring import holding_positions, open_positions

    def refuse_if_held(lock_held: bool) -> None:
        reasons = [r for r in active_holders(config) if not (lock_held and "position lock" in r)]
        if reasons:
            raise SnapshotRequestError(
                f"instance {config.instance} is held by a running relay ({'; '.join(reasons)}), which "
                "did not take the request: try again"
            )

    def mark(store: PositionStore) -> str:
        point = store.load()
        state = point.extra.get(EXTRA_KEY) if point is not None else None
        if point is None or not isinstance(state, dict) or state.get("done"):
            raise SnapshotRequestError(
                f"instance {config.instance}: no unfinished snapshot in the saved position"
            )
        ended = compacted({**state, "done": True, "cancelled": True})
        store.save(replace(point, extra={**point.extra, EXTRA_KEY: ended}))
        return str(state.get("id"))

    config.check_state_location()
    refuse_if_held(False)
    with holding_positions(config) as locked:  # file backend: a relay starting meanwhile refuses to start
        if locked:
            refuse_if_held(True)
        with open_positions(config) as store:
            return mark(store)


def cmd_snapshot_status(args: argparse.Namespace) -> int:
    if args.follow:
        return _follow(args)
    report = _progress(args)
    if args.json:
        print(json.dumps(report, indent=2, sort_keys=True))
        return 0
    if args.instance:
        print(f"instance {args.instance} on node {report.get('node') or '- (no node runs it)'}")
    print(report["snapshot"] or "no snapshot")
    for name, line in (report["snapshot_tables"] or {}).items():
        print(f"  {name}  {line}")
    return 0


def _follow(args: argparse.Namespace, expect: str | None = None) -> int:
    """A progress bar and line, rewritten every second, until the snapshot is done (exit status 0), or
    failed, was cancelled, or the relay stopped before it was done (1). ``expect``: the id of the
    snapshot just accepted — followed once the relay's status shows it, not the one it showed before."""
    from relay.ops.snapshot import progress_bar

    with _progress_source(args) as read:
        return _follow_bar(read, progress_bar, expect)


def _follow_bar(
    read: Callable[[], dict[str, Any]],
    progress_bar: Callable[[float], str],
    expect: str | None = None,
    show_within: float = _SHOW_WITHIN,
) -> int:
    deadline = time.monotonic() + show_within
    while True:
        report = read()
        if expect is not None and report["done"] is not None and report.get("snapshot_id") != expect:
            if time.monotonic() > deadline:  # accepted, yet the relay's status never showed it
                print(f"\nthe relay's status does not show snapshot {expect} (relay snapshot status)")
                return 1
            print(f"\rwaiting for the relay's status to show snapshot {expect}\033[K", end="", flush=True)
            time.sleep(0.5)
            continue
        line = report["snapshot"] or "no snapshot"
        if report.get("snapshot_percent") is not None:
            line = f"{progress_bar(report['snapshot_percent'])} {line}"
        print(f"\r{line}\033[K", end="", flush=True)
        state = report["snapshot_state"]
        if report["done"] is True or state in (None, "done"):
            print()
            return 0
        if report["done"] is None or state in ("failed", "cancelled"):
            print(f"\nthe snapshot is not done ({'no relay runs' if report['done'] is None else state})")
            return 1
        time.sleep(1.0)


def _progress(args: argparse.Namespace) -> dict[str, Any]:
    """The snapshot's progress: of the relay of ``-c``, or of the cluster instance ``--instance``."""
    with _progress_source(args) as read:
        return read()


@contextlib.contextmanager
def _progress_source(args: argparse.Namespace) -> Iterator[Callable[[], dict[str, Any]]]:
    """A reader of the progress (one ZooKeeper session for ``--instance``, kept while it is used)."""
    from relay.config.load import load_config
    from relay.ops.snapshot import progress

    remote = target(args)
    if remote is None:
        config = load_config(args.config)
        yield lambda: progress(config)
        return
    from relay.cluster.operate import snapshot_progress

    with remote:
        yield lambda: snapshot_progress(remote)
