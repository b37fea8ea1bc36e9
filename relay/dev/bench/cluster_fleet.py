"""The cluster bench's fleet: node processes (``relay cluster run``), instance definitions, their databases.

Owns ``Fleet`` (one cluster root on the bench's ZooKeeper: writes each node's node.yaml, starts and kills
node processes, defines instances on databases of their own, reads ``relay cluster status``'s report,
waits on conditions with a deadline) and ``Writer`` (a thread inserting rows into every instance's table at
a fixed rate). ``Fleet`` runs on the bench's main thread; ``Writer`` on a thread of its own.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kazoo.client import KazooClient

from relay.cluster.definition import parse_definition
from relay.cluster.report import cluster_report
from relay.cluster.store import ZooKeeperInstanceStore
from relay.common.retry import RetryPolicy
from relay.dev.bench.cluster_probe import descendants
from relay.dev.bench.common import REPO_ROOT, Progress
from relay.errors import BenchError

PASSWORD_ENV = "RELAY_BENCH_CLUSTER_MYSQL_PASSWORD"
TABLE = "t"


@dataclass
class NodeProcess:
    name: str
    config: Path
    log: Path
    popen: subprocess.Popen[bytes] | None = None
    children: set[int] = field(default_factory=set)  # instance processes seen under it (outlive a SIGKILL)

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def note_children(self) -> None:
        if self.alive() and self.popen is not None:
            self.children |= set(descendants(self.popen.pid)[1:])


def database(instance: str) -> str:
    return f"relay_bench_{instance}"


class Fleet:
    """Nodes and instances under ``root`` on ZooKeeper ``hosts``; ``client`` is the bench's one session."""

    def __init__(
        self, work: Path, hosts: str, root: str, mysql: Any, kafka: str, session: float, progress: Progress
    ) -> None:
        self.work, self.hosts, self.root = work, hosts, root
        self.mysql, self.kafka, self.session, self.progress = mysql, kafka, session, progress
        self.nodes: dict[str, NodeProcess] = {}
        self.instances: list[str] = []
        self.client = KazooClient(hosts=hosts, timeout=max(session, 10.0))
        self.client.start(timeout=30)

    # -- nodes -----------------------------------------------------------------------------------
    def start_node(self, name: str, capacity: int) -> NodeProcess:
        home = self.work / "nodes" / name
        home.mkdir(parents=True, exist_ok=True)
        config = home / "node.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "node": {"name": name, "capacity": capacity, "state_dir": str(home / "state")},
                    "zookeeper": {
                        "hosts": self.hosts,
                        "root": self.root,
                        "session_timeout_seconds": self.session,
                    },
                    "logging": {"level": "info"},
                }
            )
        )
        env = {**os.environ, PASSWORD_ENV: self.mysql.replication_password}
        env.pop("RELAY_STATE_DIR", None)
        proc = NodeProcess(name, config, home / "node.log")
        with proc.log.open("ab") as out:
            proc.popen = subprocess.Popen(
                [sys.executable, "-m", "relay.cli", "cluster", "run", "-c", str(config)],
                cwd=REPO_ROOT,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        self.nodes[name] = proc
        return proc

    def kill_node(self, name: str) -> float:
        """SIGKILL the node process (not its instance processes); the wall-clock time of the signal."""
        proc = self.nodes[name]
        proc.note_children()
        assert proc.popen is not None
        at = time.time()
        proc.popen.send_signal(signal.SIGKILL)
        proc.popen.wait(30)
        return at

    def reap_orphans(self, timeout: float) -> None:
        """Wait until the instance processes of killed nodes are gone (they stop once their node is)."""
        pids = {p for proc in self.nodes.values() if not proc.alive() for p in proc.children}

        def gone() -> bool:
            return not any(_ours(p, self.work) for p in pids)

        if not self._poll(gone, timeout):
            for pid in pids:
                if _ours(pid, self.work):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
            self.progress(f"  instance processes of a killed node still ran after {timeout:g} s: SIGKILLed")

    def close(self) -> None:
        """SIGKILL every node; its instance processes see it gone and stop (drain) by themselves."""
        for proc in self.nodes.values():
            proc.note_children()
            if proc.alive() and proc.popen is not None:
                proc.popen.send_signal(signal.SIGKILL)
                proc.popen.wait(30)
        self.reap_orphans(60.0)
        for proc in self.nodes.values():
            for pid in proc.children:
                if _ours(pid, self.work):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
        self.client.stop()
        self.client.close()

    # -- instances -------------------------------------------------------------------------------
    def create_databases(self, names: list[str]) -> None:
        """Each instance's database and table: created before the instances' start position, so that no
        instance reads their DDL (a schema history keeps every DDL of its server: one znode each)."""
        conn = self.mysql.connect()
        try:
            with conn.cursor() as cur:
                for name in names:
                    cur.execute(f"CREATE DATABASE IF NOT EXISTS {database(name)}")
                    cur.execute(
                        f"CREATE TABLE IF NOT EXISTS {database(name)}.{TABLE} "
                        "(id BIGINT PRIMARY KEY AUTO_INCREMENT, v VARCHAR(64))"
                    )
        finally:
            conn.close()

    def define(self, names: list[str], start: tuple[str, int]) -> None:
        """Each instance's definition, reading from ``start``."""
        store = ZooKeeperInstanceStore(self.hosts, self.root)
        try:
            for name in names:
                server_id = 7800 + len(self.instances)  # distinct per instance: each is a replica
                store.add(parse_definition(name, self._definition(name, start, server_id)))
                self.instances.append(name)
        finally:
            store.close()

    def _definition(self, name: str, start: tuple[str, int], server_id: int) -> str:
        mapping = self.work / "mappings" / f"{name}.yaml"
        mapping.parent.mkdir(parents=True, exist_ok=True)
        mapping.write_text(
            yaml.safe_dump(
                {
                    "version": 1,
                    "topics": {"partitions": 1, "create": True},
                    "unmapped": {"action": "drop"},
                    "logical_dbs": {name: {"physical": [database(name)], "topic": f"bench.{name}.{{table}}"}},
                }
            )
        )
        return yaml.safe_dump(
            {
                "source": {
                    "host": self.mysql.host,
                    "port": self.mysql.port,
                    "user": self.mysql.replication_user,
                    "password": f"${{{PASSWORD_ENV}}}",
                    "server_id": server_id,
                    "start": {"journal": start[0], "offset": start[1]},
                },
                "filter": {"include": f"{database(name)}\\..*"},
                "positions": {"backend": "zookeeper"},
                "mapping": {"file": str(mapping)},
                "kafka": {"bootstrap_servers": self.kafka, "ddl_topic": f"bench.{name}.ddl"},
                "snapshot": {"mode": "never"},
            }
        )

    # -- what ZooKeeper says ---------------------------------------------------------------------
    def report(self) -> dict[str, Any]:
        return cluster_report(self.client, self.root)

    def settled(self, live: set[str], loads: dict[str, int] | None = None) -> bool:
        """Every defined instance assigned to a live node and active there, balanced, no move pending."""
        r = self.report()
        ok = (
            set(r["instances"]) == set(self.instances)
            and all(i["node"] in live and i["running_on"] == i["node"] for i in r["instances"].values())
            and r["balanced"]
            and not r["pending_moves"]
        )
        if ok and loads is not None:
            ok = all(r["nodes"].get(n, {}).get("load") == load for n, load in loads.items())
        return ok

    def wait(self, probe: Callable[[], bool], timeout: float, what: str) -> None:
        if not self._poll(probe, timeout):
            tails = "\n".join(
                f"--- {n} ---\n{p.log.read_text(errors='replace')[-1500:]}" for n, p in self.nodes.items()
            )
            raise BenchError(f"cluster bench: not {what} after {timeout:g} s\n{tails}")

    @staticmethod
    def _poll(probe: Callable[[], bool], timeout: float) -> bool:
        backoff = RetryPolicy(initial=0.1, maximum=0.5, deadline=timeout).start()
        while not probe():
            if not backoff.wait():
                return probe()
        return True


def _ours(pid: int, work: Path) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")
    except OSError:
        return False
    return "cluster child" in cmdline and str(work) in cmdline


class Writer(threading.Thread):
    """Inserts ``rate`` rows/s into each instance's table (one connection, autocommit) until stopped."""

    def __init__(self, mysql: Any, instances: list[str], rate: float) -> None:
        super().__init__(name="bench-cluster-writer", daemon=True)
        self.mysql, self.instances, self.rate = mysql, list(instances), rate
        self.stopping = threading.Event()
        self.rows = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            conn = self.mysql.connect()
        except BaseException as exc:
            self.error = exc
            return
        interval = 1.0 / self.rate
        try:
            with conn.cursor() as cur:
                while not self.stopping.wait(interval):
                    for name in self.instances:
                        cur.execute(
                            f"INSERT INTO {database(name)}.{TABLE} (v) VALUES (%s)", (f"r{self.rows}",)
                        )
                    self.rows += 1
        except BaseException as exc:
            self.error = exc
        finally:
            conn.close()

    def stop(self) -> int:
        self.stopping.set()
        self.join(30)
        if self.error is not None:
            raise BenchError(f"cluster bench: the writer failed: {self.error!r}")
        return self.rows
