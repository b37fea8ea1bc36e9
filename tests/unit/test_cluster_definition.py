"""Instance definitions (``relay.cluster.definition``, ``versions``, ``diff``): validated as relay.yaml is,
every problem naming its key; what only a cluster refuses (node keys, literal secrets, a position or a
mapping only one host has); secrets kept as references and resolved on the node; the stored version
format; and the key-by-key diff. Pure logic: no ZooKeeper (tests/integration/test_cluster_instances.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from relay.cluster.definition import (
    InstanceDefinition,
    NodeSettings,
    operator_config,
    parse_definition,
    relay_config,
)
from relay.cluster.diff import changes, summary, text_diff
from relay.cluster.versions import VersionInfo, parse_stored, stored_text
from relay.errors import ClusterError, ConfigError, InvalidConfigError

ROOT = Path(__file__).resolve().parents[2]

GOOD = """\
# shop 01, the orders shard
source:
  host: db1.internal
  port: 3307
  user: relay
  password: ${SHOP01_PASSWORD}
  server_id: 7001
positions:
  backend: zookeeper
mapping:
  store: zookeeper
  zookeeper:
    hosts: zk:2181
kafka:
  bootstrap_servers: k1:9092
  settings:
    sasl.password: ${SHOP01_SASL:-fallback}
