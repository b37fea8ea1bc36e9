"""The service fixtures and ``relay dev`` give what the rest of the suite relies on, against real servers."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pymysql
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource
from confluent_kafka.cimpl import NewTopic
from kazoo.client import KazooClient

from relay.dev import services
from relay.dev.services import KafkaService, MySQLService, ZooKeeperService, launch
from relay.errors import ConfigError, ServiceError

REPO = Path(__file__).resolve().parents[2]


def _query(conn: Any, sql: str) -> list[tuple[Any, ...]]:
    with conn.cursor() as cur:
        cur.execute(sql)
        return list(cur.fetchall())


def _binlog_status_sql(service: MySQLService) -> str:
    # MySQL 8.4 removed SHOW MASTER STATUS (8.2 added SHOW BINARY LOG STATUS); MariaDB keeps it.
    if service.flavor == "mysql" and not service.version.startswith(("5.", "8.0", "8.1")):
        return "SHOW BINARY LOG STATUS"
    return "SHOW MASTER STATUS"


# ---------------------------------------------------------------------------------------------------------
# Value types (no server needed)
# ---------------------------------------------------------------------------------------------------------


def test_mysql_service_round_trips_through_text() -> None:
    svc = MySQLService("127.0.0.1", 3307, "ro:ot", "p@ss/w?rd", "mariadb", "10.11.19-MariaDB", "relay", "r&p")
    assert MySQLService.parse(str(svc)) == svc
    assert svc.url == "mysql://ro%3Aot:p%40ss%2Fw%3Frd@127.0.0.1:3307"
    assert svc.replication_url == "mysql://relay:r%26p@127.0.0.1:3307"


def test_mysql_service_from_environment_uses_one_account_for_both() -> None:
    svc = MySQLService.parse("mysql://repl:secret@db.example:3306")
    assert (svc.replication_user, svc.replication_password) == ("repl", "secret")
    assert svc.url == "mysql://repl:secret@db.example:3306"
    assert MySQLService.parse(str(svc)) == svc


@pytest.mark.parametrize(
    "text", ["postgres://a:b@h:1", "mysql://h:1", "mysql://a:b@h:x", "mysql://a:b@h:1?flavor=x"]
)
def test_mysql_service_rejects_bad_urls(text: str) -> None:
    with pytest.raises(ConfigError):
        MySQLService.parse(text)


def test_kafka_and_zookeeper_round_trip() -> None:
    assert str(KafkaService.parse("h1:9092,h2:9093")) == "h1:9092,h2:9093"
    assert str(ZooKeeperService.parse("127.0.0.1:2181")) == "127.0.0.1:2181"
    with pytest.raises(ConfigError):
        KafkaService.parse("no-port")


# ---------------------------------------------------------------------------------------------------------
# MySQL / MariaDB
# ---------------------------------------------------------------------------------------------------------


def test_mysql_has_the_binlog_a_relay_needs(mysql_service: MySQLService) -> None:
    with contextlib.closing(mysql_service.connect()) as conn:
        rows = _query(conn, "SELECT @@log_bin, @@binlog_format, @@binlog_row_image, @@binlog_row_metadata")
    assert rows == [(1, "ROW", "FULL", "FULL")]


def test_replication_user_sees_binlog_status_and_nothing_more(mysql_service: MySQLService) -> None:
    assert mysql_service.replication_user
    with contextlib.closing(mysql_service.connect_replication()) as conn:
        status = _query(conn, _binlog_status_sql(mysql_service))
        logs = _query(conn, "SHOW BINARY LOGS")
        assert status and status[0][0] in {row[0] for row in logs}
        if mysql_service.replication_user != mysql_service.user:  # a least-privilege account of ours
            with pytest.raises(pymysql.err.OperationalError, match="denied"):
                _query(conn, "CREATE DATABASE relay_must_not_exist")


def test_fresh_schema_is_usable_and_logged_in_row_format(
    mysql_service: MySQLService, fresh_schema: str
) -> None:
    with contextlib.closing(mysql_service.connect(database=fresh_schema)) as conn:
        file, start = _query(conn, _binlog_status_sql(mysql_service))[0][:2]
        _query(conn, "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))")
        _query(conn, "INSERT INTO t VALUES (1, 'é')")
        events = _query(conn, f"SHOW BINLOG EVENTS IN '{file}' FROM {start}")
    kinds = [row[2] for row in events]
    assert "Write_rows_v1" in kinds or "Write_rows" in kinds, kinds


def test_extra_server_options_make_a_misconfigured_server(
    mysql_server_factory: Callable[..., MySQLService],
) -> None:
    svc = mysql_server_factory("--binlog-format=STATEMENT", "--log-bin-compress=ON")
    with contextlib.closing(svc.connect()) as conn:
        assert _query(conn, "SELECT @@binlog_format, @@log_bin_compress") == [("STATEMENT", 1)]


def test_failed_start_reports_the_server_log(tmp_path: Path) -> None:
    try:
        services.find_binary("mariadbd")
    except ServiceError as exc:
        pytest.skip(str(exc))
    opts = services.StartOptions(tmp_path / "bad", extra_args=("--no-such-option=1",))
    with pytest.raises(ServiceError, match="no-such-option"):
        services.start_mysql(opts)


# ---------------------------------------------------------------------------------------------------------
# Broker and ZooKeeper
# ---------------------------------------------------------------------------------------------------------


def test_broker_round_trips_a_record(kafka_service: KafkaService) -> None:
    topic = f"relay-test-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(kafka_service.client_config())
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(30)
    producer = Producer({**kafka_service.client_config(), "acks": "all", "enable.idempotence": True})
    producer.produce(topic, key=b"k1", value=b"hello")
    assert producer.flush(30) == 0
    consumer = Consumer({**kafka_service.client_config(), "group.id": topic, "enable.auto.commit": False})
    try:
        # assign(), not subscribe(): a group's first subscribe can take tens of seconds on some brokers.
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + 30
        msg = None
        while msg is None and time.monotonic() < deadline:
            got = consumer.poll(0.5)
            if got is not None and got.error() is None:
                msg = got
        assert msg is not None, "no record came back within 30s"
        assert (msg.key(), msg.value()) == (b"k1", b"hello")
    finally:
        consumer.close()


def test_zookeeper_creates_and_reads_a_node(zk_service: ZooKeeperService) -> None:
    client = KazooClient(hosts=zk_service.hosts)
    client.start(timeout=30)
    try:
        path = f"/relay-test/{uuid.uuid4().hex[:8]}"
        client.create(path, b"v1", makepath=True)
        data, stat = client.get(path)
        assert (data, stat.version) == (b"v1", 0)
    finally:
        client.stop()
        client.close()


# ---------------------------------------------------------------------------------------------------------
# relay dev up | status | down
# ---------------------------------------------------------------------------------------------------------


def _dev(state_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # --state-dir after the action, as an operator writes it (it was refused there); RELAY_DEV_DIR names
    # another folder, so the flag is proved to win
    env = {**os.environ, "RELAY_DEV_DIR": str(state_dir.parent / "not-this-one")}
    argv = [sys.executable, "-m", "relay.cli", "dev", *args, "--state-dir", str(state_dir)]
    return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=180, check=False)


def test_dev_up_status_down_leaves_nothing_behind(tmp_path: Path) -> None:
    state_dir = tmp_path / "dev"
    up = _dev(state_dir, "up", "--json")
    pids: list[tuple[int, int]] = []
    try:
        assert up.returncode == 0, up.stderr
        started = json.loads(up.stdout)["services"]
        assert set(started) == {"mysql", "kafka", "zk"}
        recorded = json.loads((state_dir / "state.json").read_text())["services"]
        pids = [(rec["pid"], rec["start_time"]) for rec in recorded.values()]
        assert all(services.pid_alive(pid, start) for pid, start in pids)
        # The servers outlive `up`, are in their own sessions, and answer.
        assert services.mysql_answers(MySQLService.parse(started["mysql"]["replication_url"]))

        status = _dev(state_dir, "status", "--json")
        assert status.returncode == 0, status.stdout + status.stderr
        rows = json.loads(status.stdout)["services"]
        assert all(row["alive"] and row["answers"] for row in rows.values()), rows

        down = _dev(state_dir, "down", "--json")
        assert down.returncode == 0, down.stderr
        assert sorted(json.loads(down.stdout)["stopped"]) == ["kafka", "mysql", "zk"]
        assert not any(services.pid_alive(pid, start) for pid, start in pids)
        assert not state_dir.exists() or not any(state_dir.iterdir())
        assert _dev(state_dir, "status").returncode == 3
        assert not (tmp_path / "not-this-one").exists()
    finally:
        for pid, start in pids:  # never leave servers behind, even when an assertion failed
            services.stop_pid(pid, start, timeout=5.0)


@pytest.mark.long
def test_dev_up_with_three_brokers_runs_a_replicated_cluster_and_down_stops_every_node(
    tmp_path: Path,
) -> None:
    """``relay dev up --brokers 3``: three KRaft nodes, topics replicated three times with two in sync
    required; ``status`` sees a node killed; ``up`` asked for one broker refuses while three run."""
    state_dir = tmp_path / "dev"
    up = _dev(state_dir, "up", "--only", "kafka", "--brokers", "3", "--json")
    pids: list[tuple[int, int]] = []
    try:
        assert up.returncode == 0, up.stderr
        kafka = json.loads(up.stdout)["services"]["kafka"]
        assert kafka["broker"] == "kafka" and kafka["brokers"] == 3
        record = json.loads((state_dir / "state.json").read_text())["services"]["kafka"]
        pids = [(record["pid"], record["start_time"]), *((p, t) for p, t in record["others"])]
        assert len(pids) == 3 and all(services.pid_alive(p, t) for p, t in pids)
        service = KafkaService.parse(kafka["bootstrap_servers"])
        assert services.kafka_brokers(service) == 3
        topic = f"dev-{uuid.uuid4().hex[:8]}"
        admin = AdminClient(service.client_config())
        admin.create_topics([NewTopic(topic, 3)])[topic].result(60)  # the cluster's default replication
        meta = admin.list_topics(topic, timeout=30).topics[topic]
        assert all(len(p.replicas) == 3 for p in meta.partitions.values())
        configs = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)])
        [described] = [future.result(30) for future in configs.values()]
        assert described["min.insync.replicas"].value == "2"

        refused = _dev(state_dir, "up", "--only", "kafka")
        assert refused.returncode == 2 and "relay dev down first" in refused.stderr, refused.stderr
        services.stop_pid(*pids[2], timeout=30.0)  # one node gone
        status = _dev(state_dir, "status", "--json")
        assert status.returncode == 1 and not json.loads(status.stdout)["services"]["kafka"]["alive"]

        down = _dev(state_dir, "down", "--json")
        assert down.returncode == 0, down.stderr
        assert not any(services.pid_alive(pid, start) for pid, start in pids)
    finally:
        for pid, start in pids:
            services.stop_pid(pid, start, timeout=5.0)


@pytest.mark.parametrize("start", [services.start_mysql, services.start_kafka, services.start_zookeeper])
def test_a_port_taken_before_the_server_binds_it_is_retried(
    start: Callable[[services.StartOptions], services.Running[Any]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with socket.socket() as squatter:
        squatter.bind((services.LOOPBACK, 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        # Then free ones (an Apache Kafka node takes a second port for its controller).
        ports = itertools.chain([taken], iter(services.free_port, None))
        # start_on_free_port asks its own module (relay.dev.services.launch) for a port.
        monkeypatch.setattr(launch, "free_port", lambda: next(ports))
        with start(services.StartOptions(tmp_path / "svc")) as running:
            assert str(taken) not in str(running.service)
            assert running.process.alive()
        assert not running.process.alive()
