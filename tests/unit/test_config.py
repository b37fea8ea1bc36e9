"""The relay config: the documented example is complete and loads; bad values are refused by key."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml

from relay.config.load import RelayConfig, load_config, parse_config
from relay.config.state import POSITION_FILE
from relay.errors import ConfigError, InvalidConfigError

EXAMPLE = Path(__file__).resolve().parents[2] / "conf" / "relay.yaml"


def _keys(cls: Any, prefix: str = "") -> set[str]:
    out = set()
    for f in dataclasses.fields(cls):
        if f.metadata.get("derived"):
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
    assert str(config.state_path(POSITION_FILE)).endswith("var/default/position.json")


def test_example_values_are_the_defaults() -> None:
    example = dataclasses.replace(load_config(EXAMPLE), config_file="", config_base="")
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
        ({"snapshot": {"mode": "always"}}, "snapshot.mode"),
        ({"snapshot": {"chunk_rows": 0}}, "snapshot.chunk_rows"),
        ({"snapshot": {"parallelism": 0}}, "snapshot.parallelism"),
        ({"snapshot": {"keyless_max_rows": 0}}, "snapshot.keyless_max_rows"),
        ({"snapshot": {"max_rows_per_second": -1}}, "snapshot.max_rows_per_second"),
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


# --- transactional and exactly-once modes (issue 13, items 4 and 5) -------------------------------------


@pytest.mark.parametrize(
    ("data", "key", "says"),
    [
        ({"kafka": {"exactly_once": True}, "positions": {"backend": "kafka"}},
         "kafka.exactly_once", "transactions"),
        ({"kafka": {"transactions": True, "exactly_once": True}}, "positions.backend", "must be kafka"),
        ({"positions": {"backend": "kafka"}}, "positions.backend", "exactly_once"),
        ({"kafka": {"settings": {"transactional.id": "mine"}}},
         "kafka.settings.transactional.id", "transactional_id"),
        ({"kafka": {"transactions": True, "transactional_id": " "}}, "kafka.transactional_id", "empty"),
        ({"kafka": {"transaction_linger_seconds": -1}}, "kafka.transaction_linger_seconds", "negative"),
        ({"ha": {"enabled": True}}, "positions.backend", "zookeeper"),
    ],
)  # fmt: skip
def test_transaction_settings_are_refused_naming_the_key(data: dict[str, Any], key: str, says: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(data)
    assert info.value.key == key
    assert says in info.value.problem


def test_the_kafka_mode_follows_the_settings() -> None:
    assert parse_config({}).kafka.mode == "idempotent"
    assert parse_config({"kafka": {"transactions": True}}).kafka.mode == "transactional"
    eos = {"kafka": {"transactions": True, "exactly_once": True}, "positions": {"backend": "kafka"}}
    assert parse_config(eos).kafka.mode == "exactly-once"
    with_ha = {**eos, "ha": {"enabled": True}}
    assert parse_config(with_ha).ha.enabled  # the Kafka position is fenced by the producer epoch


def test_the_transactional_id_is_per_instance() -> None:
    from relay.wiring import publisher_config, transactional_id

    config = parse_config({"instance": "shop", "kafka": {"transactions": True}})
    assert transactional_id(config) == "canal-relay-shop"
    assert transactional_id(parse_config({"instance": "shop"})) is None
    from mapping import parse_mapping

    settings = publisher_config(config, parse_mapping({})).producer_settings()
    assert settings["transactional.id"] == "canal-relay-shop"
    assert settings["transaction.timeout.ms"] >= settings["message.timeout.ms"]
    assert settings["enable.idempotence"] is True and settings["acks"] == "all"


# --- the schema history (issue 16) ------------------------------------------------------------------------


def test_the_schema_history_is_on_by_default_and_kept_beside_every_position_backend() -> None:
    from relay.wiring import schema_node

    assert parse_config({}).schema.history == "auto"
    for backend in ({"backend": "zookeeper"}, {"backend": "file"}):
        assert parse_config({"positions": backend}).schema.history == "auto"
    eos = {"kafka": {"transactions": True, "exactly_once": True}, "positions": {"backend": "kafka"}}
    assert parse_config(eos).schema.topic == "relay.schema-history"
    zk = parse_config({"instance": "shop", "positions": {"backend": "zookeeper"}, "ha": {"root": "/r"}})
    assert schema_node(zk) == "/r/destinations/shop/schema"
    with pytest.raises(ConfigError) as info:
        parse_config({**eos, "schema": {"topic": ""}})
    assert info.value.key == "schema.topic"
    with pytest.raises(ConfigError) as info:
        parse_config({"schema": {"history": "on"}})
    assert info.value.key == "schema.history" and "auto" in info.value.problem


# --- every problem at once, duplicate keys (issue 25) -----------------------------------------------------


BROKEN = """\
instance: shop
source:
  host: db
  port: many            # a wrong type
  hots: typo            # an unknown key
  password: ${RELAY_TEST_UNSET_VARIABLE}
snapshot:
  mode: always          # a bad value
  chunk_rows: 0         # and another one in the same section
  parallelism: 2
  parallelism: 4        # PyYAML would keep this one silently
kafka:
  settings: {acks: "1", retries: "x"}
status:
  file: /var/lib/relay/status.json
"""


def test_a_config_file_reports_every_problem_at_once_with_duplicate_keys_by_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RELAY_TEST_UNSET_VARIABLE", raising=False)
    path = tmp_path / "relay.yaml"
    path.write_text(BROKEN)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    error = info.value
    assert isinstance(error, InvalidConfigError) and error.key == str(path)
    keys = {e.key for e in error.errors}
    assert keys == {
        f"{path}:11:3",  # the second `parallelism:`, with the line of the first
        "source.port",
        "source.hots",
        "source.password",
        "snapshot.mode",
        "snapshot.chunk_rows",
        "kafka.settings.acks",
        "kafka.settings.retries",
        "status.file",
    }, str(error)
    by_key = {e.key: e.problem for e in error.errors}
    assert by_key[f"{path}:11:3"] == "duplicate key 'parallelism' (first written on line 10)"
    assert "RELAY_TEST_UNSET_VARIABLE is not set" in by_key["source.password"]
    assert str(error).startswith(f"{path}: 9 problems:\n  - ")


def test_one_problem_is_one_line_naming_its_key(tmp_path: Path) -> None:
    path = tmp_path / "relay.yaml"
    path.write_text("source:\n  port: 0\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert not isinstance(info.value, InvalidConfigError)
    assert str(info.value) == "source.port: must be a TCP port, got 0"
    path.write_text("source: {port: 1}\nsource: {port: 2}\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == f"{path}:2:1: duplicate key 'source' (first written on line 1)"
