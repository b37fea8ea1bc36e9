"""Placement generations strictly increase across every plan the leader writes, on real ZooKeeper.

The leader (``relay.cluster.leader.apply_plan``) is driven through seeded sequences of cluster changes —
instances added and removed, nodes joining, leaving, drained and undrained, capacities changed — and
after every plan written the test reads ZooKeeper back: each plan's generation is above every earlier
one (also a plan that only removes assignments: it used to compute "highest stored + 1" after the
removal and so reuse a generation), every assignment it wrote carries it, and the assignment equals the
plan. A plan checked against a stale counter writes nothing. Seeds are printed on failure; the fixed set
runs in every suite.
"""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient

from relay.cluster.layout import ClusterView, LiveNode, Paths, read_view
from relay.cluster.leader import LeaderTerm, apply_plan, last_generation, try_lead

pytestmark = pytest.mark.integration

SEEDS = range(6)
STEPS = 40


@pytest.fixture
def zk(zk_service: Any) -> Iterator[KazooClient]:
    client = KazooClient(hosts=str(zk_service.hosts))
    client.start(timeout=15)
    yield client
    client.stop()
    client.close()


class Cluster:
    """The leader's side: live nodes and defined instances as the test changes them; assignments and the
    generation as ZooKeeper stores them."""

    def __init__(self, client: KazooClient, root: str) -> None:
        self.client, self.paths = client, Paths(root)
        self.nodes: dict[str, LiveNode] = {}
        self.instances: dict[str, int] = {}
        self.term: LeaderTerm | None = try_lead(client, self.paths, "leader", None)
        assert self.term is not None

    def view(self) -> ClusterView:
        stored = read_view(self.client, self.paths.root)
        return ClusterView(
            nodes=dict(self.nodes), instances=dict(self.instances), assignments=stored.assignments
        )

    def place(self) -> int | None:
        """Write the plan from here; the generation it wrote, or None when it wrote nothing."""
        assert self.term is not None
        view = self.view()
        plan = view.plan()
        if not apply_plan(self.client, self.paths, self.term, view, plan):
            return None
        after = read_view(self.client, self.paths.root)
        assert {n: a.node for n, a in after.assignments.items()} == dict(plan.assignment)
        generation = last_generation(self.client, self.paths)
        changed = {
            name
            for name, node in plan.assignment.items()
            if name not in view.assignments or view.assignments[name].node != node
        }
        assert {after.assignments[n].generation for n in changed} <= {generation}, (changed, after)
        return generation


def _step(rng: random.Random, cluster: Cluster, n: int) -> str:
    kind = rng.choice(["add", "add", "remove", "remove", "join", "leave", "drain", "capacity"])
    if kind == "add" or (not cluster.instances and kind == "remove"):
        name = f"i{n}"
        cluster.instances[name] = 1
        return f"add {name}"
    if kind == "remove":
        name = rng.choice(sorted(cluster.instances))
        del cluster.instances[name]
        return f"remove {name}"
    if kind == "join" or not cluster.nodes:
        name = f"n{n}"
        cluster.nodes[name] = LiveNode(name, rng.randint(1, 4), False)
        return f"join {name}"
    name = rng.choice(sorted(cluster.nodes))
    node = cluster.nodes[name]
    if kind == "leave":
        del cluster.nodes[name]
        return f"leave {name}"
    if kind == "drain":
        cluster.nodes[name] = LiveNode(name, node.capacity, not node.drained)
        return f"{'drain' if not node.drained else 'undrain'} {name}"
    cluster.nodes[name] = LiveNode(name, rng.randint(0, 4), node.drained)
    return f"capacity {name} {cluster.nodes[name].capacity}"


@pytest.mark.parametrize("seed", SEEDS)
def test_every_plan_has_a_generation_above_all_earlier_ones(zk: KazooClient, seed: int) -> None:
    rng = random.Random(seed)
    cluster = Cluster(zk, f"/relay-test/{uuid.uuid4().hex}")
    seen: list[int] = []
    steps: list[str] = []
    removal_only = 0
    for n in range(STEPS):
        steps.append(_step(rng, cluster, n))
        before = cluster.view()
        plan = before.plan()
        generation = cluster.place()
        if generation is None:
            continue
        where = f"seed {seed}, after {steps}"
        assert not seen or generation > seen[-1], f"generation {generation} after {seen}: {where}"
        seen.append(generation)
        if plan.assignment.keys() < before.assignments.keys() and all(
            before.assignments[i].node == node for i, node in plan.assignment.items()
        ):
            removal_only += 1
    assert len(seen) >= 5, f"seed {seed}: only {len(seen)} plans written"
    print(f"seed {seed}: {len(seen)} plans, generations {seen[0]}..{seen[-1]}, {removal_only} removal-only")


def test_a_plan_that_only_removes_assignments_gets_a_new_generation(zk: KazooClient) -> None:
    cluster = Cluster(zk, f"/relay-test/{uuid.uuid4().hex}")
    cluster.nodes = {"a": LiveNode("a", 3, False), "b": LiveNode("b", 3, False)}
    cluster.instances = {"i1": 1, "i2": 1}
    first = cluster.place()
    cluster.instances["i3"] = 1
    second = cluster.place()
    del cluster.instances["i3"]  # i3 was the highest generation's only assignment
    third = cluster.place()
    assert first is not None and second is not None and third is not None
    assert first < second < third, (first, second, third)
    stored = read_view(zk, cluster.paths.root)
    assert stored.generation() == first  # the assignments left still carry the first plan's
    # a cluster written before the counter existed continues above its highest assignment
    zk.delete(cluster.paths.generation)
    cluster.instances["i4"] = 1
    fourth = cluster.place()
    assert fourth is not None and fourth > first
    assert json.loads(zk.get(cluster.paths.assignment("i4"))[0])["generation"] == fourth


def test_a_plan_written_against_a_moved_counter_writes_nothing(
    zk: KazooClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = Cluster(zk, f"/relay-test/{uuid.uuid4().hex}")
    cluster.nodes = {"a": LiveNode("a", 3, False)}
    cluster.instances = {"i1": 1}
    assert cluster.place() == 1
    cluster.instances["i2"] = 1
    view = cluster.view()
    transaction = zk.transaction

    def counter_moves_first() -> object:  # another writer between apply_plan's read and its commit
        zk.set(cluster.paths.generation, b"9")
        return transaction()

    monkeypatch.setattr(zk, "transaction", counter_moves_first)
    assert cluster.term is not None
    assert apply_plan(zk, cluster.paths, cluster.term, view, view.plan()) is False
    monkeypatch.undo()
    assert "i2" not in read_view(zk, cluster.paths.root).assignments
    assert cluster.place() == 10
