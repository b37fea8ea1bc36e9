"""The peers of one ``relay bench --peers`` run: installed once, then run beside the relay on every workload.

``PeerSession`` is what the runner (``relay.dev.bench.runner``) calls: ``install`` (each peer's jars,
resolved once), ``begin`` (a workload's ``SideBySide``), ``relay_observer`` (the relay's drain watched like a
peer's), ``drains`` (each peer on the same backlog, after the relay, in every repetition), ``latency`` (the
relay's live phase read from its topic, then each peer's own), ``snapshot`` (S: every system snapshotting
the same table). A peer that fails a run keeps its error in the table and is not run again on that
workload; the others go on. Runs on the bench's main thread.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from functools import partial
from typing import Any

from relay.dev.bench import sidebyside as sb
from relay.dev.bench import workloads as wl
from relay.dev.bench.common import LIVE_BASE_ID, Context, Progress, run_worker
from relay.dev.bench.peer_debezium import DebeziumPeer
from relay.dev.bench.peers import PEER_NAMES, Peer
from relay.dev.bench.sidebyside_stats import RunFigures, SideBySide, SystemFigures
from relay.errors import BenchError

RELAY_LABEL = "relay (canal-json)"
LIVE_STRIDE = 20_000_000  # each system's latency phase writes ids of its own: 100M, 120M, 140M, …


def make_peer(name: str) -> Peer:
    if name == "debezium":
        return DebeziumPeer()
    raise BenchError(f"no peer named {name!r} (--peers takes {', '.join(PEER_NAMES)})")


class PeerSession:
    def __init__(self, names: tuple[str, ...]) -> None:
        self.peers: list[Peer] = [make_peer(n) for n in names]
        self.results: list[SideBySide] = []

    def install(self, progress: Progress) -> None:
        for peer in self.peers:
            peer.install(progress)

    def topics(self, tables: list[str]) -> list[str]:
        """Every topic the peers write on these tables (the runner creates them on each empty broker)."""
        out: list[str] = []
        for peer in self.peers:
            for table in tables:
                out += peer.topics(table)
            out += peer.side_topics()
        return out

    def begin(self, name: str, description: str, expected: Counter[int]) -> SideBySide:
        systems = [SystemFigures("relay", RELAY_LABEL)] + [SystemFigures(p.name, p.label) for p in self.peers]
        sbs = SideBySide(name, description, sum(expected.values()), systems)
        self.results.append(sbs)
        return sbs

    def relay_observer(self, ctx: Context, table: str, expected: Counter[int]) -> sb.RunObserver:
        return sb.RunObserver(ctx, sb.Run(table, expected, sb.RELAY_FORMAT), sb.relay_topics(table))

    def drains(
        self,
        ctx: Context,
        sbs: SideBySide,
        table: str,
        expected: Counter[int],
        start: tuple[str, int],
        rep: int,
    ) -> None:
        """Each peer once on the backlog from ``start`` (the relay's repetition ``rep`` ran just before)."""
        for peer, figures in zip(self.peers, sbs.peers, strict=True):
            if figures.error:
                continue
            workdir = ctx.work / f"{peer.name}-{sbs.workload.lower()}-{rep}"
            run = sb.Run(table, expected, peer.format)
            self._one(ctx, sbs, figures, partial(sb.peer_drain, ctx, peer, run, start, workdir))

    def _one(
        self, ctx: Context, sbs: SideBySide, figures: SystemFigures, measure: Callable[[], RunFigures]
    ) -> None:
        try:
            run = measure()
        except BenchError as exc:
            figures.error = str(exc).splitlines()[0]
            ctx.progress(f"  [{sbs.workload}] {figures.name} FAILED: {exc}")
            return
        figures.add(run)
        ctx.progress(f"  [{sbs.workload}] {describe(figures.name, run)}")

    def latency(self, ctx: Context, sbs: SideBySide, commits: wl.Commits, achieved: float) -> None:
        """The relay's live phase just ran (its topic holds it): its latency by the broker's clock; then
        each peer's own live phase."""
        o = ctx.options
        table = wl.WORKLOADS[sbs.workload].table
        sbs.relay.latency = sb.latency_from_topics(
            ctx, sb.relay_topics(table), sb.RELAY_FORMAT, commits, o.latency_rate, achieved
        )
        for n, (peer, figures) in enumerate(zip(self.peers, sbs.peers, strict=True), start=1):
            workdir = ctx.work / f"{peer.name}-{sbs.workload.lower()}-live"
            try:
                figures.latency = sb.peer_latency(
                    ctx, peer, sbs.workload, LIVE_BASE_ID + n * LIVE_STRIDE, workdir
                )
            except BenchError as exc:
                ctx.progress(f"  [{sbs.workload}] {peer.name} latency FAILED: {exc}")
                figures.error = figures.error or f"latency: {str(exc).splitlines()[0]}"
                continue
            lat = figures.latency
            ctx.progress(
                f"  [{sbs.workload}] {peer.name} latency p50 {lat.p50_ms or 0:.1f} ms, "
                f"p99 {lat.p99_ms or 0:.1f} ms "
                f"({lat.samples:,} rows, {lat.missing} missing)"
            )

    def snapshot(self, ctx: Context, rows: int) -> SideBySide:
        """S: the relay (in a worker) and each peer that snapshots, on the same table, ``repeat`` times."""
        expected = sb.snapshot_expected(rows)
        sbs = self.begin("S", "snapshot of existing rows", expected)
        for rep in range(1, ctx.options.repeat + 1):
            self._one(ctx, sbs, sbs.relay, partial(self._relay_snapshot, ctx, expected, rep))
            self._one(ctx, sbs, sbs.ceiling, partial(self._snapshot_ceiling, ctx, expected, rep))
            for peer, figures in zip(self.peers, sbs.peers, strict=True):
                if not peer.snapshots:
                    figures.error = figures.error or "it has no snapshot of existing rows"
                    continue
                if figures.error:
                    continue
                run = sb.Run("snap", expected, peer.format)
                workdir = ctx.work / f"{peer.name}-s-{rep}"
                self._one(ctx, sbs, figures, partial(sb.peer_snapshot, ctx, peer, run, workdir))
        return sbs

    def _snapshot_ceiling(self, ctx: Context, expected: Counter[int], rep: int) -> RunFigures:
        """The relay's snapshot records, captured by an untimed snapshot and sent again alone, watched."""
        topics = [f"{t}{sb.CEILING_SUFFIX}" for t in sb.relay_topics("snap")]
        sb.fresh_topics(ctx, [*sb.relay_topics("snap"), *topics])
        workdir = ctx.work / f"ceiling-s-{rep}"
        observer = sb.RunObserver(ctx, sb.Run("snap", expected, sb.RELAY_FORMAT), topics)
        config = sb.relay_snapshot_config(ctx, workdir)
        rows = sum(expected.values())
        kw: dict[str, Any] = {
            "instance": f"ceiling-s-{rep}",
            "workdir": str(workdir),
            "topic_suffix": sb.CEILING_SUFFIX,
        }
        run_worker(ctx, "produce-only", config=config, rows=rows, on_start=observer.attach, **kw)
        return observer.finish(0.0)

    def _relay_snapshot(self, ctx: Context, expected: Counter[int], rep: int) -> RunFigures:
        sb.fresh_topics(ctx, sb.relay_topics("snap"))
        workdir = ctx.work / f"relay-s-{rep}"
        observer = self.relay_observer(ctx, "snap", expected)
        config = sb.relay_snapshot_config(ctx, workdir)
        rows = sum(expected.values())
        result = run_worker(
            ctx, "relay-snapshot", config=config, rows=rows, workdir=str(workdir), on_start=observer.attach
        )
        return observer.finish(float(result["peak_rss_mb"]))


def describe(name: str, run: RunFigures) -> str:
    v = run.verdict
    checked = "ok" if v.ok else f"WRONG: {v.detail}"
    memory = (
        f", peak RSS {run.peak_rss_mb:.0f} MB" if run.peak_rss_mb else ""
    )  # the ceiling's is not compared
    return (
        f"{name}: {run.rows_per_s:,.0f} rows/s, {run.cpu_us_per_row:.1f} µs CPU/row{memory}; in Kafka "
        f"{v.rows:,} of {v.expected:,} row changes, {v.sampled} sampled vs SELECT: {checked}"
    )
