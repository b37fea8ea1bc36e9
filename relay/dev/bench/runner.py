"""The benchmark run: services, backlogs, repetitions in child processes, latency and the broker stall.

``run_bench(options, progress)`` runs on the caller's (main) thread. It starts MariaDB and Apache Kafka
(``relay.dev.bench.services``) in a temp dir (or uses the addresses given), writes each
workload's backlog once, then measures every reader on that same binlog range ``repeat`` times, each in a
fresh ``relay.dev.bench.worker`` process: the relay end to end, the stock parse-only reader and the naive
relay. Then a relay runs live while the workload is offered at a fixed rate (latency commit → acknowledged),
and finally a relay on a dedicated broker that is SIGSTOPped while a large backlog is written (peak RSS under
back-pressure). Progress goes to ``progress`` as text; the figures come back as a ``BenchReport``. Everything
started is stopped and the temp dir removed, also on errors and ^C.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pymysql

from relay.dev.bench import workloads as wl
from relay.dev.bench.common import (
    LIVE_BASE_ID,
    W3_POPULATION,
    BenchOptions,
    Context,
    LiveWorker,
    Progress,
    broker_name,
    run_worker,
)
from relay.dev.bench.peer_session import PeerSession, describe
from relay.dev.bench.services import bench_services, machine_info
from relay.dev.bench.sidebyside import (
    CEILING_SUFFIX,
    RELAY_FORMAT,
    Run,
    RunObserver,
    fresh_topics,
    paced_warm_up,
    relay_topics,
    warm_up_rows,
)
from relay.dev.bench.sidebyside_stats import SideBySide
from relay.dev.bench.snapshot import SnapshotResult, run_snapshot
from relay.dev.bench.stall import run_stall
from relay.dev.bench.stats import Latency, StallResult, WorkloadResult
from relay.dev.bench.verify import VerifyResult, run_verify
from relay.errors import BenchError

__all__ = ["BenchError", "BenchOptions", "BenchReport", "run_bench"]

# The produce-only ceiling keeps every record of the backlog in its worker's memory: not for W5's millions.
NO_CEILING = ("W5",)


@dataclass
class BenchReport:
    machine: dict[str, Any]
    options: dict[str, Any]
    workloads: list[WorkloadResult]
    stall: StallResult | None
    notes: list[str]
    snapshot: SnapshotResult | None = None
    verify: VerifyResult | None = None
    side_by_side: list[SideBySide] | None = None  # --peers: the relay, each peer and the ceiling per workload

    def to_json(self) -> dict[str, Any]:
        return {
            "machine": self.machine,
            "options": self.options,
            "workloads": [w.to_json() for w in self.workloads],
            "side_by_side": [t.to_json() for t in self.side_by_side] if self.side_by_side else None,
            "stall": self.stall.to_json() if self.stall else None,
            "snapshot": self.snapshot.to_json() if self.snapshot else None,
            "verify": self.verify.to_json() if self.verify else None,
            "notes": self.notes,
        }


# ---- services ----------------------------------------------------------------------------------------


# ---- one workload --------------------------------------------------------------------------------------


@dataclass
class _Side:
    """A workload's side-by-side run (``--peers``): the session, its table and what a full copy holds."""

    session: PeerSession
    sbs: SideBySide
    table: str
    expected: Counter[int]


def _measure_backlog(
    ctx: Context,
    name: str,
    result: WorkloadResult,
    start: tuple[str, int],
    end: tuple[str, int],
    side: _Side | None = None,
) -> None:
    o = ctx.options
    for rep in range(1, o.repeat + 1):
        line = _relay_drain(ctx, name, result, start, end, rep, side)
        if o.baselines:
            s = run_worker(ctx, "stock-parse", start=start, end=end, timeout=_timeout(result))
            ctx.renew_broker()
            n = run_worker(ctx, "naive-relay", start=start, end=end, timeout=_timeout(result))
            result.stock.add(s["rows_per_s"])
            result.naive.add(n["rows_per_s"])
            line += f"; stock parse {s['rows_per_s']:,.0f}; naive relay {n['rows_per_s']:,.0f}"
        if (o.baselines or side is not None) and name not in NO_CEILING:
            c = _ceiling(ctx, name, rep, start, end, side)
            result.ceiling.add(c["rows_per_s"])
            line += f"; produce-only {c['rows_per_s']:,.0f}"
        ctx.progress(line)
        if side is not None:
            side.session.drains(ctx, side.sbs, side.table, side.expected, start, rep)


