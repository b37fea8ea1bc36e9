"""The metrics tell the truth, against real services.

- lag (seconds and bytes) rises while the relay's own broker is frozen (SIGSTOP, as in
  test_relay_faults.py) and falls after it returns; /ready follows it;
- the retention runway matches the server's ``binlog_expire_logs_seconds`` and the age of the binlog file
  holding the saved position;
- the MySQL password never appears in the captured logs, ``relay status`` output or the metrics — the relay
  runs as the least-privilege account that deploy/mysql/relay-user.sql creates, with a distinctive password.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from relay.dev import services
from relay.dev.services import KafkaService
from tests.integration.relay_harness import (
    REPO_ROOT,
    RelayProcess,
    Writer,
    create_shards,
    drop_shards,
    master_position,
    wait_for,
    write_configs,
)

pytestmark = pytest.mark.integration

DEPLOY_SQL = REPO_ROOT / "deploy" / "mysql" / "relay-user.sql"
SHARDS, TABLES = 2, 2
KAFKA_SECRET = f"Kafka-{uuid.uuid4().hex[:10]}-secret"


def scrape(port: int) -> dict[str, float]:
    """Every sample of /metrics by name (labels dropped: each relay metric has one series)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return {s.name: s.value for fam in text_string_to_metric_families(text) for s in fam.samples}


