"""What ``relay cluster status`` shows: nodes, instances and pending moves, from one read of ZooKeeper.

Owns the report's shape (the ``--json`` document; the text form prints the same facts). Reads with the
caller's kazoo client on the caller's thread (the CLI): the runtime view (``relay.cluster.layout``), the
status each node publishes for its instances, and each instance's HA ``running`` node (who is active,
its epoch) — so the report says where an instance is assigned AND where it actually runs.
"""

from __future__ import annotations

import json
import time
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from relay.cluster.layout import ClusterView, Paths, read_view
from relay.cluster.leader import last_generation

__all__ = ["cluster_report"]


def cluster_report(client: KazooClient, root: str) -> dict[str, Any]:
    """The report of the cluster under ``root``."""
    view = read_view(client, root, statuses=True)
    paths = Paths(root)
    plan = view.plan()
    loads: dict[str, int] = {}
    for assignment in view.assignments.values():
        loads[assignment.node] = loads.get(assignment.node, 0) + 1
    now = time.time()
    nodes = {
        name: {
            "capacity": n.capacity,
            "load": loads.get(name, 0),
            "drained": n.drained or name in view.drain_marks,
            "leader": view.leader == name,
            "session": f"{n.session:#x}",
            "host": n.host,
            "pid": n.pid,
            "up_seconds": round(now - n.since, 1) if n.since else None,
        }
        for name, n in sorted(view.nodes.items())
    }
    instances = {
        name: _instance(client, paths, view, name)
        for name in sorted(set(view.instances) | set(view.assignments))
    }
    return {
        "leader": view.leader,
        "placement_generation": last_generation(client, paths) or view.generation() or None,
        "nodes": nodes,
        "drain_marks": sorted(view.drain_marks),
        "instances": instances,
        "pending_moves": [
            {"instance": m.instance, "from": m.source, "to": m.target, "reason": m.reason} for m in plan.moves
        ],
        "unplaced": list(plan.unplaced),
        "pins": dict(sorted(view.pins.items())),
        "balanced": _balanced(view),
    }


def _instance(client: KazooClient, paths: Paths, view: ClusterView, name: str) -> dict[str, Any]:
    assignment = view.assignments.get(name)
    status = view.statuses.get(name, {})
    active = _json(client, paths.running(name))
    return {
        "defined_version": view.instances.get(name),
        "node": assignment.node if assignment else None,
        "generation": assignment.generation if assignment else None,
        "moved_because": assignment.reason if assignment else None,
        "pinned_to": view.pins.get(name),
        "running_on": active.get("member") if active else None,
        "epoch": active.get("epoch") if active else None,
        "state": status.get("state"),
        "process": status.get("process"),
        "lag_seconds": status.get("lag_seconds"),
        "restarts": status.get("restarts"),
        "last_error": status.get("last_error"),
        # stopped on a schema error: not restarted until `relay schema resync --instance` (its node, error)
        "held": _json(client, paths.held(name)),
        "reported_by": status.get("node"),
        "reported_seconds_ago": round(time.time() - status["published_at"], 1)
        if isinstance(status.get("published_at"), int | float)
        else None,
    }


def _balanced(view: ClusterView) -> bool:
    """Every eligible node within one instance of the others, unless at its capacity."""
    eligible = [n for n in view.placement_nodes() if n.eligible]
    if not eligible:
        return not view.instances
    loads = {n.name: 0 for n in eligible}
    for assignment in view.assignments.values():
        if assignment.node in loads:
            loads[assignment.node] += 1
    below = [loads[n.name] for n in eligible if loads[n.name] < n.capacity]
    return not below or max(loads.values()) - min(below) <= 1


def _json(client: KazooClient, path: str) -> dict[str, Any] | None:
    try:
        data, _ = client.get(path)
        value = json.loads(data.decode("utf-8"))
    except (NoNodeError, UnicodeDecodeError, ValueError):
        return None
    return value if isinstance(value, dict) else None
