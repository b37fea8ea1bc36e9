"""``relay bench --cluster``: what a cluster costs and how fast it hands a dead node's instances over.

``run_cluster_bench(options, progress)`` runs on the caller's (main) thread. It starts ZooKeeper, MariaDB
and Apache Kafka (one KRaft broker) in a temp dir (or uses the addresses given), then:

1. *Load*: one node (``relay cluster run``, a real process) with no instance, then with N idle instances
   (each its own process, streaming an empty database): ZooKeeper's znodes, ephemerals, watches, live
   connections (sessions) and write rate (zxid growth over a window) from the server's ``mntr``/``srvr``,
   and the node's memory (RSS and PSS summed over it and its instance processes) — per instance, the
   difference divided by N; then ZooKeeper's write rate while the server writes rows none of them captures
   (each one's saved position follows such traffic).
2. *Hand-over*: two nodes with K instances each, rows written into every instance; ``--repeat`` times, one
   node is SIGKILLed, and for each of its instances the time from the signal to another node's relay being
   elected and to its first acknowledged batch there (the position node written under the new epoch past
   the old owner's last position: positions are written only after Kafka acknowledged the batch), with
   ZooKeeper's own timestamps; the dead node then joins again and takes its share back.

Everything started is stopped and the temp dir removed, also on errors and ^C.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from relay.common.jars import KAFKA_VERSION
from relay.dev.bench.cluster_fleet import Fleet, NodeProcess, Writer, database
from relay.dev.bench.cluster_probe import TreeMemory, ZkCounts, tree_memory, zk_counts, znode_census
from relay.dev.bench.cluster_stats import ClusterResult, ZkPhase
from relay.dev.bench.cluster_watch import HandoverWatch
from relay.dev.bench.common import Progress
from relay.dev.bench.workloads import master_position
from relay.errors import BenchError, RelayError

UNCAPTURED = "uncaptured"  # a database no instance's filter includes


@dataclass(frozen=True)
class ClusterOptions:
    instances: int = 8  # N: idle instances on one node (ZooKeeper load, memory)
    kill: int = 3  # K: instances on the node that is SIGKILLed
    repeat: int = 3
    session_seconds: float = 10.0  # node.yaml's default
    rows_per_s: float = 20.0  # written into each instance during the hand-overs
    window_seconds: float = 10.0  # over which write rates and memory samples are taken
    mysql: str | None = None
    kafka: str | None = None
    zookeeper: str | None = None


@dataclass(frozen=True)
class Services:
    zookeeper: str
    mysql: Any
    kafka: str
    zk_version: str


@contextlib.contextmanager
def _services(options: ClusterOptions, work: Path, progress: Progress) -> Iterator[Services]:
    from relay.dev.bench.services import bench_mysql
    from relay.dev.services import StartOptions, start_kafka, start_zookeeper

    started: list[Any] = []
    try:
        if options.zookeeper:
            zk = options.zookeeper
        else:
            progress("starting ZooKeeper …")
            started.append(start_zookeeper(StartOptions(work / "zookeeper")))
            zk = str(started[-1].service.hosts)
        mysql = bench_mysql(options.mysql, work, progress, started)
        if options.kafka:
            kafka = options.kafka
        else:
            progress("starting Apache Kafka …")
            started.append(start_kafka(StartOptions(work / "kafka")))
            kafka = str(started[-1].service.bootstrap_servers)
        from relay.dev.bench.cluster_probe import four_letter, parse_mntr

        version = parse_mntr(four_letter(zk, "mntr")).get("zk_version", "?").split("-")[0]
        yield Services(zk, mysql, kafka, version)
    finally:
        for running in reversed(started):
            with contextlib.suppress(RelayError):
                running.stop(remove_dir=True)


def _stable(hosts: str, timeout: float = 60.0) -> ZkCounts:
    """ZooKeeper's counts once two readings a second apart agree (the cluster has stopped changing)."""
    deadline = time.monotonic() + timeout
    wait = threading.Event()
    last = zk_counts(hosts)
    while time.monotonic() < deadline:
        wait.wait(1.0)
        now = zk_counts(hosts)
        same = (now.znodes, now.ephemerals, now.watches, now.connections)
        if same == (last.znodes, last.ephemerals, last.watches, last.connections):
            return now
        last = now
    raise BenchError(f"ZooKeeper's counts still changed after {timeout:g} s: {last}")


