"""The cluster's leader: one node, elected, that places instances and writes the assignment.

Owns the leader election among nodes and the assignment writes. Election as ``relay.ha``'s, one level
up: one transaction creates the ephemeral ``<root>/leader`` (the node's name) and bumps the persistent
``<root>/leader-epoch``, so every term has its own epoch; every assignment write is a transaction that
checks that epoch, so a leader whose session expired (and who does not know yet) can write nothing once
another node was elected. Runs on the node's main thread (``relay.cluster.node``) with the node's client.

Placement is ``relay.cluster.placement.place`` on ``relay.cluster.layout.read_view``: whenever a node
joins, leaves or changes (capacity, drained), or an instance is added or removed, the leader writes the
plan's changed assignments — moved instances to their new node, removed or unplaceable ones deleted —
in one transaction, with the plan's generation. Generations strictly increase across every plan, also
one that only removes assignments: the last one written is kept in ``<root>/placement-generation`` and
bumped (compare-and-set on its version) in the same transaction, so two placements never share one
(``max(counter, highest assignment) + 1``: a cluster from before the counter continues above what it
stored).
"""

from __future__ import annotations

import json
import logging
import time

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from relay.cluster.layout import Assignment, ClusterView, Paths
from relay.cluster.placement import Plan

log = logging.getLogger(__name__)

__all__ = ["LeaderTerm", "apply_plan", "try_lead"]


class LeaderTerm:
    """This node's term as leader: its epoch (the version of ``leader-epoch`` it set)."""

    def __init__(self, node: str, epoch: int, session: int) -> None:
        self.node, self.epoch, self.session = node, epoch, session


def try_lead(client: KazooClient, paths: Paths, node: str, watch: object) -> LeaderTerm | None:
    """A new term when ``<root>/leader`` was free (created with the epoch bumped); None when another
    node leads — a watch on the leader node then wakes the caller when it goes."""
    epoch_path = f"{paths.leader}-epoch"
    client.ensure_path(epoch_path)
    _, stat = client.get(epoch_path)
    record = json.dumps({"node": node, "since": time.time(), "epoch": stat.version + 1}).encode()
    tx = client.transaction()
    tx.create(paths.leader, record, ephemeral=True)
    tx.set_data(epoch_path, node.encode(), version=stat.version)
    results = tx.commit()
    if any(isinstance(r, Exception) for r in results):
        client.exists(paths.leader, watch=watch)
        return None
    log.info("leading the cluster (leader epoch %d)", stat.version + 1)
    return LeaderTerm(node, stat.version + 1, int(client.client_id[0]))


def apply_plan(client: KazooClient, paths: Paths, term: LeaderTerm, view: ClusterView, plan: Plan) -> bool:
    """Write what ``plan`` changes in ``view``'s assignment, in one transaction checked against the
    term's epoch; False when there was nothing to write. ``BadVersionError`` when the term is over."""
    counter = _generation_counter(client, paths)
    generation = max(view.generation(), counter.value) + 1
    reasons = {m.instance: m.reason for m in plan.moves}
    tx = client.transaction()
    tx.check(f"{paths.leader}-epoch", term.epoch)
    tx.set_data(paths.generation, str(generation).encode(), version=counter.version)
    writes = 0
    client.ensure_path(paths.assignments)
    for instance, node in sorted(plan.assignment.items()):
        old = view.assignments.get(instance)
        if old is not None and old.node == node:
            continue
        record = Assignment(instance, node, generation, reasons.get(instance, "placed")).record()
        if old is None:
            tx.create(paths.assignment(instance), record)
        else:
            tx.set_data(paths.assignment(instance), record)
        writes += 1
    for instance in sorted(set(view.assignments) - set(plan.assignment)):
        tx.delete(paths.assignment(instance))
        writes += 1
    if not writes:
        return False
    results = tx.commit()
    failed = [r for r in results if isinstance(r, Exception) and type(r).__name__ != "RolledBackError"]
    if isinstance(results[0], BadVersionError):
        raise BadVersionError()  # the epoch: another node leads now
    if isinstance(results[1], BadVersionError):
        log.info("placement generation moved while writing the plan; placing again")
        return False
    if any(isinstance(r, NodeExistsError | NoNodeError) for r in failed):
        log.info("assignment changed while writing the plan; placing again")  # another leader's leftovers
        return False
    if failed:
        raise failed[0]
    for move in plan.moves:
        log.info("placement generation %d: %s", generation, move.describe())
    for instance in plan.unplaced:
        log.warning("instance %s: no node has capacity for it; it runs nowhere", instance)
    return True


class _Counter:
    """The last placement generation written and the version of its node."""

    def __init__(self, value: int, version: int) -> None:
        self.value, self.version = value, version


def _generation_counter(client: KazooClient, paths: Paths) -> _Counter:
    client.ensure_path(paths.generation)
    data, stat = client.get(paths.generation)
    try:
        value = int(data.decode("ascii") or "0")
    except (UnicodeDecodeError, ValueError):
        log.warning("%s: not a generation number (%r); counting from the assignments", paths.generation, data)
        value = 0
    return _Counter(value, stat.version)


def last_generation(client: KazooClient, paths: Paths) -> int:
    """The last placement generation written (0: none), for reports."""
    try:
        data, _ = client.get(paths.generation)
        return int(data.decode("ascii") or "0")
    except (NoNodeError, UnicodeDecodeError, ValueError):
        return 0


def resign(client: KazooClient, paths: Paths, term: LeaderTerm | None) -> None:
    """Give the leadership up (the node stops): delete ``leader`` if this session still owns it."""
    if term is None:
        return
    try:
        stat = client.exists(paths.leader)
        if stat is not None and int(stat.ephemeralOwner) == term.session:
            client.delete(paths.leader, version=stat.version)
    except Exception:
        log.debug("could not delete the leader node; it goes with the session", exc_info=True)
