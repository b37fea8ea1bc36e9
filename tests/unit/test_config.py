"""The relay config: the documented example is complete and loads; bad values are refused by key."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml

from relay.config.load import RelayConfig, load_config, parse_config
from relay.errors import ConfigError

EXAMPLE = Path(__file__).resolve().parents[2] / "conf" / "relay.yaml"


def _keys(cls: Any, prefix: str = "") -> set[str]:
    out = set()
    for f in dataclasses.fields(cls):
        if f.name == "base_dir":
            continue
        key = f"{prefix}{f.name}"
        out.add(key)
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if dataclasses.is_dataclass(default):
            out |= _keys(type(default), key + ".")
    return out


def _yaml_keys(data: dict[str, Any], prefix: str = "") -> set[str]:
    out = set()
    for k, v in data.items():
        out.add(f"{prefix}{k}")
        if isinstance(v, dict) and k != "settings":
            out |= _yaml_keys(v, f"{prefix}{k}.")
    return out


def test_example_documents_every_key_and_loads() -> None:
    documented = _yaml_keys(yaml.safe_load(EXAMPLE.read_text()))
    assert _keys(RelayConfig) == documented
    config = load_config(EXAMPLE)
    assert config.store_config().ddl_isolation is True
    assert str(config.path(config.positions.path)).endswith("var/default/position.json")


def test_example_values_are_the_defaults() -> None:
    example = dataclasses.replace(load_config(EXAMPLE), base_dir=".")
    assert example == parse_config({})


@pytest.mark.parametrize(
    ("data", "key"),
    [
        ({"source": {"port": "x"}}, "source.port"),
        ({"source": {"port": 0}}, "source.port"),
        ({"source": {"hots": "a"}}, "source.hots"),
        ({"store": {"buffer_size": 1000}}, "store.buffer_size"),
        ({"store": {"batch_mode": "BYTES"}}, "store.batch_mode"),
        ({"filter": {"include": "shop_(\\d+\\..*"}}, "filter.include"),
        ({"publish": {"batch_size": 0}}, "publish.batch_size"),
        ({"kafka": {"settings": {"acks": "1"}}}, "kafka.settings"),
        ({"logging": {"format": "xml"}}, "logging.format"),
        ({"instance": "a b"}, "instance"),
    ],
)
def test_bad_values_are_refused_naming_the_key(data: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(data)
    assert info.value.key.startswith(key), info.value


def test_secrets_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RELAY_MYSQL_PASSWORD", "hunter2")
    config = parse_config({"source": {"password": "${RELAY_MYSQL_PASSWORD}"}})
    assert config.source.password == "hunter2"
    assert "hunter2" not in repr(config)
