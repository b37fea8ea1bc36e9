"""``relay bench --peers``: the relay and its peers on the same backlog and broker, measured the same way.

For each workload the runner (``relay.dev.bench.runner``) writes the backlog once; then, in every
repetition, the relay's drain (the ``relay-drain`` worker it runs anyway, watched from here) and each peer's
run on the same binlog range, one after the other, each on an empty broker (the embedded one's topics
emptied, or Tansu restarted; a given broker's topics deleted and created again). Every run is measured from
outside (``relay.dev.bench.observe``): rows/s on the broker's clock from the first record's append to the
last's, CPU seconds of the system's processes between those two moments per row, peak RSS; and what it wrote
is read back and checked against ``SELECT`` (``relay.dev.bench.landed``). Latency: each system streams while
the bench offers the workload at a fixed rate, commit → the broker's append time of the row's record. The
snapshot workload S: each system snapshots the same table. Runs on the bench's main thread.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from relay.dev.bench import workloads as wl
from relay.dev.bench.common import Context, create_topics
from relay.dev.bench.landed import DECODERS, check, read_landed, sample_keys, select_rows
from relay.dev.bench.observe import ProcessProbe, TopicWatch
from relay.dev.bench.peers import Capture, Peer, PeerProcess, gtid_at
from relay.dev.bench.sidebyside_stats import RunFigures
from relay.dev.bench.stats import Latency
from relay.errors import BenchError

RELAY_FORMAT = "canal"  # the relay's default value format (canal-json), as the bench runs it
CEILING_SUFFIX = ".ceiling"  # the produce-only ceiling's timed pass goes to bench.<table>.ceiling
SAMPLE_SEED = 43


def relay_topics(table: str) -> list[str]:
    return [f"bench.{table}"]


def fresh_topics(ctx: Context, topics: list[str]) -> None:
    """An empty broker for the next run: the embedded one renewed (Apache Kafka: every record of the bench's
    topics deleted; Tansu: restarted, its topics created by the runner), or, on a broker given with
    --kafka, ``topics`` deleted and created again."""
    from confluent_kafka.admin import AdminClient

    if ctx.fresh_broker is not None:
        ctx.renew_broker()
        _await_leaders(AdminClient({"bootstrap.servers": ctx.kafka, "log_level": 3}), topics)
        return
    admin = AdminClient({"bootstrap.servers": ctx.kafka, "log_level": 3})
    existing = [t for t in topics if t in admin.list_topics(timeout=30).topics]
    for future in admin.delete_topics(existing, request_timeout=30).values() if existing else []:
        future.result(timeout=30)
    deadline = time.monotonic() + 60
    while any(t in admin.list_topics(timeout=30).topics for t in existing):
        if time.monotonic() > deadline:
            raise BenchError(f"the broker did not delete {existing} within 60s")
        time.sleep(0.1)
    create_topics(ctx.kafka, topics)
    _await_leaders(admin, topics)


def _await_leaders(admin: Any, topics: list[str], timeout: float = 60.0) -> None:
    """Until every partition of ``topics`` has a leader in the broker's metadata (a watch's first look at
    a topic just created may otherwise meet NOT_LEADER_FOR_PARTITION)."""
    deadline = time.monotonic() + timeout
    while True:
        meta = admin.list_topics(timeout=30).topics
        ready = all(
            t in meta and meta[t].error is None and meta[t].partitions
            and all(p.leader >= 0 and p.error is None for p in meta[t].partitions.values())
            for t in topics
        )  # fmt: skip
        if ready:
            return
        if time.monotonic() > deadline:
            raise BenchError(
                f"the broker named no leader for every partition of {topics} within {timeout:.0f}s"
            )
        time.sleep(0.05)


@dataclass
class Run:
    """One measured run's job: a table, what the writer committed to it (changes per key), the format."""

    table: str
    expected: Counter[int]
    decoder: str

    @property
    def rows(self) -> int:
        return sum(self.expected.values())


