"""``node.yaml``: the settings of one cluster node (``relay cluster run -c node.yaml``), loaded and checked.

Owns the node file's schema (``NodeConfig`` and its sections), its loading and its validation, which
works as ``relay.yaml``'s does: strict YAML (a key written twice is a problem), ``${NAME}`` references
resolved from the environment, every problem reported at once, each naming its key (``node.capacity:
expected an integer …``, ``zookeeper.hots: unknown key; did you mean 'hosts'?``). ``settings()`` gives
the ``NodeSettings`` every instance the node runs is built with (``relay.cluster.definition``). Pure
functions and values; run on the caller's thread (the CLI, the node's supervisor, its children).
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from pathlib import Path

from relay.cluster.definition import NodeSettings, check_name, load_sections
from relay.config.settings import build, interpolate
from relay.errors import ConfigError, InvalidConfigError

__all__ = ["ChildrenConfig", "NodeConfig", "load_node_config", "parse_node_config"]

_LEVELS = ("debug", "info", "warning", "error")


@dataclass(frozen=True)
class NodeSection:
    name: str = ""  # "": the host name
    capacity: int = 4  # instances this node may run at once (0: runs none, hands its instances over)
    state_dir: str = "/var/lib/canal-relay"  # each instance's state in <state_dir>/<instance>


@dataclass(frozen=True)
class ZooKeeperSection:
    hosts: str = "127.0.0.1:2181"
    root: str = "/canal-relay"
    session_timeout_seconds: float = 10.0
    connect_timeout_seconds: float = 10.0
    auth: str = ""  # user:password (digest) to read nodes with an ACL; "" none


@dataclass(frozen=True)
class MetricsSection:
    port: int = 0  # 0: no metrics endpoint
    host: str = "0.0.0.0"


@dataclass(frozen=True)
class LoggingSection:
    level: str = "info"
    format: str = "text"  # text | json


@dataclass(frozen=True)
class ChildrenConfig:
    """How the node handles its instances' processes."""

    stop_timeout_seconds: float = 30.0  # after SIGTERM (a drain), SIGKILL
    restart_backoff_seconds: float = 1.0  # first wait before restarting a crashed instance
    restart_backoff_max_seconds: float = 30.0  # the wait doubles up to this
    healthy_after_seconds: float = 60.0  # a child running this long resets the backoff
    status_interval_seconds: float = 2.0  # how often the node publishes its instances' status


@dataclass(frozen=True)
class NodeConfig:
    """One node's settings, as ``node.yaml`` gives them."""

    node: NodeSection = field(default_factory=NodeSection)
    zookeeper: ZooKeeperSection = field(default_factory=ZooKeeperSection)
    metrics: MetricsSection = field(default_factory=MetricsSection)
    logging: LoggingSection = field(default_factory=LoggingSection)
    children: ChildrenConfig = field(default_factory=ChildrenConfig)
    config_file: str = ""  # where it was read from (derived, never from YAML)

    @property
    def name(self) -> str:
        return self.node.name or socket.gethostname()

    @property
    def root(self) -> str:
        return self.zookeeper.root.rstrip("/") or "/"

    def settings(self) -> NodeSettings:
        """What the node gives every instance it runs (``relay.cluster.definition.relay_config``)."""
        state_dir = Path(self.node.state_dir).expanduser()
        if not state_dir.is_absolute() and self.config_file:
            state_dir = Path(self.config_file).resolve().parent / state_dir
        return NodeSettings(
            zookeeper=self.zookeeper.hosts,
            root=self.root,
            session_timeout_seconds=self.zookeeper.session_timeout_seconds,
            connect_timeout_seconds=self.zookeeper.connect_timeout_seconds,
            state_dir=str(state_dir),
            node=self.name,
        )


def load_node_config(path: str | Path) -> NodeConfig:
    """``node.yaml`` at ``path``, checked; ``ConfigError``/``InvalidConfigError`` naming every bad key."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(str(file), f"cannot read the node file: {exc.strerror or exc}") from None
    return parse_node_config(text, str(file))


def parse_node_config(text: str, source: str = "node.yaml") -> NodeConfig:
    """A ``NodeConfig`` from YAML ``text`` (``source``: its file, for messages and relative paths)."""
    data = load_sections(text, source, "node:, zookeeper:, …")
    errors: list[ConfigError] = []
    try:
        data = interpolate(data)
    except ConfigError as exc:
        errors.append(exc)
        data = interpolate(data, lenient=True)
    config = build(NodeConfig, {k: v for k, v in data.items() if k != "config_file"}, errors=errors)
    if "config_file" in data:
        errors.append(ConfigError("config_file", "unknown key"))
    errors.extend(_problems(config))
    InvalidConfigError.raise_all(errors, source)
    return NodeConfig(
        config.node, config.zookeeper, config.metrics, config.logging, config.children, config_file=source
    )


def _problems(config: NodeConfig) -> list[ConfigError]:
    out: list[ConfigError] = []
    if config.node.name:
        try:
            check_name(config.node.name, "node.name")
        except ConfigError as exc:
            out.append(ConfigError("node.name", exc.problem.replace("an instance name", "a node name")))
    if config.node.capacity < 0:
        out.append(ConfigError("node.capacity", f"must be 0 or more, got {config.node.capacity}"))
    if not config.node.state_dir:
        out.append(ConfigError("node.state_dir", "must name a directory"))
    zk = config.zookeeper
    if not zk.hosts.strip():
        out.append(ConfigError("zookeeper.hosts", "must name at least one host:port"))
    if not zk.root.startswith("/"):
        out.append(ConfigError("zookeeper.root", f"must be an absolute ZooKeeper path, got {zk.root!r}"))
    for key in ("session_timeout_seconds", "connect_timeout_seconds"):
        if getattr(zk, key) <= 0:
            out.append(ConfigError(f"zookeeper.{key}", f"must be above 0, got {getattr(zk, key)}"))
    if zk.auth and ":" not in zk.auth:
        out.append(ConfigError("zookeeper.auth", "expected user:password"))
    if not 0 <= config.metrics.port <= 65535:
        out.append(
            ConfigError("metrics.port", f"must be 0 (off) or a port 1-65535, got {config.metrics.port}")
        )
    if config.logging.level.lower() not in _LEVELS:
        out.append(ConfigError("logging.level", f"expected one of {', '.join(_LEVELS)}"))
    if config.logging.format not in ("text", "json"):
        out.append(ConfigError("logging.format", "expected text or json"))
    ch = config.children
    for key in ("stop_timeout_seconds", "restart_backoff_seconds", "status_interval_seconds"):
        if getattr(ch, key) <= 0:
            out.append(ConfigError(f"children.{key}", f"must be above 0, got {getattr(ch, key)}"))
    if ch.restart_backoff_max_seconds < ch.restart_backoff_seconds:
        out.append(
            ConfigError(
                "children.restart_backoff_max_seconds",
                f"must be at least children.restart_backoff_seconds ({ch.restart_backoff_seconds})",
            )
        )
    return out
