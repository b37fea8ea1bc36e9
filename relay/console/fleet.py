"""What the console serves: one relay (or several) of this host by their configs, or a whole cluster.

Owns the two backends behind one interface (``Fleet``) and nothing of their logic: every answer comes
from the function the CLI calls for the same question — ``relay status`` (``relay.ops.status.
status_report``; ``relay.cluster.operate.instance_status`` with ``--instance``), ``relay cluster status``
(``relay.cluster.report.cluster_report``), ``relay cluster drain|move`` (``relay.cluster.control``),
``relay snapshot run|status`` (``relay.ops.snapshot``; ``RemoteInstance.ask`` with ``--instance``) — and
every report is redacted (``relay.common.redact``) before a page may show it. A cluster instance's config
is ``RemoteInstance.config()``: its stored definition with the secrets this environment sets.

Runs on the console's request threads and its sampler thread; each call opens what it reads and closes
it (the cluster backend keeps one ZooKeeper session for the reports, guarded by a lock).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from relay.common.redact import redact_value
from relay.config.load import RelayConfig, load_config
from relay.errors import ConfigError, ConsoleError, RelayError

log = logging.getLogger(__name__)

__all__ = ["ClusterFleet", "Fleet", "LocalFleet", "open_fleet"]

_ANSWER_SECONDS = 30.0


class Fleet(Protocol):
    """The instances the console serves and the operator actions on them."""

    kind: str  # "relay" (configs of this host) or "cluster"
    where: str  # what it serves, for the page header

    def names(self) -> list[str]: ...

    def config(self, name: str, need: str = "") -> RelayConfig:
        """The instance's config; ``need``: a section whose secrets must resolve here (``source.``)."""
        ...

    def status(self, name: str) -> dict[str, Any]: ...

    def placement(self) -> dict[str, Any]: ...

    def drain(self, node: str, undo: bool) -> list[str]: ...

    def move(self, instance: str, node: str | None) -> list[str]: ...

    def snapshot(self, name: str, table: str, where: str) -> dict[str, Any]: ...

    def snapshot_progress(self, name: str) -> dict[str, Any]: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class _Local:
    path: Path
    config: RelayConfig


class LocalFleet:
    """Relays of this host, one per ``-c`` config (their status files, stores and servers)."""

    kind = "relay"

    def __init__(self, paths: list[str]) -> None:
        self._relays: dict[str, _Local] = {}
        for path in paths:
            config = load_config(path)  # a bad file: one line naming it and the key (ConfigError)
            if config.instance in self._relays:
                raise ConsoleError("-c", f"{path}: instance {config.instance!r} is given twice")
            self._relays[config.instance] = _Local(Path(path), config)
        self.where = ", ".join(str(r.path) for r in self._relays.values())

    def names(self) -> list[str]:
        return list(self._relays)

    def config(self, name: str, need: str = "") -> RelayConfig:
        try:
            return self._relays[name].config
        except KeyError:
            raise ConsoleError("instance", f"no instance {name!r} here ({', '.join(self._relays)})") from None

    def status(self, name: str) -> dict[str, Any]:
        from relay.ops.status import status_report

        return dict(redact_value(status_report(self.config(name))))

    def placement(self) -> dict[str, Any]:
        return {"kind": "relay", "nodes": {}, "instances": {}, "pins": {}, "pending_moves": []}

    def drain(self, node: str, undo: bool) -> list[str]:
        raise ConsoleError("drain", "draining a node needs a cluster: start the console with --zookeeper")

    def move(self, instance: str, node: str | None) -> list[str]:
        raise ConsoleError("move", "moving an instance needs a cluster: start the console with --zookeeper")

    def snapshot(self, name: str, table: str, where: str) -> dict[str, Any]:
        from relay.ops.snapshot import await_answer, send_request

        config = self.config(name)
        request_id = send_request(config, "run", table, where)
        return dict(redact_value(await_answer(config, request_id, _ANSWER_SECONDS)))

    def snapshot_progress(self, name: str) -> dict[str, Any]:
        from relay.ops.snapshot import progress

        return dict(redact_value(progress(self.config(name))))

    def close(self) -> None:
        pass