class RunObserver:
    """Watches one run's topics fill while its system runs, then reads them back and checks them."""

    def __init__(self, ctx: Context, run: Run, topics: list[str]) -> None:
        self.ctx = ctx
        self.run = run
        self.topics = topics
        self.watch: TopicWatch | None = None

    def attach(self, pid: int) -> None:
        self.watch = TopicWatch(self.ctx.kafka, self.topics, self.run.rows, ProcessProbe(pid)).start()

    def wait(self, alive: Callable[[], bool], timeout: float) -> None:
        """Until every row is acknowledged; ``BenchError`` if the system stops first or time runs out."""
        assert self.watch is not None
        deadline = time.monotonic() + timeout
        while not self.watch.wait(0.5):
            if not alive():
                raise BenchError(f"stopped with {self.watch.marks.records:,} of {self.run.rows:,} records")
            if time.monotonic() > deadline:
                raise BenchError(
                    f"{self.watch.marks.records:,} of {self.run.rows:,} records in {timeout:.0f}s"
                )

    def finish(self, peak_rss_mb: float) -> RunFigures:
        assert self.watch is not None
        self.watch.wait(10.0)  # the system has finished: the last records are there or never will be
        self.watch.close()
        marks = self.watch.marks
        sample = sample_keys(self.run.expected, SAMPLE_SEED)
        landed = read_landed(self.ctx.kafka, self.topics, DECODERS[self.run.decoder], sample)
        verdict = check(landed, self.run.expected, select_rows(self.ctx.conn, self.run.table, sample), sample)
        cpu = marks.done_cpu - marks.first_cpu if marks.done_at is not None else 0.0
        return RunFigures(
            landed.rows / landed.seconds() if landed.rows else 0.0,
            cpu * 1e6 / max(self.run.rows, 1),
            peak_rss_mb,
            verdict,
        )


def peer_run(
    ctx: Context, peer: Peer, run: Run, capture: Capture, workdir: Path, timeout: float
) -> RunFigures:
    """One run of a peer: an empty broker, the peer started on ``capture``, watched until every row landed."""
    topics = peer.topics(run.table)
    fresh_topics(ctx, [*topics, *peer.side_topics()])
    observer = RunObserver(ctx, run, topics)
    proc = peer.start(ctx, capture, workdir)
    try:
        observer.attach(proc.pid)
        try:
            observer.wait(proc.alive, timeout)
        except BenchError as exc:
            raise BenchError(f"{peer.name}: {exc}\n{proc.log_tail()}") from None
        peak = ProcessProbe(proc.pid).peak_rss_mb()
    finally:
        proc.stop()
        if observer.watch is not None:
            observer.watch.close()
    return observer.finish(peak)


def peer_drain(ctx: Context, peer: Peer, run: Run, start: tuple[str, int], workdir: Path) -> RunFigures:
    capture = Capture(run.table, start, gtid_at(ctx.conn, start))
    return peer_run(ctx, peer, run, capture, workdir, timeout=max(900.0, run.rows / 200))


def peer_snapshot(ctx: Context, peer: Peer, run: Run, workdir: Path) -> RunFigures:
    return peer_run(ctx, peer, run, Capture(run.table), workdir, timeout=max(900.0, run.rows / 200))


# ---- latency ------------------------------------------------------------------------------------------


def latency_from_topics(
    ctx: Context, topics: list[str], decoder: str, commits: wl.Commits, offered: float, achieved: float
) -> Latency:
    """Commit (the bench's clock, turned into wall time) → the broker's append time of each row's record."""
    wall = time.time() - time.monotonic()
    landed = read_landed(ctx.kafka, topics, DECODERS[decoder], set())
    latencies = [
        landed.acked_ms[key] / 1000.0 - (t + wall) for key, t in commits.items() if key in landed.acked_ms
    ]
    return Latency.from_seconds(latencies, offered, achieved, len(commits) - len(latencies))


