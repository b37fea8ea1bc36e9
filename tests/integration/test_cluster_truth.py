"""What an operator reads about a fleet is what ``relay status --instance`` says of each instance.

Two nodes (``relay cluster run``, real processes) on real ZooKeeper, MariaDB and broker; two instances on
one server: one whose tables see no writes (it reads the other's transactions, filtered out), one whose
producer holds every batch ``linger.ms`` before sending. For each instance, ``relay cluster status
--json``, ``relay status --instance NAME --json`` and the node's metrics endpoint
(``relay_lag_seconds{instance=…}``) must agree: once the writes stop and both have published the binlog's
end, lag 0 in all three — the single-instance definition (before: the cluster view copied the age of the
last change, 9–16 s for an idle instance, while ``relay status`` said 0); under steady writes the lagging
one the same real seconds in all three (within the time between the reads); and the node, the active
process, the epoch, the state and the restarts the same in both commands.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from relay.cluster.definition import parse_definition
from relay.cluster.store import ZooKeeperInstanceStore
from tests.integration.relay_harness import REPO_ROOT, Writer, master_position
from tests.integration.test_cluster_nodes import PASSWORD_ENV, SHARDS, TABLES, Fleet, fleet

pytestmark = pytest.mark.integration

__all__ = ["fleet"]  # the fixture, shared with test_cluster_nodes

LINGER_MS = 3000  # the behind instance's producer holds each batch this long


def _lags(fleet: Fleet, node: str) -> dict[str, float]:
    """``relay_lag_seconds`` per instance as the node's endpoint serves it."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(fleet.metrics(node)):
        for sample in family.samples:
            if sample.name == "relay_lag_seconds":
                out[sample.labels["instance"]] = sample.value
    return out


def _cli(fleet: Fleet, *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "relay.cli", *args, "--zookeeper", fleet.zk_hosts, "--root", fleet.root],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        # the source's password: relay status asks the server too (lag_bytes), as on the nodes
        env={**os.environ, PASSWORD_ENV: fleet.mysql.replication_password},
    )
    assert done.returncode in (0, 1), done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    return dict(json.loads(done.stdout))


def test_cluster_status_and_the_metrics_agree_with_relay_status_of_each_instance(fleet: Fleet) -> None:
    idle, busy = fleet.prefixes[0], fleet.prefixes[1]
    store = ZooKeeperInstanceStore(fleet.zk_hosts, fleet.root)
    try:
        start = master_position(fleet.conn)
        for i, prefix in enumerate((idle, busy)):
            text = yaml.safe_load(fleet.definition(i, prefix, start))
            if prefix == busy:
                text["kafka"]["settings"] = {
                    "batch.num.messages": "100000",
                    "linger.ms": str(LINGER_MS),
                }
            store.add(parse_definition(prefix, yaml.safe_dump(text)))
    finally:
        store.close()
    writer = Writer(fleet.mysql, busy, SHARDS, TABLES, rate=20.0, seed=31)
    for name in ("a", "b"):
        fleet.node(name)
    try:
        fleet.wait(
            lambda: all(
                fleet.report()["instances"].get(p, {}).get("state") == "running" for p in (idle, busy)
            ),
            120,
            "both instances running",
        )
        report = fleet.report()
        nodes = {p: report["instances"][p]["node"] for p in (idle, busy)}
        fleet.wait(lambda: all(p in _lags(fleet, nodes[p]) for p in (idle, busy)), 60, "each relay's metrics")
        writer.start()
        fleet.wait(lambda: writer.changes >= 40, 60, "changes written")
        writer.stop()
        # Both caught up (the binlog's end published: the idle one read only the other's filtered-out
        # transactions): lag 0 in all three views, however old the last change — it used to be its age.
        fleet.wait(
            lambda: all(fleet.report()["instances"][p]["lag_seconds"] == 0.0 for p in (idle, busy)),
            90,
            "both caught up",
        )
        for _ in range(3):
            cluster = _cli(fleet, "cluster", "status", "--json")["instances"]
            single = {p: _cli(fleet, "status", "--instance", p, "--json") for p in (idle, busy)}
            metrics = {p: _lags(fleet, nodes[p])[p] for p in (idle, busy)}
            for p in (idle, busy):
                c, s = cluster[p], single[p]
                assert (c["node"], c["running_on"], c["epoch"]) == (s["node"], s["running_on"], s["epoch"])
                assert (c["state"], c["restarts"]) == (s["state"], s["node_restarts"]), (c, s)
                assert (c["lag_seconds"], s["lag_seconds"], metrics[p]) == (0.0, 0.0, 0.0), (p, c, s, metrics)

        # Behind: the busy instance's producer holds each batch LINGER_MS under steady writes — the same real
        # seconds in every view (each read at its own moment: the reads took `took`, a node publishes its
        # record every 0.5 s)
        first, writer = writer, Writer(fleet.mysql, busy, SHARDS, TABLES, rate=20.0, seed=32)
        writer._next_id, writer._live = first._next_id, dict(first._live)  # on from where the first stopped
        writer.start()
        fleet.wait(lambda: _lags(fleet, nodes[busy])[busy] > 1.0, 60, "the busy instance behind")
        for _ in range(3):
            began = time.monotonic()
            cluster = _cli(fleet, "cluster", "status", "--json")["instances"]
            single = {p: _cli(fleet, "status", "--instance", p, "--json") for p in (idle, busy)}
            metrics = {p: _lags(fleet, nodes[p])[p] for p in (idle, busy)}
            took = time.monotonic() - began
            lags = (cluster[busy]["lag_seconds"], single[busy]["lag_seconds"], metrics[busy])
            assert all(lag is not None and lag > 0.5 for lag in lags), lags
            assert max(lags) - min(lags) <= took + 1.5, (lags, took)
            idles = (cluster[idle]["lag_seconds"], single[idle]["lag_seconds"], metrics[idle])
            assert all(lag is not None for lag in idles) and max(idles) - min(idles) <= took + 1.5, idles
    finally:
        if writer.is_alive():
            writer.stop()
