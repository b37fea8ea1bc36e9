"""Exactly-once and transactional mode on Apache Kafka, proven from what a read_committed consumer reads.

A writer changes the sharded ``orders`` tables the whole time. A chain of relays runs on one instance, each
killed with SIGKILL at one step of the commit path (``tests/integration/kill_point.py``: before the records
are produced, after they are delivered and before the commit, after the commit intent is saved
(transactional mode), after the commit and before the ack saves the position, after the save); each one's
successor takes over from what the one before left, and a last relay runs until the writer's every change is
in Kafka. Then an independent consumer (``tests/integration/eos_proof.py``) reads the topic:

- ``read_committed``: every change exactly once — 0 missing (the writer's count), 0 repeats — each key's
  changes in binlog order along the partition's offsets, and the state they build equals SELECT;
- ``read_uncommitted``: more row records than ``read_committed`` shows (the killed relays' aborted
  transactions are in the log), so the first check is not vacuous: aborted records were there and never
  reached the read_committed consumer.

Exactly-once mode commits the position inside the transaction (``positions.backend: kafka``); transactional
mode keeps it in a file and writes a commit intent before each commit, which a successor settles
(``relay.kafka.commit_intent``). The takeovers between two relays under ZooKeeper leadership (SIGKILL, and
SIGSTOP past the session) and a broker restart in the middle of a transaction are in
``test_exactly_once_takeovers.py`` (the longer suite).
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from relay.dev.services import KafkaService
from tests.integration.eos_proof import Proof, prove, read_partitions
from tests.integration.relay_harness import (
    REPO_ROOT,
    RelayProcess,
    Writer,
    master_position,
    sharded_schema,
    single_table_mapping,
    wait_for,
    write_configs,
)

SHARDS, TABLES = 2, 2
EOS_POINTS = ("before-produce", "after-produce", "after-commit", "after-save")
TXN_POINTS = ("before-produce", "after-produce", "after-intent", "after-commit", "after-save")


class KillPointRelay(RelayProcess):
    """``relay run`` that SIGKILLs itself the ``nth`` time it passes ``point`` (``kill_point.py``)."""

    def __init__(self, cfg: Path, log_path: Path, point: str, nth: int) -> None:
        super().__init__(cfg, log_path)
        self.point, self.nth = point, nth

    def start(self) -> RelayProcess:
        with open(self.log_path, "ab") as log:
            child = [sys.executable, "-m", "tests.integration.kill_point", self.point, str(self.nth)]
            self.popen = subprocess.Popen(
                [*child, "--", "run", "-c", str(self.cfg)],
                cwd=REPO_ROOT,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.started = time.monotonic()
        RelayProcess.live.append(self)
        return self


@pytest.fixture
def shards(mysql_service: Any) -> Iterator[str]:
    with sharded_schema(mysql_service, "eos", SHARDS, TABLES) as prefix:
        yield prefix


def config(tmp: Path, mysql: Any, kafka: KafkaService, prefix: str, exactly_once: bool) -> Path:
    conn = mysql.connect()
    try:
        start = master_position(conn)
    finally:
        conn.close()
    kafka_section: dict[str, Any] = {"transactions": True, "exactly_once": exactly_once}
    if exactly_once:
        kafka_section["positions_topic"] = f"{prefix}.positions"
    return write_configs(
        tmp,
        mysql=mysql,
        bootstrap=kafka.bootstrap_servers,
        mapping=single_table_mapping(prefix),
        start=start,
        instance=prefix,
        include=f"{prefix}_\\d+\\..*",
        extra={
            "kafka": kafka_section,
            "store": {"buffer_size": 256, "batch_mode": "ITEMSIZE"},
            "publish": {"batch_size": 16, "drain_seconds": 5.0, "retry": {"initial": 0.2, "maximum": 2.0}},
            "positions": {"backend": "kafka" if exactly_once else "file"},
        },
    )


def kill_chain(cfg: Path, tmp: Path, points: tuple[str, ...]) -> list[str]:
    """One relay per kill point, each taking over from the one killed before it; returns their logs."""
    logs = []
    for i, point in enumerate(points):
        relay = KillPointRelay(cfg, tmp / f"relay-{i}-{point}.log", point, nth=3 + i % 2)
        relay.start()
        code = relay.wait(180)
        log = relay.log()
        assert code == -9 and f"KILL POINT {point} reached" in log, f"{point}: exit {code}\n{log[-3000:]}"
        logs.append(log)
    return logs


def run_to_the_end(cfg: Path, tmp: Path, writer: Writer) -> int:
    """A last relay (no kill point) until the writer stopped and everything it wrote was published."""
    relay = RelayProcess(cfg, tmp / "relay-last.log").start()
    try:
        wait_for(lambda: relay.status().get("batches_acked", 0) >= 3, 120, "the last relay publishing")
        changes = writer.stop()
        conn = writer.service.connect()
        try:
            end = master_position(conn)
        finally:
            conn.close()
        wait_for(lambda: caught_up(relay, end), 120, f"the last relay caught up with {end}")
        relay.signal(15)
        assert relay.wait(60) == 0, relay.log()[-3000:]
    finally:
        relay.stop()
    return changes


def caught_up(relay: RelayProcess, end: tuple[str, int]) -> bool:
    """The relay's saved position (its status file) is at ``end`` or past it."""
    position = relay.status().get("position") or {}
    if not position:
        return False
    return (str(position["journal"]), int(position["offset"])) >= end  # binlog names sort by number


