"""A node's Prometheus endpoint (``metrics.port`` of ``node.yaml``): the node and its instances, labelled.

Owns the collector, read at scrape time (prometheus_client's HTTP thread) from what the node's loop
last saw (``ClusterNode.view``, an immutable value) and its children's report (a fresh dict per call).
The node's own series (``relay_cluster_*``) carry the node, and the instance where they are about one:
``relay_cluster_instance_up{instance="shop01",node="a"}``. Each instance's relay metrics (rates, lag,
store, the ``relay_*`` of ``relay run``) are scraped at the same moment from the instance's own exporter
on 127.0.0.1 (its port in ``<state_dir>/<instance>/metrics.port``, ``relay.cluster.child``) and served
here with ``instance`` and ``node`` labels added; an instance that does not answer within a second is
left out of that scrape (its ``relay_cluster_instance_up`` still says whether its process runs).
"""

from __future__ import annotations

import contextlib
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from relay.cluster.child import METRICS_PORT_FILE
from relay.errors import ConfigError

if TYPE_CHECKING:
    from relay.cluster.node import ClusterNode

__all__ = ["serve_metrics"]


class _NodeCollector(Collector):
    def __init__(self, node: ClusterNode) -> None:
        self._node = node

    def collect(self) -> Iterator[Metric]:
        node, view = self._node, self._node.view
        me = node.name
        capacity = GaugeMetricFamily(
            "relay_cluster_node_capacity", "instances this node may run", labels=["node"]
        )
        capacity.add_metric([me], node.config.node.capacity)
        yield capacity
        leader = GaugeMetricFamily(
            "relay_cluster_node_leader", "1 while this node places instances", labels=["node"]
        )
        leader.add_metric([me], 1.0 if view.leader == me else 0.0)
        yield leader
        assigned = GaugeMetricFamily(
            "relay_cluster_node_assigned", "instances assigned to this node", labels=["node"]
        )
        assigned.add_metric([me], sum(1 for a in view.assignments.values() if a.node == me))
        yield assigned
        report = node.children.report()
        up = GaugeMetricFamily(
            "relay_cluster_instance_up",
            "1 while the instance's process runs here",
            labels=["instance", "node"],
        )
        restarts = CounterMetricFamily(
            "relay_cluster_instance_restarts",
            "restarts of the instance's process on this node after it exited unasked",
            labels=["instance", "node"],
        )
        for name, child in sorted(report.items()):
            up.add_metric([name, me], 1.0 if child["process"] == "running" else 0.0)
            restarts.add_metric([name, me], float(child["restarts"]))
        yield up
        yield restarts
        yield from self._instances(sorted(n for n, c in report.items() if c["process"] == "running"))

    def _instances(self, names: list[str]) -> Iterator[Metric]:
        """Every running instance's own metrics, labelled ``instance`` and ``node``, one family per name."""
        families: dict[str, Metric] = {}
        state_dir = Path(self._node.config.settings().state_dir)
        for name in names:
            text = _scrape(state_dir / name / METRICS_PORT_FILE)
            if text is None:
                continue
            with contextlib.suppress(ValueError):  # a half-written answer: left out of this scrape
                for family in text_string_to_metric_families(text):
                    merged = families.setdefault(
                        family.name, Metric(family.name, family.documentation, family.type, family.unit)
                    )
                    for sample in family.samples:
                        labels = {**sample.labels, "instance": name, "node": self._node.name}
                        merged.add_sample(sample.name, labels, sample.value, sample.timestamp)
        yield from families.values()


def _scrape(port_file: Path) -> str | None:
    try:
        port = int(port_file.read_text(encoding="utf-8").strip())
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1.0) as answer:
            return str(answer.read().decode("utf-8"))
    except (OSError, ValueError):
        return None


def serve_metrics(node: ClusterNode, host: str, port: int) -> None:
    """Serve ``/metrics`` on ``host:port`` from a daemon thread of prometheus_client's."""
    registry = CollectorRegistry()
    registry.register(_NodeCollector(node))
    try:
        start_http_server(port, addr=host, registry=registry)
    except OSError as exc:  # the port taken (another node, another program): one line naming the setting
        raise ConfigError(
            "metrics.port", f"cannot serve /metrics on {host}:{port}: {exc.strerror or exc}"
        ) from exc
