"""The node runtime's parts on a real ZooKeeper, without MySQL or Kafka: the leader's epoch fences a stale
leader's assignment writes; the view and the report (balanced, pending moves, drain marks); ``relay
cluster rebalance --dry-run|status|drain`` on it; ``relay cluster run`` refusing a bad node.yaml naming
the keys; a node process (capacity 0, no instance) that registers, leads, serves its metrics and leaves
on SIGTERM with exit status 0, taking its records with it.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError

from relay.cluster.definition import parse_definition
from relay.cluster.layout import LiveNode, Paths, read_view
from relay.cluster.leader import apply_plan, try_lead
from relay.cluster.report import cluster_report
from relay.cluster.store import ZooKeeperInstanceStore
from relay.dev import services
from tests.integration.relay_harness import REPO_ROOT, wait_for

DEFINITION = """\
source: {host: db%d.internal, port: 3306, user: relay, password: "${PW}", server_id: %d}
positions: {backend: zookeeper}
mapping: {store: zookeeper}
kafka: {bootstrap_servers: "k1:9092"}
"""


@pytest.fixture
def zk_hosts(zk_service: object) -> str:
    return str(zk_service.hosts)  # type: ignore[attr-defined]


@pytest.fixture
def root() -> str:
    return f"/relay-test-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def client(zk_hosts: str) -> Iterator[KazooClient]:
    made = KazooClient(hosts=zk_hosts)
    made.start(timeout=15)
    yield made
    made.stop()
    made.close()


def _define(zk_hosts: str, root: str, count: int) -> list[str]:
    store = ZooKeeperInstanceStore(zk_hosts, root)
    try:
        names = [f"shop{i:02d}" for i in range(count)]
        for i, name in enumerate(names):
            store.add(parse_definition(name, DEFINITION % (i, 7100 + i)))
        return names
    finally:
        store.close()


def _node(client: KazooClient, root: str, name: str, capacity: int) -> None:
    record = LiveNode(name, capacity, False, "host", 1, 0.0).record()
    client.create(Paths(root).node(name), record, ephemeral=True, makepath=True)


def _cli(zk_hosts: str, root: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "relay.cli", "cluster", *args, "--zookeeper", zk_hosts, "--root", root],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_stale_leaders_writes_are_refused_by_the_leader_epoch(
    zk_hosts: str, root: str, client: KazooClient
) -> None:
    _define(zk_hosts, root, 2)
    paths = Paths(root)
    first = KazooClient(hosts=zk_hosts)
    first.start(timeout=15)
    _node(first, root, "a", 2)
    term = try_lead(first, paths, "a", None)
    assert term is not None and term.epoch == 1
    assert try_lead(client, paths, "b", None) is None  # a leads
    view = read_view(first, root)
    assert apply_plan(first, paths, term, view, view.plan())
    assert {a.node for a in read_view(client, root).assignments.values()} == {"a"}
    first.stop()  # a's session ends: its node and leader records go
    first.close()
    second = try_lead(client, paths, "b", None)
    assert second is not None and second.epoch == 2
    _node(client, root, "b", 2)
    view = read_view(client, root)
    with pytest.raises(BadVersionError):  # the old term, its writes reaching ZooKeeper late
        apply_plan(client, paths, term, view, view.plan())
    assert apply_plan(client, paths, second, view, view.plan())
    after = read_view(client, root)
    assert {a.node for a in after.assignments.values()} == {"b"}
    assert after.generation() == 2
    assert after.plan().moves == ()
    assert after.leader == "b"


def test_report_rebalance_status_and_drain(zk_hosts: str, root: str, client: KazooClient) -> None:
    names = _define(zk_hosts, root, 3)
    paths = Paths(root)
    _node(client, root, "a", 3)
    term = try_lead(client, paths, "a", None)
    assert term is not None
    view = read_view(client, root)
    apply_plan(client, paths, term, view, view.plan())
    _node(client, root, "b", 3)
    report = cluster_report(client, root)
    assert report["balanced"] is False  # 3 on a, 0 on b
    assert [m["reason"] for m in report["pending_moves"]] == ["rebalance"]
    plan = _cli(zk_hosts, root, "rebalance", "--dry-run")
    assert plan.returncode == 0, plan.stderr
    assert f"{names[2]}: a -> b (rebalance)" in plan.stdout
    assert "1 move; loads after: a 2, b 1" in plan.stdout
    status = _cli(zk_hosts, root, "status", "--json")
    assert status.returncode == 1  # nothing is active (no relay ran)
    data = json.loads(status.stdout)
    assert data["leader"] == "a" and data["nodes"]["a"]["load"] == 3 and data["nodes"]["b"]["load"] == 0
    assert data["instances"][names[0]]["node"] == "a" and data["instances"][names[0]]["running_on"] is None
    text = _cli(zk_hosts, root, "status")
    assert "leader: a   balanced: no" in text.stdout
    assert f"pending: {names[2]}: a -> b (rebalance)" in text.stdout

    drained = _cli(zk_hosts, root, "drain", "a")
    assert drained.returncode == 0 and "a: drained" in drained.stdout
    moves = cluster_report(client, root)["pending_moves"]
    assert {(m["from"], m["to"], m["reason"]) for m in moves} == {("a", "b", "node drained")}
    assert len(moves) == 3
    waited = _cli(zk_hosts, root, "drain", "a", "--wait", "--wait-timeout", "1")
    assert waited.returncode == 1 and "a: still runs" in waited.stdout  # nobody applies the plan here
    undo = _cli(zk_hosts, root, "drain", "a", "--undo")
    assert undo.returncode == 0 and "drain mark removed" in undo.stdout
    assert cluster_report(client, root)["drain_marks"] == []
    unknown = _cli(zk_hosts, root, "drain", "nobody")
    assert unknown.returncode == 0 and "nobody is not a live node (live: a, b)" in unknown.stdout
    # said again on every call (a misspelt name must not pass for a drained node), also with --wait
    again = _cli(zk_hosts, root, "drain", "nobody", "--wait", "--wait-timeout", "5")
    assert "note: nobody is not a live node (live: a, b); stays drained for when it joins" in again.stdout
    assert "drained, not live: nobody (relay cluster drain NAME --undo removes a mark)" in (
        _cli(zk_hosts, root, "status").stdout
    )
    assert _cli(zk_hosts, root, "drain", "nobody", "--undo").returncode == 0
    assert "drained, not live" not in _cli(zk_hosts, root, "status").stdout


def test_status_of_a_root_without_a_cluster_says_so(zk_hosts: str, root: str) -> None:
    out = _cli(zk_hosts, root, "status")  # a wrong --root: nothing there, not "balanced: yes" and exit 0
    assert out.returncode == 2
    assert f"no cluster under {root}: no live node, no instance defined or assigned there" in out.stderr


def test_a_bad_node_file_is_refused_naming_every_key(tmp_path: Path) -> None:
    bad = tmp_path / "node.yaml"
    bad.write_text("node: {capacity: many}\nzookeeper: {hots: x}\n")
    out = subprocess.run(
        [sys.executable, "-m", "relay.cli", "cluster", "run", "-c", str(bad)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 2
    assert "node.capacity: expected an integer, got 'many'" in out.stderr
    assert "zookeeper.hots: unknown key; did you mean 'hosts'?" in out.stderr


def test_a_node_registers_leads_serves_metrics_and_leaves_on_sigterm(
    zk_hosts: str, root: str, client: KazooClient, tmp_path: Path
) -> None:
    port = services.free_port()
    config = tmp_path / "node.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "node": {"name": "solo", "capacity": 0, "state_dir": str(tmp_path / "state")},
                "zookeeper": {"hosts": zk_hosts, "root": root, "session_timeout_seconds": 4},
                "metrics": {"port": port, "host": "127.0.0.1"},
            }
        )
    )
    _define(zk_hosts, root, 1)
    log = (tmp_path / "node.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "relay.cli", "cluster", "run", "-c", str(config)],
        cwd=REPO_ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_for(lambda: read_view(client, root).leader == "solo", 60, "the node registered and leads")
        view = read_view(client, root)
        assert view.nodes["solo"].capacity == 0 and view.assignments == {}  # capacity 0: runs nothing

        def scraped() -> str:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
                    return str(answer.read().decode())
            except OSError:
                return ""

        wait_for(lambda: "relay_cluster_node_leader" in scraped(), 30, "the node's metrics served")
        text = scraped()
        assert 'relay_cluster_node_capacity{node="solo"} 0.0' in text
        assert 'relay_cluster_node_leader{node="solo"} 1.0' in text
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
        after = read_view(client, root)
        assert "solo" not in after.nodes and after.leader is None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        log.close()


def test_a_second_node_of_the_same_name_runs_nothing(
    zk_hosts: str, root: str, client: KazooClient, tmp_path: Path
) -> None:
    (name,) = _define(zk_hosts, root, 1)
    _node(client, root, "twin", 1)  # the first "twin", alive; it is assigned the instance
    client.create(Paths(root).assignment(name), b'{"node": "twin", "generation": 1}', makepath=True)
    config = tmp_path / "node.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "node": {"name": "twin", "capacity": 1, "state_dir": str(tmp_path / "state")},
                "zookeeper": {"hosts": zk_hosts, "root": root, "session_timeout_seconds": 4},
            }
        )
    )
    log_path = tmp_path / "node.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "relay.cli", "cluster", "run", "-c", str(config)],
            cwd=REPO_ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for(
            lambda: "is held by session" in log_path.read_text(), 60, "the second twin noticed the first"
        )
        # it neither leads nor runs the first twin's instance
        assert read_view(client, root).leader is None
        assert not (tmp_path / "state" / name).exists()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
        assert not (tmp_path / "state" / name).exists()
        assert "twin" in read_view(client, root).nodes  # the first twin's record is untouched
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
