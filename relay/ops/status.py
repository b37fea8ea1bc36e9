"""``relay status``: what a relay reports (its status file), where its position is, and how far behind.

Reads the status file the running relay writes (``relay.daemon.status``), the saved position from the
store the config names, and the server's binlog list for the lag in bytes. With HA the report adds who is
active, who stands by and the epoch, read from ZooKeeper, where the position is then kept too. A relay
whose saved position is the server's binlog end has no lag, however old its last change. Runs on the
CLI's thread, in a process other than the relay's.
"""

from __future__ import annotations

import time
from typing import Any

from mapping.watch import Refusal
from relay.common.binlog_names import bytes_behind
from relay.config.load import RelayConfig
from relay.config.state import STATE_ENV, STATUS_FILE
from relay.daemon.status import pid_running, read_status
from relay.errors import RelayError, ZooKeeperUnavailableError
from relay.ops.cluster import zookeeper_status
from relay.positions.store import ResumePoint
from relay.source.server import inspect_server
from relay.source.snapshot_checkpoint import read_percent
from relay.wiring import mapping_store, open_positions, transactional_id


def status_report(config: RelayConfig) -> dict[str, Any]:
    """What ``relay status`` shows: process, position, lag (seconds and bytes), store fill, publish rate."""
    data = read_status(config.state_path(STATUS_FILE)) or {}
    pid = data.get("pid")
    return relay_report(config, data, isinstance(pid, int) and pid_running(pid), _state_dir_line(config))


def relay_report(
    config: RelayConfig,
    data: dict[str, Any],
    alive: bool,
    state_dir: str,
    server_unknown: str | None = None,
) -> dict[str, Any]:
    """``relay status`` of a relay whose status record is ``data`` (its process ``alive``): from its
    status file, or as a cluster node published it (``relay status --instance``). ``server_unknown``:
    why the server is not asked (a secret this host cannot resolve), said as ``server_error``."""
    ha: dict[str, Any] = {}
    point = _saved_position(config, ha)
    if config.ha.enabled and "zookeeper_error" not in ha:
        # Who is active, who stands by, the epoch: in ZooKeeper (relay.ha). Not asked again when the
        # position read found ZooKeeper unreachable: one wait of ha.connect_timeout_seconds, one line.
        ha.update(zookeeper_status(config))
        ha["ha_member"] = data.get("ha_member")  # this config's process, active or standing by
    pid = data.get("pid")
    ended = data.get("state") in ("stopped", "failed")
    running = alive and not ended
    state = data.get("state", "never ran") if data else "never ran"
    if data and not alive and not ended:
        state = f"dead (killed while {state})"  # SIGKILL, OOM: the status file could not say so
    report: dict[str, Any] = {
        "instance": config.instance,
        "state_dir": state_dir,
        "running": running,
        "pid": pid if running else None,
        "state": state,
        "error": data.get("error") or None,
        # a batch unacknowledged too long: how long, and what the cluster's metadata says about it
        "kafka_waiting": data.get("kafka_waiting") if running else None,
        "position": str(point) if point else None,
        "position_time": _iso(point.timestamp / 1000) if point and point.timestamp else None,
        "lag_seconds": data.get("lag_seconds") if running else None,
        "lag_bytes": None,
        "server_end": None,
        "store_entries": data.get("store_entries"),
        "store_slots": data.get("store_slots"),
        "store_bytes": data.get("store_bytes"),
        "store_budget": data.get("store_budget"),
        "store_fill_percent": _fill_percent(data),
        "publish_rate": data.get("publish_rate") if running else (0.0 if data else None),
        "batches_acked": data.get("batches_acked"),
        "batches_rolled_back": data.get("batches_rolled_back"),
        "status_updated": _iso(data["updated"]) if "updated" in data else None,
        **mapping_report(config, data, running),
        # idempotent / transactional / exactly-once: the running relay's, else the config's
        "kafka_mode": data.get("kafka_mode") or config.kafka.mode,
        "transactional_id": data.get("transactional_id") or transactional_id(config),
        "mapping_move": _move_line(data.get("mapping_move")) if running else None,
        "heartbeats": data.get("heartbeats") if running else None,
        **snapshot_report(data.get("snapshot") if running else None, point),
        **ha,
    }
    _server_part(config, report, point, running, server_unknown)
    return report


def _server_part(
    config: RelayConfig,
    report: dict[str, Any],
    point: ResumePoint | None,
    running: bool,
    server_unknown: str | None,
) -> None:
    """The server's end and the lag in bytes into ``report`` (or why the server was not asked)."""
    if server_unknown is not None:
        report["server_error"] = server_unknown
        return
    try:
        # with a schema history a server without binlog_row_metadata=FULL is fine (relay check's rule)
        info = inspect_server(config.source, schema_history=config.schema.history != "off")
    except RelayError as exc:
        report["server_error"] = str(exc)
        return
    report["server_end"] = f"{info.end[0]}:{info.end[1]}"
    if point is not None:
        report["lag_bytes"] = bytes_behind(info.binlogs, point.journal, point.offset)
    if running and report["lag_bytes"] == 0:
        report["lag_seconds"] = 0.0  # at the server's end: nothing to publish is waiting, however old


