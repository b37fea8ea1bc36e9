"""Operating a cluster instance from any host, through ZooKeeper: a real node (``relay cluster run``)
and its child relay on real MariaDB, ZooKeeper and the broker, the operator's commands run as
processes of their own with only the cluster's ZooKeeper address.

- ``relay status --instance``: the local command's fields from the status the node publishes, plus
  node and epoch; the server asked when the environment has the source's secret, named when not; an
  unknown instance is an error, an instance no node runs says so (exit 1);
- the node's metrics endpoint: every relay series of the instance carries ``instance`` and ``node``;
- ``relay mapping history --cluster``: the instance's mapping version, from its node's status;
- ``relay snapshot run|status|cancel --instance``: a refused condition names the node, a cancel lands
  while it runs, and a request made while no node runs the instance waits for the next node, which
  carries it out exactly once: an independent consumer finds every row of the table (== SELECT, per
  key in offset order, repeats byte-identical) and, after the request, one snapshot read per row;
- a relay stopped on a broken DDL is held by its node (not restarted; ``relay cluster status`` and
  ``relay status --instance`` say so) until ``relay schema resync --instance`` (refused while the
  source's secret is missing here, naming it), then runs on and publishes the row past the DDL.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from relay.cluster.definition import parse_definition
from relay.cluster.store import ZooKeeperInstanceStore
from relay.dev import services
from tests.integration.relay_harness import REPO_ROOT, master_position, read_topic, wait_for
from tests.integration.snapshot_harness import (
    SHARDS,
    TABLES,
    Case,
    KeyChangingWriter,
    check,
    read_all,
    snapshot_case,
)

PASSWORD_ENV = "RELAY_TEST_CONTROL_MYSQL_PASSWORD"
ROWS_PER_TABLE = 300  # 2 shards x 2 tables: 1200 rows a snapshot reads


@dataclass
class Cluster:
    """One cluster root on the test's ZooKeeper, its nodes (processes), and the operator's CLI."""

    tmp: Path
    zk_hosts: str
    root: str
    password: str
    nodes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)

    def define(self, name: str, definition: dict[str, Any]) -> None:
        store = ZooKeeperInstanceStore(self.zk_hosts, self.root)
        try:
            store.add(parse_definition(name, yaml.safe_dump(definition)))
        finally:
            store.close()

    def start(self, name: str) -> None:
        config = self.tmp / f"{name}.yaml"
        port = self.ports.setdefault(name, services.free_port())
        config.write_text(
            yaml.safe_dump(
                {
                    "node": {"name": name, "capacity": 4, "state_dir": str(self.tmp / name)},
                    "zookeeper": {"hosts": self.zk_hosts, "root": self.root, "session_timeout_seconds": 4},
                    "logging": {"level": "info"},
                    "metrics": {"port": port, "host": "127.0.0.1"},
                    "children": {
                        "stop_timeout_seconds": 20,
                        "restart_backoff_seconds": 0.5,
                        "status_interval_seconds": 0.5,
                    },
                }
            )
        )
        with (self.tmp / f"{name}.log").open("ab") as out:
            self.nodes[name] = subprocess.Popen(
                [sys.executable, "-m", "relay.cli", "cluster", "run", "-c", str(config)],
                cwd=REPO_ROOT,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, PASSWORD_ENV: self.password},
            )

    def stop(self, name: str) -> None:
        proc = self.nodes[name]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(90) == 0, self.logs()

    def cli(
        self, *args: str, secret: bool = True, timeout: float = 120, where: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """``relay ARGS --zookeeper HOSTS --root ROOT`` (``where``) as an operator on another host runs
        it: no node file, the source's secret in the environment only when ``secret``."""
        env = {k: v for k, v in os.environ.items() if k != PASSWORD_ENV}
        if secret:
            env[PASSWORD_ENV] = self.password
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "relay.cli",
                *args,
                *(("--zookeeper", self.zk_hosts, "--root", self.root) if where else ()),
            ],
            cwd=self.tmp,  # nothing of the instance's there
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            check=False,
        )

    def status(self, instance: str) -> dict[str, Any]:
        out = self.cli("status", "--instance", instance, "--json")
        return dict(json.loads(out.stdout)) if out.stdout.strip() else {}

    def metrics(self, node: str) -> str:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ports[node]}/metrics", timeout=10) as answer:
                return str(answer.read().decode())
        except OSError:
            return ""

    def wait(self, probe: Callable[[], Any], timeout: float, what: str) -> None:
        try:
            wait_for(probe, timeout, what)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.logs()}") from None

    def logs(self) -> str:
        out = []
        for name in self.nodes:
            out.append(f"--- {name} ---\n{(self.tmp / f'{name}.log').read_text(errors='replace')[-3000:]}")
            for child in sorted((self.tmp / name).glob("*/relay.log")):
                out.append(f"--- {name}/{child.parent.name} ---\n{child.read_text(errors='replace')[-3000:]}")
        return "\n".join(out)

    def close(self) -> None:
        for proc in self.nodes.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)


