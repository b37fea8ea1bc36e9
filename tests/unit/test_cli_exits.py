"""The ``relay`` command as a process: a closed pipe ends quietly, and ``relay status`` with ZooKeeper
unreachable answers within the configured connect timeout with one line about it (before: a
BrokenPipeError traceback; 21 s and 15 kazoo warnings). No service is needed: the ports are ones nobody
listens on, the pipe is a real one closed by the reader after one line.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import yaml

RELAY = [sys.executable, "-m", "relay.cli"]


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "RELAY_STATE_DIR": str(tmp_path / "state")}


def _closed_port() -> int:
    with socket.socket() as s:  # bound, never listening: connections are refused or time out
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stderr_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip() and "running pure Python" not in line]


def test_a_reader_that_goes_away_ends_the_command_quietly(tmp_path: Path) -> None:
    # A mapping whose output (`mapping show` prints the parsed mapping, not the file's comments) is far
    # larger than a pipe's buffer: a key of 4,000 long column names, so the command is still writing when
    # the reader closes.
    keys = ", ".join(f"col_{i}_{'z' * 50}" for i in range(4000))
    path = tmp_path / "mapping.yaml"
    path.write_text(
        'logical_dbs:\n  shop:\n    physical: ["shop_\\\\d+"]\n    key_shard: physical\n    tables:\n'
        f'      orders:\n        physical: ["orders_\\\\d+"]\n        key: [{keys}]\n'
    )
    proc = subprocess.Popen(
        [*RELAY, "mapping", "show", "-f", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(tmp_path),
    )
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    assert first
    proc.stdout.close()  # what `| head -1` does
    err = proc.stderr.read().decode()
    code = proc.wait(timeout=60)
    assert "Traceback" not in err and "BrokenPipe" not in err, err
    assert _stderr_lines(err) == [], err
    assert code == 141, code
    full = subprocess.run(
        [*RELAY, "mapping", "show", "-f", str(path)], capture_output=True, env=_env(tmp_path), check=False
    )
    assert full.returncode == 0 and len(full.stdout) > 2 * 65536, "the output must outgrow the pipe's buffer"


def test_status_with_zookeeper_unreachable_answers_within_its_connect_timeout(tmp_path: Path) -> None:
    # Long enough that one wait plus the fixed costs (the interpreter's start and imports: 1 s here, 3 s and
    # more on a loaded 2-core machine) stays clearly under two waits.
    timeout = 8.0
    zk = _closed_port()
    (tmp_path / "mapping.yaml").write_text(
        yaml.safe_dump({"logical_dbs": {"shop": {"physical": ["shop_\\d+"], "key_shard": "physical"}}})
    )
    config = {
        "instance": "t",
        "source": {"host": "127.0.0.1", "port": _closed_port(), "connect_timeout": 1.0},
        "kafka": {"bootstrap_servers": f"127.0.0.1:{_closed_port()}"},
        "mapping": {"file": "mapping.yaml"},
        "positions": {"backend": "zookeeper"},
        "ha": {"enabled": True, "zookeeper": f"127.0.0.1:{zk}", "connect_timeout_seconds": timeout},
    }
    (tmp_path / "relay.yaml").write_text(yaml.safe_dump(config))
    # the fixed cost on this machine now (the interpreter's start and the CLI's imports: 1 s quiet, 5 s and
    # more on a loaded 2-core machine), measured right before, so that the bound is on the waits alone
    started = time.monotonic()
    help_ = [*RELAY, "status", "--help"]
    subprocess.run(help_, capture_output=True, env=_env(tmp_path), timeout=120, check=True)
    fixed = time.monotonic() - started
    started = time.monotonic()
    done = subprocess.run(
        [*RELAY, "status", "-c", str(tmp_path / "relay.yaml")],
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        timeout=120,
        check=False,
    )
    took = time.monotonic() - started
    assert done.returncode == 1, (done.returncode, done.stderr)  # not running
    assert _stderr_lines(done.stderr) == [], done.stderr  # no kazoo warnings
    about = [line for line in done.stdout.splitlines() if "ZooKeeper" in line]
    assert len(about) == 1 and about[0].startswith("zookeeper_error"), done.stdout
    assert f"127.0.0.1:{zk}" in about[0]
    # one wait of the connect timeout (not one per ZooKeeper reader), plus the fixed cost and the MySQL
    # probe of a refused port
    assert took - fixed < 1.5 * timeout, (took, fixed)


def test_a_silent_broker_is_given_up_within_kafka_connect_timeout_seconds(tmp_path: Path) -> None:
    # A broker that accepts connections and never answers: the one-shot command waits the configured
    # kafka.connect_timeout_seconds (default 10 s), says so naming the setting, and ends.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        (tmp_path / "mapping.yaml").write_text(
            yaml.safe_dump({"logical_dbs": {"shop": {"physical": ["shop_\\d+"], "key_shard": "physical"}}})
        )
        config = {
            "instance": "t",
            "source": {"host": "127.0.0.1", "port": _closed_port(), "connect_timeout": 1.0},
            "kafka": {"bootstrap_servers": f"127.0.0.1:{port}", "connect_timeout_seconds": 2.0},
            "mapping": {"file": "mapping.yaml"},
        }
        (tmp_path / "relay.yaml").write_text(yaml.safe_dump(config))
        started = time.monotonic()
        done = subprocess.run(
            [*RELAY, "check", "-c", str(tmp_path / "relay.yaml")],
            capture_output=True,
            text=True,
            env=_env(tmp_path),
            timeout=120,
            check=False,
        )
        took = time.monotonic() - started
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)
    failed = [line for line in done.stdout.splitlines() if line.startswith("FAIL  kafka")]
    assert len(failed) == 1 and "within 2 s" in failed[0] and "kafka.bootstrap_servers" in failed[0], failed
    assert _stderr_lines(done.stderr) == [], done.stderr
    # the wait is the configured 2 s (the line says so); the bound only catches a hang: a loaded 2-core
    # machine takes up to ~10 s to start the interpreter and import the command
    assert took < 30.0, took
