"""What a running relay reports about itself: counters, rates, store fill, and the status file.

``RelayStats`` is updated by the publisher thread (the only writer) and snapshotted into a JSON status
file every ``status.interval_seconds`` (written atomically), which ``relay status`` (``relay.ops.status``)
reads from another process.

The publish rate is measured over the last ``RATE_WINDOW`` seconds, so it falls to 0 while nothing is
acknowledged (a broker outage, an idle source) instead of repeating the last busy figure. Lag in
seconds (``lag_seconds``, the one definition the status file, the metrics, ``relay status`` and a cluster
node's status record share) is 0 while the relay is caught up — everything read is published and
acknowledged and the parser waits at the binlog end — however old the last change; otherwise the age of
the last acknowledged change's binlog time (before any this run: the saved position's).
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from relay.common.atomic import atomic_write_text

RATE_WINDOW = 10.0  # seconds the publish rate is averaged over


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
    # The heartbeats' counters and last position/error (``relay.daemon.heartbeats``, its thread writes
    # a new dict each beat); None: no heartbeats.
    heartbeats: dict[str, Any] | None = None
    # A batch waiting for Kafka too long: {"batch", "seconds", "why"} (``relay.daemon.kafka_wait``); None: no.
    kafka_waiting: dict[str, Any] | None = None
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

    def lag_seconds(self, caught_up: bool = False, saved_ms: int = 0, pending_ms: int = 0) -> float | None:
        """``lag_seconds`` of this relay: 0 when ``caught_up``, else the age of the oldest change not yet
        acknowledged (``pending_ms``: ``Instance.oldest_pending_ms``), else of the last acknowledged
        change (``saved_ms``, the saved position's binlog time, before any this run)."""
        return lag_seconds(caught_up, pending_ms or self.last_event_ms or saved_ms)

    def snapshot(
        self, caught_up: bool = False, saved_ms: int = 0, pending_ms: int = 0, **extra: Any
    ) -> dict[str, Any]:
        data = {k: v for k, v in asdict(self).items() if not k.startswith("_")}
        lag = self.lag_seconds(caught_up, saved_ms, pending_ms)
        data.update(
            pid=os.getpid(),
            host=socket.gethostname(),
            updated=time.time(),
            publish_rate=round(self.publish_rate(), 1),
            lag_seconds=None if lag is None else round(lag, 3),
            caught_up=caught_up,
        )
        data.update(extra)
        return data


def lag_seconds(caught_up: bool, event_ms: int, now: float | None = None) -> float | None:
    """A relay's lag in seconds: 0 while it is caught up (nothing read waits to be published, the
    parser waits at the binlog end), else now minus the binlog time ``event_ms`` of the oldest change
    not yet acknowledged (or, not known, of the last one acknowledged); None when there is none to go by."""
    if caught_up:
        return 0.0
    if not event_ms:
        return None
    return max(0.0, (time.time() if now is None else now) - event_ms / 1000.0)


def write_status(path: Path, data: dict[str, Any]) -> None:
    """Replace the status file atomically (a reader sees the old or the new one, whole)."""
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True), durable=False)


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
