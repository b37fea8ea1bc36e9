"""A cluster of nodes (``relay cluster run``, each a real process) on real ZooKeeper, MariaDB and broker.

Three nodes, three instances on distinct databases with distinct server ids, writes going on into all
of them. The leader places one instance per node (balanced). Then: SIGKILL the node running one of them
— it runs on another node within the session timeout plus a few seconds (its child saw its node go and
drained, the new node's child was elected); ``relay cluster drain`` another node — its instance moves
gracefully; ``relay cluster status --json`` and ``rebalance --dry-run`` say so; ``drain --undo``; SIGSTOP a
node past its session — its instances run elsewhere, and after SIGCONT it finds its session lost, joins
again and takes a share; a fourth node joins and takes one instance. Then an independent consumer reads
every topic: every committed change is there, per key in binlog order in its partition (offsets, never
re-sorted), repeats only byte-identical — compared with SELECT on the source. Never two
active relays of one instance at once: the instance's epoch only grows. ``relay instance remove`` stops
one. Nodes leave on SIGTERM, exit 0.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from relay.cluster.definition import parse_definition
from relay.cluster.report import cluster_report
from relay.cluster.store import ZooKeeperInstanceStore
from relay.dev import services
from tests.integration.relay_harness import (
    REPO_ROOT,
    Writer,
    apply_records,
    check_exact_repeats,
    create_shards,
    drop_shards,
    master_position,
    read_topic,
    row_sequences,
    select_orders,
    single_table_mapping,
    wait_for,
)
from tests.integration.test_ha import distinct_changes

SHARDS, TABLES = 1, 2
SESSION = 4.0  # ZooKeeper's minimum with tickTime=2000
PASSWORD_ENV = "RELAY_TEST_CLUSTER_MYSQL_PASSWORD"
INSTANCES = 3


@dataclass
class NodeProcess:
    name: str
    config: Path
    log: Path
    env: dict[str, str]
    popen: subprocess.Popen[bytes] | None = None

    def start(self) -> NodeProcess:
        with self.log.open("ab") as out:
            self.popen = subprocess.Popen(
                [sys.executable, "-m", "relay.cli", "cluster", "run", "-c", str(self.config)],
                cwd=REPO_ROOT,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env,
            )
        return self

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None


@dataclass
class Fleet:
    tmp: Path
    zk_hosts: str
    root: str
    mysql: Any
    bootstrap: str
    conn: Any
    prefixes: list[str]
    nodes: dict[str, NodeProcess] = field(default_factory=dict)
    epochs: dict[str, list[int]] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)  # each node's metrics port

    def metrics(self, node: str) -> str:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ports[node]}/metrics", timeout=10) as answer:
                return str(answer.read().decode())
        except OSError:
            return ""

    def node(self, name: str) -> NodeProcess:
        config = self.tmp / f"{name}.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "node": {"name": name, "capacity": 3, "state_dir": str(self.tmp / name)},
                    "zookeeper": {
                        "hosts": self.zk_hosts,
                        "root": self.root,
                        "session_timeout_seconds": SESSION,
                    },
                    "logging": {"level": "info"},
                    "metrics": {
                        "port": self.ports.setdefault(name, services.free_port()),
                        "host": "127.0.0.1",
                    },
                    "children": {
                        "stop_timeout_seconds": 20,
                        "restart_backoff_seconds": 0.5,
                        "status_interval_seconds": 0.5,
                    },
                }
            )
        )
        env = {**os.environ, PASSWORD_ENV: self.mysql.replication_password}
        proc = NodeProcess(name, config, self.tmp / f"{name}.log", env).start()
        self.nodes[name] = proc
        return proc

    def definition(self, i: int, prefix: str, start: tuple[str, int]) -> str:
        mapping = self.tmp / f"{prefix}-mapping.yaml"
        mapping.write_text(yaml.safe_dump(single_table_mapping(prefix)))
        return yaml.safe_dump(
            {
                "source": {
                    "host": self.mysql.host,
                    "port": self.mysql.port,
                    "user": self.mysql.replication_user,
                    "password": f"${{{PASSWORD_ENV}}}",
                    "server_id": 7700 + i,
                    "start": {"journal": start[0], "offset": start[1]},
                },
                "filter": {"include": f"{prefix}_\\d+\\..*"},
                "positions": {"backend": "zookeeper"},
                "mapping": {"file": str(mapping)},
                "kafka": {
                    "bootstrap_servers": self.bootstrap,
                    "ddl_topic": f"{prefix}.ddl",
                    "settings": {"batch.num.messages": "1"},
                },
                "store": {"buffer_size": 256, "batch_mode": "ITEMSIZE"},
                "publish": {
                    "batch_size": 32,
                    "drain_seconds": 5.0,
                    "retry": {"initial": 0.2, "maximum": 2.0},
                },
                "snapshot": {"mode": "never"},
            }
        )

    def report(self) -> dict[str, Any]:
        client = KazooClient(hosts=self.zk_hosts)
        client.start(timeout=15)
        try:
            report = cluster_report(client, self.root)
        finally:
            client.stop()
            client.close()
        for name, instance in report["instances"].items():  # every epoch seen: it may only grow
            if instance["epoch"] is not None:
                seen = self.epochs.setdefault(name, [])
                if not seen or seen[-1] != instance["epoch"]:
                    seen.append(int(instance["epoch"]))
        return report

    def settled(self, live: set[str]) -> bool:
        """Every instance assigned to a live node and active there, the assignment balanced."""
        report = self.report()
        instances = report["instances"]
        return (
            len(instances) == INSTANCES
            and all(i["node"] in live and i["running_on"] == i["node"] for i in instances.values())
            and report["balanced"]
            and not report["pending_moves"]
        )

    def active(self, instance: str) -> dict[str, Any] | None:
        """The instance's HA ``running`` record (who is active), None when nobody is — read once (the
        record may go between an ``exists`` and a ``get``)."""
        client = KazooClient(hosts=self.zk_hosts)
        client.start(timeout=15)
        try:
            return dict(json.loads(client.get(f"{self.root}/destinations/{instance}/running")[0]))
        except NoNodeError:
            return None
        finally:
            client.stop()
            client.close()

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "relay.cli",
                "cluster",
                *args,
                "--zookeeper",
                self.zk_hosts,
                "--root",
                self.root,
            ],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )

    def wait(self, probe: Any, timeout: float, what: str, interval: float = 0.5) -> None:
        """``wait_for`` with the nodes' and instances' logs and the cluster's report in the failure."""
        try:
            wait_for(probe, timeout, what, interval)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{json.dumps(self.report(), indent=1)}\n{self.logs()}") from None

    def logs(self) -> str:
        out = []
        for name in self.nodes:
            out.append(f"--- {name} ---\n{(self.tmp / f'{name}.log').read_text(errors='replace')[-3000:]}")
            for child in sorted((self.tmp / name).glob("*/relay.log")):
                out.append(f"--- {name}/{child.parent.name} ---\n{child.read_text(errors='replace')[-2000:]}")
        return "\n".join(out)


