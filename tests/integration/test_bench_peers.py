"""``relay bench --peers debezium`` end to end, as a user runs it: the bench installs Debezium on Kafka
Connect (the ``debezium`` set of relay.common.jars), starts its own MariaDB and Apache Kafka, and runs the
relay, the produce-only ceiling and Debezium on W2 and S, each run's topics read back by its own consumer
and checked against SELECT. What is asserted: every system's topics held every row once and the sampled
rows as SELECT has them, and each table has its figures; no speed (the figures are the bench's to
report). Minutes long (a JVM per Debezium run): in the longer suite."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# A JVM per Debezium run: about 5 minutes at a load of 15-25 on 2 cores, past pytest's 300 s default.
pytestmark = [pytest.mark.long, pytest.mark.timeout(1800)]

REPO = Path(__file__).resolve().parents[2]


def test_the_relay_and_debezium_side_by_side_hold_every_row() -> None:
    argv = [sys.executable, "-m", "relay.cli", "bench", "--quick", "--workloads", "W2", "--peers", "debezium"]
    argv += [
        "--no-baselines",
        "--snapshot-rows",
        "3000",
        "--latency-seconds",
        "2",
        "--stall-mb",
        "0",
        "--json",
    ]
    done = subprocess.run(
        argv,
        cwd=REPO,
        check=False,
        capture_output=True,
        text=True,
        timeout=1700,  # inside the test's own timeout: the bench ends (and cleans up) on its own
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout)
    tables = {t["workload"]: t for t in report["side_by_side"]}
    assert sorted(tables) == ["S", "W2"]
    assert "Debezium" in report["machine"]["peers"]["debezium"]
    for name, table in tables.items():
        systems = {s["name"]: s for s in table["systems"]}
        assert sorted(systems) == ["debezium", "relay"], name
        for system in [*systems.values(), table["produce_only"]]:
            assert system["error"] == "", (name, system["name"], system["error"])
            assert system["verified"] is True, (name, system["name"], system["verdicts"])
            assert system["rows_per_s"]["median"] > 0 and system["cpu_us_per_row"]["median"] > 0
        assert systems["debezium"]["peak_rss_mb"]["median"] > 0
        assert set(table["relay_vs"]) == {"debezium"}
    for system in tables["W2"]["systems"]:
        latency = system["latency"]
        assert latency["samples"] > 0 and latency["missing"] == 0, (system["name"], latency)
