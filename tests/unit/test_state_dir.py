"""One rule for paths: configuration is only read, state lives in the state directory (relay.config.state).

The config sits in a folder of its own (as /etc/relay or /etc/canal-relay would be) and the commands run
from another working directory: state must land under the working directory's ``var/{instance}`` (or
``state_dir`` / ``RELAY_STATE_DIR``), never beside the config, while ``mapping.file`` keeps resolving
against the config's folder. A relay upgraded with its position at the old place refuses to start.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from relay.cli.main import main
from relay.config.load import load_config, parse_config
from relay.config.state import MAPPING_HISTORY_DIR, POSITION_FILE, SCHEMA_HISTORY_FILE, STATUS_FILE
from relay.errors import ConfigError

MAPPING = {
    "version": 1,
    "logical_dbs": {"shop": {"physical": ["shop_\\d+"], "tables": {"orders": {"physical": ["orders_\\d+"]}}}},
}


def _install(root: Path, extra: dict[str, object] | None = None) -> Path:
    """``root/etc/conf/relay.yaml`` + ``mapping.yaml`` beside it; returns the config's path."""
    conf = root / "etc" / "conf"
    conf.mkdir(parents=True)
    (conf / "mapping.yaml").write_text("# the shop's mapping\n" + yaml.safe_dump(MAPPING, sort_keys=False))
    data: dict[str, object] = {
        "instance": "shop",
        "source": {"host": "127.0.0.1", "port": 1, "connect_timeout": 1.0},
        **(extra or {}),
    }
    (conf / "relay.yaml").write_text(yaml.safe_dump(data))
    return conf / "relay.yaml"


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The working directory the commands run in (not the config's folder)."""
    monkeypatch.delenv("RELAY_STATE_DIR", raising=False)
    cwd = tmp_path / "work"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    return cwd


def test_state_is_under_the_working_directory_and_the_mapping_beside_the_config(
    tmp_path: Path, work: Path
) -> None:
    config = load_config(_install(tmp_path))
    state = work / "var" / "shop"
    assert config.state_directory == state
    assert config.state_path(POSITION_FILE) == state / "position.json"
    assert config.state_path(STATUS_FILE) == state / "status.json"
    assert config.state_path(SCHEMA_HISTORY_FILE) == state / "schema-history.jsonl"
    # configuration: relative to the folder holding conf/, as before
    assert config.config_path(config.mapping.file) == tmp_path / "etc" / "conf" / "mapping.yaml"


def test_state_dir_and_the_environment_place_the_state(
    tmp_path: Path, work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = _install(tmp_path, {"state_dir": "/srv/relay/{instance}"})
    assert load_config(cfg).state_directory == Path("/srv/relay/shop")
    monkeypatch.setenv("RELAY_STATE_DIR", str(tmp_path / "env" / "{instance}"))
    assert load_config(cfg).state_directory == tmp_path / "env" / "shop"  # the environment wins
    monkeypatch.setenv("RELAY_STATE_DIR", "relative")
    assert load_config(cfg).state_directory == work / "relative"
    monkeypatch.setenv("RELAY_STATE_DIR", "/x/{nope}")
    with pytest.raises(ConfigError, match=r"RELAY_STATE_DIR.*only \{instance\}"):
        load_config(cfg)


@pytest.mark.parametrize(
    ("section", "key", "value", "name"),
    [
        ("positions", "path", "var/{instance}/position.json", "position.json"),
        ("status", "file", "/var/lib/relay/{instance}/status.json", "status.json"),
        ("schema", "path", "data/history.jsonl", "schema-history.jsonl"),
        ("snapshot", "request_file", "var/{instance}/snapshot-request.json", "snapshot-request.json"),
    ],
)
def test_the_keys_that_named_state_files_are_refused_with_the_new_place(
    tmp_path: Path, work: Path, section: str, key: str, value: str, name: str
) -> None:
    cfg = _install(tmp_path, {section: {key: value}})
    with pytest.raises(ConfigError) as caught:
        load_config(cfg)
    assert caught.value.key == f"{section}.{key}"
    text = str(caught.value)
    assert f"{work / 'var' / 'shop' / name}" in text and "no longer a setting" in text
    old = Path(value.replace("{instance}", "shop"))
    old_dir = old.parent if old.is_absolute() else tmp_path / "etc" / old.parent
    assert f"set state_dir: {old_dir}" in text
    assert ("rename" in text) == (old.name != name)


def test_a_relay_with_its_position_at_the_old_place_refuses_to_start(
    tmp_path: Path, work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = _install(tmp_path)
    old = tmp_path / "etc" / "var" / "shop"  # where earlier versions kept it: beside conf/
    old.mkdir(parents=True)
    (old / "position.json").write_text('{"format": 2}')
    new = work / "var" / "shop"
    for argv in (["run", "-c", str(cfg)], ["positions", "show", "-c", str(cfg)]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("relay: error: state_dir: ") and err.count("\n") == 1
        assert f"found {old / 'position.json'}" in err and f"state directory {new}" in err
        assert f"mv {old}/* {new}/" in err and "Nothing was started" in err
        assert not new.exists(), "nothing may be written before the refusal"
    # once moved, the relay's place has it and nothing is refused
    new.mkdir(parents=True)
    os.rename(old / "position.json", new / "position.json")
    assert load_config(cfg).legacy_state_problem() is None


def test_a_moved_schema_history_alone_is_refused_too(tmp_path: Path, work: Path) -> None:
    cfg = _install(tmp_path)
    old = tmp_path / "etc" / "var" / "shop"
    old.mkdir(parents=True)
    (old / "schema-history.jsonl").write_text("")
    problem = load_config(cfg).legacy_state_problem()
    assert problem is not None and "schema-history.jsonl" in problem
    # the ZooKeeper backend keeps neither in files: nothing to refuse
    assert (
        load_config(_install(tmp_path / "zk", {"positions": {"backend": "zookeeper"}})).legacy_state_problem()
        is None
    )
    assert parse_config({"instance": "shop"}).legacy_state_problem() is None  # no config file: no old place


def test_a_mapping_edit_writes_nothing_beside_the_config_but_the_mapping(
    tmp_path: Path, work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = _install(tmp_path)
    etc = tmp_path / "etc"
    before = _files(etc)
    argv = ["mapping", "tag", "set", "shop.orders", "hot", "-c", str(cfg), "--note", "hot orders"]
    assert main(argv) == 0, capsys.readouterr().err
    after = _files(etc)
    changed = {name for name in set(before) | set(after) if before.get(name) != after.get(name)}
    assert changed == {"conf/mapping.yaml"}, "only the mapping itself may change under the config folder"
    history = work / "var" / "shop" / MAPPING_HISTORY_DIR
    assert sorted(p.name for p in history.iterdir()) == ["00000001.yaml", "00000002.yaml"]
    assert main(["mapping", "history", "-c", str(cfg)]) == 0
    assert '"hot orders"' in capsys.readouterr().out