def _window(
    hosts: str, node: NodeProcess, instances: int, seconds: float
) -> tuple[ZkPhase, list[TreeMemory]]:
    """ZooKeeper's counts, its write rate over ``seconds`` and the node's memory sampled during them."""
    counts = _stable(hosts)
    assert node.popen is not None
    samples: list[TreeMemory] = []
    wait = threading.Event()
    began = time.monotonic()
    for _ in range(5):
        samples.append(tree_memory(node.popen.pid))
        wait.wait(seconds / 5)
    elapsed = time.monotonic() - began
    after = zk_counts(hosts)
    rates = ((after.zxid - counts.zxid) / elapsed, (after.requests - counts.requests) / elapsed)
    return ZkPhase(instances, counts, *rates), samples


def measure_load(
    s: Services, options: ClusterOptions, work: Path, result: ClusterResult, progress: Progress
) -> None:
    n = options.instances
    names = [f"i{k:02d}" for k in range(n)]
    fleet = Fleet(
        work / "load", s.zookeeper, "/relay-bench/load", s.mysql, s.kafka, options.session_seconds, progress
    )
    try:
        node = fleet.start_node("n1", n)
        fleet.wait(lambda: fleet.report()["leader"] == "n1", 120, "node n1 registered and leading")
        progress(f"[load] one node, no instance: measuring for {options.window_seconds:g} s …")
        result.zk_idle, result.memory_idle = _window(s.zookeeper, node, 0, options.window_seconds)
        fleet.create_databases(names)
        fleet.define(names, _master(s.mysql))
        progress(f"[load] {n} instances defined; waiting until each is active on n1 …")
        fleet.wait(lambda: fleet.settled({"n1"}), 120 + 15 * n, f"{n} instances active on n1")
        progress(f"[load] one node, {n} idle instances: measuring for {options.window_seconds:g} s …")
        result.zk_loaded, result.memory_loaded = _window(s.zookeeper, node, n, options.window_seconds)
        result.census = znode_census(fleet.client, fleet.root, fleet.instances)
        result.zk_filtered = _filtered_window(s, fleet, n, options, progress)
    finally:
        fleet.close()
        _drop(s.mysql, [*names, UNCAPTURED])


def _filtered_window(
    s: Services, fleet: Fleet, n: int, options: ClusterOptions, progress: Progress
) -> ZkPhase:
    """The same idle instances while their server writes into a table none of them captures: each one's saved
    position follows that traffic (at most once a second), what an instance on a busy server writes."""
    fleet.create_databases([UNCAPTURED])
    writer = Writer(s.mysql, [UNCAPTURED], options.rows_per_s)
    writer.start()
    try:
        progress(f"[load] {n} idle instances, {options.rows_per_s:g} uncaptured rows/s on their server …")
        first, began = zk_counts(s.zookeeper), time.monotonic()
        threading.Event().wait(options.window_seconds)
        after = zk_counts(s.zookeeper)
    finally:
        writer.stop()
    elapsed = time.monotonic() - began
    rates = ((after.zxid - first.zxid) / elapsed, (after.requests - first.requests) / elapsed)
    return ZkPhase(n, after, *rates)


def _epochs(fleet: Fleet, node: str) -> dict[str, int]:
    report = fleet.report()
    return {k: int(i["epoch"]) for k, i in report["instances"].items() if i["running_on"] == node}


def _one_handover(fleet: Fleet, victim: str, options: ClusterOptions, progress: Progress) -> list[Any]:
    epochs = _epochs(fleet, victim)
    watch = HandoverWatch(fleet.client, fleet.root, victim, epochs)
    watch.start()
    try:
        fleet.wait(watch.has_base, 60, "every instance's position read once")
        killed = fleet.kill_node(victim)
        progress(f"[handover] SIGKILLed node {victim} (running {', '.join(sorted(epochs))}) …")
        fleet.wait(watch.done, options.session_seconds + 180, f"{victim}'s instances acknowledging elsewhere")
    finally:
        watch.stop()
    handovers = watch.handovers(killed)
    if watch.missed:
        progress(f"  (a position version before the first new one was not read for {watch.missed})")
    progress("  first acknowledged batch after " + ", ".join(f"{h.first_ack_s:.1f} s" for h in handovers))
    return handovers


