"""What a bench worker measures of its own process: memory, CPU time (per thread), the collector, profiles.

Owns ``emit`` (the JSON lines a worker prints for ``relay.dev.bench.common``), ``memory_mb``, ``cpu_seconds``,
``thread_cpu``, ``GcClock`` and ``profile_threads`` (cProfile in every thread, py-spy's stand-in). Runs on
the worker's main thread; ``GcClock`` runs inside the collector, ``profile_threads``' wrapper in each
thread it profiles.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def emit(event: str, **fields: Any) -> None:
    sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


def memory_mb() -> tuple[float, float]:
    """(current RSS, peak RSS) of this process in MB, from /proc (VmRSS, VmHWM)."""
    rss = hwm = 0.0
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) / 1024
            elif line.startswith("VmHWM:"):
                hwm = int(line.split()[1]) / 1024
    except OSError:
        hwm = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return rss, hwm


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def thread_cpu() -> dict[str, float]:
    """CPU seconds per thread name (/proc/self/task/*: the relay's threads, librdkafka's rdk:* threads)."""
    ticks = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for task in Path("/proc/self/task").glob("*"):
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        name = (
            name.split("-")[0]
            if name.startswith("parser")
            else name.split(":")[0] + ":"
            if ":" in name
            else name
        )
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / ticks
    return out


class GcClock:
    """Wall time spent in the cycle collector while installed (``gc.callbacks``)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.collections = 0
        self._began = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._began
            self.collections += 1


def profile_threads(out: Path) -> Callable[[], None]:
    """cProfile every thread started from now on (py-spy's stand-in); the returned call writes ``out``.

    Each thread's ``run`` gets a profiler of its own (cProfile sees one thread); their stats are merged.
    """
    import cProfile
    import pstats

    profiles: list[cProfile.Profile] = []
    original = threading.Thread.run

    def run(self: threading.Thread) -> None:
        profile = cProfile.Profile()
        profiles.append(profile)
        profile.enable()
        try:
            original(self)
        finally:
            profile.disable()

    threading.Thread.run = run  # type: ignore[method-assign]

    def dump() -> None:
        threading.Thread.run = original  # type: ignore[method-assign]
        for profile in profiles:
            profile.disable()  # a daemon thread still running: its samples so far
        merged = pstats.Stats(*profiles) if profiles else None
        if merged is not None:
            out.parent.mkdir(parents=True, exist_ok=True)
            merged.dump_stats(str(out))

    return dump