@pytest.fixture
def fleet(mysql_service: Any, kafka_service: Any, zk_service: Any, tmp_path: Path) -> Iterator[Fleet]:
    tag = f"cl{time.monotonic_ns() % 10**7}"
    prefixes = [f"{tag}i{i}" for i in range(INSTANCES)]
    conn = mysql_service.connect()
    for prefix in prefixes:
        create_shards(conn, prefix, SHARDS, TABLES)
    made = Fleet(
        tmp_path,
        str(zk_service.hosts),
        f"/relay-test/{uuid.uuid4().hex}",
        mysql_service,
        kafka_service.bootstrap_servers,
        conn,
        prefixes,
    )
    yield made
    for proc in made.nodes.values():
        if proc.popen is not None and proc.alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.popen.pid, signal.SIGCONT)
                proc.popen.send_signal(signal.SIGKILL)
            proc.popen.wait(30)
    _kill_children(tmp_path)
    for prefix in prefixes:
        drop_shards(conn, prefix, SHARDS)
    conn.close()


def _kill_children(tmp: Path) -> None:
    """Instances whose node was SIGKILLed stop by themselves; make sure none outlives the test."""
    for status in tmp.glob("*/*/status.json"):
        with contextlib.suppress(OSError, ValueError, ProcessLookupError, TypeError):
            pid = int(json.loads(status.read_text())["pid"])
            if f"cluster child -c {tmp}" in Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " "):
                os.kill(pid, signal.SIGKILL)