@pytest.fixture
def cluster(zk_service: Any, mysql_service: Any, tmp_path: Path) -> Iterator[Cluster]:
    made = Cluster(
        tmp_path, str(zk_service.hosts), f"/relay-test/{uuid.uuid4().hex}", mysql_service.replication_password
    )
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def case(mysql_service: Any, kafka_service: Any, tmp_path: Path) -> Iterator[Case]:
    with snapshot_case(mysql_service, kafka_service, tmp_path / "case", ROWS_PER_TABLE) as made:
        yield made


def _definition(
    tmp: Path, mysql: Any, bootstrap: str, prefix: str, server_id: int, **extra: Any
) -> dict[str, Any]:
    from tests.integration.relay_harness import single_table_mapping

    mapping = tmp / f"{prefix}-mapping.yaml"
    mapping.parent.mkdir(parents=True, exist_ok=True)
    mapping.write_text(yaml.safe_dump(single_table_mapping(prefix)))
    conn = mysql.connect()
    with contextlib.closing(conn):
        start = master_position(conn)
    return {
        "source": {
            "host": mysql.host,
            "port": mysql.port,
            "user": mysql.replication_user,
            "password": f"${{{PASSWORD_ENV}}}",
            "server_id": server_id,
            "start": {"journal": start[0], "offset": start[1]},
        },
        "filter": {"include": f"{prefix}_\\d+\\..*"},
        "positions": {"backend": "zookeeper"},
        "mapping": {"file": str(mapping)},
        "kafka": {"bootstrap_servers": bootstrap, "ddl_topic": f"{prefix}.ddl"},
        "store": {"buffer_size": 256, "batch_mode": "ITEMSIZE"},
        "publish": {"batch_size": 32, "drain_seconds": 5.0},
        **extra,
    }


def _relay_series_labelled(text: str, instance: str, node: str) -> list[str]:
    """The relay series of ``instance`` on a node's endpoint; fails on a relay series without both labels."""
    seen = []
    for family in text_string_to_metric_families(text):
        if not family.name.startswith("relay_") or family.name.startswith("relay_cluster_node_"):
            continue
        for sample in family.samples:
            assert sample.labels.get("node") == node, f"{sample.name}{sample.labels}: no node label"
            assert "instance" in sample.labels, f"{sample.name}{sample.labels}: no instance label"
            if sample.labels["instance"] == instance:
                seen.append(sample.name)
    return seen


