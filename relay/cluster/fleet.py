"""What one instance definition may not share with the others of its cluster.

Each instance is checked alone by ``relay.cluster.definition``; this module checks it against the
other defined instances, for what only the fleet shows:

- ``source.server_id``: the replica server ids an instance uses on a server (``host:port`` as written,
  the source's and the standby's): its own, the side connections' (bit 31 flipped) and the retention
  probe's (+ 1,000,000) — a MySQL server drops one of two replicas connected with the same id, so the
  two would take turns failing;
- ``source.id`` (the instance name when empty): the source id every record carries — two instances with
  the same one would give different changes the same change identity;
- ``kafka.transactional_id`` (with ``{instance}`` filled in, when either uses transactions): two
  producers of one id fence each other, so neither could keep publishing.

Values are compared as written (a ``${NAME}`` reference is not resolved here). Pure functions over
``InstanceDefinition`` values, run on the caller's thread; ``relay.cluster.store`` runs them under the
same compare-and-set as the write, so two concurrent edits cannot both slip a clash past it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from relay.cluster.definition import InstanceDefinition
from relay.errors import ConfigError
from relay.source.server import SIDE_SERVER_ID_BIT

__all__ = ["Identity", "fleet_problems", "identity"]

PROBE_ID_OFFSET = 1_000_000  # relay.source.retention's probe: the relay's server id + this


@dataclass(frozen=True)
class Identity:
    """What an instance must not share: its replica (server + id), source id, transactional id."""

    name: str
    replica: tuple[str, str, str]  # host, port, server_id as written
    replicas: frozenset[tuple[str, str, str]]  # every (host, port, id) it connects with
    source_id: str
    transactional_id: str | None  # None: no transactions


def identity(definition: InstanceDefinition) -> Identity:
    doc = definition.document
    source = _section(doc, "source")
    kafka = _section(doc, "kafka")
    replica = (
        str(source.get("host", "127.0.0.1")),
        str(source.get("port", 3306)),
        str(source.get("server_id", 6543)),
    )
    source_id = str(source.get("id") or "") or definition.name
    standby = _section(source, "standby")
    servers = [replica[:2]]
    if standby.get("host"):
        servers.append((str(standby["host"]), str(standby.get("port", 3306))))
    replicas = frozenset((host, port, sid) for host, port in servers for sid in _server_ids(replica[2]))
    transactional: str | None = None
    if _true(kafka.get("transactions")) or _true(kafka.get("exactly_once")):
        template = str(kafka.get("transactional_id", "canal-relay-{instance}"))
        try:
            transactional = template.format(instance=definition.name)
        except (KeyError, IndexError, ValueError):  # refused by the definition's own checks
            transactional = template
    return Identity(definition.name, replica, replicas, source_id, transactional)


def fleet_problems(definition: InstanceDefinition, others: Iterable[InstanceDefinition]) -> list[ConfigError]:
    """Every clash of ``definition`` with another defined instance (``others``; itself is skipped)."""
    mine = identity(definition)
    out: list[ConfigError] = []
    for other in others:
        if other.name == definition.name:
            continue
        theirs = identity(other)
        shared = sorted(mine.replicas & theirs.replicas, key=lambda r: (r[2] != mine.replica[2], r))
        if shared:
            host, port, server_id = shared[0]
            out.append(
                ConfigError(
                    "source.server_id",
                    f"{mine.replica[2]}: instance {other.name} connects to {host}:{port} with replica server "
                    f"id {server_id} too (the ids of an instance: its server_id, that id with bit 31 flipped "
                    "for side connections, and server_id + 1000000 for the retention probe): the server "
                    "drops one of two replicas with the same id; give each instance ids of its own",
                )
            )
        if mine.source_id == theirs.source_id:
            out.append(
                ConfigError(
                    "source.id",
                    f"{mine.source_id!r} is also instance {other.name}'s source id: the change identities "
                    "of the two instances' records could collide; give each its own (or leave it empty: "
                    "the instance name)",
                )
            )
        if mine.transactional_id is not None and mine.transactional_id == theirs.transactional_id:
            out.append(
                ConfigError(
                    "kafka.transactional_id",
                    f"{mine.transactional_id!r} is also instance {other.name}'s: two producers of one "
                    "transactional id fence each other; keep {instance} in it",
                )
            )
    return out


def _server_ids(written: str) -> tuple[str, ...]:
    """The replica server ids an instance with ``server_id: written`` connects with."""
    try:
        sid = int(written)
    except ValueError:  # a reference: only itself can be compared
        return (written,)
    return (str(sid), str(sid ^ SIDE_SERVER_ID_BIT), str(sid + PROBE_ID_OFFSET))


def _section(doc: dict[str, Any], name: str) -> dict[str, Any]:
    value = doc.get(name)
    return value if isinstance(value, dict) else {}


def _true(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.lower() in ("true", "yes", "on"))
