"""Operator actions on the cluster's placement: drain a node (or undo it), pin an instance to a node.

Owns what ``relay cluster drain|move`` and the console's fleet page change in ZooKeeper and the lines
that say what was done: a drain mark ``<root>/drained/<node>`` (the leader moves the node's instances
away, each drains gracefully on its way out), and a pin ``<root>/pins/<instance>`` holding a node's name
(the leader's placement moves the instance there and keeps it there while the node is eligible:
``relay.cluster.placement``). Nothing here moves an instance by itself: the leader applies its plan, so a
move is always the placement rule's, fenced by its leader epoch. Functions run on the caller's thread
with a kazoo client the caller owns.
"""

from __future__ import annotations

import contextlib
import time

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from relay.cluster.layout import Paths, read_view
from relay.cluster.report import cluster_report
from relay.common import zookeeper
from relay.errors import ClusterError, ClusterUnavailableError

__all__ = ["drain", "on_node", "pin", "unpin", "wait_drained"]


def drain(client: KazooClient, root: str, node: str, *, undo: bool = False) -> list[str]:
    """Mark ``node`` drained (``undo``: remove the mark); the lines saying what was done."""
    paths = Paths(root)
    try:
        if undo:
            try:
                client.delete(paths.drain_mark(node))
                return [f"{node}: drain mark removed; the leader gives it a fair share again"]
            except NoNodeError:
                return [f"{node}: was not drained"]
        view = read_view(client, root)
        lines = []
        if node not in view.nodes:  # said every time: a misspelt name must not pass for a drained node
            known = ", ".join(sorted(view.nodes)) or "none"
            kept = "stays" if node in view.drain_marks else "marked"
            lines.append(f"note: {node} is not a live node (live: {known}); {kept} drained for when it joins")
        with contextlib.suppress(NodeExistsError):
            client.create(paths.drain_mark(node), b"", makepath=True)
        lines.append(f"{node}: drained; its instances move to the other nodes")
        return lines
    except zookeeper.ERRORS as exc:
        raise ClusterUnavailableError(f"{paths.drain_mark(node)}: {exc!r}") from exc


def on_node(client: KazooClient, root: str, node: str) -> list[str]:
    """Instances assigned to ``node`` or still active there."""
    report = cluster_report(client, root)
    return sorted(
        name for name, i in report["instances"].items() if i["node"] == node or i["running_on"] == node
    )


def wait_drained(client: KazooClient, root: str, node: str, timeout: float) -> list[str]:
    """Wait up to ``timeout`` seconds until ``node`` runs no instance; the ones it still runs then."""
    deadline = time.monotonic() + timeout
    while True:
        left = on_node(client, root, node)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.5)


def pin(client: KazooClient, root: str, instance: str, node: str) -> list[str]:
    """Pin ``instance`` to ``node``: the leader moves it there (gracefully: it drains on its old node)
    and keeps it there while ``node`` is eligible; the lines saying what happens."""
    paths = Paths(root)
    view = read_view(client, root)
    if instance not in view.instances:
        known = ", ".join(sorted(view.instances)) or "none"
        raise ClusterError(f"no instance {instance!r} is defined under {root} (defined: {known})")
    lines = []
    if node not in view.nodes:
        known = ", ".join(sorted(view.nodes)) or "none"
        lines.append(f"note: {node} is not a live node (live: {known}); the pin waits until it joins")
    elif node in view.drain_marks or view.nodes[node].drained:
        lines.append(f"note: {node} is drained; the pin waits until `relay cluster drain {node} --undo`")
    try:
        if client.exists(paths.pin(instance)) is None:
            client.create(paths.pin(instance), node.encode(), makepath=True)
        else:
            client.set(paths.pin(instance), node.encode())
    except zookeeper.ERRORS as exc:
        raise ClusterUnavailableError(f"{paths.pin(instance)}: {exc!r}") from exc
    now = view.assignments.get(instance)
    where = f"from {now.node} " if now is not None and now.node != node else ""
    lines.append(
        f"{instance}: pinned to {node}; the leader moves it {where}there (it drains first) and keeps it "
        f"there until `relay cluster move {instance} --unpin`"
    )
    return lines


def unpin(client: KazooClient, root: str, instance: str) -> list[str]:
    """Remove ``instance``'s pin: it stays where it runs until the placement rule moves it."""
    path = Paths(root).pin(instance)
    try:
        client.delete(path)
    except NoNodeError:
        return [f"{instance}: was not pinned"]
    except zookeeper.ERRORS as exc:
        raise ClusterUnavailableError(f"{path}: {exc!r}") from exc
    return [f"{instance}: pin removed; it stays where it runs unless the placement rule moves it"]
