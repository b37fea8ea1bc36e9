"""What ZooKeeper says about an instance's relays, for reports: who is active, who stands by, the epoch
(``relay status``, ``relay positions``) and what each live relay announced (``relay mapping history``,
``relay check``). Read-only: the election and the fence are ``relay.ha.leadership``'s.

Runs on the CLI's thread, in a process other than the relay's; each call opens its own ZooKeeper session
unless handed one.
"""

from __future__ import annotations

from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from relay.common import zookeeper
from relay.config.load import RelayConfig
from relay.config.sections import HAConfig
from relay.errors import LeadershipUnavailableError, RelayError
from relay.ha.leadership import Layout, connect, read_json
from relay.positions.zookeeper import read_position_node


def zookeeper_status(config: RelayConfig) -> dict[str, Any]:
    """For ``relay status``: who is active, who stands by, the epoch, and the epoch that wrote the
    position node."""
    try:
        client = connect(config.ha)
    except RelayError as exc:
        return {"ha_error": str(exc)}
    try:
        report = cluster_report(config.ha, config.instance, client)
        _, written_by = read_position_node(client, Layout(config.ha.root, config.instance).position)
        report["position_epoch"] = written_by
        return report
    except RelayError as exc:
        return {"ha_error": str(exc)}
    finally:
        client.stop()
        client.close()


def cluster_report(config: HAConfig, instance: str, client: KazooClient | None = None) -> dict[str, Any]:
    """Who is active, who stands by, the epoch: for ``relay status``."""
    layout = Layout(config.root, instance)
    own = client is None
    try:
        zk = client or connect(config)
    except RelayError as exc:
        return {"ha_error": str(exc)}
    try:
        active = read_json(zk, layout.running)
        try:
            members = sorted(zk.get_children(layout.cluster))
        except NoNodeError:
            members = []
        try:
            _, stat = zk.get(layout.epoch)
            epoch: int | None = stat.version
        except NoNodeError:
            epoch = None
    except zookeeper.ERRORS as exc:
        return {"ha_error": f"cannot read {layout.base}: {exc!r}"}
    finally:
        if own:
            zk.stop()
            zk.close()
    leader = active.get("member") if active else None
    return {
        "ha_active": leader,
        "ha_active_pid": active.get("pid") if active else None,
        "ha_standby": [m for m in members if m != leader],
        "ha_epoch": epoch,
    }


def members(config: HAConfig, instance: str) -> list[dict[str, Any]]:
    """Every live relay process of ``instance`` with what it announced (``Leadership.announce``) and
    ``active``; for ``relay mapping history``. ``LeadershipUnavailableError`` when ZooKeeper does not
    answer within ``ha.connect_timeout_seconds``."""
    layout = Layout(config.root, instance)
    zk = connect(config)
    try:
        active = read_json(zk, layout.running)
        leader = active.get("member") if active else None
        try:
            names = sorted(zk.get_children(layout.cluster))
        except NoNodeError:
            names = []
        out = []
        for name in names:
            data = read_json(zk, f"{layout.cluster}/{name}") or {"member": name}
            out.append({**data, "active": data.get("member", name) == leader})
        return out
    except zookeeper.ERRORS as exc:
        raise LeadershipUnavailableError(f"cannot read {layout.base}: {exc!r}") from exc
    finally:
        zk.stop()
        zk.close()
