"""Where a profiled relay run spends its time: the top entries of py-spy's stacks or of a cProfile dump.

``relay bench --profile DIR`` samples each relay-drain run (``relay.dev.bench.common.py_spy``) into
``DIR/<workload>-<rep>.txt``. ``top_entries`` reads one back: the functions with the most samples as the
innermost frame ("self") and anywhere on the stack ("total"), as shares of the samples of the threads that
did work (idle waits in ``poll``/``wait``/``select`` are counted apart, so the shares say where CPU goes).
Only the relay's own threads count: the worker's main thread (imports, start-up, waiting for the end) is
left out.
"""

from __future__ import annotations

import pstats
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

IDLE = ("wait (threading.py", "select (", "poll (", "_wait_for_tstate_lock", "sleep (", "get (queue.py")
# With --native (compiled builds), waits end in libc: condition variables, futexes (the GIL's included),
# poll; py-spy leaves most of those frames unresolved (``0x7f… (libc.so.6)``).
NATIVE_IDLE = ("pthread_cond_", "futex", "epoll_wait", "nanosleep", "sem_wait", "sem_timedwait")


def _idle(leaf: str) -> bool:
    if any(leaf.startswith(i) or i in leaf for i in IDLE):
        return True
    if "(libc.so" in leaf and (leaf.startswith("0x") or leaf.startswith(NATIVE_IDLE)):
        return True
    return leaf.startswith(NATIVE_IDLE)


@dataclass(frozen=True)
class Entry:
    function: str
    self_share: float
    total_share: float


def _frame_name(frame: str) -> str:
    """``"decode_row (relay/binlog/rows.py:120)"`` → ``"decode_row (relay/binlog/rows.py)"``."""
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    for marker in ("/site-packages/", "/lib/python3"):
        if marker in path:
            path = path.split(marker, 1)[1]
    if "/relay/" in path:
        path = "relay/" + path.split("/relay/", 1)[1]
    return f"{name} ({path})" if path else name


def collapsed_top(path: Path, limit: int = 15) -> tuple[list[Entry], float]:
    """Top entries of a py-spy ``--format raw`` file, and the idle share of all samples."""
    self_counts: Counter[str] = Counter()
    total_counts: Counter[str] = Counter()
    busy = idle = 0
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")[1:]  # the first is the thread
        if not frames or "MainThread" in stack.split(";")[0] or frames[0].startswith("_run_module_as_main"):
            continue  # the worker's main thread: imports, building the relay, waiting for the end
        if _idle(frames[-1]):
            idle += count
            continue
        busy += count
        names = [_frame_name(f) for f in frames]
        self_counts[names[-1]] += count
        for name in set(names):
            total_counts[name] += count
    if busy == 0:
        return [], 1.0
    top = [Entry(n, c / busy, total_counts[n] / busy) for n, c in self_counts.most_common(limit)]
    return top, idle / (busy + idle)


def cprofile_top(path: Path, limit: int = 15) -> list[Entry]:
    """Top entries (by own time) of a cProfile dump written by the worker's fallback."""
    stats = pstats.Stats(str(path))
    table = stats.stats  # type: ignore[attr-defined]
    total = sum(v[2] for v in table.values()) or 1.0
    rows = sorted(table.items(), key=lambda kv: kv[1][2], reverse=True)[:limit]
    out = []
    for (file, _line, func), (_cc, _nc, own, cumulative, _callers) in rows:
        out.append(Entry(_frame_name(f"{func} ({file}:0)"), own / total, cumulative / total))
    return out


def render(path: Path, limit: int = 15) -> str:
    """The top entries of one profile as a small text table."""
    if path.suffix == ".prof":
        top, idle_note = cprofile_top(path, limit), "cProfile, own time"
    else:
        top, idle = collapsed_top(path, limit)
        idle_note = f"py-spy samples; {idle:.0%} of thread samples idle (waits) left out"
    lines = [f"{path.name} ({idle_note})", f"{'self':>6} {'total':>6}  function"]
    lines += [f"{e.self_share:>6.1%} {e.total_share:>6.1%}  {e.function}" for e in top]
    return "\n".join(lines)
