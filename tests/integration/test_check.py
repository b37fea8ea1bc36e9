"""``relay check``: everything a start would check, one line per check, exit 0/1 — and nothing written.

Against the real MariaDB, broker and ZooKeeper: a sound installation passes (every line ok, skip or
warn); a broken one fails on each thing a start would stop on (an overlap only the server's tables
show, a topic present with other settings, a topic absent while creation is off — but not the relay's
own compacted topic, which it creates whatever ``topics.create`` says — the metrics port taken), each
named on its own line. Proven from the outside that nothing was written: the files under
the test folder (no state directory created), the broker's topic list and the ZooKeeper tree under the
HA root are the same before and after.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from relay.dev import services
from tests.integration.relay_harness import sharded_schema, write_configs

pytestmark = pytest.mark.integration


@pytest.fixture()
def prefix(mysql_service: Any) -> Iterator[str]:
    with sharded_schema(mysql_service, "ck", 2, 2) as name:
        yield name


def _mapping(prefix: str, **orders: Any) -> dict[str, Any]:
    return {
        "version": 1,
        "topics": {"partitions": 2, "config": {"cleanup.policy": "delete"}},
        "unmapped": {"action": "drop"},
        "logical_dbs": {
            prefix: {
                "physical": [f"{prefix}_\\d+"],
                "key_shard": "physical",
                "tables": {"orders": {"physical": ["orders_\\d+"], "topic": f"{prefix}.orders", **orders}},
            }
        },
    }


def _check(cfg: Path, cwd: Path) -> tuple[int, list[str]]:
    out = subprocess.run(
        [sys.executable, "-m", "relay.cli", "check", "-c", str(cfg)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "Traceback" not in out.stderr, out.stderr
    return out.returncode, out.stdout.splitlines()


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _topics(bootstrap: str) -> set[str]:
    return set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics)


def _tree(zk: KazooClient, path: str) -> list[str]:
    if zk.exists(path) is None:
        return []
    out = [path]
    for child in sorted(zk.get_children(path)):
        out.extend(_tree(zk, f"{path.rstrip('/')}/{child}"))
    return out


def _config(tmp: Path, mysql: Any, bootstrap: str, mapping: dict[str, Any], extra: dict[str, Any]) -> Path:
    cfg = write_configs(tmp, mysql=mysql, bootstrap=bootstrap, mapping=mapping, start=None, extra=extra)
    data = yaml.safe_load(cfg.read_text())
    data["state_dir"] = "var/{instance}"  # relative: under the working directory the check runs in
    data["snapshot"] = {"mode": "when_needed"}  # SELECT on the captured tables is then needed too
    cfg.write_text(yaml.safe_dump(data))
    return cfg


def test_a_sound_installation_passes_and_nothing_is_written(
    mysql_service: Any, kafka_service: Any, zk_service: Any, prefix: str, tmp_path: Path
) -> None:
    bootstrap = kafka_service.bootstrap_servers
    root = f"/relay-check-{uuid.uuid4().hex[:8]}"
    ha = {"enabled": True, "zookeeper": zk_service.hosts, "root": root, "connect_timeout_seconds": 5.0}
    extra = {"ha": ha, "positions": {"backend": "zookeeper"}, "metrics": {"port": services.free_port()}}
    # Heartbeats: their topic is checked like the others; the query writes, so it is proved at start only.
    beat = f"UPDATE {prefix}_00.customers SET name = name WHERE id = 0"
    extra["kafka"] = {"heartbeat_topic": f"{prefix}.heartbeats", "heartbeat_query": beat}
    cfg = _config(tmp_path, mysql_service, bootstrap, _mapping(prefix), extra)
    work = tmp_path / "work"
    work.mkdir()
    zk = KazooClient(hosts=zk_service.hosts)
    zk.start(timeout=10)
    try:
        before = (_files(tmp_path), _topics(bootstrap), _tree(zk, root))
        code, lines = _check(cfg, work)
        after = (_files(tmp_path), _topics(bootstrap), _tree(zk, root))
    finally:
        zk.stop()
        zk.close()
    text = "\n".join(lines)
    assert code == 0, text
    assert all(line.split()[0] in ("ok", "warn", "skip") for line in lines), text
    for expected in (
        "ok    config:",
        "ok    state directory:",
        "ok    mapping: file",
        "ok    source 127.0.0.1",
        "binlog_format: ROW",
        "binlog_row_image: FULL",
        "ok    source grants: REPLICATION SLAVE",
        "ok    source grants: SELECT on the",
        "ok    mapping against the source: ",
        "ok    start: current end of the binlog",
        f"ok    topic {prefix}.orders: absent: created at start",
        f"ok    topic {prefix}.heartbeats: absent: created at start",
        "skip  heartbeat query: it writes to the source",
        "ok    zookeeper: ",
        "ok    metrics: ",
    ):
        assert expected in text, f"{expected!r} missing from:\n{text}"
    assert before == after, "relay check wrote something (files, topics or ZooKeeper nodes)"
    assert not (work / "var").exists() and f"{prefix}.orders" not in after[1] and after[2] == []


def test_a_broken_installation_fails_on_each_problem_one_line_each(
    mysql_service: Any, kafka_service: Any, prefix: str, tmp_path: Path
) -> None:
    bootstrap = kafka_service.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    present = f"{prefix}.orders"  # exists, compacted: the mapping wants cleanup.policy=delete
    admin.create_topics([NewTopic(present, 1, 1, config={"cleanup.policy": "compact"})])[present].result(10)
    # orders_x\w and orders_\w1 share only orders_x1, which no example name of either pattern shows
    # (the mapping is valid on its own); the server has that table
    with mysql_service.connect().cursor() as cur:
        cur.execute(f"CREATE TABLE {prefix}_00.orders_x1 (id INT PRIMARY KEY)")
    mapping = _mapping(prefix)
    mapping["logical_dbs"][prefix]["tables"]["orders"]["physical"] = ["orders_x\\w"]
    mapping["logical_dbs"][prefix]["tables"]["hot"] = {"physical": ["orders_\\w1"], "topic": f"{prefix}.hot"}
    mapping["topics"]["create"] = False
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        # the relay creates its own compacted topic (heartbeats) whatever topics.create says
        extra = {"metrics": {"port": taken.getsockname()[1]}, "kafka": {"heartbeat_topic": f"{prefix}.beats"}}
        cfg = _config(tmp_path, mysql_service, bootstrap, mapping, extra)
        code, lines = _check(cfg, tmp_path)
    text = "\n".join(lines)
    assert code == 1, text
    failed = [line for line in lines if line.startswith("FAIL")]
    assert any(f"'{prefix}_00.orders_x1' is claimed by both" in line for line in failed), text
    assert any(
        f"topic {present}: present with other settings: cleanup.policy='compact'" in line for line in failed
    )
    assert any(f"topic {prefix}.hot: absent, and topics.create is false" in line for line in failed), text
    assert any(line.startswith("FAIL  metrics:") and "in use" in line for line in failed), text
    assert f"ok    topic {prefix}.beats: absent: created at start" in text, text


def test_a_bad_config_is_every_problem_one_line_each(tmp_path: Path) -> None:
    cfg = tmp_path / "relay.yaml"
    cfg.write_text("source:\n  port: many\n  port: 3306\nsnapshot: {mode: always}\nstatus: {file: x.json}\n")
    code, lines = _check(cfg, tmp_path)
    assert code == 1
    assert all(line.startswith("FAIL  config: ") for line in lines), lines
    keys = sorted(line.removeprefix("FAIL  config: ").split(": ")[0] for line in lines)
    assert keys == sorted([f"{cfg}:3:3", "snapshot.mode", "status.file"]), lines
