"""A node cut from ZooKeeper stops its instances BEFORE its session can expire (issue 27: "a node that lost
its session stops its instances before another node can start them").

Two nodes, two instances in transactional mode under writes; node ``a`` (and so its instances, which use
its ``node.yaml``) reaches ZooKeeper through a relay the test cuts like a network partition
(``tests.integration.zk_cut``: bytes stop, connections stay open). A client of the test, connected
directly, samples a's instance processes and a's node record: every one of those processes is gone
before the record goes — before the server expired a's session, the moment another node may start the
instances. Then the instances run on ``b``; the link comes back, ``a`` finds its session lost, joins
again and takes a share. The independent ``read_committed`` consumer checks both topics against
``SELECT`` after each step (``tests.integration.cluster_proof.checkpoint``).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from relay.cluster.layout import Paths
from tests.integration.cluster_proof import (
    EpochObserver,
    Proof,
    aborted_visible,
    checkpoint,
    children_of,
    open_proof,
    process_state,
)
from tests.integration.zk_cut import ZooKeeperCut

__all__ = ["aborted_visible"]  # a fixture: pytest finds it in this module

pytestmark = pytest.mark.timeout(600)

SESSION = 6.0


@pytest.fixture
def proof(
    mysql_service: Any, kafka_service: Any, zk_service: Any, tmp_path: Path, aborted_visible: str | None
) -> Iterator[Proof]:
    servers = (mysql_service, kafka_service, zk_service)
    with open_proof(
        servers, tmp_path, 2, aborted_visible, capacity=2, session=SESSION, server_ids=7900
    ) as made:
        yield made


def _alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists() and process_state(pid) != "Z"


def test_a_node_cut_from_zookeeper_stops_its_instances_before_its_session_expires(proof: Proof) -> None:
    link = ZooKeeperCut(proof.zk_hosts)
    proof.zk_of["a"] = link.address
    proof.define()
    proof.write(rate=12.0, seed=70)
    observer = EpochObserver(proof.zk_hosts, proof.root, proof.prefixes)
    observer.start()
    client = KazooClient(hosts=proof.zk_hosts)
    client.start(timeout=15)
    live = {"a", "b"}
    for name in sorted(live):
        proof.node(name)
    try:
        proof.wait(lambda: proof.settled(live), 180, "one instance per node, each active")
        checkpoint(proof, observer, live, "start")
        children = children_of(proof.pid("a"))
        assert children, "a runs no instance"
        record = Paths(proof.root).node("a")
        stat = client.exists(record)
        assert stat is not None
        owner = stat.ephemeralOwner

        link.cut()
        cut = time.monotonic()
        gone: float | None = None  # when a's instance processes were all gone
        expired: float | None = None  # when a's record went: its session expired on the server
        while expired is None:
            now = time.monotonic()
            assert now - cut < SESSION + 60, "a's session never expired"
            if gone is None and not any(_alive(pid) for pid in children):
                gone = now
            stat = client.exists(record)
            if stat is None or stat.ephemeralOwner != owner:
                expired = now
            time.sleep(0.05)
        print(
            f"a's instances gone {gone - cut:.1f} s after the cut, its session expired "
            f"{expired - cut:.1f} s after it"
            if gone is not None
            else f"a's session expired {expired - cut:.1f} s after the cut, its instances still running"
        )
        assert gone is not None and gone < expired, "a's instances outlived its session"
        log = (proof.tmp / "a.log").read_text(errors="replace")
        assert "no answer from ZooKeeper for" in log and "before its session can expire" in log, log[-3000:]
        proof.wait(lambda: proof.settled({"b"}), SESSION + 90, "both instances active on b")
        checkpoint(proof, observer, {"b"}, "cut a")

        link.restore()

        def rejoined() -> bool:
            nodes = proof.report()["nodes"]
            return "a" in nodes and nodes["a"]["load"] == 1 and proof.settled(live)

        proof.wait(rejoined, 120, "a joined again and took a share")
        assert "ZooKeeper session lost" in (proof.tmp / "a.log").read_text(errors="replace")
        checkpoint(proof, observer, live, "a's link restored")
    finally:
        for writer in proof.writers.values():
            writer.halt.set()
        observer.stop()
        client.stop()
        client.close()
        link.close()
    observer.check()

    for name in sorted(live):
        os.kill(proof.pid(name), signal.SIGTERM)
    for name in sorted(live):
        popen = proof.nodes[name].popen
        assert popen is not None and popen.wait(120) == 0, proof.logs()
