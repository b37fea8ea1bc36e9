"""One instance's process on a node (``relay cluster child``, started by ``relay.cluster.children``):
its config, built here from the stored definition, and the watchdog that ties it to its node.

Owns ``instance_config`` — the definition read from ZooKeeper and turned into the ``RelayConfig`` the
instance runs with by ``relay.cluster.definition.relay_config`` IN this process, so ``${NAME}`` secrets
resolve from the node's environment and never pass through a file; ``with_metrics_port``, its
Prometheus exporter on a local port its node scrapes; and ``NodeWatchdog`` (thread
``node-watchdog``, reading ZooKeeper through the relay's own session when given it — one session per
instance, not two: it only reads the node's record, and a relay cut from ZooKeeper is fenced by that
very session anyway): it asks the relay to stop (a drain: in-flight batches acked, position saved) as soon
as the node process that started it is gone (a SIGKILLed node) or the node's record in ZooKeeper is
gone or belongs to another session (the node's session expired: it was frozen, or cut off) — the leader
then moves the instance, and this relay must release it rather than keep it from the new node. Past the
stop bound after that, it ends the process (``os._exit``): the instance's epoch fences whatever was left.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path

from kazoo.client import KazooClient

from relay.cluster.definition import relay_config
from relay.cluster.layout import Paths
from relay.cluster.node_config import NodeConfig
from relay.cluster.store import ZooKeeperInstanceStore
from relay.common import zookeeper
from relay.config.load import RelayConfig
from relay.errors import ClusterError, ClusterUnavailableError, ZooKeeperUnavailableError

log = logging.getLogger(__name__)

__all__ = ["EXIT_NODE_GONE", "METRICS_PORT_FILE", "NodeWatchdog", "instance_config", "with_metrics_port"]

EXIT_NODE_GONE = 4  # the child ended itself past the stop bound after its node went
METRICS_PORT_FILE = "metrics.port"  # in the instance's state directory: where its node scrapes it


def instance_config(node: NodeConfig, instance: str) -> tuple[RelayConfig, int]:
    """The config ``instance`` runs with on this node, and its definition's version; ``ClusterError``
    when it is not defined (removed meanwhile), a ``ConfigError`` naming the key when it does not resolve
    here (a ``${NAME}`` unset in the node's environment)."""
    store = ZooKeeperInstanceStore(
        node.zookeeper.hosts,
        node.root,
        timeout=node.zookeeper.connect_timeout_seconds,
        auth=node.zookeeper.auth or None,
        setting="zookeeper.hosts",
    )
    try:
        stored = store.read(instance)
    finally:
        store.close()
    assert stored.definition is not None  # read() refuses a tombstone
    return relay_config(stored.definition, node.settings()), stored.info.version


def with_metrics_port(config: RelayConfig) -> RelayConfig:
    """``config`` with its Prometheus exporter on a free port of 127.0.0.1, written to
    ``<state dir>/metrics.port`` for the node, which serves every instance's metrics with an ``instance``
    label on its own port (``relay.cluster.node_metrics``)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    path = Path(config.state_path(METRICS_PORT_FILE))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{port}\n", encoding="utf-8")
    return dataclasses.replace(
        config, metrics=dataclasses.replace(config.metrics, port=port, host="127.0.0.1")
    )


class NodeWatchdog(threading.Thread):
    """Stops the relay when its node is gone; ``start`` it after the relay is built, ``close`` at the end."""

    def __init__(
        self,
        node: NodeConfig,
        stop: Callable[[], None],
        interval: float = 0.5,
        client: KazooClient | None = None,
    ) -> None:
        super().__init__(name="node-watchdog", daemon=True)
        self._node = node
        self._stop_relay = stop
        self._interval = interval
        self._done = threading.Event()
        self._parent = os.getppid()
        self._path = Paths(node.root).node(node.name)
        self._owns_client = client is None
        if client is None:
            try:
                client = zookeeper.start_client(
                    node.zookeeper.hosts,
                    session_timeout=node.zookeeper.session_timeout_seconds,
                    connect_timeout=node.zookeeper.connect_timeout_seconds,
                    auth=node.zookeeper.auth or None,
                    setting="zookeeper.hosts",
                )
            except ZooKeeperUnavailableError as exc:
                raise ClusterUnavailableError(str(exc)) from exc
        self._client: KazooClient = client
        stat = self._client.exists(self._path)
        if stat is None:
            self.close()
            raise ClusterError(
                f"node {node.name}: no record at {self._path}; an instance runs under a live node"
            )
        self._owner = int(stat.ephemeralOwner)

    def run(self) -> None:
        while not self._done.wait(self._interval):
            why = self._gone()
            if why is None:
                continue
            log.error("%s: stopping this instance (its node hands it over)", why)
            self._stop_relay()
            if not self._done.wait(self._node.children.stop_timeout_seconds):
                log.error(
                    "not stopped %.0f s after the node went: exiting",
                    self._node.children.stop_timeout_seconds,
                )
                os._exit(EXIT_NODE_GONE)
            return

    def _gone(self) -> str | None:
        if os.getppid() != self._parent:
            return f"node {self._node.name}: its process (pid {self._parent}) is gone"
        if not self._client.connected:
            return None  # unknown: the relay's own HA session fences it if ZooKeeper is gone for it too
        try:
            stat = self._client.exists(self._path)
        except zookeeper.ERRORS:
            return None
        if stat is None or int(stat.ephemeralOwner) != self._owner:
            return f"node {self._node.name}: its ZooKeeper session ended"
        return None

    def close(self) -> None:
        self._done.set()
        if not self._owns_client:
            return  # the relay's session: the relay closes it
        try:
            self._client.stop()
        finally:
            self._client.close()