def test_status_metrics_mapping_and_snapshots_of_an_instance_from_any_host(
    cluster: Cluster, case: Case
) -> None:
    prefix, table = case.prefix, f"{case.prefix}.orders"
    snapshot = {"mode": "never", "chunk_rows": 100, "parallelism": 1, "max_rows_per_second": 150}
    cluster.define(prefix, _definition(case.tmp, case.mysql, case.bootstrap, prefix, 7601, snapshot=snapshot))
    writer = KeyChangingWriter(case.mysql, prefix, dict(case.existing), seed=21)
    writer.start()
    cluster.start("a")
    try:
        # status from any host: the local command's fields + node and epoch; exit 0 while it runs
        cluster.wait(lambda: cluster.cli("status", "--instance", prefix).returncode == 0, 120, "running")
        cluster.wait(lambda: (cluster.status(prefix).get("batches_acked") or 0) >= 3, 60, "publishing")
        report = cluster.status(prefix)
        assert report["instance"] == prefix and report["running"] is True and report["state"] == "running"
        assert report["node"] == "a" and report["node_process"] == "running"
        assert report["running_on"] and isinstance(report["epoch"], int) and report["epoch"] >= 1
        assert report["position"] and report["kafka_mode"] and report["mapping_version"] == 1
        assert report["server_end"] and isinstance(report["lag_bytes"], int)
        assert report["state_dir"].endswith(f"/a/{prefix} on node a")
        assert report["held"] is None
        text = cluster.cli("status", "--instance", prefix)
        assert re.search(r"^node\s+a$", text.stdout, re.M), text.stdout
        blind = cluster.cli("status", "--instance", prefix, "--json", secret=False)
        assert blind.returncode == 0, blind.stderr
        error = json.loads(blind.stdout)["server_error"]
        assert f"environment variable {PASSWORD_ENV} is not set here (source.password is written" in error
        unknown = cluster.cli("status", "--instance", "nope")
        assert unknown.returncode == 2 and "nope: no such instance" in unknown.stderr, unknown.stderr
        both = cluster.cli("status", "--instance", prefix, "-c", "relay.yaml")
        assert both.returncode == 2 and "not allowed with argument" in both.stderr, both.stderr

        # metrics: every relay series on the node's endpoint carries instance and node
        cluster.wait(
            lambda: "relay_batches_acked_total" in _relay_series_labelled(cluster.metrics("a"), prefix, "a"),
            60,
            "the instance's relay metrics on the node's endpoint",
        )

        # mapping version reports see the cluster instance
        mapping_file = str(case.tmp / f"{prefix}-mapping.yaml")
        history = cluster.cli(
            "mapping", "history", "-f", mapping_file, "--cluster", cluster.zk_hosts, "--cluster-root",
            cluster.root, where=False,
        )  # fmt: skip
        assert f"{prefix}@a (cluster): runs version 1" in history.stdout, history.stdout + history.stderr
        assert re.search(rf"^\s+1\s.*<= runs on {prefix}@a", history.stdout, re.M), history.stdout

        # snapshot run/cancel/status through ZooKeeper
        bad = cluster.cli("snapshot", "run", "--instance", prefix, "--table", table, "--where", "nope = 1")
        assert bad.returncode == 1, bad.stdout + bad.stderr
        assert re.search(rf"refused by the relay of {prefix} on node a: --where 'nope = 1' fails", bad.stdout)
        ran = cluster.cli("snapshot", "run", "--instance", prefix, "--table", table)
        assert ran.returncode == 0 and f"run: accepted by the relay of {prefix} on node a" in ran.stdout, (
            ran.stdout + ran.stderr
        )
        cluster.wait(lambda: (cluster.status(prefix).get("snapshot_percent") or 0) >= 10, 60, "10% read")
        cancel = cluster.cli("snapshot", "cancel", "--instance", prefix)
        assert cancel.returncode == 0 and "cancel: accepted by the relay" in cancel.stdout, cancel.stdout
        cluster.wait(
            lambda: ": cancelled," in cluster.cli("snapshot", "status", "--instance", prefix).stdout,
            60,
            "the snapshot cancelled",
        )
        assert (
            f"instance {prefix} on node a" in cluster.cli("snapshot", "status", "--instance", prefix).stdout
        )

        # a request made while no node runs the instance waits for the next node, carried out once
        # (the writes stop first: the table as it then is is what that snapshot must read, each row once)
        writer.stop()
        cluster.stop("a")
        with case.conn.cursor() as cur:
            cur.execute(
                " UNION ALL ".join(
                    f"SELECT id FROM {prefix}_{d:02d}.orders_{t:02d}"
                    for d in range(SHARDS)
                    for t in range(TABLES)
                )
            )
            rows = {str(row[0]) for row in cur.fetchall()}
        # nothing is published while no node runs it: what follows these offsets is the request's
        before = {}
        for r in read_all(case):
            before[r.partition] = max(before.get(r.partition, -1), r.offset)
        nowhere = cluster.cli("status", "--instance", prefix)
        assert nowhere.returncode == 1 and "no node runs it" in nowhere.stderr, nowhere.stderr
        # with no relay active, cancel goes to the saved position (in ZooKeeper), which has none unfinished
        offline = cluster.cli("snapshot", "cancel", "--instance", prefix)
        assert offline.returncode == 2 and "no unfinished snapshot in the saved position" in offline.stderr, (
            offline.stdout + offline.stderr
        )
        env = {k: v for k, v in os.environ.items() if k != PASSWORD_ENV}
        asking = subprocess.Popen(
            [
                sys.executable, "-m", "relay.cli", "snapshot", "run", "--instance", prefix, "--table", table,
                "--answer-timeout", "240", "--zookeeper", cluster.zk_hosts, "--root", cluster.root,
            ],
            cwd=cluster.tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip
        try:
            cluster.start("b")
            out, err = asking.communicate(timeout=300)
        finally:
            if asking.poll() is None:
                asking.kill()
        assert asking.returncode == 0, out + err
        assert f"run: accepted by the relay of {prefix} on node b" in out, out
        follow = cluster.cli("snapshot", "status", "--instance", prefix, "--follow", timeout=300)
        assert follow.returncode == 0, follow.stdout + follow.stderr
        cluster.wait(lambda: cluster.status(prefix).get("lag_bytes") == 0, 120, "caught up")
        records = read_all(case)
    finally:
        writer.stop()
    check(case, records)  # every row of the table, from the snapshots and the stream, == SELECT
    reads = {  # an exact repeat (same sequence and part) counts once; a second run has its own
        (int(r.json["sequence"]), int(r.json.get("part") or 0)): str(json.loads(r.key or b"{}")["id"])
        for r in records
        if r.json.get("snapshot") and r.offset > before.get(r.partition, -1)
    }
    after = list(reads.values())
    assert len(after) == len(set(after)), "a row read twice: the request carried out twice"
    assert set(after) == rows, "the waiting request's snapshot read the table as it was"
    cluster.stop("b")


def test_a_broken_ddl_holds_the_instance_until_schema_resync(
    cluster: Cluster, mysql_server_factory: Callable[..., Any], kafka_service: Any, tmp_path: Path
) -> None:
    svc = mysql_server_factory("--binlog-row-metadata=MINIMAL")
    prefix = f"h{uuid.uuid4().hex[:6]}"
    conn = svc.connect(autocommit=True)
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {prefix}_00")
        cur.execute(f"CREATE TABLE {prefix}_00.orders_00 (id INT PRIMARY KEY, name VARCHAR(20), note TEXT)")
    cluster.password = svc.replication_password
    cluster.define(
        prefix,
        _definition(tmp_path, svc, kafka_service.bootstrap_servers, prefix, 7602, snapshot={"mode": "never"}),
    )
    cluster.start("a")
    topic = f"{prefix}.orders"
    try:
        cluster.wait(lambda: cluster.status(prefix).get("state") == "running", 120, "running")
        with conn.cursor() as cur:
            cur.execute(f"INSERT INTO {prefix}_00.orders_00 VALUES (1, 'a', 'b')")
            cur.execute(f"ALTER TABLE {prefix}_00.orders_00 CONVERT TO CHARACTER SET latin1")
            cur.execute(f"INSERT INTO {prefix}_00.orders_00 VALUES (9, 'é', 'ü')")
        cluster.wait(
            lambda: (cluster.status(prefix).get("held") or "").startswith("stopped on a schema"),
            120,
            "the instance held",
        )
        report = cluster.status(prefix)
        assert report["running"] is False and report["node_process"] == "held"
        assert "CONVERT TO" in (report["error"] or ""), report["error"]
        restarts = report["node_restarts"]
        whole = json.loads(cluster.cli("cluster", "status", "--json").stdout)
        assert whole["instances"][prefix]["held"]["node"] == "a"
        assert whole["instances"][prefix]["running_on"] is None
        shown = cluster.cli("schema", "show", "--instance", prefix, "--table", f"{prefix}_00.orders_00",
                            secret=False)  # fmt: skip
        assert shown.returncode == 0 and "name" in shown.stdout, shown.stdout + shown.stderr
        args = ("schema", "resync", "--instance", prefix, "--table", f"{prefix}_00.orders_00", "--yes")
        blind = cluster.cli(*args, secret=False)
        assert blind.returncode == 2
        assert f"source.password: environment variable {PASSWORD_ENV} is not set here" in blind.stderr
        assert cluster.status(prefix)["node_restarts"] == restarts, "restarted while held"
        fixed = cluster.cli(*args)
        assert fixed.returncode == 0, fixed.stdout + fixed.stderr
        assert "its hold is lifted" in fixed.stdout and "latin1" in fixed.stdout
        seen: dict[str, Any] = {}

        def past_the_ddl() -> bool:
            seen.update(cluster.status(prefix))
            return seen.get("lag_bytes") == 0

        try:
            cluster.wait(past_the_ddl, 120, "running on past the DDL")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{json.dumps(seen, indent=1)}") from None
        records = read_topic(
            kafka_service.bootstrap_servers,
            topic,
            until=lambda found: sum(1 for r in found if not r.json["isDdl"]) >= 2,
            timeout=60,
        )
        rows = {str(r.json["data"][0]["id"]): r.json["data"][0] for r in records if not r.json["isDdl"]}
        with conn.cursor() as cur:
            cur.execute(f"SELECT id, name, note FROM {prefix}_00.orders_00 ORDER BY id")
            expected = {str(i): {"id": str(i), "name": n, "note": t} for i, n, t in cur.fetchall()}
        assert {k: {c: v.get(c) for c in ("id", "name", "note")} for k, v in rows.items()} == expected
        assert cluster.status(prefix)["held"] is None
    finally:
        conn.close()
    cluster.stop("a")