def measure_handover(
    s: Services, options: ClusterOptions, work: Path, result: ClusterResult, progress: Progress
) -> None:
    k = options.kill
    fleet = Fleet(
        work / "handover",
        s.zookeeper,
        "/relay-bench/handover",
        s.mysql,
        s.kafka,
        options.session_seconds,
        progress,
    )
    writer: Writer | None = None
    names = [f"h{i:02d}" for i in range(2 * k)]
    try:
        fleet.create_databases(names)
        fleet.define(names, _master(s.mysql))
        for name in ("a", "b"):
            fleet.start_node(name, 2 * k)
        loads = {"a": k, "b": k}
        progress(f"[handover] 2 nodes, {2 * k} instances: waiting until {k} are active on each …")
        fleet.wait(lambda: fleet.settled({"a", "b"}, loads), 180 + 20 * k, f"{k} instances active per node")
        writer = Writer(s.mysql, fleet.instances, options.rows_per_s)
        writer.start()
        before = _stable_zxid(s.zookeeper, options.window_seconds)
        idle_node = result.zk_idle.writes_per_s if result.zk_idle else 0.0
        result.busy_writes_per_s = (before - 2 * idle_node) / (2 * k)
        for r in range(options.repeat):
            victim = ("a", "b")[r % 2]
            result.handovers.append(_one_handover(fleet, victim, options, progress))
            fleet.reap_orphans(90)
            fleet.start_node(victim, 2 * k)
            progress(f"[handover] node {victim} joined again; waiting until it has its {k} instances back …")
            fleet.wait(lambda: fleet.settled({"a", "b"}, loads), 240 + 20 * k, "the share taken back")
    finally:
        if writer is not None:
            writer.stop()
        fleet.close()
        _drop(s.mysql, names)


def _stable_zxid(hosts: str, seconds: float) -> float:
    """ZooKeeper's writes/s over ``seconds``."""
    first, began = zk_counts(hosts).zxid, time.monotonic()
    threading.Event().wait(seconds)
    return (zk_counts(hosts).zxid - first) / (time.monotonic() - began)


def _master(mysql: Any) -> tuple[str, int]:
    with contextlib.closing(mysql.connect()) as conn:
        return master_position(conn)


def _drop(mysql: Any, instances: list[str]) -> None:
    with contextlib.suppress(Exception), contextlib.closing(mysql.connect()) as conn, conn.cursor() as cur:
        for name in instances:
            cur.execute(f"DROP DATABASE IF EXISTS {database(name)}")


# What _services starts when no --kafka is given (the report's machine line said Tansu after the switch).
_EMBEDDED_KAFKA = f"Apache Kafka {KAFKA_VERSION} (embedded, one KRaft broker)"


def run_cluster_bench(options: ClusterOptions, progress: Progress) -> tuple[ClusterResult, dict[str, Any]]:
    from relay.dev.bench.services import machine_info

    if options.kill < 1 or options.instances < 1:
        raise BenchError("relay bench --cluster: --cluster-instances and --cluster-kill must be at least 1")
    work = Path(tempfile.mkdtemp(prefix="relay-bench-cluster-"))
    result = ClusterResult(options.instances, options.kill, options.session_seconds, options.rows_per_s)
    try:
        with _services(options, work, progress) as s:
            measure_load(s, options, work, result, progress)
            measure_handover(s, options, work, result, progress)
            info = machine_info(s.mysql.version, "given" if options.kafka else _EMBEDDED_KAFKA)
            info["zookeeper"] = (
                f"{s.zk_version}{' (given)' if options.zookeeper else ' (embedded, standalone)'}"
            )
        return result, info
    finally:
        shutil.rmtree(work, ignore_errors=True)
