"""``relay positions show|set``: read or move an instance's saved position, never under a running relay.

Runs on the CLI's main thread. ``set`` resolves the new position against the MySQL server (a binlog
file and offset; the first transaction not in a GTID set; the first transaction at or after a time),
checks that no relay is active for the instance, and writes it to the configured position backend
(the file, replaced atomically while holding the instance lock; or the ZooKeeper node). The next
``relay run`` starts there, under the next generation (the saved one + 1): moving the position is
a new binlog history, so the sequences published from it sort after every earlier one.

"Active" means any of: a process holds the file position's lock (``relay.positions.lock``); the status
file names a live process that has not stopped; with HA or the ZooKeeper backend, ZooKeeper has an
active relay for the instance (``relay.ops.cluster.cluster_report``), or cannot be asked (fail closed).
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from relay.binlog.events import GtidEvent
from relay.binlog.stream import BinlogStream, StreamConfig
from relay.cli import values
from relay.common.redact import redact, redact_value
from relay.config.state import POSITION_FILE, STATUS_FILE
from relay.daemon.status import pid_running, read_status
from relay.errors import PositionError, RelayError, SourceError
from relay.positions.lock import holder
from relay.positions.store import ResumePoint, SourceIdentity, next_generation
from relay.source.binlog_time import find_by_timestamp
from relay.source.server import ServerInfo, inspect_server
from relay.wiring import holding_positions, open_positions

if TYPE_CHECKING:
    from relay.config.load import RelayConfig

GTID_PROBE_SECONDS = 3.0  # no transaction after the GTID set within this: the set is the server's end


def add_positions_parser(sub: Any) -> None:
    pos = sub.add_parser(
        "positions",
        help="show or move an instance's saved position (refused while a relay runs it)",
        description="Reads or replaces the resume point of the instance a relay config names. `set` refuses "
        "while a relay holds the instance (its lock, a live status file, or an active HA leader).",
    )
    cmds = pos.add_subparsers(dest="positions_command", required=True, metavar="ACTION")
    show = cmds.add_parser("show", help="the saved position, and whether a relay holds the instance")
    show.add_argument("-c", "--config", required=True, help="the relay's config file")
    show.add_argument("--json", action="store_true", help="machine-readable output")
    show.set_defaults(func=cmd_positions_show)

    put = cmds.add_parser(
        "set",
        help="move the instance to another position (only while no relay is active)",
        description="Exactly one of: --file [--offset] (the start of a transaction, e.g. from "
        "`relay entries` or SHOW BINLOG EVENTS), --gtid (start after this executed GTID set), "
        "--timestamp (the first transaction at or after this ISO time or epoch milliseconds; refused when "
        "the server's binlog, purged, no longer reaches back to it).",
    )
    put.add_argument("-c", "--config", required=True, help="the relay's config file")
    where = put.add_mutually_exclusive_group(required=True)
    where.add_argument("--file", type=values.binlog_file, help="binlog file, e.g. mysql-bin.000042")
    where.add_argument(
        "--gtid", type=values.gtid_set, help="executed GTID set: MySQL uuid:1-100, MariaDB 0-1-100"
    )
    where.add_argument(
        "--timestamp", type=values.instant, help="ISO time (2026-01-31T12:00:00+00:00) or ms since the epoch"
    )
    put.add_argument(
        "--offset", type=values.positive_int, default=4, help="offset in --file (default 4: its start)"
    )
    put.set_defaults(func=cmd_positions_set)


# -- who holds the instance ---------------------------------------------------------------------------
def active_holders(config: RelayConfig) -> list[str]:
    """Why the instance counts as held by a relay (empty: nobody holds it)."""
    reasons: list[str] = []
    if config.positions.backend == "file":
        pid = holder(config.state_path(POSITION_FILE))
        if pid is not None:
            reasons.append(f"relay process {pid or '?'} holds the position lock")
    status = read_status(config.state_path(STATUS_FILE)) or {}
    pid = status.get("pid")
    if isinstance(pid, int) and status.get("state") not in ("stopped", "failed") and pid_running(pid):
        reasons.append(f"relay process {pid} is {status.get('state', 'running')} (status file)")
    if config.ha.enabled or config.positions.backend == "zookeeper":
        from relay.ops.cluster import cluster_report

        report = cluster_report(config.ha, config.instance)
        if report.get("ha_error"):
            reasons.append(f"cannot ask ZooKeeper who is active: {report['ha_error']}")
        elif report.get("ha_active"):
            reasons.append(
                f"{report['ha_active']} (pid {report.get('ha_active_pid')}) is the active HA relay"
            )
    return reasons


# -- show -----------------------------------------------------------------------------------------------
def positions_report(config: RelayConfig) -> dict[str, Any]:
    with open_positions(config) as store:
        point = store.load()
        where = store.describe()
    report: dict[str, Any] = {
        "instance": config.instance,
        "store": where,
        "position": str(point) if point else None,
        "gtid_set": point.gtid_set if point else None,
        "generation": point.generation if point else None,
        "mapping_version": point.mapping_version if point else None,
        "position_time": _iso(point.timestamp / 1000) if point and point.timestamp else None,
        "held_by": active_holders(config) or None,
    }
    try:
        info = inspect_server(config.source, schema_history=config.schema.history != "off")
    except RelayError as exc:
        report["server_error"] = str(exc)
        return report
    report["server_end"] = f"{info.end[0]}:{info.end[1]}"
    report["server_oldest"] = info.binlogs[0][0] if info.binlogs else None
    if point is not None:
        report["position_on_server"] = point.journal in dict(info.binlogs)
    return report


def cmd_positions_show(args: argparse.Namespace) -> int:
    from relay.config.load import load_config

    report = redact_value(positions_report(load_config(args.config)))
    if args.json:
        print(json.dumps(report, indent=2, sort_keys=True))
    else:
        width = max(len(k) for k in report)
        for key, value in report.items():
            shown = "; ".join(value) if isinstance(value, list) else value
            print(f"{key:<{width}}  {shown if shown is not None else '-'}")
    return 0


# -- set ------------------------------------------------------------------------------------------------
def cmd_positions_set(args: argparse.Namespace) -> int:
    from relay.config.load import load_config

    config = load_config(args.config)
    point = set_position(config, file=args.file, offset=args.offset, gtid=args.gtid, timestamp=args.timestamp)
    print(redact(f"instance {config.instance}: position set to {point}" + _gtid_note(point)))
    return 0


def set_position(
    config: RelayConfig,
    *,
    file: str | None = None,
    offset: int = 4,
    gtid: str | None = None,
    timestamp: str | None = None,
) -> ResumePoint:
    """Resolve and save a new position; ``PositionError`` while a relay holds the instance."""
    config.check_state_location()  # not beside a position an upgrade left at the old place
    _refuse_if_active(config)
    info = inspect_server(config.source, schema_history=config.schema.history != "off")
    if file is not None:
        point = _at_file(info, file, offset)
    elif gtid is not None:
        point = _after_gtid(config, info, gtid)
    elif timestamp is not None:
        journal, off = find_by_timestamp(config.source, info, _parse_time(timestamp))
        point = ResumePoint(journal, off)
    else:
        raise PositionError("positions set: give --file, --gtid or --timestamp")
    identity = SourceIdentity(config.source.host, config.source.port, info.server_id, info.server_uuid)
    point = ResumePoint(point.journal, point.offset, gtid_set=point.gtid_set, source=identity)
    # The file backend's lock is held while writing: a relay starting now waits for nothing, it refuses.
    with holding_positions(config) as locked:
        _refuse_if_active(config, lock_checked=locked)
        with open_positions(config) as store:
            point = _renumbered(point, store.load())  # ZooKeeper: also learns the node's version for the CAS
            store.save(point)
    return point


def _renumbered(point: ResumePoint, saved: ResumePoint | None) -> ResumePoint:
    """``point`` as a new binlog history: the saved generation + 1, so that every record published from
    it sorts after every record published before, wherever the new position is. It keeps the saved
    point's mapping version: the relay resumes under the version it last published under and switches
    to the current one by the usual rule — a switch that moves tables copies their history first, which
    starting under the current version at once would skip."""
    version = saved.mapping_version if saved is not None else None
    return replace(point, generation=next_generation(saved), mapping_version=version)


def _refuse_if_active(
    config: RelayConfig, *, lock_checked: bool = False, then: str = "set the position"
) -> None:
    reasons = active_holders(config)
    if lock_checked:  # we hold the lock ourselves now
        reasons = [r for r in reasons if "position lock" not in r]
    if reasons:
        raise PositionError(
            f"instance {config.instance} is held by a running relay ({'; '.join(reasons)}): stop it first "
            f"(`systemctl stop`, SIGTERM), then {then}"
        )


def _at_file(info: ServerInfo, file: str, offset: int) -> ResumePoint:
    sizes = dict(info.binlogs)
    sizes.setdefault(info.end[0], info.end[1])
    if file not in sizes:
        raise SourceError(f"{file} is not on the server; available: {', '.join(sizes)}")
    if not 4 <= offset <= sizes[file]:
        raise SourceError(f"offset {offset} is outside {file} (4..{sizes[file]})")
    return ResumePoint(file, offset)


def _after_gtid(config: RelayConfig, info: ServerInfo, gtid_set: str) -> ResumePoint:
    """The first transaction the server would send a replica that has executed ``gtid_set``."""
    src = config.source
    stream_config = StreamConfig(
        host=src.host,
        port=src.port,
        user=src.user,
        password=src.password,
        server_id=src.server_id,  # no relay is active: its replica id is free
        heartbeat_seconds=src.heartbeat_seconds,
        connect_timeout=src.connect_timeout,
        read_timeout=src.read_timeout,
        mariadb=info.mariadb,
        tls=src.tls,
    )
    with BinlogStream(stream_config) as stream:
        stream.open_at_gtid(gtid_set)
        deadline = time.monotonic() + GTID_PROBE_SECONDS
        while time.monotonic() < deadline:
            event = stream.read(timeout=max(0.05, deadline - time.monotonic()))
            if event is None:
                break
            if isinstance(event, GtidEvent):
                h = event.header
                return ResumePoint(h.log_file, h.start, gtid_set=gtid_set)
    # Nothing after the set: the replica would start at the end of the binlog.
    return ResumePoint(info.end[0], info.end[1], gtid_set=gtid_set)


def _parse_time(text: str) -> int:
    if text.isdigit():
        return int(text)
    try:
        return int(datetime.fromisoformat(text).timestamp() * 1000)
    except ValueError as exc:
        raise PositionError(f"--timestamp: not an ISO time or epoch milliseconds: {text!r}") from exc


def _gtid_note(point: ResumePoint) -> str:
    return f" (after GTID set {point.gtid_set})" if point.gtid_set else ""


def _iso(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(seconds))
