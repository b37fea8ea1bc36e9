"""Which mapping version each known relay runs, for ``relay mapping history``.

A relay says which version it publishes under, which one waits for a switch and the last one it refused
(``relay.daemon.mapping_report``) in three places, and this module reads every one it can reach:

- the status file in the state directory of ``-c CONFIG`` (the relay of that config on this host);
- with ``ha.enabled`` in that config, the member nodes of its instance in ZooKeeper (every replica,
  active or standing by, on any host);
- with a ZooKeeper mapping store, the store's registry (every relay reading that node, any instance);
- with ``--cluster HOSTS``, the status each cluster node publishes for every instance reading this
  mapping store (``relay.cluster.operate.cluster_relays``), on whatever node it runs.

Runs on the CLI's thread; a source that cannot be read becomes a note line, never an error.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Any

from mapping.store import MappingStore
from mapping.watch import Refusal
from relay.errors import RelayError


@dataclass
class KnownRelay:
    name: str
    where: str  # how we know: "status file", "ZooKeeper (HA)", "mapping store"
    state: str  # running, standby, stopped…
    version: int | None
    pending: int | None = None
    refused: Refusal | None = None
    host_pid: tuple[str, int] | None = field(default=None, compare=False)

    @property
    def publishing(self) -> bool:
        return self.state == "running"

    def describe(self) -> str:
        if self.version is None:
            runs = "no mapping reported"
        elif self.publishing:
            runs = f"runs version {self.version}"
        else:
            runs = f"{self.state}, last ran version {self.version}"
        if self.state == "standby":
            runs = f"standing by (read version {self.version})"
        extra = f", switching to version {self.pending}" if self.pending is not None else ""
        refused = f"; refused {self.refused.summary()}" if self.refused is not None else ""
        return f"{self.name} ({self.where}): {runs}{extra}{refused}"


def known_relays(args: argparse.Namespace, store: MappingStore) -> tuple[list[KnownRelay], list[str]]:
    """Every relay we can learn about, and notes on the sources that could not be read."""
    found: list[KnownRelay] = []
    notes: list[str] = []
    config = None
    if getattr(args, "config", None):
        from relay.config.load import load_config

        config = load_config(args.config)
        found.extend(_from_status_file(config))
        if config.ha.enabled:
            try:
                found.extend(_from_members(config))
            except RelayError as exc:
                notes.append(f"cannot ask ZooKeeper for the replicas of {config.instance}: {exc}")
    try:
        found.extend(_from_store(store))
    except RelayError as exc:
        notes.append(f"cannot read the relays registered with {store.name}: {exc}")
    if getattr(args, "cluster", None):
        try:
            found.extend(_from_cluster(args, store))
        except RelayError as exc:
            notes.append(f"cannot read the cluster's instances at {args.cluster}{args.cluster_root}: {exc}")
    return _unique(found), notes


def _from_cluster(args: argparse.Namespace, store: MappingStore) -> list[KnownRelay]:
    from relay.cluster.operate import cluster_relays
    from relay.cluster.remote import ClusterAddress

    out = []
    for info in cluster_relays(ClusterAddress(args.cluster, args.cluster_root), store.name):
        version, pending, refused = _mapping(info["mapping"])
        pid = info.get("pid")
        host_pid = (str(info.get("host") or ""), pid) if isinstance(pid, int) else None
        name = f"{info['instance']}@{info.get('node') or 'no node'}"
        out.append(KnownRelay(name, "cluster", str(info["state"]), version, pending, refused, host_pid))
    return out


def _mapping(data: dict[str, Any]) -> tuple[int | None, int | None, Refusal | None]:
    version, pending = data.get("mapping_version"), data.get("mapping_pending")
    return (
        version if isinstance(version, int) else None,
        pending if isinstance(pending, int) else None,
        Refusal.from_dict(data.get("mapping_refused")),
    )


def _from_status_file(config: Any) -> list[KnownRelay]:
    from relay.config.state import STATUS_FILE
    from relay.daemon.status import pid_running, read_status

    data = read_status(config.state_path(STATUS_FILE))
    if not data:
        return []
    pid = data.get("pid")
    alive = isinstance(pid, int) and pid_running(pid)
    state = str(data.get("state", "?")) if alive else "stopped"
    if alive and state in ("stopped", "failed"):
        state = str(data["state"])
    version, pending, refused = _mapping(data)
    member = data.get("ha_member") or f"{data.get('host', '?')}:{pid}"
    name = f"{config.instance}@{member}"
    host_pid = (str(data.get("host", "")), pid) if isinstance(pid, int) else None
    return [KnownRelay(name, "status file", state, version, pending, refused, host_pid)]


def _from_members(config: Any) -> list[KnownRelay]:
    from relay.ops.cluster import members

    out = []
    for member in members(config.ha, config.instance):
        version, pending, refused = _mapping(member.get("mapping") or {})
        state = "running" if member.get("active") else "standby"
        pid = member.get("pid")
        host_pid = (str(member.get("host", "")), pid) if isinstance(pid, int) else None
        name = f"{config.instance}@{member.get('member')}"
        out.append(KnownRelay(name, "ZooKeeper (HA)", state, version, pending, refused, host_pid))
    return out


def _from_store(store: MappingStore) -> list[KnownRelay]:
    out = []
    for info in store.relays():
        version, pending, refused = _mapping(info.get("mapping") or {})
        pid = info.get("pid")
        host_pid = (str(info.get("host", "")), pid) if isinstance(pid, int) else None
        out.append(
            KnownRelay(
                str(info.get("relay")), "mapping store", "running", version, pending, refused, host_pid
            )
        )
    return out


def _unique(found: list[KnownRelay]) -> list[KnownRelay]:
    """One entry per relay name; what ZooKeeper says wins over a status file (it knows who leads)."""
    by_name: dict[str, KnownRelay] = {}
    for relay in found:
        by_name[relay.name] = relay
    return list(by_name.values())


def markers(relays: list[KnownRelay], version: int) -> str:
    """The note after a version's line in ``relay mapping history``."""
    runs = [r.name for r in relays if r.version == version and r.publishing]
    refused = [r.name for r in relays if r.refused is not None and r.refused.version == version]
    parts = []
    if runs:
        parts.append(f"runs on {', '.join(runs)}")
    if refused:
        parts.append(f"refused by {', '.join(refused)}")
    return f"  <= {'; '.join(parts)}" if parts else ""


def print_relays(relays: list[KnownRelay], notes: list[str]) -> None:
    """The footer of ``relay mapping history``: every known relay and what it runs."""
    if not relays and not notes:
        print(
            "relays: none known (give -c CONFIG for its relay's status file and HA replicas, --cluster "
            "HOSTS for a cluster's instances)"
        )
        return
    print("relays:")
    for relay in relays:
        print(f"  {relay.describe()}")
    for note in notes:
        print(f"  ({note})")
