"""The cluster's proof from Kafka (issue 27, item 5): three nodes (``relay cluster run`` processes) and six
instances — six databases on the session's MariaDB, each instance its own server id — in transactional
mode (every batch in a Kafka transaction of the instance's ``transactional.id``; exactly-once where the
broker allows it), under continuous
inserts, updates and deletes. Then, one after the other:

1. SIGKILL a node: its instances run elsewhere (their processes saw their node go and drained);
2. SIGSTOP a node AND its instances' processes (a frozen host) past the session timeout: the instances run
   elsewhere; on SIGCONT the node stops its (fenced) instances before anything else, then joins again;
3. a fourth node joins and takes a fair share by graceful moves;
4. ``relay cluster drain`` a node: its instances move gracefully;
5. ``relay instance remove`` an instance: its node stops it and nothing runs it any more.

After each step (the writers paused) an independent ``read_committed`` consumer — confluent-kafka, not
the project's reader — reads every topic from the start and checks it against ``SELECT``: nothing
missing, per key the partition's offsets in binlog order (never re-sorted by our sequence); in
exactly-once mode (a broker that hides aborted records: Apache Kafka) no change twice, in transactional
mode (Tansu: the position saved in ZooKeeper after the commit) a change twice only where a term ended
between the two — byte-identical, and written again by a LATER producer epoch, never a zombie's copy. The
batches' producer ids and epochs, read from the broker with a bare Fetch request
(``tests.integration.kafka_batches``), say which records a ``read_committed`` reader sees (those whose
transaction committed: the check does not depend on the broker hiding aborted ones, which Tansu does
not) and prove the fencing in Kafka: per instance one producer id, its epoch never going back in any
partition's offset order, at most one producer epoch per ZooKeeper term. In ZooKeeper an observer
samples every instance's ``running`` record all along: each epoch ran on one node only, epochs only
grow. The assignment is balanced within one, from ZooKeeper's assignments and from ``relay cluster
status --json`` alike.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.cluster_proof import (
    EpochObserver,
    Proof,
    aborted_visible,
    check_instance,
    checkpoint,
    children_of,
    log_since,
    open_proof,
    process_state,
)
from tests.integration.relay_harness import REPO_ROOT

__all__ = ["aborted_visible"]  # a fixture: pytest finds it in this module

pytestmark = pytest.mark.timeout(900)

SESSION = 6.0


@pytest.fixture
def proof(
    mysql_service: Any, kafka_service: Any, zk_service: Any, tmp_path: Path, aborted_visible: str | None
) -> Iterator[Proof]:
    with open_proof(
        (mysql_service, kafka_service, zk_service), tmp_path, 6, aborted_visible, capacity=6, session=SESSION
    ) as made:
        yield made


# --- the test ----------------------------------------------------------------------------------------


def test_six_instances_on_three_nodes_prove_their_fencing_and_exactness_from_kafka(proof: Proof) -> None:
    proof.define()
    proof.write(rate=12.0, seed=40)
    observer = EpochObserver(proof.zk_hosts, proof.root, proof.prefixes)
    observer.start()
    live = {"a", "b", "c"}
    for name in sorted(live):
        proof.node(name)
    try:
        proof.wait(lambda: proof.settled(live), 180, "two instances per node, each active")
        checkpoint(proof, observer, live, "start")

        # 1. SIGKILL a node
        report = proof.report()
        victim = report["instances"][proof.prefixes[0]]["node"]
        os.kill(proof.pid(victim), signal.SIGKILL)
        live.discard(victim)
        proof.wait(lambda: proof.settled(live), SESSION + 90, f"{victim}'s instances on the other nodes")
        checkpoint(proof, observer, live, f"SIGKILL {victim}")

        # 2. SIGSTOP a node and its instances' processes past the session timeout, then SIGCONT
        frozen = sorted(live)[0]
        zombies = _freeze_and_thaw(proof, frozen, live)
        proof.wait(lambda: proof.settled(live), 120, f"{frozen} joined again and took a share")
        checkpoint(proof, observer, live, f"SIGSTOP/SIGCONT {frozen}", fenced=zombies)

        # 3. a fourth node takes a fair share
        proof.node("d")
        live.add("d")
        proof.wait(lambda: proof.settled(live), 120, "the new node took its share")
        checkpoint(proof, observer, live, "fourth node d")

        # 4. drain one
        drained = sorted(live)[0]
        done = proof.cli("drain", drained, "--wait", "--wait-timeout", "180")
        assert done.returncode == 0, done.stdout + done.stderr + proof.logs()
        live.discard(drained)
        proof.wait(lambda: proof.settled(live), 120, f"{drained} drained")
        checkpoint(proof, observer, live, f"drain {drained}")

        # 5. remove an instance (its writer stopped first: its topic is complete before the removal)
        removed = proof.prefixes[-1]
        print(check_instance(proof, observer, removed, proof.writers[removed].pause()))
        gone = subprocess.run(
            [sys.executable, "-m", "relay.cli", "instance", "remove", removed, *proof.where()],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert gone.returncode == 0, gone.stderr
        proof.removed.add(removed)
        proof.wait(
            lambda: proof.settled(live) and proof.active(removed) is None,
            120,
            f"{removed} unassigned and stopped after its removal",
        )
        checkpoint(proof, observer, live, f"remove {removed}")
    finally:
        for writer in proof.writers.values():
            writer.halt.set()
        observer.stop()
    observer.check()
    print({name: history for name, history in observer.seen.items()})

    for name in sorted(n for n, p in proof.nodes.items() if p.alive()):
        os.kill(proof.pid(name), signal.SIGTERM)
    for name in sorted(live):
        popen = proof.nodes[name].popen
        assert popen is not None and popen.wait(120) == 0, proof.logs()


def _freeze_and_thaw(proof: Proof, frozen: str, live: set[str]) -> frozenset[str]:
    """SIGSTOP ``frozen`` and its instances (a frozen host) until they run elsewhere and its session is
    long expired, then SIGCONT all: the node stops its fenced instances before anything else. Returns
    the instances that were frozen."""
    node = proof.pid(frozen)
    children = children_of(node)
    before = {k: i["epoch"] for k, i in proof.report()["instances"].items() if i["running_on"] == frozen}
    assert before and children, f"{frozen} runs nothing to freeze"
    log = proof.tmp / f"{frozen}.log"
    mark = len(log.read_bytes())
    for pid in (node, *children):
        os.kill(pid, signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        onto = live - {frozen}

        def moved() -> bool:
            instances = proof.report()["instances"]
            return all(
                instances[k]["running_on"] in onto and (instances[k]["epoch"] or 0) > epoch
                for k, epoch in before.items()
            )

        proof.wait(moved, SESSION + 60, f"{frozen}'s instances active elsewhere", 0.2)
        print(f"{sorted(before)} active elsewhere {time.monotonic() - stopped:.1f} s after the freeze")
        # past its session for sure (the instances moved, so it expired), then a little more
        proof.wait(lambda: time.monotonic() - stopped > SESSION + 2, SESSION + 5, "the session long over")
    finally:
        for pid in (*children, node):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
    # the node's first act after the thaw: stop its instances; they are gone within the bound
    proof.wait(
        lambda: "stopping every instance it runs before its session can expire" in log_since(log, mark),
        30,
        f"{frozen} stopped its instances after the thaw",
    )
    after = log_since(log, mark).splitlines()
    first = next(i for i, line in enumerate(after) if "stopping every instance it runs" in line)
    silent = re.search(r"no answer from ZooKeeper for ([0-9.]+) s", after[first])
    assert silent and float(silent[1]) > SESSION, after[: first + 1]  # the whole freeze: it stopped first
    acts = ("registered", ": started", "session lost", "leader", "placed")
    assert not any(act in line for line in after[:first] for act in acts), after[: first + 1]
    proof.wait(
        lambda: not any(Path(f"/proc/{pid}").exists() and process_state(pid) != "Z" for pid in children),
        SESSION + 30,
        f"{frozen}'s old instance processes gone",
    )
    return frozenset(before)
