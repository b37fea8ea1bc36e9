"""The operator's side of the control plane: one cluster instance, reached through ZooKeeper from any host.

Owns ``RemoteInstance``, what ``relay status|snapshot|schema … --instance NAME --zookeeper HOSTS`` and
``relay mapping history --instance`` work with: the instance's stored definition (an unknown instance
is an ``InstanceNotFoundError`` listing the defined ones), the status record its node publishes (with
the relay's whole status record, ``relay.cluster.node``), where it is assigned and active, its hold
after a schema error (``relay.cluster.holds``), the config an operator's command reads it with
(``relay.cluster.definition.operator_config``: secrets resolved from THIS environment where set), and
``ask``: a request znode under ``<root>/destinations/<name>/requests/`` answered by the node running
the instance (``relay.cluster.requests``), waited for with a deadline.

Runs on the CLI's thread; kazoo runs its own connection thread.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kazoo.exceptions import NoNodeError

from relay.cluster.definition import InstanceDefinition, NodeSettings, operator_config
from relay.cluster.layout import Paths
from relay.cluster.store import ZooKeeperInstanceStore
from relay.common import zookeeper
from relay.config.load import RelayConfig
from relay.errors import ClusterUnavailableError, ConfigError, SnapshotRequestError

__all__ = ["ClusterAddress", "RemoteInstance"]

DEFAULT_STATE_DIR = "/var/lib/canal-relay"  # NodeSettings' default, when no node reports its own


@dataclass(frozen=True)
class ClusterAddress:
    """Where the cluster is: its ZooKeeper, root, the digest identity to use (if any) and the timeout."""

    hosts: str
    root: str = "/canal-relay"
    auth: str | None = None
    timeout: float = 10.0


class RemoteInstance:
    """One defined instance of the cluster at ``address``; ``close()`` ends the session."""

    def __init__(self, address: ClusterAddress, name: str) -> None:
        self.address, self.name = address, name
        self.paths = Paths(address.root.rstrip("/") or "/")
        self._store = ZooKeeperInstanceStore(address.hosts, address.root, address.timeout, address.auth)
        try:
            stored = self._store.read(name)  # unknown or removed: InstanceNotFoundError, naming the others
        except BaseException:
            self._store.close()
            raise
        assert stored.definition is not None
        self.definition: InstanceDefinition = stored.definition
        self.version = stored.info.version
        self._client = self._store.client

    def close(self) -> None:
        self._store.close()

    def __enter__(self) -> RemoteInstance:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- what ZooKeeper says ------------------------------------------------------------------------
    def record(self) -> dict[str, Any] | None:
        """The status record the node running the instance publishes (ephemeral: gone with its node)."""
        return self._json(self.paths.status(self.name))

    def assigned(self) -> str | None:
        record = self._json(self.paths.assignment(self.name))
        node = record.get("node") if record else None
        return node if isinstance(node, str) else None

    def active(self) -> dict[str, Any] | None:
        """The instance's HA ``running`` record: the member that is active, its epoch."""
        return self._json(self.paths.running(self.name))

    def held(self) -> dict[str, Any] | None:
        """The hold marker of an instance stopped on a schema error (``relay.cluster.holds``)."""
        return self._json(self.paths.held(self.name))

    def lift_hold(self) -> bool:
        """Remove the hold marker (after a resync): its node starts the instance again."""
        try:
            self._client.delete(self.paths.held(self.name))
            return True
        except NoNodeError:
            return False
        except zookeeper.ERRORS as exc:
            raise ClusterUnavailableError(f"{self.paths.held(self.name)}: {exc!r}") from exc

    def where(self) -> str:
        """Where the instance runs, or why it runs nowhere, in words."""
        node = self.assigned()
        if node is None:
            return f"instance {self.name} is assigned to no node (no live node with room, or no leader)"
        try:
            live = self._client.exists(self.paths.node(node)) is not None
        except zookeeper.ERRORS as exc:
            raise ClusterUnavailableError(str(exc)) from exc
        if not live:
            return f"instance {self.name} is assigned to node {node}, which is not live"
        return f"instance {self.name} is assigned to node {node}"

    # -- the config an operator's command reads the instance with ------------------------------------
    def config(self) -> tuple[RelayConfig, dict[str, str]]:
        """The instance's config here: its state directory as its node reports it, and every ``${NAME}``
        this environment sets; the unresolved ones as {variable: key} (``operator_config``)."""
        record = self.record() or {}
        state_dir = record.get("state_dir")
        root = str(Path(state_dir).parent) if isinstance(state_dir, str) else DEFAULT_STATE_DIR
        settings = NodeSettings(
            zookeeper=self.address.hosts,
            root=self.paths.root,
            session_timeout_seconds=self.address.timeout,
            connect_timeout_seconds=self.address.timeout,
            state_dir=root,
            node=f"operator-{uuid.uuid4().hex[:8]}",
        )
        return operator_config(self.definition, settings)

    @staticmethod
    def require(missing: dict[str, str], prefix: str, why: str) -> None:
        """``ConfigError`` naming the first unresolved reference under ``prefix`` (e.g. ``source.``)."""
        for variable, key in sorted(missing.items(), key=lambda item: item[1]):
            if key.startswith(prefix):
                raise ConfigError(
                    key,
                    f"environment variable {variable} is not set here (written as ${{{variable}}}): {why} "
                    "(set it as on the nodes, or run the command on a node)",
                )

    # -- requests -----------------------------------------------------------------------------------
    def ask(self, body: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Send a request (``id`` is added) and wait up to ``timeout`` seconds for the node's answer:
        ``{id, action, node, accepted, reason, …}``. At the deadline the request is withdrawn when no
        node took it (``SnapshotRequestError``: nothing was done), else the error says which node's
        relay has it."""
        request_id = f"{self.name}-{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}"
        data = json.dumps({**body, "id": request_id, "at": time.time()}).encode()
        try:
            znode = self._client.create(
                f"{self.paths.requests(self.name)}/r-", data, sequence=True, makepath=True
            )
        except zookeeper.ERRORS as exc:
            raise ClusterUnavailableError(f"{self.paths.requests(self.name)}: {exc!r}") from exc
        answer_path = self.paths.answer(self.name, request_id)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            answer = self._json(answer_path)
            if answer is not None and answer.get("state") == "answered":
                with contextlib.suppress(NoNodeError):
                    self._client.delete(answer_path)
                return answer
            time.sleep(0.2)
        withdrawn = True
        try:
            self._client.delete(znode)
        except NoNodeError:
            withdrawn = False
        answer = self._json(answer_path)  # a node that claimed it before the withdrawal carries it out
        if answer is None and withdrawn:
            raise SnapshotRequestError(
                f"no node took request {request_id} within {timeout:.0f} s ({self.where()}; it takes "
                "requests while its relay is active): withdrawn, nothing was done"
            )
        node = answer.get("node") if answer else "?"
        raise SnapshotRequestError(
            f"request {request_id} was handed to the relay of {self.name} on node {node}, which did not "
            f"answer within {timeout:.0f} s; `relay snapshot status --instance {self.name}` shows what "
            "it does"
        )

    def _json(self, path: str) -> dict[str, Any] | None:
        try:
            data, _ = self._client.get(path)
        except NoNodeError:
            return None
        except zookeeper.ERRORS as exc:
            raise ClusterUnavailableError(f"{path}: {exc!r}") from exc
        try:
            value = json.loads(data.decode("utf-8") or "null")
        except (UnicodeDecodeError, ValueError):
            return None
        return value if isinstance(value, dict) else None