def proofs(kafka: KafkaService, prefix: str, changes: int, mysql: Any) -> tuple[Proof, Proof]:
    topic = f"{prefix}.orders"
    conn = mysql.connect()
    try:
        committed = prove(read_partitions(kafka.bootstrap_servers, topic, "read_committed"), changes, conn,
                          prefix, SHARDS, TABLES)  # fmt: skip
        everything = prove(read_partitions(kafka.bootstrap_servers, topic, "read_uncommitted"), changes,
                           conn, prefix, SHARDS, TABLES)  # fmt: skip
    finally:
        conn.close()
    return committed, everything


def assert_exactly_once(committed: Proof, everything: Proof, what: str, aborted: bool = True) -> None:
    print(f"{what}: read_committed: {committed.summary()}; read_uncommitted: {everything.summary()}")
    assert committed.missing == 0, committed.summary()
    assert committed.repeats == 0, committed.summary()
    assert committed.order_breaks == [], committed.order_breaks[:5]
    assert committed.state_equal, committed.summary()
    # The killed relays' open transactions reached the log and were aborted: the check above saw none.
    if aborted:
        assert everything.rows > committed.rows, "no aborted records in the log: the kill points left nothing"


@pytest.mark.parametrize(
    ("mode", "points"), [("exactly-once", EOS_POINTS), ("transactional", TXN_POINTS)], ids=["eos", "txn"]
)
def test_a_relay_killed_at_every_step_of_the_commit_path_publishes_every_change_exactly_once(
    mysql_service: Any,
    kafka_service: KafkaService,
    shards: str,
    tmp_path: Path,
    mode: str,
    points: tuple[str, ...],
) -> None:
    prefix = shards
    cfg = config(tmp_path, mysql_service, kafka_service, prefix, exactly_once=mode == "exactly-once")
    writer = Writer(
        mysql_service, prefix, SHARDS, TABLES, rate=300.0, seed=41 if mode == "exactly-once" else 43
    )
    writer.start()
    try:
        logs = kill_chain(cfg, tmp_path, points)
    except BaseException:
        writer.stop()
        raise
    changes = run_to_the_end(cfg, tmp_path, writer)
    if mode == "transactional":
        # The relays after the intent and commit kills found the intent and settled it each way.
        settled = "\n".join(logs[3:])
        assert "was aborted: continuing before it" in settled, settled[-3000:]
        assert "committed: continuing after it" in settled, settled[-3000:]
    committed, everything = proofs(kafka_service, prefix, changes, mysql_service)
    assert_exactly_once(committed, everything, f"{mode}, killed at {', '.join(points)}")
