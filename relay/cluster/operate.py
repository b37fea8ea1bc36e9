"""What the operator's commands report about cluster instances, read through ZooKeeper from any host.

Owns ``instance_status`` (``relay status --instance``: the local command's report, made from the
relay's status record as its node published it, plus the node, its process and the hold after a
schema error), ``snapshot_progress`` (``relay snapshot status --instance``), ``is_active`` (whether a
request can be handed to the relay now) and ``cluster_relays`` (``relay mapping history --cluster``:
the mapping version each cluster instance reading a given mapping store runs). Runs on the CLI's
thread with a ``RemoteInstance`` (``relay.cluster.remote``).
"""

from __future__ import annotations

import os
import time
from typing import Any

from relay.cluster.remote import ClusterAddress, RemoteInstance
from relay.cluster.requests import READY_STATES
from relay.cluster.store import ZooKeeperInstanceStore
from relay.config.load import RelayConfig
from relay.errors import ClusterError
from relay.ops.snapshot import progress_of
from relay.ops.status import relay_report

__all__ = ["cluster_relays", "instance_status", "is_active", "snapshot_progress"]


def _relay(record: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """The relay's status record as its node published it, and whether it is the child running now."""
    data = record.get("relay")
    data = data if isinstance(data, dict) else {}
    alive = record.get("process") == "running" and data.get("pid") == record.get("pid")
    return data, alive


def is_active(record: dict[str, Any] | None) -> bool:
    """Whether the instance's relay takes requests now (its node hands them over)."""
    if record is None:
        return False
    data, alive = _relay(record)
    return alive and data.get("state") in READY_STATES


def instance_status(remote: RemoteInstance) -> dict[str, Any] | None:
    """``relay status`` of a cluster instance; None when no node publishes its status (it runs nowhere:
    ``remote.where()`` says why)."""
    record = remote.record()
    if record is None:
        return None
    config, missing = remote.config()
    data, alive = _relay(record)
    unknown = None
    for variable, key in sorted(missing.items(), key=lambda item: item[1]):
        if key.startswith("source."):
            unknown = (
                f"environment variable {variable} is not set here ({key} is written as ${{{variable}}}), so "
                "the server is not asked (server_end, lag_bytes); set it as on the nodes to see them"
            )
            break
    node = record.get("node")
    where = f"{record.get('state_dir')} on node {node}"
    report = relay_report(config, data, alive, where, unknown)
    held = remote.held()
    active = remote.active()
    report.update(
        {
            "node": node,
            "node_process": record.get("process"),
            "node_restarts": record.get("restarts"),
            "running_on": active.get("member") if active else None,
            "epoch": active.get("epoch") if active else report.get("ha_epoch"),
            "definition_version": record.get("definition_version") or remote.version,
            "status_published": _iso(record["published_at"])
            if isinstance(record.get("published_at"), int | float)
            else None,
            "held": None if held is None else _held_line(remote.name, held),
        }
    )
    if not report.get("error") and not alive and record.get("last_error"):
        report["error"] = record.get("last_error")
    return report


def _held_line(name: str, held: dict[str, Any]) -> str:
    return (
        f"stopped on a schema error on node {held.get('node')} at {_iso(float(held.get('at') or 0))}: not "
        f"restarted until `relay schema resync --instance {name} --table SCHEMA.TABLE --yes`"
    )


def snapshot_progress(remote: RemoteInstance) -> dict[str, Any]:
    """``relay snapshot status`` of a cluster instance: from the relay's published status while it
    runs, else the checkpoint in the saved position."""
    record = remote.record() or {}
    config, _ = remote.config()
    data, alive = _relay(record)
    running = alive and data.get("state") not in ("stopped", "failed")
    report = progress_of(config, data, running)
    report["node"] = record.get("node")
    return report


def cluster_relays(address: ClusterAddress, store_name: str) -> list[dict[str, Any]]:
    """Every cluster instance whose mapping is ``store_name`` (a ``MappingStore.name``), with what its
    node published: ``{instance, node, state, mapping}`` (the relay's ``mapping_*`` fields)."""
    found = []
    store = ZooKeeperInstanceStore(address.hosts, address.root, address.timeout, address.auth)
    try:
        names = store.names()
    finally:
        store.close()
    for name in names:
        try:
            remote = RemoteInstance(address, name)
        except ClusterError:
            continue  # removed meanwhile
        with remote:
            config, _ = remote.config()
            if _store_name(config) != _normal(store_name):
                continue
            record = remote.record() or {}
            data, alive = _relay(record)
            state = str(data.get("state", "?")) if alive else (record.get("process") or "not running")
            found.append(
                {
                    "instance": name,
                    "node": record.get("node"),
                    "state": state,
                    "pid": data.get("pid") if alive else None,
                    "host": data.get("host"),
                    "mapping": {
                        k: data.get(k) for k in ("mapping_version", "mapping_pending", "mapping_refused")
                    },
                }
            )
    return found


def _store_name(config: RelayConfig) -> str:
    mapping = config.mapping
    if mapping.store == "zookeeper":
        return _normal(f"zookeeper {mapping.zookeeper.hosts}{mapping.zookeeper.path}")
    return _normal(f"file {config.config_path(mapping.file)}")


def _normal(name: str) -> str:
    kind, _, where = name.partition(" ")
    if kind == "file":
        return f"file {os.path.abspath(where)}"
    return f"{kind} {where.rstrip('/')}"


def _iso(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(seconds))