def _ceiling(
    ctx: Context, name: str, rep: int, start: tuple[str, int], end: tuple[str, int], side: _Side | None
) -> dict[str, Any]:
    """One produce-only run; with --peers its timed pass goes to ``<topic>.ceiling`` and is watched there."""
    instance = f"{name.lower()}-{rep}-ceiling-{time.monotonic_ns() % 10**6}"
    kw: dict[str, Any] = {"instance": instance, "workdir": str(ctx.work / instance)}
    if side is None:
        ctx.renew_broker()
        return run_worker(ctx, "produce-only", start=start, end=end, **kw)
    topics = [f"{t}{CEILING_SUFFIX}" for t in relay_topics(side.table)]
    fresh_topics(ctx, [*relay_topics(side.table), *topics])
    observer = RunObserver(ctx, Run(side.table, side.expected, RELAY_FORMAT), topics)
    c = run_worker(
        ctx, "produce-only", start=start, end=end, topic_suffix=CEILING_SUFFIX, on_start=observer.attach, **kw
    )
    seen = observer.finish(0.0)
    side.sbs.ceiling.add(seen)
    ctx.progress(f"  [{name}] {describe('produce-only ceiling (watched)', seen)}")
    return c


def _timeout(result: WorkloadResult) -> float:
    # A reader slower than 2,000 rows/s over a large backlog (W5: millions of changes) is still running.
    return max(900.0, result.rows / 2_000)


def _relay_drain(
    ctx: Context,
    name: str,
    result: WorkloadResult,
    start: tuple[str, int],
    end: tuple[str, int],
    rep: int,
    side: _Side | None,
) -> str:
    """One relay drain (watched from outside too with --peers); its progress line."""
    o = ctx.options
    instance = f"{name.lower()}-{rep}-{time.monotonic_ns() % 10**6}"
    profile: dict[str, Any] = {"profile_to": str(Path(o.profile) / f"{name}-{rep}.txt")} if o.profile else {}
    observer = None
    if side is None:
        ctx.renew_broker()
    else:  # its topic empty on a given broker too: what it holds afterwards is read back
        fresh_topics(ctx, relay_topics(side.table))
        observer = side.session.relay_observer(ctx, side.table, side.expected)
    r = run_worker(
        ctx,
        "relay-drain",
        start=start,
        end=end,
        instance=instance,
        workdir=str(ctx.work / instance),
        timeout=_timeout(result),
        on_start=observer.attach if observer is not None else None,
        **profile,
    )
    if r["rows"] != result.rows:
        ctx.progress(f"  warning: the relay published {r['rows']} rows, the backlog has {result.rows}")
    result.relay.add(r["rows_per_s"])
    result.relay_rss_mb.add(r["peak_rss_mb"])
    result.relay_cpu_us_per_row.add(r["cpu_us_per_row"])
    if observer is not None and side is not None:
        seen = observer.finish(float(r["peak_rss_mb"]))
        side.sbs.relay.add(seen)
        ctx.progress(f"  [{name}] {describe('relay (watched like the peers)', seen)}")
    if o.profile:
        _show_profile(ctx, Path(profile["profile_to"]))
    return _drain_line(name, rep, o.repeat, r, result)


def _drain_line(name: str, rep: int, repeat: int, r: dict[str, Any], result: WorkloadResult) -> str:
    line = f"  [{name}] {rep}/{repeat} relay {r['rows_per_s']:>9,.0f} rows/s ({r['seconds']:.2f} s"
    line += f", {r['cpu_us_per_row']:.0f} µs CPU/row, peak RSS {r['peak_rss_mb']:.0f} MB"
    if result.rss_bound_mb is not None:
        line += f" of {result.rss_bound_mb:.0f} MB"
    line += ")"
    threads = r.get("thread_cpu_us_per_row") or {}
    if threads:
        line += " [µs/row by thread: " + ", ".join(f"{k} {v:.0f}" for k, v in threads.items()) + "]"
    if "gc_collections" in r:
        line += f" [cycle collector: {r['gc_collections']} runs, {r['gc_seconds'] * 1000:.0f} ms]"
    return line