def test_three_nodes_place_move_on_sigkill_and_drain_and_lose_nothing(fleet: Fleet) -> None:
    store = ZooKeeperInstanceStore(fleet.zk_hosts, fleet.root)
    try:
        start = master_position(fleet.conn)
        for i, prefix in enumerate(fleet.prefixes):
            store.add(parse_definition(prefix, fleet.definition(i, prefix, start)))
    finally:
        store.close()
    writers = [
        Writer(fleet.mysql, p, SHARDS, TABLES, rate=60.0, seed=10 + k) for k, p in enumerate(fleet.prefixes)
    ]
    for writer in writers:
        writer.start()
    for name in ("a", "b", "c"):
        fleet.node(name)
    live = {"a", "b", "c"}
    try:
        fleet.wait(lambda: fleet.settled(live), 120, "one instance per node, each active")
        report = fleet.report()
        assert sorted(n["load"] for n in report["nodes"].values()) == [1, 1, 1]
        assert report["leader"] in live
        # each node's metrics: its instance's process up, and the instance's own relay metrics, labelled
        for name, instance in report["instances"].items():
            where = instance["node"]
            series = f'instance="{name}",node="{where}"'
            fleet.wait(
                lambda series=series, where=where: f"relay_leader{{{series}}} 1.0" in fleet.metrics(where),
                30,
                f"{name}'s relay metrics on {where}'s endpoint",
            )
            assert f"relay_cluster_instance_up{{{series}}} 1.0" in fleet.metrics(where)

        # SIGKILL the node running the first instance: it runs elsewhere within the session timeout + a few s
        victim_instance = fleet.prefixes[0]
        victim = report["instances"][victim_instance]["node"]
        epoch = report["instances"][victim_instance]["epoch"]
        killed = time.monotonic()
        node = fleet.nodes[victim]
        assert node.popen is not None
        node.popen.send_signal(signal.SIGKILL)
        node.popen.wait(30)
        live.discard(victim)

        def moved() -> bool:
            i = fleet.report()["instances"][victim_instance]
            return i["running_on"] in live and i["epoch"] is not None and i["epoch"] > epoch

        fleet.wait(moved, SESSION + 30, f"{victim_instance} active on a live node after SIGKILL", 0.2)
        took = time.monotonic() - killed
        print(f"instance {victim_instance} active elsewhere {took:.1f} s after its node's SIGKILL")
        assert took < SESSION + 15, f"took {took:.1f} s"
        fleet.wait(lambda: fleet.settled(live), 90, "settled on two nodes")

        # drain a live node: its instance moves gracefully (released by its relay, not by a session end)
        drained = sorted(live)[0]
        done = fleet.cli("drain", drained, "--wait", "--wait-timeout", "120")
        assert done.returncode == 0, done.stdout + done.stderr + fleet.logs()
        assert f"{drained}: runs no instance" in done.stdout
        live.discard(drained)
        fleet.wait(lambda: _all_on(fleet, live), 90, "all on the remaining node")
        fleet.wait(  # the drained node's last record ("running") is gone, its successor's written
            lambda: all(i["reported_by"] == i["node"] for i in fleet.report()["instances"].values()),
            30,
            "every instance's status record written by its new node",
        )
        report = fleet.report()
        assert all(i["running_on"] in live for i in report["instances"].values()), report
        assert report["nodes"][drained]["drained"] and report["nodes"][drained]["load"] == 0
        moved_log = (fleet.tmp / drained / _only_instance_dir(fleet, drained) / "relay.log").read_text()
        assert "exited; saved position" in moved_log, "the drained node's relay did not stop gracefully"

        plan = fleet.cli("rebalance", "--dry-run")
        assert plan.returncode == 0 and "0 moves" in plan.stdout, plan.stdout + plan.stderr
        status = fleet.cli("status", "--json")
        assert status.returncode == 0, status.stdout + status.stderr
        assert json.loads(status.stdout)["pending_moves"] == []
        undo = fleet.cli("drain", drained, "--undo")
        assert undo.returncode == 0
        live.add(drained)
        fleet.wait(lambda: fleet.settled(live), 90, "the undrained node takes a share")

        # SIGSTOP a node past its session: its instances run elsewhere (their processes stop by themselves
        # once the node's record is gone); after SIGCONT the node finds its session lost, stops what it
        # ran, joins again and takes a share
        report = fleet.report()
        frozen = next(n for n in sorted(live) if report["nodes"][n]["load"] > 0)
        before = {k: i["epoch"] for k, i in report["instances"].items() if i["running_on"] == frozen}
        thawed = fleet.nodes[frozen].popen
        assert thawed is not None
        os.kill(thawed.pid, signal.SIGSTOP)
        stopped_at = time.monotonic()
        try:
            fleet.wait(
                lambda: _moved(fleet, before, live - {frozen}), SESSION + 30, "frozen node's instances", 0.2
            )
            took = time.monotonic() - stopped_at
            print(f"instances {sorted(before)} active elsewhere {took:.1f} s after their node's SIGSTOP")
        finally:
            os.kill(thawed.pid, signal.SIGCONT)

        def rejoined() -> bool:
            nodes = fleet.report()["nodes"]
            return frozen in nodes and nodes[frozen]["load"] > 0 and fleet.settled(live)

        fleet.wait(rejoined, 120, "the thawed node joined again and took a share")
        assert "ZooKeeper session lost" in (fleet.tmp / f"{frozen}.log").read_text()

        # a new node takes a fair share by graceful moves: 3 instances over 3 live nodes, one each
        fleet.node("d")
        live.add("d")

        def shared() -> bool:
            nodes = fleet.report()["nodes"]
            return "d" in nodes and all(nodes[n]["load"] == 1 for n in live) and fleet.settled(live)

        fleet.wait(shared, 120, "the new node took its share")
    finally:
        changes = [writer.stop() for writer in writers]

    # an independent consumer, against SELECT: nothing missing, per key in binlog order, repeats exact
    for prefix, count in zip(fleet.prefixes, changes, strict=True):
        records = read_topic(fleet.bootstrap, f"{prefix}.orders", until=distinct_changes(count), timeout=180)
        assert len(row_sequences(records)) == count, prefix
        assert apply_records(records) == select_orders(fleet.conn, prefix, SHARDS, TABLES), prefix
        check_exact_repeats(records)
    for name, seen in fleet.epochs.items():
        assert seen == sorted(set(seen)), f"{name}: epochs {seen} did not only grow"

    # remove an instance: its node stops it (drained), nothing stays assigned or active
    removed = fleet.prefixes[-1]
    gone = subprocess.run(
        [
            sys.executable,
            "-m",
            "relay.cli",
            "instance",
            "remove",
            removed,
            "--zookeeper",
            fleet.zk_hosts,
            "--root",
            fleet.root,
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert gone.returncode == 0, gone.stderr
    fleet.wait(
        lambda: removed not in fleet.report()["instances"] and fleet.active(removed) is None,
        90,
        f"{removed} unassigned and stopped (drained, released) after its removal",
    )

    # nodes leave on SIGTERM: their instances drain, the node exits 0
    for name in sorted(n for n, p in fleet.nodes.items() if p.alive()):
        proc = fleet.nodes[name].popen
        assert proc is not None
        proc.send_signal(signal.SIGTERM)
    for name, node in fleet.nodes.items():
        if node.popen is not None and name != victim:
            assert node.popen.wait(120) == 0, fleet.logs()


def _moved(fleet: Fleet, before: dict[str, int], onto: set[str]) -> bool:
    instances = fleet.report()["instances"]
    return all(
        instances[k]["running_on"] in onto and (instances[k]["epoch"] or 0) > epoch
        for k, epoch in before.items()
    )


def _all_on(fleet: Fleet, live: set[str]) -> bool:
    report = fleet.report()
    return all(i["running_on"] in live and i["node"] in live for i in report["instances"].values())


def _only_instance_dir(fleet: Fleet, node: str) -> str:
    dirs = [p.name for p in (fleet.tmp / node).iterdir() if (p / "relay.log").exists()]
    assert dirs, f"{node} ran no instance"
    return sorted(dirs, key=lambda d: (fleet.tmp / node / d / "relay.log").stat().st_mtime)[-1]
