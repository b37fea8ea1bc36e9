"""The fleet's recent past: each instance's status sampled every few seconds into a bounded ring.

Owns the sampler thread (``console-sampler``) and the rings. Every ``interval`` seconds it asks the fleet
for each instance's status — the report ``relay status`` prints — and for the placement, keeps the latest
of each for the pages (so a page never waits for a server, and ten open browsers cost what one does), and
appends one ``Sample`` (time, lag seconds, lag bytes, publish rate, store fill) per instance to its ring,
a ``deque`` of at most ``hours × 3600 / interval`` samples: the chart of the last hours. The ring is
memory only; the Prometheus endpoint of each relay stays the long-term record.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from relay.console.fleet import Fleet, safe_call

log = logging.getLogger(__name__)

__all__ = ["Sample", "Sampler"]


@dataclass(frozen=True)
class Sample:
    at: float
    lag_seconds: float | None
    lag_bytes: int | None
    rate: float | None
    fill: float | None

    def as_list(self) -> list[Any]:
        return [round(self.at, 1), self.lag_seconds, self.lag_bytes, self.rate, self.fill]


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


class Sampler:
    """Samples ``fleet`` every ``interval`` seconds, keeping ``hours`` of samples per instance."""

    def __init__(self, fleet: Fleet, interval: float, hours: float) -> None:
        self.fleet, self.interval = fleet, interval
        self.size = max(2, int(hours * 3600 / interval))
        self._lock = threading.Lock()
        self._rings: dict[str, deque[Sample]] = {}
        self._latest: dict[str, dict[str, Any]] = {}
        self._placement: dict[str, Any] = {}
        self._errors: dict[str, str] = {}
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name="console-sampler", daemon=True)
        self.passes = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=30)

    def refresh(self) -> None:
        """Sample again now (after an operator's action, so the page shows its effect sooner)."""
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            self.sample_once()
            self._wake.wait(max(0.0, self.interval - (time.monotonic() - began)))
            self._wake.clear()

    def sample_once(self) -> None:
        names, error = safe_call("instances", self.fleet.names)
        placement, placement_error = safe_call("placement", self.fleet.placement)
        found: dict[str, dict[str, Any]] = {}
        errors: dict[str, str] = {}
        for name in names or []:
            status, problem = safe_call(f"status of {name}", self.fleet.status, name)
            if status is None:
                errors[name] = problem or "unknown"
                status = {"instance": name, "running": False, "state": "unknown", "error": problem}
            found[name] = status
        now = time.time()
        with self._lock:
            if error is not None:
                errors[""] = error
            if placement_error is not None:
                errors["placement"] = placement_error
            self._latest, self._errors = found, errors
            self._placement = placement or {}
            for name, status in found.items():
                ring = self._rings.setdefault(name, deque(maxlen=self.size))
                ring.append(
                    Sample(
                        now,
                        _number(status.get("lag_seconds")),
                        int(status["lag_bytes"]) if isinstance(status.get("lag_bytes"), int) else None,
                        _number(status.get("publish_rate")),
                        _number(status.get("store_fill_percent")),
                    )
                )
            for gone in set(self._rings) - set(found):
                del self._rings[gone]
            self.passes += 1

    def view(self, since: float = 0.0) -> dict[str, Any]:
        """The latest statuses, the placement, the errors met and every instance's samples taken after
        ``since`` (epoch seconds: a page that has the earlier ones asks only for the new ones)."""
        with self._lock:
            return {
                "instances": dict(self._latest),
                "placement": dict(self._placement),
                "errors": dict(self._errors),
                "samples": {
                    name: [s.as_list() for s in ring if round(s.at, 1) > since]
                    for name, ring in self._rings.items()
                },
                "interval": self.interval,
                "window": self.size * self.interval,
                "passes": self.passes,
            }

    def wait_first(self, timeout: float) -> None:
        """Until the first pass is done (or ``timeout``), so the first page is not empty."""
        deadline = time.monotonic() + timeout
        while self.passes == 0 and time.monotonic() < deadline and self._thread.is_alive():
            time.sleep(0.05)
