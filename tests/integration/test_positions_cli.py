"""``relay positions show|set`` against a real server: refused while a relay holds the instance, works
when none does."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from relay.common.mysql import binlog_status
from relay.config.load import load_config
from relay.config.state import POSITION_FILE
from relay.dev.services import KafkaService, ZooKeeperService
from relay.ha.leadership import Layout, Leadership, connect
from relay.positions.lock import InstanceLock
from relay.positions.store import FilePositionStore, ResumePoint
from relay.positions.zookeeper import read_position_node
from tests.integration.relay_harness import REPO_ROOT, RelayProcess, wait_for, write_configs

pytestmark = pytest.mark.integration


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "relay.cli", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _mapping(prefix: str) -> dict[str, Any]:
    return {
        "version": 1,
        "topics": {"partitions": 1, "create": True},
        "unmapped": {"action": "drop"},
        "logical_dbs": {
            prefix: {"physical": [prefix], "tables": {"t": {"physical": ["t"], "topic": f"{prefix}.t"}}}
        },
    }


def _master(conn: Any) -> tuple[str, int]:
    with conn.cursor() as cur:
        row = binlog_status(cur)
    assert row is not None
    return str(row[0]), int(row[1])


def _event_at(conn: Any, journal: str, offset: int) -> str:
    with conn.cursor() as cur:
        cur.execute(f"SHOW BINLOG EVENTS IN '{journal}' FROM {offset} LIMIT 1")
        row = cur.fetchone()
    return str(row[2]) if row else ""


@pytest.fixture
def setup(mysql_service: Any, kafka_service: KafkaService, tmp_path: Path) -> Any:
    prefix = f"pc{time.monotonic_ns() % 10**8}"
    conn = mysql_service.connect()
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {prefix}")
        cur.execute(f"CREATE TABLE {prefix}.t (id INT PRIMARY KEY, v VARCHAR(20))")
    cfg = write_configs(
        tmp_path,
        mysql=mysql_service,
        bootstrap=kafka_service.bootstrap_servers,
        mapping=_mapping(prefix),
        start=_master(conn),
        instance=prefix,
        include=f"{prefix}\\..*",
        extra={"logging": {"level": "INFO"}},
    )
    yield prefix, conn, cfg
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE {prefix}")
    conn.close()


def _saved(cfg: Path) -> ResumePoint | None:
    config = load_config(cfg)
    return FilePositionStore(config.state_path(POSITION_FILE)).load()


def test_set_by_file_gtid_and_timestamp_when_no_relay_runs(setup: Any) -> None:
    prefix, conn, cfg = setup
    before_gtid = _gtid_pos(conn)
    # Binlog times are whole seconds. Begin in a later second than anything the fixture logged, so that on
    # a server started just now the oldest binlog's first transaction is still before the target.
    first = int(time.time())
    wait_for(lambda: int(time.time()) > first, 5, "the next second")
    since = time.time()
    with conn.cursor() as cur:
        cur.execute(f"INSERT INTO {prefix}.t VALUES (1, 'a')")
    journal, end = _master(conn)

    done = run_cli("positions", "set", "-c", str(cfg), "--file", journal, "--offset", "4")
    assert done.returncode == 0, done.stderr
    point = _saved(cfg)
    assert point is not None and (point.journal, point.offset) == (journal, 4)
    assert point.source is not None and point.source.server_id > 0
    # Every set is a new binlog history: the saved generation + 1, no mapping version.
    assert (point.generation, point.mapping_version) == (1, None)
    generation = 1

    if before_gtid:
        done = run_cli("positions", "set", "-c", str(cfg), "--gtid", before_gtid)
        assert done.returncode == 0, done.stderr
        point = _saved(cfg)
        assert point is not None and point.gtid_set == before_gtid
        generation += 1
        assert point.generation == generation
        # The first transaction not in the set: our INSERT, which starts with its GTID event.
        assert _event_at(conn, point.journal, point.offset) == "Gtid", point
        assert point.offset < end

    done = run_cli("positions", "set", "-c", str(cfg), "--timestamp", str(int(since) * 1000))
    assert done.returncode == 0, done.stderr
    point = _saved(cfg)
    assert point is not None and _event_at(conn, point.journal, point.offset) in (
        "Gtid",
        "Query",
        "Anonymous_Gtid",
    )

    assert point is not None and point.generation == generation + 1

    shown = run_cli("positions", "show", "-c", str(cfg), "--json")
    assert shown.returncode == 0, shown.stderr
    report = json.loads(shown.stdout)
    assert report["position"] == str(point) and report["held_by"] is None and report["position_on_server"]
    assert report["generation"] == point.generation


def _gtid_pos(conn: Any) -> str:
    with conn.cursor() as cur:
        cur.execute("SELECT @@GLOBAL.gtid_binlog_pos")
        row = cur.fetchone()
    return str(row[0]) if row and row[0] else ""


def test_set_is_refused_while_a_relay_holds_the_instance_and_works_after_it_stops(
    setup: Any, tmp_path: Path
) -> None:
    prefix, conn, cfg = setup
    relay = RelayProcess(cfg, tmp_path / "relay.log").start()
    try:
        wait_for(lambda: relay.status().get("state") == "running", 60, "the relay running")
        with conn.cursor() as cur:
            cur.execute(f"INSERT INTO {prefix}.t VALUES (2, 'b')")
        wait_for(lambda: bool(relay.position()), 60, "a saved position")
        held = relay.position()
        journal, _ = _master(conn)

        refused = run_cli("positions", "set", "-c", str(cfg), "--file", journal, "--offset", "4")
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert "held by a running relay" in refused.stderr and str(relay.pid) in refused.stderr
        assert relay.position() == held, "a refused set must not touch the position"
        shown = json.loads(run_cli("positions", "show", "-c", str(cfg), "--json").stdout)
        assert shown["held_by"], shown

        relay.signal(signal.SIGTERM)
        assert relay.wait(30) == 0, relay.log()[-2000:]
    finally:
        relay.stop()

    done = run_cli("positions", "set", "-c", str(cfg), "--file", journal, "--offset", "4")
    assert done.returncode == 0, done.stderr
    point = _saved(cfg)
    assert point is not None and (point.journal, point.offset) == (journal, 4)


def test_the_lock_alone_refuses_and_a_relay_cannot_start_while_it_is_held(setup: Any, tmp_path: Path) -> None:
    _, conn, cfg = setup
    config = load_config(cfg)
    journal, _ = _master(conn)
    with InstanceLock(config.state_path(POSITION_FILE)):  # a relay that has not written its status yet
        refused = run_cli("positions", "set", "-c", str(cfg), "--file", journal)
        assert refused.returncode == 2 and "position lock" in refused.stderr, refused.stderr
        second = RelayProcess(cfg, tmp_path / "second.log").start()
        try:
            assert second.wait(60) != 0, "a second relay of the same instance must refuse to start"
        finally:
            second.stop()
        assert "holds" in second.log()
    done = run_cli("positions", "set", "-c", str(cfg), "--file", journal)
    assert done.returncode == 0, done.stderr


def test_with_ha_set_is_refused_while_zookeeper_has_an_active_relay(
    setup: Any, zk_service: ZooKeeperService
) -> None:
    _, conn, cfg = setup
    data = yaml.safe_load(cfg.read_text())
    root = f"/relay-test/{uuid.uuid4().hex}"
    data["ha"] = {
        "enabled": True,
        "zookeeper": zk_service.hosts,
        "root": root,
        "session_timeout_seconds": 4.0,
    }
    data["positions"] = {"backend": "zookeeper"}
    cfg.write_text(yaml.safe_dump(data))
    config = load_config(cfg)
    journal, _ = _master(conn)
    leader = Leadership(config.ha, config.instance)
    leader.start()
    try:
        assert leader.acquire(threading.Event())
        refused = run_cli("positions", "set", "-c", str(cfg), "--file", journal)
        assert refused.returncode == 2 and "active HA relay" in refused.stderr, refused.stderr
    finally:
        leader.close()  # resigns: the running node goes at once

    done = run_cli("positions", "set", "-c", str(cfg), "--file", journal)
    assert done.returncode == 0, done.stderr
    client = connect(config.ha)
    try:
        point, _ = read_position_node(client, Layout(root, config.instance).position)
    finally:
        client.stop()
        client.close()
    assert point is not None and (point.journal, point.offset) == (journal, 4)
    shown = json.loads(run_cli("positions", "show", "-c", str(cfg), "--json").stdout)
    assert shown["position"] == f"{journal}:4" and shown["store"].startswith("zookeeper")
