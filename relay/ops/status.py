"""What a running relay reports about itself: counters, rates, the saved position, store fill.

``RelayStats`` is updated by the publisher thread (the only writer) and snapshotted into a JSON
status file every ``status.interval_seconds`` (written atomically), which ``relay status`` reads
from another process. Lag in bytes needs the server: ``binlog_bytes_behind`` computes it from
``SHOW BINARY LOGS`` and the saved position. With HA (``relay.ha.leadership``) the report adds who is active,
who stands by and the epoch, read from ZooKeeper, where the position is then kept too.

The publish rate is measured over the last ``RATE_WINDOW`` seconds, so it falls to 0 while nothing is
acknowledged (a broker outage, an idle source) instead of repeating the last busy figure. Lag in
seconds is the age of the last acknowledged change's binlog time while there is something left to
publish; a relay whose saved position is the server's binlog end has no lag, however old that change.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from relay.errors import RelayError
from relay.ha.leadership import zookeeper_status
from relay.positions.store import FilePositionStore
from relay.source.binlog_source import inspect_server

RATE_WINDOW = 10.0  # seconds the publish rate is averaged over

if TYPE_CHECKING:
    from relay.config.load import RelayConfig


@dataclass
class RelayStats:
    started: float = field(default_factory=time.time)
    batches_acked: int = 0
    batches_rolled_back: int = 0
    records_published: int = 0
    rows_published: int = 0
    last_position: str = ""
    last_event_ms: int = 0  # binlog time of the last acknowledged entry
    last_ack_time: float = 0.0
    state: str = "starting"
    error: str = ""
    # (time, records published by then): the samples of the last RATE_WINDOW seconds and one before
    _window: deque[tuple[float, int]] = field(default_factory=deque, repr=False)

    def acked(self, records: int, rows: int, position: str, event_ms: int) -> None:
        now = time.time()
        self.batches_acked += 1
        self.records_published += records
        self.rows_published += rows
        self.last_position = position
        self.last_event_ms = max(self.last_event_ms, event_ms)
        self.last_ack_time = now
        self._window.append((now, self.records_published))
        self._trim(now)

    def _trim(self, now: float) -> None:
        # Keep one sample at or before the window's start: it is the baseline the rate counts from.
        while len(self._window) > 1 and self._window[1][0] <= now - RATE_WINDOW:
            self._window.popleft()

    def publish_rate(self, now: float | None = None) -> float:
        """Records per second acknowledged over the last ``RATE_WINDOW`` seconds (0 when none were)."""
        now = time.time() if now is None else now
        self._trim(now)
        start = now - RATE_WINDOW
        base_time, base_count = self.started, 0
        if self._window and self._window[0][0] <= start:
            base_time, base_count = self._window[0]
        elapsed = now - max(base_time, start)
        published = self.records_published - base_count
        return published / elapsed if elapsed > 0 and published > 0 else 0.0

    def lag_seconds(self) -> float | None:
        if not self.last_event_ms:
            return None
        return max(0.0, time.time() - self.last_event_ms / 1000.0)

    def snapshot(self, **extra: Any) -> dict[str, Any]:
        data = {k: v for k, v in asdict(self).items() if not k.startswith("_")}
        data.update(
            pid=os.getpid(),
            updated=time.time(),
            publish_rate=round(self.publish_rate(), 1),
            lag_seconds=None if self.lag_seconds() is None else round(self.lag_seconds() or 0.0, 3),
        )
        data.update(extra)
        return data


def write_status(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=2, sort_keys=True)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_status(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def pid_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (exited, not reaped) is not running
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state != "Z"


def binlog_bytes_behind(binlogs: tuple[tuple[str, int], ...], journal: str, offset: int) -> int | None:
    """Bytes of binlog written after ``journal:offset`` (None when the file is no longer on the server)."""
    names = [name for name, _ in binlogs]
    if journal not in names:
        return None
    i = names.index(journal)
    return max(0, binlogs[i][1] - offset) + sum(size for _, size in binlogs[i + 1 :])


def status_report(config: RelayConfig) -> dict[str, Any]:
    """What ``relay status`` shows: process, position, lag (seconds and bytes), store fill, publish rate."""
    data = read_status(config.path(config.status.file)) or {}
    ha: dict[str, Any] = {}
    if config.ha.enabled or config.positions.backend == "zookeeper":
        # Who is active, who stands by, the epoch, and the position: all in ZooKeeper (relay.ha).
        point, ha = zookeeper_status(config)
        if config.ha.enabled:
            ha["ha_member"] = data.get("ha_member")  # this config's process, active or standing by
    else:
        point = FilePositionStore(config.path(config.positions.path)).load()
    pid = data.get("pid")
    alive = isinstance(pid, int) and pid_running(pid)
    ended = data.get("state") in ("stopped", "failed")
    running = alive and not ended
    state = data.get("state", "never ran") if data else "never ran"
    if data and not alive and not ended:
        state = f"dead (killed while {state})"  # SIGKILL, OOM: the status file could not say so
    report: dict[str, Any] = {
        "instance": config.instance,
        "running": running,
        "pid": pid if running else None,
        "state": state,
        "error": data.get("error") or None,
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
        **ha,
    }
    try:
        info = inspect_server(config.source)
    except RelayError as exc:
        report["server_error"] = str(exc)
        return report
    report["server_end"] = f"{info.end[0]}:{info.end[1]}"
    if point is not None:
        report["lag_bytes"] = binlog_bytes_behind(info.binlogs, point.journal, point.offset)
    if running and report["lag_bytes"] == 0:
        report["lag_seconds"] = 0.0  # at the server's end: nothing to publish is waiting, however old
    return report


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
