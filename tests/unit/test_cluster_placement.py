"""Placement (``relay.cluster.placement``): balanced within one, capacities respected, sticky (the fewest
moves, none in a balanced cluster), deterministic — checked on named cases, then over thousands of random
clusters (seeded loops) against properties and an independent brute force of the fewest possible moves.
"""

from __future__ import annotations

import itertools
import random
from collections import Counter
from collections.abc import Mapping, Sequence

import pytest

from relay.cluster.placement import Move, Node, Plan, place
from relay.errors import ClusterError


def loads(plan: Plan) -> Counter[str]:
    return Counter(plan.assignment.values())


def test_a_new_cluster_spreads_instances_evenly() -> None:
    plan = place([Node("a", 4), Node("b", 4), Node("c", 4)], [f"i{n}" for n in range(7)], {})
    assert sorted(loads(plan).values()) == [2, 2, 3]
    assert all(m.source is None and m.reason == "new instance" for m in plan.moves)
    assert len(plan.moves) == 7 and plan.unplaced == ()


def test_a_balanced_cluster_gets_an_empty_plan() -> None:
    current = {"i0": "a", "i1": "a", "i2": "b", "i3": "b", "i4": "c"}
    plan = place([Node("a", 3), Node("b", 3), Node("c", 3)], list(current), current)
    assert plan.moves == () and dict(plan.assignment) == current


def test_a_node_that_left_hands_over_only_its_own_instances() -> None:
    current = {"i0": "a", "i1": "a", "i2": "b", "i3": "b", "i4": "c", "i5": "c"}
    plan = place([Node("a", 3), Node("b", 3)], list(current), current)
    assert {(m.instance, m.source, m.reason) for m in plan.moves} == {
        ("i4", "c", "node left"),
        ("i5", "c", "node left"),
    }
    assert loads(plan) == Counter({"a": 3, "b": 3})


def test_a_drained_node_runs_nothing() -> None:
    current = {"i0": "a", "i1": "b", "i2": "b"}
    plan = place([Node("a", 3), Node("b", 3, drained=True), Node("c", 3)], list(current), current)
    assert "b" not in plan.assignment.values()
    assert {m.instance: m.reason for m in plan.moves} == {"i1": "node drained", "i2": "node drained"}
    assert loads(plan) == Counter({"a": 1, "c": 2}) or loads(plan) == Counter({"a": 2, "c": 1})


def test_a_shrunk_capacity_moves_only_the_excess() -> None:
    current = {"i0": "a", "i1": "a", "i2": "a", "i3": "b"}
    plan = place([Node("a", 1), Node("b", 4)], list(current), current)
    assert loads(plan) == Counter({"a": 1, "b": 3})
    assert [m.reason for m in plan.moves] == ["capacity shrank", "capacity shrank"]
    assert plan.assignment["i0"] == "a"  # the first by name stays; the last ones leave


def test_a_new_node_takes_a_fair_share_by_the_fewest_moves() -> None:
    current = {f"i{n}": "ab"[n % 2] for n in range(6)}
    plan = place([Node("a", 5), Node("b", 5), Node("c", 5)], list(current), current)
    assert loads(plan) == Counter({"a": 2, "b": 2, "c": 2})
    assert len(plan.moves) == 2 and {m.reason for m in plan.moves} == {"rebalance"}


def test_an_imbalance_of_one_is_left_alone() -> None:
    current = {"i0": "a", "i1": "a", "i2": "b"}
    assert place([Node("a", 5), Node("b", 5)], list(current), current).moves == ()


def test_short_capacity_leaves_instances_unplaced_and_keeps_running_ones() -> None:
    current = {"x": "a", "y": "a", "z": "b"}
    plan = place([Node("a", 1), Node("b", 1)], ["new", "x", "y", "z"], current)
    assert dict(plan.assignment) == {"x": "a", "z": "b"}
    assert plan.unplaced == ("new", "y")
    assert plan.moves == (Move("y", "a", None, "capacity shrank; no capacity left"),)


def test_a_removed_instance_is_stopped() -> None:
    plan = place([Node("a", 2)], ["x"], {"x": "a", "gone": "a"})
    assert plan.moves == (Move("gone", "a", None, "instance removed"),)


def test_bad_nodes_are_refused() -> None:
    with pytest.raises(ClusterError, match="listed twice"):
        place([Node("a", 1), Node("a", 2)], [], {})
    with pytest.raises(ClusterError, match="capacity"):
        place([Node("a", -1)], [], {})


def test_no_eligible_node_places_nothing() -> None:
    plan = place([Node("a", 0), Node("b", 3, drained=True)], ["x"], {"x": "b"})
    assert dict(plan.assignment) == {} and plan.unplaced == ("x",)
    assert plan.moves == (Move("x", "b", None, "node drained; no capacity left"),)


