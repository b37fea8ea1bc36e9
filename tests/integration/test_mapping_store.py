"""One contract suite, run unchanged against every mapping store: the YAML file and a real ZooKeeper node.

Compare-and-set (two concurrent edits: one wins, one conflicts, the stored mapping is one of the two),
versions and history, rollback, the change fingerprint the relay's watcher polls, refusal of invalid
stored text; then what only ZooKeeper has (the digest ACL) and the CLI racing itself on a real node.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from mapping import Mapping, editor, parse_mapping
from mapping.store import FileMappingStore, MappingStore
from mapping.store_zk import ZooKeeperMappingStore, ZooKeeperStoreConfig
from relay.dev import services
from relay.errors import InvalidMappingError, MappingConflictError, MappingError, MappingStoreError

REPO = Path(__file__).resolve().parents[2]

BASE: dict[str, Any] = {
    "version": 1,
    "logical_dbs": {
        "shop": {
            "physical": ["shop_\\d+"],
            "tables": {"orders": {"physical": ["orders_\\d+"], "key": ["order_id"]}},
        }
    },
}

Factory = Callable[[], MappingStore]


def wait_for(probe: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not probe():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {what}")
        time.sleep(0.02)


@pytest.fixture(params=["file", "zookeeper"])
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Factory]:
    """A factory of store handles on ONE fresh store holding BASE as version 1 (one handle per 'process')."""
    opened: list[MappingStore] = []

    if request.param == "file":

        def make() -> MappingStore:
            return FileMappingStore(tmp_path / "mapping.yaml", tmp_path / "state" / "mapping-history")

    else:
        zk = request.getfixturevalue("zk_service")
        config = ZooKeeperStoreConfig(zk.hosts, f"/relay-test/{uuid.uuid4().hex[:8]}/mapping")

        def make() -> MappingStore:
            return ZooKeeperMappingStore(config)

    def factory() -> MappingStore:
        store = make()
        opened.append(store)
        return store

    factory().create(parse_mapping(BASE), note="test base")
    yield factory
    for store in opened:
        store.close()


def test_read_write_history_and_versions(stores: Factory) -> None:
    store = stores()
    base = store.read()
    assert base.version == 1 and base.logical_db("shop") is not None
    edited = editor.add_table(base, "shop", "items", physical=["items_\\d+"], topic="shop.items")
    saved = store.write(edited, expected=1, note="give items a topic")
    assert saved.version == 2
    assert store.read() == saved
    assert [v.version for v in store.history()] == [1, 2]
    assert store.history()[1].note == "give items a topic"
    assert store.version(1) == base
    assert store.version(2) == saved
    with pytest.raises(MappingError) as info:
        store.version(7)
    assert info.value.key == "version" and "1, 2" in str(info.value)


def test_stale_edit_is_a_conflict_and_stores_nothing(stores: Factory) -> None:
    store = stores()
    store.write(editor.set_topic(store.read(), "shop", "shop.all"), expected=1)
    late = editor.set_topic(store.version(1), "shop", "other")
    with pytest.raises(MappingConflictError, match="based on version 1"):
        store.write(late, expected=1)
    assert store.read().version == 2
    assert store.read().logical_db("shop").topic == "shop.all"  # type: ignore[union-attr]
    assert [v.version for v in store.history()] == [1, 2]


@pytest.mark.parametrize("rounds", [5])
def test_two_concurrent_edits_one_wins_one_conflicts_never_a_mix(stores: Factory, rounds: int) -> None:
    for n in range(rounds):
        a, b = stores(), stores()  # separate handles, as two operators' processes would have
        base = a.read()
        edits = [
            (a, editor.set_topic(base, "shop.orders", f"orders.by.a{n}")),
            (b, editor.set_tag(editor.add_key(base, "shop.orders", [f"b{n}"]), "shop.orders", f"by-b{n}")),
        ]
        barrier = threading.Barrier(2)
        outcome: dict[int, Any] = {}
        threads = [
            threading.Thread(target=_edit, args=(barrier, outcome, i, s, m, base.version))
            for i, (s, m) in enumerate(edits)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        wins = [v for v in outcome.values() if isinstance(v, Mapping)]
        losses = [v for v in outcome.values() if isinstance(v, MappingConflictError)]
        assert len(wins) == 1 and len(losses) == 1, outcome
        stored = stores().read()
        assert stored == wins[0] and stored.version == base.version + 1
        assert stored in [m.with_version(base.version + 1) for _, m in edits]  # one of the two, not a mix


def _edit(
    barrier: threading.Barrier,
    outcome: dict[int, Any],
    i: int,
    store: MappingStore,
    new: Mapping,
    expected: int,
) -> None:
    barrier.wait()  # both edits read the same version and write at the same moment
    try:
        outcome[i] = store.write(new, expected=expected)
    except MappingError as exc:
        outcome[i] = exc


def test_rollback_stores_the_old_content_as_a_new_version(stores: Factory) -> None:
    store = stores()
    v2 = store.write(editor.remove_table(store.read(), "shop", "orders"), expected=1)
    v3 = store.write(store.version(1), expected=v2.version, note="rollback to version 1")
    assert v3.version == 3
    assert v3 == store.version(1).with_version(3)
    assert [v.version for v in store.history()] == [1, 2, 3]


def test_fingerprint_changes_when_another_handle_writes(stores: Factory) -> None:
    watcher, editor_handle = stores(), stores()
    before = watcher.fingerprint()
    wait_for(lambda: watcher.fingerprint() is not None, 10, "the first fingerprint")
    before = watcher.fingerprint()
    editor_handle.write(editor.set_topic(editor_handle.read(), "shop", "x"), expected=1)
    wait_for(lambda: watcher.fingerprint() != before, 10, "the fingerprint to change after a write")


def test_invalid_stored_text_is_refused_naming_the_key(stores: Factory, tmp_path: Path) -> None:
    store = stores()
    bad = "version: 2\nlogical_dbs:\n  shop:\n    physical: ['shop_(']\n"
    if isinstance(store, FileMappingStore):
        store.path.write_text(bad)
    else:
        assert isinstance(store, ZooKeeperMappingStore)
        with _kazoo(store.config.hosts) as zk:
            zk.set(store.path, bad.encode())
    with pytest.raises(InvalidMappingError) as info:
        store.read()
    assert any(e.key.startswith("logical_dbs.shop.physical") for e in info.value.errors), info.value


def test_create_is_refused_when_a_mapping_exists(stores: Factory) -> None:
    with pytest.raises(MappingError):
        stores().create(parse_mapping(BASE))
    assert stores().read().version == 1


# --- ZooKeeper only --------------------------------------------------------------------------


class _kazoo:  # noqa: N801 - a tiny context manager
    def __init__(self, hosts: str, auth: str | None = None) -> None:
        self.client = KazooClient(hosts=hosts, auth_data=[("digest", auth)] if auth else None)

    def __enter__(self) -> KazooClient:
        self.client.start(timeout=10)
        return self.client

    def __exit__(self, *exc: object) -> None:
        self.client.stop()
        self.client.close()


def test_digest_acl_lets_only_the_operator_edit(zk_service: Any) -> None:
    path = f"/relay-test/{uuid.uuid4().hex[:8]}/mapping"
    operator = ZooKeeperMappingStore(ZooKeeperStoreConfig(zk_service.hosts, path, auth="ops:s3cret"))
    anonymous = ZooKeeperMappingStore(ZooKeeperStoreConfig(zk_service.hosts, path))
    intruder = ZooKeeperMappingStore(ZooKeeperStoreConfig(zk_service.hosts, path, auth="ops:wrong"))
    try:
        operator.create(parse_mapping(BASE))
        assert anonymous.read().version == 1  # every relay can read without credentials
        for other in (anonymous, intruder):
            with pytest.raises(MappingStoreError) as info:
                other.write(editor.set_topic(other.read(), "shop", "x"), expected=1)
            assert info.value.key == "mapping.zookeeper.auth"
            assert not info.value.retriable
        assert operator.read().version == 1
        assert operator.write(editor.set_topic(operator.read(), "shop", "x"), expected=1).version == 2
        assert [v.version for v in anonymous.history()] == [1, 2]
    finally:
        for s in (operator, anonymous, intruder):
            s.close()


def test_cli_edits_racing_on_one_node_one_conflicts(zk_service: Any) -> None:
    path = f"/relay-test/{uuid.uuid4().hex[:8]}/mapping"
    store = ZooKeeperMappingStore(ZooKeeperStoreConfig(zk_service.hosts, path))
    try:
        store.create(parse_mapping(BASE))
        where = ["--zookeeper", zk_service.hosts, "--zk-path", path, "--expect-version", "1"]
        cmds = [
            ["topic", "set", "shop.orders", "orders.one", *where],
            ["tag", "add", "shop.orders", "two", *where],
        ]
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "relay.cli", "mapping", *c],
                cwd=REPO,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for c in cmds
        ]
        results = [(p.wait(60), *p.communicate()) for p in procs]
        codes = sorted(r[0] for r in results)
        assert codes == [0, 2], results
        loser = next(r for r in results if r[0] == 2)
        assert "nothing" in loser[2] and ("changed" in loser[2] or "another edit" in loser[2]), loser
        stored = store.read()
        assert stored.version == 2
        orders = stored.logical_db("shop").table("orders")  # type: ignore[union-attr]
        assert (orders.topic, orders.tag) in (("orders.one", None), (None, "two"))  # type: ignore[union-attr]
    finally:
        store.close()


# --- the CLI against a live server -------------------------------------------------------------


def test_resolve_all_and_live_dry_run_list_real_tables(mysql_service: Any, tmp_path: Path) -> None:
    from tests.integration.relay_harness import create_shards, drop_shards

    prefix = f"rs{time.monotonic_ns() % 10**8}"
    conn = mysql_service.connect()
    create_shards(conn, prefix, 2, 2)
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE {prefix}_01.orders_12 (id INT PRIMARY KEY)")
    mfile = tmp_path / "mapping.yaml"
    mfile.write_text(
        f"logical_dbs:\n  {prefix}:\n    physical: ['{prefix}_\\d+']\n    tables:\n"
        "      orders: {physical: ['orders_\\d+'], topic: o}\n"
    )
    original = mfile.read_text()
    base = [sys.executable, "-m", "relay.cli", "mapping"]
    # -f with the history in the test's own state directory, not the repository's var/
    env = {**os.environ, "RELAY_STATE_DIR": str(tmp_path / "state")}
    where = ["-f", str(mfile), "--mysql", mysql_service.url]
    try:
        out = subprocess.run(
            [*base, "resolve", "--all", *where],
            check=False, cwd=REPO, env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        assert f"{prefix}_01.orders_12 -> topic o  as {prefix}.orders" in out.stdout
        assert f"{prefix}_00.customers -> topic {prefix}  as {prefix}.customers" in out.stdout
        assert "ambiguous or invalid (0)" in out.stdout

        moved = subprocess.run(
            [*base, "table", "add", f"{prefix}.hot", "--physical", "orders_1\\d", "--topic", "hot",
             "--dry-run", "--live", *where],
            check=False, cwd=REPO, env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert moved.returncode == 2  # orders_10 would be claimed twice: an example name shows it
        assert "'orders_10' matches both" in moved.stderr
        ok = subprocess.run(
            [*base, "table", "set", f"{prefix}.orders", "--topic", "o2", "--dry-run", "--live", *where],
            check=False, cwd=REPO, env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert ok.returncode == 0, ok.stderr
        assert "physical tables that move (5)" in ok.stdout
        line = f"{prefix}_01.orders_12: topic o as {prefix}.orders -> topic o2 as {prefix}.orders"
        assert line in ok.stdout
        assert "dry run: nothing stored" in ok.stdout and mfile.read_text() == original
    finally:
        drop_shards(conn, prefix, 2)
        conn.close()


def test_relays_without_credentials_announce_what_they_run_beside_an_acl_node(zk_service: Any) -> None:
    path = f"/relay-test/{uuid.uuid4().hex[:8]}/mapping"
    operator = ZooKeeperMappingStore(ZooKeeperStoreConfig(zk_service.hosts, path, auth="ops:s3cret"))
    relay = ZooKeeperMappingStore(ZooKeeperStoreConfig(zk_service.hosts, path))
    try:
        operator.create(parse_mapping(BASE))
        relay.announce("shop@host:1", {"relay": "shop@host:1", "mapping": {"mapping_version": 1}})
        relay.announce("shop@host:1", {"relay": "shop@host:1", "mapping": {"mapping_version": 2}})
        assert operator.relays() == [{"relay": "shop@host:1", "mapping": {"mapping_version": 2}}]
    finally:
        relay.close()  # the relay's session ends: its announcement goes with it
    try:
        assert operator.relays() == []
    finally:
        operator.close()


def test_validate_and_edits_check_overlaps_against_the_servers_tables_when_they_can(
    mysql_service: Any, tmp_path: Path
) -> None:
    """`{p}_2\\d` and `{p}_\\d8` share only `{p}_28`, which no example of either pattern shows: the
    mapping is valid on its own; where the source server has `{p}_28`, validate and every edit given
    the server (--mysql, or -c) refuse it; an unreachable server leaves a warning, not a failure."""
    prefix = f"ov{uuid.uuid4().hex[:6]}"
    conn = mysql_service.connect()
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {prefix}_28")
        cur.execute(f"CREATE TABLE {prefix}_28.t (id INT PRIMARY KEY)")
    mfile = tmp_path / "mapping.yaml"
    mfile.write_text(f"logical_dbs:\n  a:\n    physical: ['{prefix}_2\\d']\n")
    env = {**os.environ, "RELAY_STATE_DIR": str(tmp_path / "state")}

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "relay.cli", "mapping", *argv, "-f", str(mfile)],
            check=False, cwd=REPO, env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip

    try:
        add = ["db", "add", "b", "--physical", f"{prefix}_\\d8"]
        refused = run(*add, "--mysql", mysql_service.url)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert f"'{prefix}_28' is claimed by both" in refused.stderr
        assert "b:" not in mfile.read_text()
        down = f"mysql://x:y@127.0.0.1:{services.free_port()}"
        stored = run(*add, "--mysql", down)  # no server to ask: the patterns alone are fine
        assert stored.returncode == 0, stored.stderr
        assert "warning: overlaps checked between the patterns only" in stored.stderr
        ok = run("validate")
        assert ok.returncode == 0 and "version 2 is valid" in ok.stdout
        live = run("validate", "--mysql", mysql_service.url)
        assert live.returncode == 2 and f"'{prefix}_28' is claimed by both" in live.stderr
    finally:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {prefix}_28")
        conn.close()
