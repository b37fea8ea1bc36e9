"""The cluster bench's figures and their arithmetic: hand-over times, ZooKeeper load and memory per instance.

Owns ``ClusterResult`` (what ``relay.dev.bench.cluster`` measured, as samples), the derived figures (medians
and maxima over repeats, per-instance deltas between a node with 0 and with N instances), its JSON and
``render_cluster`` (the text ``relay bench --cluster`` prints). Pure: no I/O. Runs on the bench's main thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from relay.dev.bench.cluster_probe import TreeMemory, ZkCounts
from relay.dev.bench.stats import median


@dataclass(frozen=True)
class Handover:
    """One instance of a SIGKILLed node: seconds from the SIGKILL to the node's record gone (its session
    expired: what ZooKeeper takes), to another node's relay being elected (its ``running`` record created)
    and to its first acknowledged batch there (the saved position, written under the new epoch, past where
    the dead node's relay left it)."""

    instance: str
    elected_s: float
    first_ack_s: float
    node_gone_s: float | None = None  # the dead node's record removed: its session expired (bench's clock)


@dataclass(frozen=True)
class ZkPhase:
    """ZooKeeper seen with one node running ``instances`` instances: its counters and its write rate."""

    instances: int
    counts: ZkCounts
    writes_per_s: float
    requests_per_s: float = 0.0  # every request the server received (reads, writes, pings)


def _spread(values: Sequence[float]) -> dict[str, float | None]:
    return {
        "median": median(values) if values else None,
        "max": max(values) if values else None,
        "min": min(values) if values else None,
    }


@dataclass
class ClusterResult:
    instances: int  # N: idle instances on one node (ZooKeeper, memory)
    kill: int  # K: instances on the node that is SIGKILLed
    session_seconds: float
    rows_per_s: float  # offered to each instance during the hand-over runs
    handovers: list[list[Handover]] = field(default_factory=list)  # one list per repeat
    zk_idle: ZkPhase | None = None
    zk_loaded: ZkPhase | None = None
    zk_filtered: ZkPhase | None = None  # the same, while their server writes rows none of them captures
    busy_writes_per_s: float | None = None  # ZooKeeper writes/s per instance under the offered rows
    memory_idle: list[TreeMemory] = field(default_factory=list)  # samples: a node without instances
    memory_loaded: list[TreeMemory] = field(default_factory=list)  # samples: a node with N idle instances
    census: dict[str, int] = field(default_factory=dict)  # znodes by path with N instances (cluster_probe)
    notes: list[str] = field(default_factory=list)

    # -- derived ---------------------------------------------------------------------------------
    def first_ack(self) -> dict[str, float | None]:
        return _spread([h.first_ack_s for run in self.handovers for h in run])

    def elected(self) -> dict[str, float | None]:
        return _spread([h.elected_s for run in self.handovers for h in run])

    def node_gone(self) -> dict[str, float | None]:
        """Once per repeat: every instance of a repeat saw the same node go."""
        return _spread(
            [h.node_gone_s for run in self.handovers for h in run[:1] if h.node_gone_s is not None]
        )

    def last_per_repeat(self) -> list[float]:
        """Per repeat, when the last of the dead node's instances had acknowledged a batch elsewhere."""
        return [max(h.first_ack_s for h in run) for run in self.handovers if run]

    def zk_per_instance(self) -> dict[str, float] | None:
        if self.zk_idle is None or self.zk_loaded is None or self.instances == 0:
            return None
        delta = self.zk_loaded.counts.minus(self.zk_idle.counts)
        out = {k: v / self.instances for k, v in delta.items()}
        out["writes_per_s"] = (self.zk_loaded.writes_per_s - self.zk_idle.writes_per_s) / self.instances
        out["requests_per_s"] = (self.zk_loaded.requests_per_s - self.zk_idle.requests_per_s) / self.instances
        return out

    def filtered_writes_per_s(self) -> float | None:
        """Writes/s per idle instance while its server writes rows it does not capture."""
        if self.zk_filtered is None or self.zk_idle is None or not self.instances:
            return None
        return (self.zk_filtered.writes_per_s - self.zk_idle.writes_per_s) / self.instances

    def memory(self) -> dict[str, float | None]:
        idle_pss = median([m.pss_mb for m in self.memory_idle]) if self.memory_idle else None
        idle_rss = median([m.rss_mb for m in self.memory_idle]) if self.memory_idle else None
        pss = median([m.pss_mb for m in self.memory_loaded]) if self.memory_loaded else None
        rss = median([m.rss_mb for m in self.memory_loaded]) if self.memory_loaded else None

        def per(loaded: float | None, idle: float | None) -> float | None:
            if loaded is None or idle is None or not self.instances:
                return None
            return (loaded - idle) / self.instances

        return {
            "idle_node_pss_mb": idle_pss,
            "idle_node_rss_mb": idle_rss,
            "loaded_node_pss_mb": pss,
            "loaded_node_rss_mb": rss,
            "per_instance_pss_mb": per(pss, idle_pss),
            "per_instance_rss_mb": per(rss, idle_rss),
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "instances": self.instances,
            "kill": self.kill,
            "session_seconds": self.session_seconds,
            "rows_per_s": self.rows_per_s,
            "handover": {
                "first_ack_s": self.first_ack(),
                "elected_s": self.elected(),
                "node_gone_s": self.node_gone(),
                "last_instance_per_repeat_s": self.last_per_repeat(),
                "runs": [[asdict(h) for h in run] for run in self.handovers],
            },
            "zookeeper": {
                "idle": asdict(self.zk_idle) if self.zk_idle else None,
                "loaded": asdict(self.zk_loaded) if self.zk_loaded else None,
                "filtered": asdict(self.zk_filtered) if self.zk_filtered else None,
                "filtered_writes_per_s_per_instance": self.filtered_writes_per_s(),
                "per_instance": self.zk_per_instance(),
                "busy_writes_per_s_per_instance": self.busy_writes_per_s,
                "znodes_by_path": self.census,
            },
            "memory": {
                **self.memory(),
                "idle_samples": [asdict(m) for m in self.memory_idle],
                "loaded_samples": [asdict(m) for m in self.memory_loaded],
            },
            "notes": self.notes,
        }


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def _n(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _render_handover(r: ClusterResult) -> list[str]:
    ack, elected, gone = r.first_ack(), r.elected(), r.node_gone()
    samples = sum(len(run) for run in r.handovers)
    lines = [
        f"hand-over after a node's SIGKILL ({r.kill} instance(s) on it, session timeout "
        f"{r.session_seconds:g} s, {r.rows_per_s:g} rows/s written into each instance; {len(r.handovers)} "
        f"repeat(s), {samples} instance hand-overs):",
        f"  SIGKILL -> first acknowledged batch on another node  median {_s(ack['median'])}   "
        f"max {_s(ack['max'])}   min {_s(ack['min'])}",
        f"  SIGKILL -> relay elected on another node             median {_s(elected['median'])}   "
        f"max {_s(elected['max'])}   min {_s(elected['min'])}",
        f"  SIGKILL -> the node's session expired (record gone)  median {_s(gone['median'])}   "
        f"max {_s(gone['max'])}   min {_s(gone['min'])}",
    ]
    for i, run in enumerate(r.handovers, 1):
        each = ", ".join(f"{h.first_ack_s:.1f}" for h in sorted(run, key=lambda h: h.first_ack_s))
        lines.append(f"  repeat {i}: first acknowledged batch after {each} s")
    return lines


def _render_zookeeper(r: ClusterResult) -> list[str]:
    per = r.zk_per_instance()
    if per is None or r.zk_idle is None or r.zk_loaded is None:
        return ["ZooKeeper load: not measured"]
    idle, loaded = r.zk_idle, r.zk_loaded
    rows = [
        ("znodes", idle.counts.znodes, loaded.counts.znodes, per["znodes"]),
        ("  of them ephemeral", idle.counts.ephemerals, loaded.counts.ephemerals, per["ephemerals"]),
        ("watches", idle.counts.watches, loaded.counts.watches, per["watches"]),
        ("sessions (connections)", idle.counts.connections, loaded.counts.connections, per["connections"]),
        ("data bytes", idle.counts.data_bytes, loaded.counts.data_bytes, per["data_bytes"]),
    ]
    lines = [
        f"ZooKeeper, one node with 0 vs {r.instances} idle instances (mntr, srvr; whole server, this "
        "bench's own client included in both):",
        f"  {'':<24} {'0 instances':>12} {f'{r.instances} instances':>13} {'per instance':>13}",
    ]
    for name, a, b, d in rows:
        lines.append(f"  {name:<24} {a:>12,} {b:>13,} {d:>13,.1f}")
    lines.append(
        f"  {'writes/s (zxid growth)':<24} {idle.writes_per_s:>12.2f} {loaded.writes_per_s:>13.2f} "
        f"{per['writes_per_s']:>13.2f}"
    )
    mine = {path: n for path, n in r.census.items() if "<i>" in path}
    if mine:
        lines.append(f"  znodes per instance by path (<i>: an instance; {r.instances} instances):")
        lines += [f"    {path:<52} {n / r.instances:>6.1f}" for path, n in mine.items()]
    lines.append(
        f"  {'requests/s (all kinds)':<24} {idle.requests_per_s:>12.2f} {loaded.requests_per_s:>13.2f} "
        f"{per['requests_per_s']:>13.2f}"
    )
    filtered = r.filtered_writes_per_s()
    if filtered is not None:
        lines.append(
            f"  writes/s per idle instance while its server writes {r.rows_per_s:g} uncaptured rows/s: "
            f"{filtered:.2f}"
        )
    if r.busy_writes_per_s is not None:
        lines.append(
            f"  writes/s per instance with {r.rows_per_s:g} rows/s written into it: {r.busy_writes_per_s:.2f}"
        )
    return lines


def _render_memory(r: ClusterResult) -> list[str]:
    m = r.memory()
    return [
        "memory of a node (summed over the node process and its instance processes; PSS shares pages "
        "among their sharers, RSS counts them in each):",
        f"  idle node, no instance      PSS {_n(m['idle_node_pss_mb'])} MB   "
        f"RSS {_n(m['idle_node_rss_mb'])} MB",
        f"  node with {r.instances} idle instances  PSS {_n(m['loaded_node_pss_mb'])} MB   "
        f"RSS {_n(m['loaded_node_rss_mb'])} MB",
        f"  per instance                PSS {_n(m['per_instance_pss_mb'])} MB   "
        f"RSS {_n(m['per_instance_rss_mb'])} MB",
    ]


def render_cluster(r: ClusterResult) -> str:
    lines = [*_render_handover(r), "", *_render_zookeeper(r), "", *_render_memory(r)]
    lines += [f"note: {n}" for n in r.notes]
    return "\n".join(lines)


# ---- the first acknowledged batch of a new owner, from the position node's versions ----------------------


@dataclass(frozen=True)
class PositionVersion:
    """One version of an instance's position node as read: the writer's epoch, the position, the server's
    modification time (ms since the epoch)."""

    version: int
    epoch: int
    position: str
    mtime_ms: int


def first_advance(seen: Sequence[PositionVersion], old_epoch: int) -> tuple[PositionVersion, bool] | None:
    """The first version written under an epoch newer than ``old_epoch`` whose position differs from the
    version before it (a batch acknowledged by the new owner, not its start-up rewrite of the same point),
    and whether the version before it was missed (then it is compared with the last old-epoch one seen)."""
    by_version = {v.version: v for v in seen}
    old = [v for v in by_version.values() if v.epoch <= old_epoch]
    base = max(old, key=lambda v: v.version).position if old else None
    for v in sorted(by_version.values(), key=lambda v: v.version):
        if v.epoch <= old_epoch:
            continue
        before = by_version.get(v.version - 1)
        reference = before.position if before is not None else base
        if v.position != reference:
            return v, before is None
    return None