# --- properties over random clusters ----------------------------------------------------------


def _balanced(load: Mapping[str, int], capacity: Mapping[str, int]) -> bool:
    """No node runs two more than another unless that other is full."""
    return all(load[a] - load[b] <= 1 or load[b] == capacity[b] for a in load for b in load)


def _fewest_moves(nodes: Sequence[Node], wanted: set[str], current: Mapping[str, str]) -> int:
    """Brute force over every load vector: the fewest instances whose node must change."""
    eligible = [n for n in nodes if n.eligible]
    capacity = {n.name: n.capacity for n in eligible}
    placed = min(len(wanted), sum(capacity.values()))
    held = Counter(current[i] for i in wanted if current.get(i) in capacity)
    new = sum(1 for i in wanted if i not in current)
    removed = sum(1 for i in current if i not in wanted)
    best = None
    for vector in itertools.product(*(range(n.capacity + 1) for n in eligible)):
        if sum(vector) != placed:
            continue
        load = dict(zip(capacity, vector, strict=True))
        if not _balanced(load, capacity):
            continue
        kept = sum(min(held[name], load[name]) for name in load)
        moves = len(wanted) - kept - min(len(wanted) - placed, new) + removed
        best = moves if best is None else min(best, moves)
    assert best is not None
    return best


def _random_cluster(rng: random.Random) -> tuple[list[Node], list[str], dict[str, str]]:
    nodes = [Node(f"n{k}", rng.randint(0, 5), drained=rng.random() < 0.15) for k in range(rng.randint(0, 4))]
    instances = [f"i{k:02d}" for k in range(rng.randint(0, 14))]
    places = [n.name for n in nodes] + ["gone0", "gone1"]
    current: dict[str, str] = {}
    for instance in [*instances, "old0", "old1"]:
        if rng.random() < 0.7 and (instance.startswith("i") or rng.random() < 0.5):
            current[instance] = rng.choice(places)
    return nodes, instances, current


