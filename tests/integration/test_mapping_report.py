"""Which mapping a running relay uses, and which version it refused and why — where operators look.

Before: `relay status` showed neither; only a log line and a metric (off by default) told that a relay
kept an old version after refusing a new one. A relay (a child process, real MariaDB and broker, metrics
on) is given a broken version by hand: `relay status` (text and --json), the metrics and `relay mapping
history` name the version in use, the refused version and the key that broke it; after a valid edit
through the CLI the relay switches and history marks the new version as the one it runs. With HA, the
member node in ZooKeeper carries the same report, so `mapping history` sees the replicas too.
"""

from __future__ import annotations

import dataclasses
import json
import math
import socket
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from relay.dev import services
from tests.integration.relay_harness import (
    REPO_ROOT,
    RelayProcess,
    master_position,
    sharded_schema,
    wait_for,
    write_configs,
)

pytestmark = pytest.mark.integration


@pytest.fixture()
def prefix(mysql_service: Any) -> Iterator[str]:
    with sharded_schema(mysql_service, "mr", 1, 1) as name:
        yield name


def _mapping(prefix: str) -> dict[str, Any]:
    return {
        "version": 1,
        "unmapped": {"action": "drop"},
        "logical_dbs": {
            prefix: {
                "physical": [f"{prefix}_\\d+"],
                "key_shard": "physical",
                "tables": {"orders": {"physical": ["orders_\\d+"], "topic": f"{prefix}.orders"}},
            }
        },
    }


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "relay.cli", *argv],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _metrics(port: int) -> list[tuple[str, dict[str, str], float]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
    except OSError:
        return []
    return [(s.name, s.labels, s.value) for f in text_string_to_metric_families(text) for s in f.samples]


def _value(port: int, name: str) -> float:
    return next((v for n, _, v in _metrics(port) if n == name), math.nan)


def test_status_metrics_and_history_show_the_version_in_use_and_the_one_refused(
    mysql_service: Any, kafka_service: Any, prefix: str, tmp_path: Path
) -> None:
    port = services.free_port()
    cfg = write_configs(
        tmp_path,
        mysql=mysql_service,
        bootstrap=kafka_service.bootstrap_servers,
        mapping=_mapping(prefix),
        start=master_position(mysql_service.connect()),
        instance=prefix,
        include=f"{prefix}_\\d+\\..*",
        extra={"mapping": {"reload_check_seconds": 0.1}, "metrics": {"port": port}},
    )
    mfile = cfg.parent / "mapping.yaml"
    relay = RelayProcess(cfg, tmp_path / "relay.log").start()
    try:
        wait_for(lambda: relay.status().get("state") == "running", 60, "the relay running")
        status = json.loads(_cli("status", "-c", str(cfg), "--json").stdout)
        assert status["mapping_version"] == 1 and status["mapping_stored"] == 1
        assert status["mapping_refused"] is None

        # A hand edit that breaks a regex, as version 5: the relay keeps version 1 and says why.
        original = mfile.read_text()
        broken = yaml.safe_load(original)
        broken["version"] = 5
        broken["logical_dbs"][prefix]["tables"]["orders"]["physical"] = ["orders_(\\d+"]
        mfile.write_text(yaml.safe_dump(broken))
        wait_for(lambda: (relay.status().get("mapping_refused") or {}).get("version") == 5, 30, "refused")

        out = _cli("status", "-c", str(cfg), "--json")
        assert out.returncode == 0, out.stderr
        status = json.loads(out.stdout)
        assert status["mapping_version"] == 1 and status["mapping_refused"]["version"] == 5
        key = f"logical_dbs.{prefix}.tables.orders.physical[0]"
        assert key in status["mapping_refused"]["reason"]
        assert str(status["mapping_stored"]).startswith("unreadable:")
        text = _cli("status", "-c", str(cfg)).stdout
        lines = text.splitlines()
        assert any(line.split() == ["mapping_version", "1"] for line in lines), text
        refused = lines[[line.split()[0] for line in lines].index("mapping_refused") :][:4]
        assert any(line.split()[:2] == ["version", "5"] for line in refused), text
        assert any(key in line for line in refused), text

        samples = _metrics(port)
        assert ("relay_mapping_version", {}, 1.0) in samples
        assert ("relay_mapping_refused_version", {}, 5.0) in samples
        info = [labels for name, labels, _ in samples if name == "relay_mapping_refused_info"]
        assert len(info) == 1 and info[0]["version"] == "5" and key in info[0]["reason"]

        me = f"{prefix}@{socket.gethostname()}:{relay.pid}"
        history = _cli("mapping", "history", "-c", str(cfg))
        assert history.returncode == 0, history.stderr
        first = next(line for line in history.stdout.splitlines() if line.split()[0] == "1")
        assert first.endswith(f"<= runs on {me}")
        assert f"{me} (status file): runs version 1; refused version 5 at" in history.stdout

        # Repaired by hand, then edited through the CLI: version 2 is stored and the relay runs it.
        mfile.write_text(original)
        edit = _cli("mapping", "tag", "set", f"{prefix}.orders", "hot", "-c", str(cfg))
        assert edit.returncode == 0, edit.stderr
        wait_for(lambda: relay.status().get("mapping_version") == 2, 30, "the switch to version 2")
        wait_for(lambda: _value(port, "relay_mapping_version") == 2, 10, "the metric following")
        history = _cli("mapping", "history", "-c", str(cfg)).stdout
        second = next(line for line in history.splitlines() if line.split()[0] == "2")
        assert second.endswith(f"<= runs on {me}") and "<=" not in history.splitlines()[0]
    finally:
        relay.stop()
    stopped = json.loads(_cli("status", "-c", str(cfg), "--json").stdout)
    assert stopped["mapping_version"] == "2 (last run)"


def test_history_shows_the_ha_replicas_from_zookeeper(
    zk_service: Any, mysql_service: Any, prefix: str, tmp_path: Path
) -> None:
    """The member nodes carry what each replica announced: the active one runs its version, a standby
    is shown standing by, wherever their status files are."""
    from relay.config.load import load_config
    from relay.ha.leadership import Leadership

    root = f"/relay-test/{prefix}"
    cfg = write_configs(
        tmp_path,
        mysql=mysql_service,
        bootstrap="127.0.0.1:1",
        mapping=_mapping(prefix),
        start=None,
        instance=prefix,
        extra={
            "ha": {"enabled": True, "zookeeper": zk_service.hosts, "root": root, "member_id": "a"},
            "positions": {"backend": "zookeeper"},
        },
    )
    config = load_config(cfg)
    active = Leadership(config.ha, prefix)
    standby = Leadership(dataclasses.replace(config.ha, member_id="b"), prefix)
    try:
        for lead in (active, standby):
            lead.start()
        assert active.acquire(threading.Event())
        active.announce(mapping={"mapping_version": 1, "mapping_refused": None})
        standby.announce(mapping={"mapping_version": 1})
        out = _cli("mapping", "history", "-c", str(cfg))
        assert out.returncode == 0, out.stderr
        first = next(line for line in out.stdout.splitlines() if line.split()[0] == "1")
        assert first.endswith(f"<= runs on {prefix}@a")
        assert f"{prefix}@a (ZooKeeper (HA)): runs version 1" in out.stdout
        assert f"{prefix}@b (ZooKeeper (HA)): standing by (read version 1)" in out.stdout
    finally:
        for lead in (active, standby):
            lead.close()