class ClusterFleet:
    """Every instance defined in a cluster's ZooKeeper, wherever it runs."""

    kind = "cluster"

    def __init__(self, hosts: str, root: str, auth: str | None, timeout: float) -> None:
        from relay.cluster.remote import ClusterAddress
        from relay.common import zookeeper

        self.address = ClusterAddress(hosts, root.rstrip("/") or "/", auth, timeout)
        self.where = f"cluster {hosts}{self.address.root}"
        self._lock = threading.Lock()
        self._client = zookeeper.start_client(
            hosts, session_timeout=timeout, connect_timeout=timeout, auth=auth
        )

    def names(self) -> list[str]:
        from relay.cluster.layout import read_view

        with self._lock:
            return sorted(read_view(self._client, self.address.root).instances)

    def _remote(self, name: str) -> Any:
        from relay.cluster.remote import RemoteInstance

        return RemoteInstance(self.address, name)

    def config(self, name: str, need: str = "") -> RelayConfig:
        with self._remote(name) as remote:
            config, missing = remote.config()
            if need:
                remote.require(missing, need, f"the console reads {need.rstrip('.')} here")
            return config  # type: ignore[no-any-return]

    def status(self, name: str) -> dict[str, Any]:
        from relay.cluster.operate import instance_status

        with self._remote(name) as remote:
            found = instance_status(remote)
            if found is None:
                found = {"instance": name, "running": False, "state": "not running", "error": remote.where()}
        return dict(redact_value(found))

    def placement(self) -> dict[str, Any]:
        from relay.cluster.report import cluster_report

        with self._lock:
            report = cluster_report(self._client, self.address.root)
        return {"kind": "cluster", **redact_value(report)}

    def drain(self, node: str, undo: bool) -> list[str]:
        from relay.cluster.control import drain

        with self._lock:
            return drain(self._client, self.address.root, node, undo=undo)

    def move(self, instance: str, node: str | None) -> list[str]:
        from relay.cluster.control import pin, unpin

        with self._lock:
            if node is None:
                return unpin(self._client, self.address.root, instance)
            return pin(self._client, self.address.root, instance, node)

    def snapshot(self, name: str, table: str, where: str) -> dict[str, Any]:
        with self._remote(name) as remote:
            answer = remote.ask({"action": "run", "table": table, "where": where}, 2 * _ANSWER_SECONDS)
        return dict(redact_value(answer))

    def snapshot_progress(self, name: str) -> dict[str, Any]:
        from relay.cluster.operate import snapshot_progress

        with self._remote(name) as remote:
            return dict(redact_value(snapshot_progress(remote)))

    def close(self) -> None:
        self._client.stop()
        self._client.close()


def open_fleet(
    configs: list[str], zookeeper: str | None, root: str, auth: str | None, timeout: float
) -> Fleet:
    """The backend the options name: ``-c`` configs, or a cluster's ``--zookeeper``."""
    if bool(configs) == bool(zookeeper):
        both = ", not both" if configs else ""
        raise ConfigError(
            "-c/--zookeeper", f"give -c CONFIG (relays of this host) or --zookeeper HOSTS{both}"
        )
    if zookeeper:
        from relay.errors import ClusterUnavailableError, ZooKeeperUnavailableError

        try:
            return ClusterFleet(zookeeper, root, auth, timeout)
        except ZooKeeperUnavailableError as exc:
            raise ClusterUnavailableError(f"--zookeeper {zookeeper}: {exc}") from exc
    return LocalFleet(configs)


def safe_call(what: str, call: Any, *args: Any) -> tuple[Any, str | None]:
    """``call(*args)`` and None, or None and the error's line (a relay error, said on the page)."""
    from relay.common.redact import redact

    try:
        return call(*args), None
    except RelayError as exc:
        log.info("%s: %s", what, exc)
        return None, redact(str(exc))