@pytest.mark.parametrize("seed", range(6))
def test_random_clusters_hold_every_property(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(300):
        nodes, instances, current = _random_cluster(rng)
        plan = place(nodes, instances, current)
        capacity = {n.name: n.capacity for n in nodes if n.eligible}
        load = {name: loads(plan)[name] for name in capacity}
        where = (nodes, instances, current, plan)
        # capacities, eligibility, how many are placed
        assert set(plan.assignment.values()) <= set(capacity), where
        assert all(load[n] <= capacity[n] for n in capacity), where
        assert len(plan.assignment) == min(len(instances), sum(capacity.values())), where
        assert set(plan.assignment) | set(plan.unplaced) == set(instances), where
        assert not set(plan.assignment) & set(plan.unplaced), where
        assert dict(plan.loads) == load, where
        # balanced within one (a node runs two more only where the other is full)
        assert _balanced(load, capacity), where
        # the moves lead from the current assignment to the plan's, and only they change anything
        after = {i: n for i, n in current.items() if i in set(instances)}
        for move in plan.moves:
            assert move.source == current.get(move.instance) and move.source != move.target, where
            if move.target is None:
                after.pop(move.instance, None)
            else:
                after[move.instance] = move.target
        assert after == dict(plan.assignment), where
        # sticky: the fewest moves any balanced assignment needs; none leave a node not above its load
        assert len(plan.moves) == _fewest_moves(nodes, set(instances), current), where
        held = Counter(current[i] for i in instances if current.get(i) in capacity)
        for move in plan.moves:
            if move.source in capacity and move.instance in instances:
                assert held[move.source] > load[move.source], where
        # every move says why: the node left, was drained, its capacity fell below its load, or balance
        by_name = {n.name: n for n in nodes}
        for move in plan.moves:
            if move.instance not in instances:
                assert move.reason == "instance removed", where
            elif move.source is None:
                assert move.reason == "new instance", where
            else:
                node = by_name.get(move.source)
                expected = (
                    "node left"
                    if node is None
                    else "node drained"
                    if node.drained
                    else "capacity shrank"
                    if node.capacity == 0 or held[node.name] > node.capacity
                    else "rebalance"
                )
                assert move.reason.split(";")[0] == expected, where
                assert move.reason.endswith("no capacity left") == (move.target is None), where
        # a move for balance only where the imbalance exceeded one (a node two above another not full)
        if any(m.reason.startswith("rebalance") for m in plan.moves):
            assert not _balanced({n: held[n] for n in capacity}, capacity), where
        # deterministic whatever the order of the inputs; stable once applied
        shuffled = list(current.items())
        rng.shuffle(shuffled)
        again = place(rng.sample(nodes, len(nodes)), rng.sample(instances, len(instances)), dict(shuffled))
        assert again == plan, where
        assert place(nodes, instances, plan.assignment).moves == (), where


def test_large_clusters_stay_balanced_and_sticky() -> None:
    rng = random.Random(27)
    nodes = [Node(f"n{k:02d}", rng.randint(5, 40)) for k in range(20)]
    instances = [f"i{k:04d}" for k in range(400)]
    plan = place(nodes, instances, {})
    current = dict(plan.assignment)
    # a node leaves: only its instances move, and the rest stays balanced
    gone = "n07"
    plan2 = place([n for n in nodes if n.name != gone], instances, current)
    assert {m.instance for m in plan2.moves} == {i for i, n in current.items() if n == gone}
    capacity = {n.name: n.capacity for n in nodes if n.name != gone}
    assert _balanced({n: loads(plan2)[n] for n in capacity}, capacity)


# --- pins (`relay cluster move`) ---------------------------------------------------------------------


def balanced(plan: Plan, nodes: Sequence[Node]) -> bool:
    eligible = {n.name: n.capacity for n in nodes if n.eligible}
    held = {name: sum(1 for node in plan.assignment.values() if node == name) for name in eligible}
    below = [held[name] for name in eligible if held[name] < eligible[name]]
    return all(held[n] <= eligible[n] for n in eligible) and (
        not below or max(held.values()) - min(below) <= 1
    )


def test_a_pin_moves_the_instance_and_another_one_makes_room() -> None:
    current = {"a1": "a", "b1": "b"}
    plan = place([Node("a", 2), Node("b", 2)], list(current), current, {"a1": "b"})
    assert plan.assignment["a1"] == "b" and plan.assignment["b1"] == "a"  # a swap keeps the balance
    assert {m.instance: m.reason for m in plan.moves}["a1"] == "pinned to b"
    # once there, the pin keeps it there: the next plan is empty
    again = place([Node("a", 2), Node("b", 2)], list(current), dict(plan.assignment), {"a1": "b"})
    assert again.moves == ()


def test_a_pinned_instance_is_kept_where_a_sticky_plan_would_move_the_last_by_name() -> None:
    current = {"x": "a", "y": "a", "z": "b"}
    nodes = [Node("a", 3), Node("b", 3), Node("c", 3)]
    unpinned = place(nodes, list(current), current)
    assert unpinned.moves == () or all(m.instance != "x" for m in unpinned.moves)
    plan = place(nodes, list(current), current, {"y": "c"})
    assert plan.assignment["y"] == "c" and balanced(plan, nodes)


def test_a_pin_to_a_node_that_is_not_eligible_waits() -> None:
    current = {"i0": "a", "i1": "b"}
    for nodes in ([Node("a", 2), Node("b", 2)], [Node("a", 2), Node("b", 2), Node("c", 2, drained=True)]):
        plan = place(nodes, list(current), current, {"i0": "c"})
        assert plan.moves == () and plan.assignment["i0"] == "a"
    plan = place([Node("a", 2), Node("b", 2), Node("c", 2)], list(current), current, {"i0": "c"})
    assert plan.assignment["i0"] == "c"


def test_pins_never_exceed_a_capacity_and_keep_the_balance_random() -> None:
    rng = random.Random(4411)
    for case in range(2000):
        nodes = [
            Node(f"n{k}", rng.randint(0, 4), drained=rng.random() < 0.15) for k in range(rng.randint(1, 5))
        ]
        instances = [f"i{k}" for k in range(rng.randint(0, 12))]
        names = [n.name for n in nodes] + ["gone"]
        current = {i: rng.choice(names) for i in instances if rng.random() < 0.8}
        pins = {i: rng.choice(names) for i in instances if rng.random() < 0.3}
        plan = place(nodes, instances, current, pins)
        assert balanced(plan, nodes), (case, nodes, current, pins, plan)
        eligible = {n.name for n in nodes if n.eligible}
        assert set(plan.assignment.values()) <= eligible, case
        placed = min(len(instances), sum(n.capacity for n in nodes if n.eligible))
        assert len(plan.assignment) == placed, case
        # every pin honoured where its node had room for it after the pins before it (by name)
        room = {n.name: n.capacity for n in nodes if n.eligible}
        for instance, node in sorted(pins.items()):
            if node in room and room[node] > 0 and plan.assignment.get(instance) != node:
                # only allowed when the balanced load of that node leaves no room for it
                held = sum(1 for i, n in plan.assignment.items() if n == node and pins.get(i) == node)
                assert held >= sum(1 for n in plan.assignment.values() if n == node), (
                    case,
                    instance,
                    node,
                    plan,
                )
        assert place(nodes, instances, current, pins) == plan, case  # deterministic
