"""``node.yaml``: defaults, the example file, and bad values refused together, each naming its key."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from relay.cluster.node_config import load_node_config, parse_node_config
from relay.errors import ConfigError, InvalidConfigError

REPO = Path(__file__).resolve().parents[2]


def test_the_example_loads_with_its_documented_defaults() -> None:
    config = load_node_config(REPO / "conf" / "node.yaml")
    assert config.name == socket.gethostname()
    assert config.node.capacity == 4
    assert config.zookeeper.hosts == "127.0.0.1:2181"
    assert config.children.stop_timeout_seconds == 30
    settings = config.settings()
    assert settings.node == socket.gethostname()
    assert settings.state_dir == "/var/lib/canal-relay"
    assert settings.root == "/canal-relay"


def test_an_empty_file_is_all_defaults_and_a_relative_state_dir_is_the_files() -> None:
    assert parse_node_config("").node.capacity == 4
    config = parse_node_config("node: {name: a, state_dir: var}\n", "/etc/relay/node.yaml")
    assert config.settings().state_dir == "/etc/relay/var"
    assert config.settings().node == "a"


def test_references_resolve_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZK", "zk1:2181,zk2:2181")
    config = parse_node_config("zookeeper:\n  hosts: ${ZK}\n  auth: ${AUTH:-u:p}\n")
    assert config.zookeeper.hosts == "zk1:2181,zk2:2181"
    assert config.zookeeper.auth == "u:p"
    with pytest.raises(ConfigError, match=r"MISSING_ZK"):
        parse_node_config("zookeeper: {hosts: '${MISSING_ZK}'}\n")


def test_every_problem_at_once_each_naming_its_key() -> None:
    text = """\
node:
  name: "a b"
  capacity: -1
zookeeper:
  hots: x
  root: relative
  session_timeout_seconds: 0
metrics: {port: 70000}
logging: {level: loud}
children: {restart_backoff_seconds: 5, restart_backoff_max_seconds: 2}
extra: 1
"""
    with pytest.raises(InvalidConfigError) as caught:
        parse_node_config(text, "node.yaml")
    keys = {e.key for e in caught.value.errors}
    assert keys == {
        "node.name",
        "node.capacity",
        "zookeeper.hots",
        "zookeeper.root",
        "zookeeper.session_timeout_seconds",
        "metrics.port",
        "logging.level",
        "children.restart_backoff_max_seconds",
        "extra",
    }
    text_of = {e.key: e.problem for e in caught.value.errors}
    assert "did you mean 'hosts'" in text_of["zookeeper.hots"]
    assert "a node name" in text_of["node.name"]


def test_bad_yaml_and_a_duplicate_key_name_the_place() -> None:
    with pytest.raises(ConfigError, match=r"not valid YAML"):
        parse_node_config("node: [\n", "node.yaml")
    with pytest.raises(ConfigError, match=r"node.yaml:2:1.*duplicate key 'node'"):
        parse_node_config("node: {}\nnode: {}\n", "node.yaml")
    with pytest.raises(ConfigError, match="cannot read the node file"):
        load_node_config("/nonexistent/node.yaml")