def _show_profile(ctx: Context, path: Path) -> None:
    from relay.dev.bench.profiles import render

    found = path if path.exists() else path.with_suffix(".prof")
    if not found.exists():
        ctx.progress(f"  no profile was written to {path}")
        return
    for line in render(found).splitlines():
        ctx.progress(f"    {line}")


def _await_acked(live: LiveWorker, rows: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while live.last.get("acked_rows", 0) < rows:
        if time.monotonic() > deadline:
            return False
        live.next(0.2)
    return True


def _warm_up(ctx: Context, live: LiveWorker, name: str, population: int) -> int:
    """A few statements before the measured ones, acknowledged first: the first record to a topic waits
    for the producer's metadata of it (about a second here), a one-off of a relay's start, not of its
    steady state. Returns the row changes written."""
    rows = warm_up_rows(ctx, name, LIVE_BASE_ID, population)
    if not _await_acked(live, rows, 60):
        raise BenchError(f"{name}: the relay did not acknowledge the warm-up rows within 60s")
    return rows


def _measure_latency(ctx: Context, name: str, side: _Side | None) -> tuple[Latency, wl.Commits, float]:
    """The relay live at the fixed offered rate: its latency, the commits and the achieved rate."""
    o = ctx.options
    instance = f"{name.lower()}-live-{time.monotonic_ns() % 10**6}"
    ack_file = ctx.work / f"{instance}.acks.json"
    start = wl.master_position(ctx.conn)
    if side is None:
        ctx.renew_broker()
    else:  # its topic is read back for the latency by the broker's clock
        fresh_topics(ctx, relay_topics(side.table))
    live = LiveWorker(
        ctx, start=start, instance=instance, workdir=str(ctx.work / instance), ack_file=str(ack_file)
    )
    try:
        live.wait_for("ready", 60)
        population = max(W3_POPULATION, int(o.latency_rate * o.latency_seconds) + wl.W3_ROWS_PER_UPDATE)
        if name == "W3" and population > W3_POPULATION:
            wl.populate_w3(ctx.conn, population)  # more rows, so each is updated once while measured
        warm = _warm_up(ctx, live, name, population)
        if side is not None:  # as every peer's: the rate offered unmeasured first (a JVM warms up)
            warm += paced_warm_up(ctx, name, LIVE_BASE_ID, population)
            if not _await_acked(live, warm, 300):
                raise BenchError(f"{name}: the relay did not acknowledge the paced warm-up within 300s")
        step = wl.steps_for(name, LIVE_BASE_ID, population)
        commits, achieved = wl.write_paced(
            ctx.conn, step, o.latency_rate, o.latency_seconds, wl.rows_per_step(name)
        )
        _await_acked(live, warm + len(commits), 30)
        live.stop()
    finally:
        live.kill()
    acks: dict[tuple[int, str], float] = {}
    for ident, kind, when in json.loads(ack_file.read_text()):
        acks.setdefault((ident, kind), when)
    latencies = [acks[key] - t for key, t in commits.items() if key in acks]
    latency = Latency.from_seconds(latencies, o.latency_rate, achieved, len(commits) - len(latencies))
    return latency, commits, achieved


def _run_bulk(ctx: Context, name: str) -> WorkloadResult:
    """W5: one transaction far larger than the relay's store, drained; no latency phase (a bulk load
    is not offered at a rate), and the relay's peak RSS is held against its bound."""
    o = ctx.options
    workload = wl.WORKLOADS[name]
    start = wl.master_position(ctx.conn)
    ctx.progress(f"[{name}] {workload.description}: N = {o.rows[name]:,} …")
    began = time.monotonic()
    rows = wl.write_bulk(ctx.conn, workload.table, o.rows[name])
    end = wl.master_position(ctx.conn)
    size = wl.binlog_bytes(ctx.conn, start, end)
    took = time.monotonic() - began
    ctx.progress(
        f"  [{name}] backlog {rows:,} row changes in one transaction, {size / 2**20:.1f} MB of binlog "
        f"in {took:.1f} s"
    )
    result = WorkloadResult(name, workload.description, rows, size, rss_bound_mb=o.rss_bound_mb)
    _measure_backlog(ctx, name, result, start, end)
    return result


def run_workload(ctx: Context, name: str, peers: PeerSession | None = None) -> WorkloadResult:
    o = ctx.options
    if name not in wl.STEP_WORKLOADS:
        return _run_bulk(ctx, name)  # W5: the peers are compared on W1-W4 and S
    workload = wl.WORKLOADS[name]
    if name == "W3":
        wl.populate_w3(ctx.conn, W3_POPULATION)
    start = wl.master_position(ctx.conn)
    per = wl.rows_per_step(name)
    steps = max(1, o.rows[name] // per)
    began = time.monotonic()
    ctx.progress(f"[{name}] {workload.description}: writing a backlog of {steps * per:,} row changes …")
    step = wl.steps_for(name, 0, W3_POPULATION)
    expected: Counter[int] = Counter()
    rows = wl.write_backlog(
        ctx.conn, step, steps, lambda n: ctx.progress(f"  [{name}] written {n:,} rows"), expected
    )
    end = wl.master_position(ctx.conn)
    size = wl.binlog_bytes(ctx.conn, start, end)
    took = time.monotonic() - began
    ctx.progress(f"  [{name}] backlog {rows:,} rows, {size / 2**20:.1f} MB of binlog in {took:.1f} s")
    result = WorkloadResult(name, workload.description, rows, size)
    side = (
        _Side(peers, peers.begin(name, workload.description, expected), workload.table, expected)
        if peers
        else None
    )
    _measure_backlog(ctx, name, result, start, end, side)
    if o.latency_seconds > 0:
        ctx.progress(
            f"  [{name}] latency at {o.latency_rate:,.0f} rows/s offered for {o.latency_seconds:.0f} s …"
        )
        result.latency, commits, achieved = _measure_latency(ctx, name, side)
        lat = result.latency
        ctx.progress(
            f"  [{name}] latency p50 {lat.p50_ms or 0:.1f} ms, p99 {lat.p99_ms or 0:.1f} ms "
            f"({lat.samples:,} rows, achieved {lat.achieved_rows_per_s:,.0f} rows/s, {lat.missing} missing)"
        )
        if side is not None:
            side.session.latency(ctx, side.sbs, commits, achieved)
    return result


# ---- the whole run -------------------------------------------------------------------------------------


def _snapshot_workloads(ctx: Context, peers: PeerSession | None) -> tuple[Any, Any]:
    """S and V as before; then, with --peers, S side by side (the table S filled, snapshotted by each)."""
    if ctx.options.snapshot_rows <= 0:
        return None, None
    ctx.renew_broker()
    snapshot = run_snapshot(ctx, ctx.options.snapshot_rows)
    verified = run_verify(ctx, ctx.options.snapshot_rows)
    if peers is not None:
        peers.snapshot(ctx, ctx.options.snapshot_rows)
    return snapshot, verified


def _stall(ctx: Context, notes: list[str]) -> StallResult | None:
    if ctx.options.stall_mb <= 0:
        return None
    if ctx.mysql.flavor != "mariadb":
        notes.append("stall not measured: its backlog is written with MariaDB's sequence engine")
        return None
    stall = run_stall(ctx)
    ctx.progress("  [stall] " + f"peak RSS {stall.peak_rss_mb:.0f} MB (limit {stall.limit_mb:.0f} MB)")
    return stall


def run_bench(options: BenchOptions, progress: Progress) -> BenchReport:
    work = Path(tempfile.mkdtemp(prefix="relay-bench-"))
    notes: list[str] = []
    peers = PeerSession(options.peers) if options.peers else None
    try:
        if peers is not None:
            peers.install(progress)
        with bench_services(options, work, progress, peers) as (mysql, kafka, broker):
            conn = mysql.connect()
            try:
                fresh = broker.renew if broker is not None else None
                ctx = Context(options, mysql, kafka, work, progress, conn, fresh_broker=fresh)
                wl.create_schema(conn, list(options.workloads))
                results = [run_workload(ctx, name, peers) for name in options.workloads]
                snapshot, verified = _snapshot_workloads(ctx, peers)
                stall = _stall(ctx, notes)
                info = machine_info(mysql.version, broker_name(options))
                if peers is not None:
                    info["peers"] = {p.name: p.label for p in peers.peers}
            finally:
                with contextlib.suppress(pymysql.err.MySQLError), conn.cursor() as cur:
                    cur.execute(f"DROP DATABASE IF EXISTS {wl.DB}")
                conn.close()
        opts = {k: v for k, v in options.__dict__.items() if k not in ("mysql",)}
        side = peers.results if peers is not None else None
        return BenchReport(info, opts, results, stall, notes, snapshot, verified, side)
    finally:
        shutil.rmtree(work, ignore_errors=True)