def mapping_report(config: RelayConfig, data: dict[str, Any], running: bool) -> dict[str, Any]:
    """``mapping_version``: the version the relay publishes under (stopped: the one it last used);
    ``mapping_stored``: the store's current version (a newer one is pending, refused, or not read yet);
    ``mapping_pending``; ``mapping_refused``: the last version refused — version, when, why."""
    version = data.get("mapping_version")
    refused = Refusal.from_dict(data.get("mapping_refused"))
    report: dict[str, Any] = {
        "mapping_version": version if running or version is None else f"{version} (last run)",
        "mapping_stored": _stored_version(config),
        "mapping_pending": data.get("mapping_pending") if running else None,
        "mapping_refused": None
        if refused is None
        else {"version": refused.version, "at": _iso(refused.at), "reason": refused.reason},
    }
    if running and data.get("mapping_store_error"):
        report["mapping_store_error"] = data["mapping_store_error"]
    return report


def _stored_version(config: RelayConfig) -> int | str:
    try:
        store = mapping_store(config)
    except RelayError as exc:
        return f"unreadable: {exc}"
    try:
        return store.read().version
    except RelayError as exc:
        return f"unreadable: {exc}"
    finally:
        store.close()


def _state_dir_line(config: RelayConfig) -> str:
    """Where this report reads the relay's files; a missing folder is named, with the usual cause."""
    where = config.state_directory
    if where.is_dir():
        return str(where)
    return (
        f"{where} (missing: state_dir is relative to the working directory — run this where the relay "
        f"runs, or set state_dir to an absolute path, or {STATE_ENV})"
    )


def _saved_position(config: RelayConfig, report: dict[str, Any]) -> ResumePoint | None:
    try:
        with open_positions(config) as store:
            return store.load()
    except ZooKeeperUnavailableError as exc:
        report["zookeeper_error"] = str(exc)  # positions.backend: zookeeper, on ha.zookeeper
        return None
    except RelayError as exc:
        if isinstance(exc.__cause__, ZooKeeperUnavailableError):
            report["zookeeper_error"] = str(exc.__cause__)
        else:
            report["position_error"] = str(exc)
        return None


def snapshot_report(live: dict[str, Any] | None, point: ResumePoint | None) -> dict[str, Any]:
    """``snapshot``: one progress line; ``snapshot_tables``: a line per table; ``snapshot_percent``: the
    share of the rows read, against the tables' estimated rows; ``snapshot_state``: done, running, read
    (publishing), cancelled, failed or interrupted. From the running relay's status file, else from the
    checkpoint in the saved position (what a restart continues)."""
    state = live
    if state is None and point is not None:
        state = point.extra.get("snapshot")
    if not isinstance(state, dict) or "id" not in state:
        return {"snapshot": None, "snapshot_tables": None, "snapshot_percent": None, "snapshot_state": None}
    tables: dict[str, Any] = state.get("tables", {})
    done = sum(1 for t in tables.values() if t["done"])
    rows = sum(int(t["rows"]) for t in tables.values())
    if "table_count" in state:  # a finished snapshot's compacted checkpoint
        done = int(state["table_count"])
        rows = int(state["rows"])
    what = (
        "done"
        if state.get("done")
        else ("running" if live is not None else "interrupted (continues on start)")
    )
    if state.get("cancelled"):
        what = "cancelled"
    elif live is not None and live.get("read") and not live.get("done"):
        what = "read, publishing"  # every chunk is in the store, not all of them acknowledged yet
    percent = read_percent(state)
    line = f"{state.get('id')}: {what}, {done}/{max(done, len(tables))} tables, {rows} rows ({percent:.0f}%)"
    if live is not None:
        line += f", {live.get('acked_rows', 0)} acked, {live.get('rows_per_second', 0)} rows/s"
        if live.get("eta_seconds") is not None:
            line += f", ETA {live['eta_seconds']} s"
        if live.get("failure"):
            line += f", failed: {live['failure']}"
    per_table = {
        name: f"chunk {t['chunks']}, {t['rows']}/~{t.get('estimated_rows', '?')} rows"
        + (", done" if t["done"] else "")
        for name, t in tables.items()
    }
    if live is not None and live.get("failure"):
        what = "failed"
    return {
        "snapshot": line,
        "snapshot_tables": per_table,
        "snapshot_percent": percent,
        "snapshot_state": what,
    }


def _move_line(move: Any) -> str | None:
    """A table move under way (relay.kafka.history): where to, how far, what the relay waits for."""
    if not isinstance(move, dict):
        return None
    phase = {"copying": "copying history", "final": "switching: new batches held for the last records"}
    state = move.get("state")
    waiting = " (caught up)" if move.get("caught_up") and state == "copying" else ""
    line = (
        f"{phase.get(str(state), state)}{waiting} for mapping version {move.get('to_version')}: "
        f"{', '.join(move.get('from') or [])} -> {', '.join(move.get('to') or [])}, "
        f"{move.get('tables')} table(s), read {move.get('read')}, copied {move.get('copied')}, "
        f"already there {move.get('already_there')}"
    )
    return f"{line}; error: {move['error']}" if move.get("error") else line


def _fill_percent(data: dict[str, Any]) -> float | None:
    """How full the store is: entries of its slots, and in MEMSIZE mode bytes of its budget too."""
    entries, slots = data.get("store_entries"), data.get("store_slots")
    if not isinstance(entries, int) or not isinstance(slots, int) or slots <= 0:
        return None
    fill = entries / slots
    size, budget = data.get("store_bytes"), data.get("store_budget")
    if data.get("store_mode") == "MEMSIZE" and isinstance(size, int) and isinstance(budget, int) and budget:
        fill = max(fill, size / budget)
    return round(100.0 * fill, 1)


def _iso(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(seconds))
