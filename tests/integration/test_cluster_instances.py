"""Instance definitions in a real ZooKeeper (``relay.cluster.store``) and ``relay instance …`` on it:
versions and history, compare-and-set (two concurrent edits: one wins, one conflicts), removal as a
tombstone version that keeps the history, secrets stored as references and resolved on the node, and
the command's answers to bad input (bad YAML, an invalid field, an unknown instance, ZooKeeper
unreachable): one line naming what is wrong, exit status 2, nothing stored.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from relay.cli.main import main
from relay.cluster.definition import NodeSettings, parse_definition, relay_config
from relay.cluster.store import ZooKeeperInstanceStore
from relay.errors import (
    ClusterError,
    ConfigError,
    InstanceConflictError,
    InstanceNotFoundError,
    InvalidConfigError,
)

RELAY = [sys.executable, "-m", "relay.cli"]
DEFINITION = """\
# shop 01
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
kafka:
  bootstrap_servers: k1:9092
"""


@pytest.fixture
def root() -> str:
    return f"/relay-test-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def zk_hosts(zk_service: object) -> str:
    return str(zk_service.hosts)  # type: ignore[attr-defined]


@pytest.fixture
def store(zk_hosts: str, root: str) -> Iterator[ZooKeeperInstanceStore]:
    opened = ZooKeeperInstanceStore(zk_hosts, root)
    yield opened
    opened.close()


def test_versions_history_and_a_tombstone(store: ZooKeeperInstanceStore) -> None:
    first = parse_definition("shop01", DEFINITION)
    assert store.add(first, note="first").version == 1
    with pytest.raises(ClusterError, match="already defined"):
        store.add(first)
    second = parse_definition("shop01", DEFINITION.replace("3307", "3308"))
    assert store.update(second, expected=1, note="port").version == 2
    with pytest.raises(InstanceConflictError, match="based on version 1"):
        store.update(first, expected=1)
    assert store.read("shop01").definition == second
    assert store.remove("shop01", expected=2, note="gone").removed
    with pytest.raises(InstanceNotFoundError, match="removed in version 3"):
        store.read("shop01")
    assert store.current("shop01").info.removed
    history = store.history("shop01")
    assert [(v.version, v.note, v.removed) for v in history] == [
        (1, "first", False),
        (2, "port", False),
        (3, "gone", True),
    ]
    assert store.version("shop01", 1).definition == first
    with pytest.raises(ClusterError, match=r"no stored version 9 \(stored versions: 1, 2, 3\)"):
        store.version("shop01", 9)
    assert store.add(first, note="back").version == 4  # the history continues
    assert [v.version for v in store.history("shop01")] == [1, 2, 3, 4]
    assert store.names() == ["shop01"]
    with pytest.raises(InstanceNotFoundError, match=r"never added\); defined instances: shop01"):
        store.read("shop02")


def test_two_concurrent_edits_one_wins_one_conflicts(zk_hosts: str, root: str) -> None:
    stores = [ZooKeeperInstanceStore(zk_hosts, root) for _ in range(2)]
    try:
        stores[0].add(parse_definition("shop01", DEFINITION))
        edits = [parse_definition("shop01", DEFINITION.replace("3307", p)) for p in ("4001", "4002")]
        ready = threading.Barrier(2)
        outcome: list[object] = [None, None]

        def edit(k: int) -> None:
            ready.wait(timeout=30)
            try:
                outcome[k] = stores[k].update(edits[k], expected=1).version
            except InstanceConflictError as exc:
                outcome[k] = exc

        threads = [threading.Thread(target=edit, args=(k,)) for k in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        wins = [k for k in range(2) if outcome[k] == 2]
        assert len(wins) == 1, outcome
        assert isinstance(outcome[1 - wins[0]], InstanceConflictError), outcome
        assert stores[1].read("shop01").definition == edits[wins[0]]
        assert [v.version for v in stores[1].history("shop01")] == [1, 2]
    finally:
        for s in stores:
            s.close()


def test_instances_may_not_share_a_replica_a_source_id_or_a_transactional_id(
    store: ZooKeeperInstanceStore,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    zk_hosts: str,
    root: str,
) -> None:
    store.add(parse_definition("shop01", DEFINITION + "  transactions: true\n"))
    clash = DEFINITION + "  transactions: true\n  transactional_id: canal-relay-shop01\n"
    clash = clash.replace("  server_id: 7001\n", "  server_id: 7001\n  id: shop01\n")
    with pytest.raises(InvalidConfigError) as caught:
        store.add(parse_definition("shop02", clash))
    assert {e.key for e in caught.value.errors} == {"source.server_id", "source.id", "kafka.transactional_id"}
    assert all("shop01" in e.problem for e in caught.value.errors)
    assert store.names() == ["shop01"]  # nothing stored
    path = tmp_path / "shop02.yaml"
    path.write_text(clash)
    code, out, err = run(
        capsys, "instance", "add", "shop02", str(path), "--dry-run", "--zookeeper", zk_hosts, "--root", root
    )
    assert (
        code == 2
        and "7001: instance shop01 connects to db1.internal:3307 with replica server id 7001 " in err
        and "source.server_id: " in err
        and "dry run" not in out
    )
    # another server, its own ids: accepted; the same server id on another server is no clash
    store.add(parse_definition("shop02", DEFINITION.replace("db1.internal", "db2.internal")))
    # an update cannot bring a clash either
    with pytest.raises(ConfigError, match="server_id"):
        store.update(parse_definition("shop02", DEFINITION), expected=1)
    # a removed instance frees its ids
    store.remove("shop01", expected=1)
    assert store.update(parse_definition("shop02", DEFINITION), expected=1).version == 2


def test_an_edit_of_another_instance_in_between_is_a_conflict(store: ZooKeeperInstanceStore) -> None:
    """The fleet check and the write are one compare-and-set: the container's version read before the
    check must still be current at the write."""
    fleet = store.check_fleet(parse_definition("shop01", DEFINITION))
    store.add(parse_definition("shop02", DEFINITION.replace("db1.internal", "db2.internal")))
    with pytest.raises(InstanceConflictError, match="another edit of the cluster's instances"):
        store._create(
            parse_definition("shop01", DEFINITION), fleet, "late"
        )  # as add() would, after the check
    assert store.names() == ["shop02"]


def test_secrets_stay_references_and_resolve_on_the_node(
    store: ZooKeeperInstanceStore, zk_hosts: str, root: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SHOP01_PASSWORD", "resolved-on-the-cli-host")
    store.add(parse_definition("shop01", DEFINITION))
    raw = KazooClient(hosts=zk_hosts)
    raw.start(timeout=30)
    try:
        for path in (f"{root}/instances/shop01", f"{root}/instances/shop01/history/v0000000001"):
            data, _ = raw.get(path)
            assert b"password: ${SHOP01_PASSWORD}" in data and b"resolved-on" not in data
    finally:
        raw.stop()
        raw.close()
    monkeypatch.setenv("SHOP01_PASSWORD", "the-node's-own")
    monkeypatch.delenv("RELAY_STATE_DIR", raising=False)
    definition = store.read("shop01").definition
    assert definition is not None
    config = relay_config(definition, NodeSettings(zookeeper=zk_hosts, root=root, state_dir="/srv/r"))
    assert config.source.password == "the-node's-own" and config.ha.root == root


# --- the command -----------------------------------------------------------------------------


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_the_command_adds_updates_removes_and_reports(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, zk_hosts: str, root: str
) -> None:
    where = ["--zookeeper", zk_hosts, "--root", root]
    path = tmp_path / "shop01.yaml"
    path.write_text(DEFINITION)
    code, out, _ = run(capsys, "instance", "add", "shop01", str(path), "--dry-run", *where)
    assert code == 0 and "+ source.port: 3307" in out and "dry run: nothing stored" in out
    code, out, _ = run(capsys, "instance", "list", "--json", *where)
    assert code == 0 and json.loads(out) == []
    code, out, _ = run(capsys, "instance", "add", "shop01", str(path), *where)
    assert code == 0 and "stored shop01 version 1" in out
    code, out, _ = run(capsys, "instance", "list", *where)
    [row] = out.splitlines()
    assert code == 0 and row.split()[:2] == ["shop01", "v1"] and row.endswith("db1.internal:3307")
    path.write_text(DEFINITION.replace("3307", "3308"))
    code, out, _ = run(capsys, "instance", "update", "shop01", str(path), "--dry-run", *where)
    assert code == 0 and "~ source.port: 3307 -> 3308" in out and "+  port: 3308" in out
    assert "stays at version 1" in out
    code, out, _ = run(capsys, "instance", "update", "shop01", str(path), "--note", "new port", *where)
    assert code == 0 and "stored shop01 version 2" in out and "(was 1)" in out
    code, out, _ = run(capsys, "instance", "update", "shop01", str(path), *where)
    assert code == 0 and "no change" in out
    code, _, err = run(capsys, "instance", "update", "shop01", str(path), "--expect-version", "1", *where)
    assert code == 2 and "based on version 1, the stored version is 2" in err
    code, out, _ = run(capsys, "instance", "show", "shop01", "--json", *where)
    shown = json.loads(out)
    assert shown["version"] == 2 and shown["settings"]["source"]["port"] == 3308
    assert shown["definition"] == DEFINITION.replace("3307", "3308")
    code, out, _ = run(capsys, "instance", "show", "shop01", "--version", "1", *where)
    assert code == 0 and "version 1" in out.splitlines()[0] and "port: 3307" in out
    # back to version 1, as the runbook says: show it, save it, update from it
    code, out, _ = run(capsys, "instance", "show", "shop01", "--version", "1", *where)
    (tmp_path / "v1.yaml").write_text(out)
    code, out, _ = run(capsys, "instance", "update", "shop01", str(tmp_path / "v1.yaml"), *where)
    assert code == 0 and "~ source.port: 3308 -> 3307" in out and "stored shop01 version 3" in out
    code, out, _ = run(capsys, "instance", "remove", "shop01", "--dry-run", *where)
    assert code == 0 and "- source.port: 3307" in out and "stays at version 3" in out
    code, out, _ = run(capsys, "instance", "remove", "shop01", *where)
    assert code == 0 and "version 4" in out
    code, out, _ = run(capsys, "instance", "list", *where)
    assert code == 0 and "no instances defined" in out
    code, out, _ = run(capsys, "instance", "list", "--all", "--json", *where)
    assert [(r["instance"], r["version"], r["removed"]) for r in json.loads(out)] == [("shop01", 4, True)]
    code, _, err = run(capsys, "instance", "show", "shop01", *where)
    assert code == 2 and "removed in version 4" in err
    code, out, _ = run(capsys, "instance", "history", "shop01", "--json", *where)
    rows = json.loads(out)
    assert [(r["version"], r["summary"]) for r in rows] == [
        (1, "defined"),
        (2, "changed source.port"),
        (3, "changed source.port"),
        (4, "removed"),
    ]
    assert rows[1]["note"] == "new port" and rows[0]["note"].startswith("relay instance add from")
    code, out, _ = run(capsys, "instance", "history", "shop01", *where)
    assert code == 0 and len(out.splitlines()) == 4 and '"new port"' in out


def test_the_command_refuses_bad_input_naming_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, zk_hosts: str, root: str
) -> None:
    where = ["--zookeeper", zk_hosts, "--root", root]
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("source:\n  host: [db1\n")
    code, _, err = run(capsys, "instance", "add", "shop01", str(bad_yaml), *where)
    assert code == 2 and f"{bad_yaml}:" in err and "not valid YAML" in err
    invalid = tmp_path / "invalid.yaml"
    invalid.write_text(DEFINITION.replace("port: 3307", "port: many").replace("${SHOP01_PASSWORD}", "pw"))
    code, _, err = run(capsys, "instance", "add", "shop01", str(invalid), *where)
    assert code == 2 and "source.port: expected an integer" in err and "source.password: a secret" in err
    assert "pw" not in err.replace("password", "")
    code, _, err = run(capsys, "instance", "add", "shop01", str(tmp_path / "missing.yaml"), *where)
    assert code == 2 and "cannot read the definition" in err
    code, out, _ = run(capsys, "instance", "list", "--all", "--json", *where)
    assert json.loads(out) == []  # nothing was stored by the refused edits
    good = tmp_path / "good.yaml"
    good.write_text(DEFINITION)
    for argv in (
        ["update", "nope", str(good)],
        ["remove", "nope"],
        ["show", "nope"],
        ["history", "nope"],
    ):
        code, _, err = run(capsys, "instance", *argv, *where)
        assert code == 2 and "nope: no such instance (never added)" in err, (argv, err)
        assert len(err.strip().splitlines()) == 1
    code, _, err = run(capsys, "instance", "show", "bad/name", *where)
    assert code == 2 and "not an instance name" in err


def test_with_an_identity_only_the_editors_change_definitions_and_everyone_reads(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, zk_hosts: str, root: str
) -> None:
    where = ["--zookeeper", zk_hosts, "--root", root]
    path = tmp_path / "shop01.yaml"
    path.write_text(DEFINITION)
    code, _, err = run(capsys, "instance", "add", "shop01", str(path), *where, "--zk-auth", "ops:s3cret-ed")
    assert code == 0, err
    code, out, _ = run(capsys, "instance", "show", "shop01", *where)  # a node: no credentials
    assert code == 0 and "port: 3307" in out
    path.write_text(DEFINITION.replace("3307", "3308"))
    code, _, err = run(capsys, "instance", "update", "shop01", str(path), *where)
    assert code == 2 and "not authorized to write" in err and "--zk-auth" in err
    code, _, err = run(capsys, "instance", "update", "shop01", str(path), *where, "--zk-auth", "ops:wrong")
    assert code == 2 and "not authorized" in err and "wrong" not in err and "s3cret" not in err
    code, _, err = run(capsys, "instance", "add", "shop02", str(path), *where)  # the container too
    assert code == 2 and "not authorized" in err
    code, out, err = run(
        capsys, "instance", "update", "shop01", str(path), *where, "--zk-auth", "ops:s3cret-ed"
    )
    assert code == 0 and "version 2" in out, err


def test_zookeeper_unreachable_is_one_line_and_status_2(tmp_path: Path) -> None:
    with socket.socket() as s:  # bound, never listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        started = time.monotonic()
        done = subprocess.run(
            [*RELAY, "instance", "list", "--zookeeper", f"127.0.0.1:{port}", "--timeout", "3"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env={**os.environ, "RELAY_STATE_DIR": str(tmp_path)},
        )
    lines = [line for line in done.stderr.splitlines() if line.strip() and "pure Python" not in line]
    assert done.returncode == 2, done
    assert len(lines) == 1 and f"ZooKeeper at 127.0.0.1:{port} (--zookeeper) did not answer" in lines[0], (
        lines
    )
    assert time.monotonic() - started < 60
