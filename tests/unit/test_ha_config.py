"""The ``ha:`` section, ``positions.backend: zookeeper`` and the failover keys: refused by key when wrong;
the canal-like ZooKeeper layout of an instance."""

from __future__ import annotations

from typing import Any

import pytest

from relay.config.load import parse_config
from relay.errors import ConfigError
from relay.ha.leadership import Layout


@pytest.mark.parametrize(
    ("data", "key"),
    [
        ({"ha": {"enabled": True}}, "positions.backend"),  # a file cannot be shared or fenced
        ({"positions": {"backend": "etcd"}}, "positions.backend"),
        ({"ha": {"root": "canal"}}, "ha.root"),
        ({"ha": {"session_timeout_seconds": 0}}, "ha.session_timeout_seconds"),
        ({"ha": {"member_id": "a/b"}}, "ha.member_id"),
        ({"ha": {"zookeper": "x"}}, "ha.zookeper"),
        ({"source": {"failover": {"mode": "magic"}}}, "source.failover.mode"),
        ({"source": {"failover": {"attempts": 0}}}, "source.failover.attempts"),
        ({"source": {"standby": {"host": "r", "port": 0}}}, "source.standby.port"),
    ],
)
def test_bad_ha_and_failover_values_are_refused_naming_the_key(data: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(data)
    assert info.value.key == key, info.value


def test_ha_with_the_zookeeper_position_store_is_accepted() -> None:
    config = parse_config(
        {
            "ha": {"enabled": True, "zookeeper": "127.0.0.1:2181", "root": "/relays"},
            "positions": {"backend": "zookeeper"},
            "source": {"standby": {"host": "10.0.0.2"}, "failover": {"mode": "timestamp"}},
        }
    )
    assert config.ha.enabled and config.source.standby.port == 3306


def test_layout_is_canal_like_under_the_root() -> None:
    layout = Layout("/canal-relay", "shop")
    assert layout.running == "/canal-relay/destinations/shop/running"
    assert layout.cluster == "/canal-relay/destinations/shop/cluster"
    assert layout.epoch == "/canal-relay/destinations/shop/epoch"
    assert layout.position == "/canal-relay/destinations/shop/position"
