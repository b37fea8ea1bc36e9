"""``relay snapshot run|status|cancel``: asking a running relay for an on-demand snapshot, and its progress.

Writes one request into the relay's request file (``snapshot.request_file``, see
``relay.daemon.snapshot_requests``) and waits for the answer in its status file; the progress comes from
the status file while the relay runs, else from the checkpoint in the saved position. Runs on the CLI's
thread.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from relay.common.atomic import atomic_write_text
from relay.config.load import RelayConfig
from relay.config.state import SNAPSHOT_REQUEST_FILE, STATUS_FILE
from relay.daemon.status import pid_running, read_status
from relay.errors import SnapshotRequestError
from relay.ops.status import snapshot_report
from relay.wiring import open_positions


def send_request(
    config: RelayConfig,
    action: str,
    table: str = "",
    where: str = "",
    keys: dict[str, Any] | None = None,
    above_generation: int | None = None,
) -> str:
    """Leave a request for the running relay; returns its id. Refused when no relay runs. ``keys``: a
    snapshot of these keys only (``relay.source.snapshot_keys``). ``above_generation``: the snapshot (a
    repair of records beyond the relay's position) is published in a binlog generation above it."""
    status = read_status(config.state_path(STATUS_FILE)) or {}
    pid = status.get("pid")
    if not (isinstance(pid, int) and pid_running(pid)) or status.get("state") in ("stopped", "failed"):
        raise SnapshotRequestError(f"no relay runs instance {config.instance!r} (its status file says so)")
    request_id = f"{config.instance}-{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}"
    body: dict[str, Any] = {"id": request_id, "action": action, "table": table, "where": where}
    if keys is not None:
        body["keys"] = keys
    if above_generation is not None:
        body["above_generation"] = above_generation
    atomic_write_text(config.state_path(SNAPSHOT_REQUEST_FILE), json.dumps(body) + "\n")
    return request_id


def key_request(items: Any, where: str = "keys") -> dict[str, Any]:
    """``[{"shard": "db.table", "key": {column: value}}, …]`` as a key request: per physical table its key
    columns (the same for every key of it) and the keys' values."""
    if not isinstance(items, list) or not items:
        raise SnapshotRequestError(f"{where}: expected a non-empty list of {{shard, key}} objects")
    out: dict[str, dict[str, Any]] = {}
    for n, item in enumerate(items):
        shard, key = (item.get("shard"), item.get("key")) if isinstance(item, dict) else (None, None)
        if not isinstance(shard, str) or not isinstance(key, dict) or not key:
            raise SnapshotRequestError(f'{where}[{n}]: expected {{"shard": "db.table", "key": {{…}}}}')
        entry = out.setdefault(shard, {"columns": list(key), "values": []})
        if list(key) != entry["columns"]:
            raise SnapshotRequestError(
                f"{where}[{n}]: {shard} keys name columns {entry['columns']}, not {list(key)}"
            )
        entry["values"].append([None if v is None else str(v) for v in key.values()])
    return out


def await_answer(config: RelayConfig, request_id: str, timeout: float = 30.0) -> dict[str, Any]:
    """The relay's answer to ``request_id`` (from its status file), waiting up to ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = read_status(config.state_path(STATUS_FILE)) or {}
        answer = status.get("snapshot_request")
        if isinstance(answer, dict) and answer.get("id") == request_id:
            return answer
        time.sleep(0.2)
    raise SnapshotRequestError(f"the relay did not answer request {request_id} within {timeout:.0f} s")


def progress_bar(percent: float, width: int = 30) -> str:
    """``[##########--------------------]  33%``: the share of a snapshot read, as a bar."""
    share = max(0.0, min(100.0, percent)) / 100.0
    filled = int(share * width)
    return f"[{'#' * filled}{'-' * (width - filled)}] {percent:3.0f}%"


def progress(config: RelayConfig) -> dict[str, Any]:
    """The snapshot's progress line and per-table lines (running relay, else the saved checkpoint)."""
    status = read_status(config.state_path(STATUS_FILE)) or {}
    pid = status.get("pid")
    running = isinstance(pid, int) and pid_running(pid) and status.get("state") not in ("stopped", "failed")
    return progress_of(config, status, running)


def progress_of(config: RelayConfig, status: dict[str, Any], running: bool) -> dict[str, Any]:
    """``progress`` of a relay whose status record is ``status`` (a status file, or as a cluster node
    published it), ``running`` or not."""
    with open_positions(config) as store:
        point = store.load()
    report = snapshot_report(status.get("snapshot") if running else None, point)
    report["snapshot_request"] = status.get("snapshot_request")
    live = status.get("snapshot") if running else None
    report["done"] = bool(live.get("done")) if isinstance(live, dict) else None
    report["snapshot_id"] = live.get("id") if isinstance(live, dict) else None  # the running relay's
    return report
