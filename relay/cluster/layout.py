"""The cluster's runtime state in ZooKeeper: live nodes, drain marks, the leader, assignments, status.

Owns the paths and the JSON records of the node runtime (docs/architecture.md, "Cluster"), and
``read_view``, one consistent-enough read of them all that the leader places from and ``relay cluster
status|rebalance|drain`` print. Under the cluster root::

    <root>/nodes/<node>           ephemeral: a live node (capacity, drained, host, pid, since)
    <root>/drained/<node>         persistent: `relay cluster drain NODE` (kept across the node's restarts)
    <root>/leader                 ephemeral: the node that places instances (its name)
    <root>/assignments/<name>     persistent: the node an instance is placed on, the plan's generation
    <root>/pins/<name>            persistent: `relay cluster move NAME NODE` — the node the instance is
                                  pinned to (``relay.cluster.placement``: honoured while it is eligible)
    <root>/placement-generation   persistent: the last plan's generation (bumped by every plan written)
    <root>/destinations/<name>/status
                                  ephemeral, written by the node running the instance: its state, lag,
                                  last error, restarts, and the relay's whole status record (next to
                                  the instance's HA nodes)
    <root>/destinations/<name>/held
                                  persistent: the instance stopped on a schema error and is not
                                  restarted until `relay schema resync --instance` (``relay.cluster.holds``)
    <root>/destinations/<name>/requests/r-<seq>
                                  persistent sequential: a request to the instance (`relay snapshot
                                  run|cancel --instance`, `relay schema resync --instance`), taken by
                                  the node running it (``relay.cluster.requests``)
    <root>/destinations/<name>/answers/<id>
                                  persistent: the node's answer to request <id> (handed over, then
                                  accepted or refused, naming the node); the asking CLI removes it

Functions run on the caller's thread with a kazoo client the caller owns.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from relay.cluster.placement import Node, Plan, place
from relay.cluster.versions import parse_stored
from relay.errors import ClusterError, ConfigError

log = logging.getLogger(__name__)

__all__ = ["Assignment", "ClusterView", "LiveNode", "Paths", "read_view"]


@dataclass(frozen=True)
class Paths:
    """The runtime znodes under one cluster root."""

    root: str

    def _at(self, *parts: str) -> str:
        return "/".join([self.root.rstrip("/"), *parts])

    @property
    def nodes(self) -> str:
        return self._at("nodes")

    @property
    def drained(self) -> str:
        return self._at("drained")

    @property
    def leader(self) -> str:
        return self._at("leader")

    @property
    def assignments(self) -> str:
        return self._at("assignments")

    @property
    def generation(self) -> str:
        return self._at("placement-generation")

    def node(self, name: str) -> str:
        return self._at("nodes", name)

    def drain_mark(self, name: str) -> str:
        return self._at("drained", name)

    @property
    def pins(self) -> str:
        return self._at("pins")

    def pin(self, instance: str) -> str:
        return self._at("pins", instance)

    def assignment(self, instance: str) -> str:
        return self._at("assignments", instance)

    def status(self, instance: str) -> str:
        return self._at("destinations", instance, "status")

    def running(self, instance: str) -> str:
        return self._at("destinations", instance, "running")

    def held(self, instance: str) -> str:
        return self._at("destinations", instance, "held")

    def requests(self, instance: str) -> str:
        return self._at("destinations", instance, "requests")

    def answers(self, instance: str) -> str:
        return self._at("destinations", instance, "answers")

    def answer(self, instance: str, request_id: str) -> str:
        return self._at("destinations", instance, "answers", request_id)


@dataclass(frozen=True)
class LiveNode:
    """A node's ephemeral record; ``session``: its ZooKeeper session (the znode's owner)."""

    name: str
    capacity: int
    drained: bool
    host: str = ""
    pid: int = 0
    since: float = 0.0
    session: int = 0

    def record(self) -> bytes:
        data = {"capacity": self.capacity, "drained": self.drained, "host": self.host, "pid": self.pid}
        return json.dumps({**data, "since": self.since}, sort_keys=True).encode()


@dataclass(frozen=True)
class Assignment:
    """Where the leader placed an instance, in which plan generation, and why it moved there."""

    instance: str
    node: str
    generation: int = 0
    reason: str = ""

    def record(self) -> bytes:
        return json.dumps({"node": self.node, "generation": self.generation, "reason": self.reason}).encode()


@dataclass(frozen=True)
class ClusterView:
    """What ZooKeeper says now: live nodes, drain marks, defined instances (name → version), the
    assignment, the leader, each instance's published status."""

    nodes: Mapping[str, LiveNode] = field(default_factory=dict)
    drain_marks: frozenset[str] = frozenset()
    instances: Mapping[str, int] = field(default_factory=dict)
    assignments: Mapping[str, Assignment] = field(default_factory=dict)
    leader: str | None = None
    statuses: Mapping[str, dict[str, Any]] = field(default_factory=dict)
    pins: Mapping[str, str] = field(default_factory=dict)

    def placement_nodes(self) -> list[Node]:
        return [
            Node(n.name, n.capacity, n.drained or n.name in self.drain_marks) for n in self.nodes.values()
        ]

    def current(self) -> dict[str, str]:
        return {name: a.node for name, a in self.assignments.items()}

    def plan(self) -> Plan:
        """The leader's plan from here (``relay.cluster.placement``); empty when nothing is to move.
        An assignment to a node that is not live counts as running nowhere… but still as a move."""
        return place(self.placement_nodes(), self.instances, self.current(), self.pins)

    def generation(self) -> int:
        return max((a.generation for a in self.assignments.values()), default=0)


