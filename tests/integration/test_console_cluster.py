"""``relay console --zookeeper`` over a real cluster: two ``relay cluster run`` nodes, two instances, in the
browser. The fleet page shows the nodes and where each instance is assigned and active; moving an
instance from the page (with its confirmation step) pins it to the other node and the leader swaps the
two (the balance kept), each drained on its old node first; draining that node from the page moves both
away, and undoing the drain brings the pinned one back. Each step is judged by what ZooKeeper says
(``relay cluster status``'s report) and shown on the page without a reload; the moved instance keeps
relaying (its next row is read back from its topic).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page

from relay.cluster.definition import parse_definition
from relay.cluster.store import ZooKeeperInstanceStore
from tests.integration.console_harness import ConsoleProcess, Shots, login, screenshots, users_file, wait_page
from tests.integration.relay_harness import create_shards, drop_shards, master_position, read_topic
from tests.integration.test_cluster_nodes import PASSWORD_ENV, SHARDS, TABLES, Fleet, _kill_children


@pytest.fixture
def cluster(mysql_service: Any, kafka_service: Any, zk_service: Any, tmp_path: Path) -> Iterator[Fleet]:
    tag = f"cc{time.monotonic_ns() % 10**7}"
    prefixes = [f"{tag}i{i}" for i in range(2)]
    conn = mysql_service.connect()
    for prefix in prefixes:
        create_shards(conn, prefix, SHARDS, TABLES)
    made = Fleet(
        tmp_path,
        str(zk_service.hosts),
        f"/relay-test/{uuid.uuid4().hex}",
        mysql_service,
        kafka_service.bootstrap_servers,
        conn,
        prefixes,
    )
    store = ZooKeeperInstanceStore(made.zk_hosts, made.root)
    try:
        start = master_position(conn)
        for i, prefix in enumerate(prefixes):
            store.add(parse_definition(prefix, made.definition(i, prefix, start)))
    finally:
        store.close()
    try:
        yield made
    finally:
        for proc in made.nodes.values():
            if proc.popen is not None and proc.alive():
                with contextlib.suppress(ProcessLookupError):
                    proc.popen.send_signal(signal.SIGKILL)
                proc.popen.wait(30)
        _kill_children(tmp_path)
        for prefix in prefixes:
            drop_shards(conn, prefix, SHARDS)
        conn.close()


def _where(cluster: Fleet) -> dict[str, tuple[str | None, str | None]]:
    """Each instance's (assigned node, node it is active on), as ZooKeeper says."""
    return {name: (i["node"], i["running_on"]) for name, i in cluster.report()["instances"].items()}


def _settled(cluster: Fleet, wanted: dict[str, str]) -> bool:
    return _where(cluster) == {name: (node, node) for name, node in wanted.items()}


def _shown(page: Page, instance: str) -> str:
    return page.inner_text(f'tr[data-instance="{instance}"] td[data-place="running_on"]')


def _confirm(page: Page, form: str, expect: str) -> None:
    page.click(f"{form} button[type=submit]")
    assert page.is_visible("#confirm"), page.inner_text("main")  # the confirmation step, nothing done yet
    page.click("#confirm")
    assert expect in page.inner_text("#result"), page.inner_text("main")


def test_the_console_moves_an_instance_and_drains_a_node(cluster: Fleet, new_context: Any) -> None:
    for name in ("a", "b"):
        cluster.node(name)
    cluster.wait(lambda: sorted(n for n, _ in _where(cluster).values() if n) == ["a", "b"], 120, "one each")
    first = _where(cluster)
    cluster.wait(lambda: _settled(cluster, {k: v[0] for k, v in first.items() if v[0]}), 120, "both active")
    on_a = next(name for name, (node, _) in first.items() if node == "a")
    on_b = next(name for name, (node, _) in first.items() if node == "b")
    env = {**os.environ, PASSWORD_ENV: cluster.mysql.replication_password}  # as on the nodes: lag bytes
    console = ConsoleProcess(
        [
            "--zookeeper",
            cluster.zk_hosts,
            "--root",
            cluster.root,
            "--users",
            str(users_file(cluster.tmp / "users.yaml")),
            "--state-dir",
            str(cluster.tmp / "console"),
            "--sample-seconds",
            "1",
        ],
        cluster.tmp / "console.log",
        env,
    ).start()
    shots = Shots(screenshots())
    try:
        page = new_context().new_page()
        page.set_viewport_size({"width": 1400, "height": 900})
        login(page, console.url, "admin")
        assert page.locator("#nodes tr[data-node]").count() == 2
        wait_page(page, lambda: _shown(page, on_a) == "a" and _shown(page, on_b) == "b", 30, "placement")
        wait_page(
            page,
            lambda: page.inner_text(f'tr[data-instance="{on_a}"] td[data-field="state"]') == "running",
            30,
            "state",
        )
        # move the instance of a to b: pinned there, the other one leaves b (the balance kept)
        page.select_option(f'section[data-instance="{on_a}"] select[name=node]', "b")
        _confirm(page, f'section[data-instance="{on_a}"] form.move', f"{on_a}: pinned to b")
        cluster.wait(lambda: _settled(cluster, {on_a: "b", on_b: "a"}), 120, "the swap")
        page.goto(console.url + "/")
        wait_page(page, lambda: _shown(page, on_a) == "b" and _shown(page, on_b) == "a", 30, "the swap shown")
        assert "pinned b" in page.inner_text(f'tr[data-instance="{on_a}"] td[data-place="node"]')
        with contextlib.closing(cluster.mysql.connect()) as conn, conn.cursor() as cur:
            cur.execute(f"INSERT INTO {on_a}_00.orders_00 VALUES (777001, 'NEW', '1.00', NULL)")
        read_topic(
            cluster.bootstrap, f"{on_a}.orders", until=lambda rs: any(b'"777001"' in r.value for r in rs)
        )
        shots.take(page, "fleet-cluster")
        # drain b: both run on a (the pin waits); undo: the pinned one goes back to b
        _confirm(page, 'tr[data-node="b"] form', "b: drained")
        cluster.wait(lambda: _settled(cluster, {on_a: "a", on_b: "a"}), 120, "b drained")
        page.goto(console.url + "/")
        wait_page(
            page, lambda: _shown(page, on_a) == "a" and _shown(page, on_b) == "a", 30, "the drain shown"
        )
        assert page.inner_text('tr[data-node="b"] td:nth-child(4)') == "yes"
        page.click('tr[data-node="b"] form button[type=submit]')  # "Undo drain": confirmed too
        page.click("#confirm")
        cluster.wait(lambda: _settled(cluster, {on_a: "b", on_b: "a"}), 120, "the pin honoured again")
        page.goto(console.url + "/audit")
        audit = page.inner_text("#audit")
        assert "move" in audit and "drain" in audit and "drain --undo" in audit
    finally:
        assert console.stop() == 0, console.text()[-3000:]
    assert "Traceback" not in console.text(), console.text()[-5000:]
