"""Placement: which node runs which instance — balanced, within capacities, sticky, deterministic.

Owns the rule (pure logic, no I/O; run by whoever decides: the cluster's leader node,
``relay.cluster.leader``, and ``relay cluster rebalance --dry-run`` to print the plan).
``place(nodes, instances, current)`` hands back a ``Plan``: the new assignment, the moves that lead
there from ``current``, and the instances left without a node when the cluster's capacity is short.

The rule (docs/architecture.md, "Cluster"):

- Eligible nodes are the live nodes that are not drained and have a capacity above 0. ``min(instances,
  total capacity)`` instances are placed.
- **Balanced**: the loads are a water-filling of the capacities: there is a level L such that every
  node runs ``min(capacity, L)`` or ``L + 1`` instances. So every node not at its capacity is within one
  instance of the others, and a node runs more only where another is full: no move from a node to
  another could narrow the gap. Capacities are never exceeded.
- **Sticky**: among the balanced loads, the plan keeps the most instances where they run (the ``+1``
  goes to the nodes that already run more than L), so an instance moves only when its node left, was
  drained, its capacity shrank below its load, or the imbalance exceeds one — and then the fewest
  instances move. A cluster already balanced gets an empty plan.
- **Deterministic**: the same nodes, instances and assignment give the same plan, whatever their order:
  the instances that leave a node are the last by name; the ones to place (those running elsewhere
  first, then new ones, each by name) fill the nodes below their load by name order.
- **Pinned** (``relay cluster move INSTANCE NODE``, the console's "move"): an instance pinned to an
  eligible node counts as running there, ahead of the others on it, so the plan moves it there and keeps
  it while the node stays eligible; the balance is kept by moving another instance off that node (the last
  by name, as ever). A pin to a node that left, is drained or has no room is ignored until it is eligible
  again (the instance is placed as usual meanwhile), and never exceeds a capacity.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from relay.errors import ClusterError

__all__ = ["Move", "Node", "Plan", "place"]


@dataclass(frozen=True)
class Node:
    """A live node as placement sees it: its name, how many instances it may run, whether drained."""

    name: str
    capacity: int
    drained: bool = False

    @property
    def eligible(self) -> bool:
        return not self.drained and self.capacity > 0


@dataclass(frozen=True)
class Move:
    """One instance changing node. ``source`` None: it runs nowhere now; ``target`` None: it stops."""

    instance: str
    source: str | None
    target: str | None
    reason: str

    def describe(self) -> str:
        source, target = self.source or "(not running)", self.target or "(stopped)"
        return f"{self.instance}: {source} -> {target} ({self.reason})"


@dataclass(frozen=True)
class Plan:
    """The assignment to reach, the moves from the current one (by instance name), the instances no
    node can take (capacity short), and each eligible node's load in the plan."""

    assignment: Mapping[str, str] = field(default_factory=dict)
    moves: tuple[Move, ...] = ()
    unplaced: tuple[str, ...] = ()
    loads: Mapping[str, int] = field(default_factory=dict)


def place(
    nodes: Iterable[Node],
    instances: Iterable[str],
    current: Mapping[str, str],
    pins: Mapping[str, str] | None = None,
) -> Plan:
    """The plan from ``current`` (instance → node) to a balanced, sticky assignment of ``instances``
    over ``nodes``, honouring ``pins`` (instance → node) where the node is eligible; ``ClusterError`` for
    a node named twice or a negative capacity."""
    by_name = _nodes(nodes)
    wanted = sorted(set(instances))
    eligible = {name: n.capacity for name, n in by_name.items() if n.eligible}
    pinned = {i: n for i, n in (pins or {}).items() if i in wanted and n in eligible}
    seat = {**current, **pinned}  # where each instance counts as running: a pin wins over the assignment
    on: dict[str, list[str]] = {name: [] for name in eligible}
    for instance in sorted(wanted, key=lambda i: (i not in pinned, i)):  # pinned first: kept first
        node = seat.get(instance)
        if node in on:
            on[node].append(instance)
    held = {name: len(on[name]) for name in on}
    placed = min(len(wanted), sum(eligible.values()))
    targets = _targets(eligible, held, placed)
    assignment: dict[str, str] = {}
    free: dict[str, int] = {}
    for name in sorted(on):
        keep = min(held[name], targets[name])
        assignment.update((instance, name) for instance in on[name][:keep])
        free[name] = targets[name] - keep
    running = sorted(i for i in wanted if i in seat and i not in assignment)
    new = [i for i in wanted if i not in seat]
    pool = iter([*running, *new])  # those already running first: leaving one unplaced is a move too
    for name in sorted(free):
        for _ in range(free[name]):
            assignment[next(pool)] = name
    unplaced = tuple(sorted(pool))
    moves = _moves(by_name, held, set(wanted), current, assignment, pinned)
    return Plan(assignment, moves, unplaced, targets)


def _nodes(nodes: Iterable[Node]) -> dict[str, Node]:
    out: dict[str, Node] = {}
    for node in nodes:
        if node.name in out:
            raise ClusterError(f"node {node.name!r} is listed twice")
        if node.capacity < 0:
            raise ClusterError(f"node {node.name!r}: capacity must be 0 or more, got {node.capacity}")
        out[node.name] = node
    return out


def _targets(capacity: Mapping[str, int], held: Mapping[str, int], placed: int) -> dict[str, int]:
    """The balanced load of each node for ``placed`` instances: water-filled to level L (the highest
    with ``sum(min(capacity, L)) <= placed``), the rest ``+1`` on the nodes that already hold more than
    L (then the most, then by name), so the most instances stay where they run."""
    if not capacity:
        return {}
    low, high = 0, max(capacity.values())
    while low < high:  # the highest level whose fill fits
        mid = (low + high + 1) // 2
        if sum(min(c, mid) for c in capacity.values()) <= placed:
            low = mid
        else:
            high = mid - 1
    targets = {name: min(c, low) for name, c in capacity.items()}
    rest = placed - sum(targets.values())
    room = [name for name, c in capacity.items() if c > low]
    room.sort(key=lambda name: (held[name] <= low, -held[name], name))
    for name in room[:rest]:
        targets[name] += 1
    return targets


def _moves(
    nodes: Mapping[str, Node],
    held: Mapping[str, int],
    wanted: set[str],
    current: Mapping[str, str],
    assignment: Mapping[str, str],
    pinned: Mapping[str, str],
) -> tuple[Move, ...]:
    out: list[Move] = []
    for instance in sorted(wanted | set(current)):
        source, target = current.get(instance), assignment.get(instance)
        if source == target:
            continue
        if instance not in wanted:
            reason = "instance removed"
        elif target is not None and pinned.get(instance) == target:
            reason = f"pinned to {target}"
        elif source is None:
            reason = "new instance"
        else:
            reason = _why_it_leaves(nodes.get(source), held.get(source, 0))
        if target is None and instance in wanted:
            reason = f"{reason}; no capacity left" if source is not None else "no capacity left"
        out.append(Move(instance, source, target, reason))
    return tuple(out)


def _why_it_leaves(node: Node | None, held: int) -> str:
    """Why an instance leaves the node it runs on (``held``: the wanted instances it runs now)."""
    if node is None:
        return "node left"
    if node.drained:
        return "node drained"
    if node.capacity == 0 or held > node.capacity:  # a node of capacity 0 is not eligible: held is 0 there
        return "capacity shrank"
    return "rebalance"