def read_view(client: KazooClient, root: str, *, statuses: bool = False, watch: Any = None) -> ClusterView:
    """Read the runtime state (``watch``: a kazoo watcher set on every container and record read, so a
    change of any of them calls it once)."""
    paths = Paths(root)
    base = f"{root.rstrip('/')}/instances"
    instances: dict[str, int] = {}
    for name in _children(client, base, watch):
        try:
            data, _ = client.get(f"{base}/{name}", watch=watch)
            stored = parse_stored(name, data.decode("utf-8"), f"{base}/{name}")
        except NoNodeError:
            continue
        except (ClusterError, ConfigError, UnicodeDecodeError) as exc:
            log.warning("instance %s: unreadable definition, not placed: %s", name, exc)
            continue
        if stored.definition is not None:
            instances[name] = stored.info.version
    nodes = {}
    for name in _children(client, paths.nodes, watch):
        live = _live_node(client, paths.node(name), name, watch)
        if live is not None:
            nodes[name] = live
    assignments = {}
    for name in _children(client, paths.assignments, watch):
        record = _json(client, paths.assignment(name), watch)
        if record is not None and isinstance(record.get("node"), str):
            generation, reason = int(record.get("generation", 0)), str(record.get("reason", ""))
            assignments[name] = Assignment(name, record["node"], generation, reason)
    pins = {}
    for name in _children(client, paths.pins, watch):
        pin = _text(client, paths.pin(name), watch)
        if pin:
            pins[name] = pin
    leader_record = _json(client, paths.leader, watch)
    found: dict[str, dict[str, Any]] = {}
    if statuses:
        for name in set(instances) | set(assignments):
            status = _json(client, paths.status(name), None)
            if status is not None:
                found[name] = status
    return ClusterView(
        nodes=nodes,
        drain_marks=frozenset(_children(client, paths.drained, watch)),
        instances=instances,
        assignments=assignments,
        leader=str(leader_record.get("node")) if leader_record else None,
        statuses=found,
        pins=pins,
    )


def _children(client: KazooClient, path: str, watch: Any) -> list[str]:
    try:
        return sorted(client.get_children(path, watch=watch))
    except NoNodeError:
        if watch is not None:  # a watch on a container that does not exist yet: its creation
            client.exists(path, watch=watch)
        return []


def _text(client: KazooClient, path: str, watch: Any) -> str:
    """A record holding a name ("" when absent or not text)."""
    try:
        data, _ = client.get(path, watch=watch)
        return str(data.decode("utf-8")).strip()
    except NoNodeError:
        return ""
    except UnicodeDecodeError:
        log.warning("%s: not a node name, ignored", path)
        return ""


def _json(client: KazooClient, path: str, watch: Any) -> dict[str, Any] | None:
    try:
        data, _ = client.get(path, watch=watch)
    except NoNodeError:
        if watch is not None:
            client.exists(path, watch=watch)
        return None
    try:
        value = json.loads(data.decode("utf-8") or "null")
    except (UnicodeDecodeError, ValueError):
        log.warning("%s: not a JSON record, ignored", path)
        return None
    return value if isinstance(value, dict) else None


def _live_node(client: KazooClient, path: str, name: str, watch: Any) -> LiveNode | None:
    try:
        data, stat = client.get(path, watch=watch)
    except NoNodeError:
        return None
    try:
        record = json.loads(data.decode("utf-8") or "{}")
        return LiveNode(
            name,
            int(record.get("capacity", 0)),
            bool(record.get("drained", False)),
            str(record.get("host", "")),
            int(record.get("pid", 0)),
            float(record.get("since", 0.0)),
            int(stat.ephemeralOwner),
        )
    except (UnicodeDecodeError, ValueError, TypeError, AttributeError):
        log.warning("%s: not a node record, the node counts with capacity 0", path)
        return LiveNode(name, 0, True, session=int(getattr(stat, "ephemeralOwner", 0)))