def endpoint(port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def metric(port: int, name: str) -> float:
    try:
        return scrape(port).get(name, math.nan)
    except OSError:
        return math.nan


@pytest.fixture
def relay_account(mysql_service: Any) -> Iterator[tuple[str, str, str]]:
    """(prefix, user, password): an account made by deploy/mysql/relay-user.sql for this test's schemas."""
    prefix = f"mt{time.monotonic_ns() % 10**8}"
    user, password = f"relay_{prefix}", f"Pw-{uuid.uuid4().hex[:12]}-secret"
    # The file takes its values from user variables (nothing is substituted into it): set them, then run
    # its statements in the same session, as `SOURCE` in a client session would.
    sql = re.sub(r"(?m)^--[^\n]*", "", DEPLOY_SQL.read_text())
    conn = mysql_service.connect()
    with conn.cursor() as cur:
        cur.execute(
            "SET @relay_user = %s, @relay_password = %s, @relay_schemas = %s",
            (user, password, f"{prefix}\\_%"),  # the pattern prefix\_%: a literal underscore
        )
        for statement in sql.split(";"):
            if statement.strip():
                cur.execute(statement)
    create_shards(conn, prefix, SHARDS, TABLES)
    yield prefix, user, password
    drop_shards(conn, prefix, SHARDS)
    with conn.cursor() as cur:
        cur.execute(f"DROP USER '{user}'@'%'")
    conn.close()


@pytest.fixture
def own_broker(spare_broker: services.KafkaCluster) -> services.KafkaCluster:
    """A broker of its own (the session's spare): freezing it must not stall the session's shared broker."""
    return spare_broker


def _configure(
    tmp: Path, mysql: Any, bootstrap: str, account: tuple[str, str, str], monkeypatch: pytest.MonkeyPatch
) -> tuple[Path, int]:
    prefix, user, password = account
    monkeypatch.setenv("RELAY_TEST_MYSQL_PASSWORD", password)  # the relay child inherits it
    monkeypatch.setenv("RELAY_TEST_KAFKA_PASSWORD", KAFKA_SECRET)
    port = services.free_port()
    cfg = write_configs(
        tmp,
        mysql=mysql,
        bootstrap=bootstrap,
        mapping=_mapping(prefix),
        start=master_position(mysql.connect()),
        instance=prefix,
        include=f"{prefix}_\\d+\\..*",
        extra={
            "source": {"user": user, "password": "${RELAY_TEST_MYSQL_PASSWORD}"},
            "store": {"buffer_size": 256, "batch_mode": "ITEMSIZE"},
            "publish": {"batch_size": 32, "drain_seconds": 5.0, "retry": {"initial": 0.2, "maximum": 1.0}},
            # SASL credentials as a real deployment passes them (unused by this PLAINTEXT broker).
            "kafka": {
                "delivery_timeout_seconds": 4.0,
                "settings": {"sasl.username": "relay", "sasl.password": "${RELAY_TEST_KAFKA_PASSWORD}"},
            },
            "logging": {"level": "DEBUG", "format": "json"},
            "metrics": {"port": port, "server_check_seconds": 0.3, "ready_max_lag_seconds": 3.0},
        },
    )
    return cfg, port


def _mapping(prefix: str) -> dict[str, Any]:
    return {
        "version": 7,
        "topics": {"partitions": 2, "create": True},
        "unmapped": {"action": "drop"},
        "logical_dbs": {
            prefix: {
                "physical": [f"{prefix}_\\d+"],
                "tables": {"orders": {"physical": ["orders_\\d+"], "topic": f"{prefix}.orders"}},
            }
        },
    }


def test_lag_rises_while_the_broker_is_frozen_and_falls_after_and_no_secret_leaks(
    mysql_service: Any,
    own_broker: services.Running[KafkaService],
    relay_account: tuple[str, str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bootstrap = own_broker.service.bootstrap_servers
    cfg, port = _configure(tmp_path, mysql_service, bootstrap, relay_account, monkeypatch)
    writer = Writer(mysql_service, relay_account[0], SHARDS, TABLES, rate=150)
    writer.start()
    relay = RelayProcess(cfg, tmp_path / "relay.log").start()
    try:
        wait_for(lambda: metric(port, "relay_records_published_total") >= 50, 60, "the relay publishing")
        wait_for(lambda: endpoint(port, "/ready") == 200, 30, "ready: active and caught up")
        assert endpoint(port, "/health") == 200
        first = scrape(port)
        assert first["relay_mapping_version"] == 7 and first["relay_leader"] == 1
        assert first["relay_source_up"] == 1 and first["relay_lag_seconds"] < 3

        broker = own_broker.process.pid
        os.kill(broker, signal.SIGSTOP)
        try:
            # Nothing is acknowledged: the last acked change ages, the binlog moves on.
            wait_for(lambda: metric(port, "relay_lag_seconds") >= 6, 30, "lag in seconds rising")
            frozen = scrape(port)
            wait_for(
                lambda: metric(port, "relay_lag_bytes") > frozen["relay_lag_bytes"], 15, "lag in bytes rising"
            )
            assert metric(port, "relay_lag_seconds") >= frozen["relay_lag_seconds"]
            assert endpoint(port, "/ready") == 503 and endpoint(port, "/health") == 200
            assert metric(port, "relay_position_offset") == frozen["relay_position_offset"]
        finally:
            os.kill(broker, signal.SIGCONT)

        wait_for(lambda: metric(port, "relay_lag_seconds") < 3, 60, "lag falling after the broker returned")
        wait_for(lambda: endpoint(port, "/ready") == 200, 30, "ready again")
        after = scrape(port)
        assert after["relay_rows_published_total"] > frozen["relay_rows_published_total"]
        assert after["relay_publish_latency_seconds_count"] >= after["relay_batches_acked_total"] - 1 > 0
        writer.stop()
        relay.signal(signal.SIGTERM)
        # A clean stop may give batches still in flight publish.drain_seconds (30 s by default) to land.
        try:
            code = relay.wait(60)
        except subprocess.TimeoutExpired:
            raise AssertionError("no clean stop within 60 s of SIGTERM:\n" + relay.log()[-3000:]) from None
        assert code == 0, relay.log()[-2000:]
    finally:
        writer.halt.set()
        relay.stop()

    status = subprocess.run(
        [sys.executable, "-m", "relay.cli", "status", "-c", str(cfg), "--json"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    log = relay.log()
    assert "effective configuration" in log and "***" in log, "the redaction was not exercised"
    for where, text in (
        ("log", log),
        ("status", status.stdout + status.stderr),
        ("metrics", json.dumps(after)),
    ):
        for secret in (relay_account[2], KAFKA_SECRET):
            assert secret not in text, f"a secret leaked into the {where}"


def test_retention_runway_matches_the_servers_expiry_and_the_file_age(
    mysql_service: Any,
    kafka_service: KafkaService,
    relay_account: tuple[str, str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    expire = 7200
    conn = mysql_service.connect()
    with conn.cursor() as cur:
        cur.execute("SELECT @@GLOBAL.binlog_expire_logs_seconds")
        before = int(cur.fetchone()[0])
        cur.execute(f"SET GLOBAL binlog_expire_logs_seconds = {expire}")
    cfg, port = _configure(
        tmp_path, mysql_service, kafka_service.bootstrap_servers, relay_account, monkeypatch
    )
    relay = RelayProcess(cfg, tmp_path / "relay.log").start()
    try:
        writer = Writer(mysql_service, relay_account[0], SHARDS, TABLES, rate=200)
        writer.start()
        wait_for(lambda: writer.changes >= 30, 30, "some writes")
        writer.stop()
        end = master_position(conn)
        wait_for(lambda: _saved(relay) == end, 60, "the relay caught up")
        # The position is in the file being written: never purged while it is; the runway is the full expiry.
        wait_for(lambda: metric(port, "relay_binlog_expire_seconds") == expire, 10, "expiry read")
        assert expire - 2 <= metric(port, "relay_retention_runway_seconds") <= expire

        t0 = time.time()
        with conn.cursor() as cur:
            cur.execute("FLUSH BINARY LOGS")
        t1 = time.time()
        assert master_position(conn)[0] != end[0] and _saved(relay) == end
        # Let the closed file age, so the runway must count from its rotation, not from now.
        wait_for(lambda: time.time() > t1 + 5, 10, "the closed binlog aging")
        s0 = time.time()
        runway = metric(port, "relay_retention_runway_seconds")
        s1 = time.time()
        low, high = math.floor(t0) + expire - s1 - 1.5, t1 + expire - s0 + 1.5
        assert low <= runway <= high, (low, runway, high)
        assert runway < expire - 3
    finally:
        relay.stop()
        with conn.cursor() as cur:
            cur.execute(f"SET GLOBAL binlog_expire_logs_seconds = {before}")
        conn.close()


def _saved(relay: RelayProcess) -> tuple[str, int] | None:
    text = relay.position()
    if not text:
        return None
    data = json.loads(text)
    return str(data["journal"]), int(data["offset"])