def _wait_records(watch: TopicWatch, proc: PeerProcess, rows: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while watch.count() < rows:
        if not proc.alive():
            raise BenchError(f"stopped before {rows} records reached Kafka:\n{proc.log_tail()}")
        if time.monotonic() > deadline:
            raise BenchError(
                f"{watch.count()} of {rows} records reached Kafka in {timeout:.0f}s:\n{proc.log_tail()}"
            )
        time.sleep(0.05)


def peer_latency(ctx: Context, peer: Peer, name: str, base: int, workdir: Path) -> Latency:
    """The peer streaming from the binlog's end while the bench offers ``name`` at the fixed rate: after
    a few statements (acknowledged first: its start and the schema's read come before), the rate offered
    for as long as the measured window and acknowledged (a JVM's compiler warms up), then measured."""
    o = ctx.options
    table = wl.WORKLOADS[name].table
    topics = peer.topics(table)
    fresh_topics(ctx, [*topics, *peer.side_topics()])
    start = wl.master_position(ctx.conn)
    proc = peer.start(ctx, Capture(table, start, gtid_at(ctx.conn, start)), workdir)
    watch = TopicWatch(ctx.kafka, topics, 1 << 62, None)
    try:
        population = live_population(ctx)
        warm = warm_up_rows(ctx, name, base, population)
        _wait_records(watch, proc, warm, timeout=600)
        warm += paced_warm_up(ctx, name, base, population)
        _wait_records(watch, proc, warm, timeout=300)
        step = wl.steps_for(name, base, population)
        commits, achieved = wl.write_paced(
            ctx.conn, step, o.latency_rate, o.latency_seconds, wl.rows_per_step(name)
        )
        _wait_records(watch, proc, warm + len(commits), timeout=120)
    finally:
        watch.close()
        proc.stop()
    return latency_from_topics(ctx, topics, peer.format, commits, o.latency_rate, achieved)


def live_population(ctx: Context) -> int:
    """The W3 rows the latency phase updates (each once while measured)."""
    from relay.dev.bench.common import W3_POPULATION

    o = ctx.options
    return max(W3_POPULATION, int(o.latency_rate * o.latency_seconds) + wl.W3_ROWS_PER_UPDATE)


def warm_up_rows(ctx: Context, name: str, base: int, population: int) -> int:
    """A few statements before the measured ones (ids below ``base``; W3: the top rows); their row changes."""
    with ctx.conn.cursor() as cur:
        if name == "W3":
            return len(wl.w3_update(cur, population - wl.W3_ROWS_PER_UPDATE, 0))
        step = wl.steps_for(name, base - 10_000_000, population)
        return sum(len(step(cur, n)) for n in range(4))


def paced_warm_up(ctx: Context, name: str, base: int, population: int) -> int:
    """The workload offered at the measured rate for the measured window's length, on rows of its own
    (ids ``base`` - 5,000,000 on; W3: the rows ``population`` … 2 ``population`` - 1); its row changes."""
    o = ctx.options
    step: wl.Step = wl.steps_for(name, base - 5_000_000, population)
    if name == "W3":
        wl.populate_w3(ctx.conn, 2 * population, first=population)

        def step(cur: Any, n: int) -> list[tuple[int, str]]:
            return wl.w3_update(cur, population + (n * wl.W3_ROWS_PER_UPDATE) % population, n)

    commits, _ = wl.write_paced(ctx.conn, step, o.latency_rate, o.latency_seconds, wl.rows_per_step(name))
    return len(commits)


def snapshot_expected(rows: int) -> Counter[int]:
    """The snapshot workload's table: ids 1 … rows, each read once."""
    return Counter({i: 1 for i in range(1, rows + 1)})


def relay_snapshot_config(ctx: Context, workdir: Path) -> dict[str, Any]:
    """The relay's configuration for S in a worker: the bench table snapshotted, then streamed."""
    from relay.dev.bench.snapshot import _relay_config

    return _relay_config(ctx, workdir)
