"""A node's Prometheus endpoint (``metrics.port`` of ``node.yaml``): the node and its instances, labelled.

Owns the collector, read at scrape time (prometheus_client's HTTP thread) from what the node's loop
last saw (``ClusterNode.view``, an immutable value) and its children's report (a fresh dict per call).
Each instance's relay metrics proper (rates, lag histograms) are its own process's; here every series
carries the instance as a label: ``relay_cluster_instance_up{instance="shop01",node="a"}``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

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


def serve_metrics(node: ClusterNode, host: str, port: int) -> None:
    """Serve ``/metrics`` on ``host:port`` from a daemon thread of prometheus_client's."""
    registry = CollectorRegistry()
    registry.register(_NodeCollector(node))
    start_http_server(port, addr=host, registry=registry)