"""


def problems(text: str, name: str = "shop01") -> dict[str, str]:
    """Every problem of a refused definition, by key."""
    with pytest.raises(ConfigError) as caught:
        parse_definition(name, text, "shop01.yaml")
    exc = caught.value
    found = exc.errors if isinstance(exc, InvalidConfigError) else (exc,)
    return {e.key: e.problem for e in found}


def test_a_valid_definition_is_kept_as_written() -> None:
    definition = parse_definition("shop01", GOOD)
    assert definition.text == GOOD  # comments and references as written, nothing resolved
    assert definition.document["source"]["password"] == "${SHOP01_PASSWORD}"


def test_the_shipped_example_is_valid() -> None:
    parse_definition("shop01", (ROOT / "conf" / "instance.yaml").read_text(), "conf/instance.yaml")


def test_the_node_resolves_secrets_from_its_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHOP01_PASSWORD", "s3cret-pw")
    monkeypatch.delenv("RELAY_STATE_DIR", raising=False)
    node = NodeSettings(zookeeper="zk9:2181", root="/fleet", state_dir="/srv/relay", node="host-a")
    config = relay_config(parse_definition("shop01", GOOD), node)
    assert config.instance == "shop01"
    assert config.source.password == "s3cret-pw" and config.source.port == 3307
    assert config.kafka.settings["sasl.password"] == "fallback"
    assert config.ha.enabled and config.ha.zookeeper == "zk9:2181" and config.ha.root == "/fleet"
    assert config.ha.member_id == "host-a"
    assert relay_config(parse_definition("shop01", GOOD), node).state_directory == Path("/srv/relay/shop01")


def test_a_state_directory_from_the_environment_is_refused_on_a_node(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SHOP01_PASSWORD", "pw-on-node")
    monkeypatch.setenv("RELAY_STATE_DIR", str(tmp_path / "shared"))
    with pytest.raises(ConfigError) as caught:
        relay_config(parse_definition("shop01", GOOD), NodeSettings(state_dir=str(tmp_path / "node")))
    assert caught.value.key == "RELAY_STATE_DIR" and str(tmp_path / "node" / "shop01") in caught.value.problem


def test_a_secret_unset_on_the_node_names_its_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SHOP01_PASSWORD", raising=False)
    with pytest.raises(ConfigError) as caught:
        relay_config(parse_definition("shop01", GOOD), NodeSettings())
    assert caught.value.key == "source.password" and "SHOP01_PASSWORD" in caught.value.problem


def test_an_operator_reads_a_definition_with_what_its_environment_sets() -> None:
    definition = parse_definition("shop01", GOOD)
    node = NodeSettings(zookeeper="zk9:2181", root="/fleet", state_dir="/srv/relay")
    config, missing = operator_config(definition, node, {})
    assert missing == {"SHOP01_PASSWORD": "source.password"}  # the default of SHOP01_SASL stands
    assert (
        config.kafka.settings["sasl.password"] == "fallback" and "SHOP01_PASSWORD" in config.source.password
    )
    assert config.positions.backend == "zookeeper" and config.ha.zookeeper == "zk9:2181"
    config, missing = operator_config(definition, node, {"SHOP01_PASSWORD": "pw", "SHOP01_SASL": "s"})
    assert missing == {} and config.source.password == "pw" and config.kafka.settings["sasl.password"] == "s"


def test_validation_is_relay_yaml_s_own() -> None:
    found = problems(GOOD.replace("port: 3307", "port: 99999").replace("server_id: 7001", "server_id: x"))
    assert "source.port" in found and "TCP port" in found["source.port"]
    assert "source.server_id" in found and "integer" in found["source.server_id"]
    found = problems(GOOD.replace("positions:", "sourse:\n  host: x\npositions:"))
    assert "did you mean 'source'" in found["sourse"]


def test_a_reference_where_a_number_goes_is_named() -> None:
    found = problems(GOOD.replace("port: 3307", "port: ${SHOP01_PORT}"))
    assert "${SHOP01_PORT}" in found["source.port"]


def test_node_settings_are_refused() -> None:
    found = problems(GOOD + "state_dir: /x\nha:\n  enabled: true\nmetrics:\n  port: 9108\n")
    assert set(found) >= {"state_dir", "ha", "metrics"}
    assert all("node setting" in found[k] for k in ("state_dir", "ha", "metrics"))


def test_literal_secrets_are_refused() -> None:
    text = GOOD.replace("${SHOP01_PASSWORD}", "hunter2").replace("${SHOP01_SASL:-fallback}", "plain")
    found = problems(text)
    assert set(found) == {"source.password", "kafka.settings.sasl.password"}
    assert "${NAME} reference" in found["source.password"]
    assert "hunter2" not in " ".join(found.values())


def test_a_position_or_mapping_one_host_keeps_is_refused() -> None:
    found = problems(GOOD.replace("backend: zookeeper", "backend: file"))
    assert "positions.backend" in found
    found = problems(
        GOOD.replace("  store: zookeeper\n  zookeeper:\n    hosts: zk:2181\n", "  file: m.yaml\n")
    )
    assert "relative" in found["mapping.file"]
    parse_definition(
        "shop01",
        GOOD.replace("  store: zookeeper\n  zookeeper:\n    hosts: zk:2181\n", "  file: /etc/m.yaml\n"),
    )
    found = problems(GOOD.replace("mapping:\n  store: zookeeper\n  zookeeper:\n    hosts: zk:2181\n", ""))
    assert "mapping.store: zookeeper" in found["mapping"]


def test_names_yaml_and_duplicates() -> None:
    assert "instance" in problems(GOOD, name="bad/name")
    assert "differs" in problems("instance: other\n" + GOOD)["instance"]
    parse_definition("shop01", "instance: shop01\n" + GOOD)
    bad = problems("source: [1\n")
    [(key, problem)] = bad.items()
    assert key.startswith("shop01.yaml:") and "not valid YAML" in problem
    dup = problems(GOOD + "positions:\n  backend: kafka\n")
    assert any(key.startswith("shop01.yaml:") for key in dup)
    assert "expected a mapping" in problems("- a\n- b\n")["shop01.yaml"]


def test_every_problem_at_once() -> None:
    text = GOOD.replace("port: 3307", "port: nope").replace("${SHOP01_PASSWORD}", "pw") + "logging: {}\n"
    assert set(problems(text)) == {"source.port", "source.password", "logging"}


# --- stored versions and diffs ----------------------------------------------------------------


def test_stored_versions_round_trip_and_tombstones() -> None:
    definition = parse_definition("shop01", GOOD)
    text = stored_text(VersionInfo("shop01", 3, note="more memory"), definition)
    stored = parse_stored("shop01", text, "here")
    assert stored.definition == definition and stored.info.version == 3 and stored.info.note == "more memory"
    assert stored.info.saved and "@" in stored.info.by and not stored.info.removed
    tomb = parse_stored("shop01", stored_text(VersionInfo("shop01", 4, removed=True), None), "here")
    assert tomb.definition is None and tomb.info.removed and tomb.text == ""
    with pytest.raises(ClusterError, match="no relay-instance header"):
        parse_stored("shop01", GOOD, "here")
    with pytest.raises(ClusterError, match="unreadable"):
        parse_stored("shop01", '# relay-instance {"no": 1}\n', "here")


def test_changes_key_by_key() -> None:
    old = InstanceDefinition("shop01", GOOD).document
    new = InstanceDefinition(
        "shop01",
        GOOD.replace("port: 3307", "port: 3308").replace("  user: relay\n", "") + "store:\n  memunit: 2048\n",
    ).document
    assert changes(old, new) == [
        "~ source.port: 3307 -> 3308",
        "- source.user: relay",
        "+ store.memunit: 2048",
    ]
    assert changes(old, old) == []
    assert "+ source.password: ${SHOP01_PASSWORD}" in changes(None, old)
    assert all(line.startswith("- ") for line in changes(old, None))
    assert summary(None, old) == "defined" and summary(old, None) == "removed"
    assert summary(old, new) == "changed source.port, source.user, store.memunit"
    assert summary(old, old) == "no setting changed"
    diff = text_diff(GOOD, GOOD.replace("3307", "3308"), "v1", "v2")
    assert "-  port: 3307" in diff and "+  port: 3308" in diff and text_diff(GOOD, GOOD) == ""


def test_the_validate_command_needs_no_zookeeper(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from relay.cli.main import main

    assert main(["instance", "validate", "shop01", str(ROOT / "conf" / "instance.yaml")]) == 0
    assert "a valid definition of instance shop01" in capsys.readouterr().out
    bad = tmp_path / "bad.yaml"
    bad.write_text(GOOD.replace("backend: zookeeper", "backend: file") + "metrics: {port: 1}\n")
    assert main(["instance", "validate", "shop01", str(bad)]) == 2
    err = capsys.readouterr().err
    assert (
        "2 problems" in err
        and "positions.backend: must be zookeeper" in err
        and "metrics: a node setting" in err
    )


def test_what_instances_may_not_share() -> None:
    from relay.cluster.fleet import fleet_problems, identity

    a = parse_definition("shop01", GOOD)
    assert identity(a).replica == ("db1.internal", "3307", "7001") and identity(a).source_id == "shop01"
    assert identity(a).transactional_id is None
    other_server = parse_definition("shop02", GOOD.replace("db1.internal", "db2.internal"))
    assert fleet_problems(a, [a, other_server]) == []  # itself skipped; same id on another server: fine
    same = parse_definition("shop02", GOOD)
    assert [e.key for e in fleet_problems(a, [same])] == ["source.server_id"]
    probe = parse_definition("shop02", GOOD.replace("server_id: 7001", "server_id: 1007001"))
    side = parse_definition("shop02", GOOD.replace("server_id: 7001", f"server_id: {7001 | 1 << 31}"))
    assert ["1007001" in e.problem for e in fleet_problems(a, [probe])] == [True]
    assert [e.key for e in fleet_problems(a, [side])] == ["source.server_id"]
    via_standby = parse_definition(
        "shop02",
        GOOD.replace("db1.internal", "db2.internal").replace(
            "  server_id: 7001\n", "  server_id: 7001\n  standby:\n    host: db1.internal\n    port: 3307\n"
        ),
    )
    assert [e.key for e in fleet_problems(a, [via_standby])] == ["source.server_id"]
    txn = GOOD + "  transactions: true\n"
    mine, theirs = parse_definition("shop01", txn), parse_definition("shop02", txn.replace("db1", "db2"))
    assert identity(mine).transactional_id == "canal-relay-shop01"
    assert fleet_problems(mine, [theirs]) == []  # {instance} keeps them apart
    fixed = txn + "  transactional_id: relay-fixed\n"
    mine, theirs = parse_definition("shop01", fixed), parse_definition("shop02", fixed.replace("db1", "db2"))
    assert [e.key for e in fleet_problems(mine, [theirs])] == ["kafka.transactional_id"]
    plain = parse_definition("shop02", (GOOD + "  transactional_id: relay-fixed\n").replace("db1", "db2"))
    assert fleet_problems(mine, [plain]) == []  # a producer without transactions uses no transactional id
    named = parse_definition(
        "shop02",
        GOOD.replace("db1", "db2").replace("  server_id: 7001\n", "  server_id: 7001\n  id: shop01\n"),
    )
    assert [e.key for e in fleet_problems(a, [named])] == ["source.id"]
