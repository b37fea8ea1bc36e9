"""High availability on real ZooKeeper, real MariaDB and the real broker, relays as child processes.

- Leadership fencing on a ZooKeeper of its own: frozen (SIGSTOP), the leader's session goes SUSPENDED
  and the leader is fenced within the session timeout — before any standby could be elected.
- SIGKILL of the active relay under load, twice, three relays: a standby takes over within the session
  timeout plus a few seconds, the epoch grows, nothing is lost, every repeat is an exact copy;
  ``relay status`` names the active relay, the standbys and the epoch.
- A relay frozen (SIGSTOP) until its session expired and a standby took over, then resumed: it sends
  nothing, acks nothing, moves no position, and exits with status 3.
- The same in transactional mode, frozen with a transaction open (records sent and queued): the
  successor's ``init_transactions`` fences it, so nothing it had queued lands after the successor's
  records, and the position epoch is the successor's.

The transactional takeover and the mapping edit then SIGKILL also end with the Spark mirror of the records
(``apply_changes``) equal to SELECT over the shards, every column.

Every wait is a condition with a deadline.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from kazoo.client import KazooClient

from mapping.load import parse_mapping
from mapping.store import FileMappingStore
from relay.config.sections import HAConfig
from relay.dev import services
from relay.dev.services import KafkaService, ZooKeeperService
from relay.errors import LeadershipError, ServiceError
from relay.ha.leadership import Layout, Leadership
from relay.positions.zookeeper import read_position_node
from tests.integration.relay_harness import (
    REPO_ROOT,
    Rec,
    RelayProcess,
    Writer,
    apply_records,
    check_exact_repeats,
    create_shards,
    drop_shards,
    master_position,
    orders_tables,
    read_topic,
    row_sequences,
    select_orders,
    single_table_mapping,
    wait_for,
    write_configs,
)
from tests.mirror_check import assert_mirror_equals, mirror_records, rows_by_key, select_rows

SHARDS, TABLES = 2, 2
SESSION = 4.0  # ZooKeeper's minimum with tickTime=2000: two ticks


@dataclass
class Cluster:
    """Relays of one instance, each with its own directory (config, status file), sharing ZooKeeper."""

    prefix: str
    tmp: Path
    mysql: Any
    bootstrap: str
    zk: ZooKeeperService
    root: str
    conn: Any
    start: tuple[str, int]
    procs: list[RelayProcess] = field(default_factory=list)
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)  # per section, over the defaults
    mapping_file: Path | None = None  # one mapping file for every relay (else each has its own copy)

    @property
    def topic(self) -> str:
        return f"{self.prefix}.orders"

    @property
    def layout(self) -> Layout:
        return Layout(self.root, self.prefix)

    def config(self, i: int) -> Path:
        extra = self._extra(i)
        for section, values in self.overrides.items():
            extra.setdefault(section, {}).update(values)
        return write_configs(
            self.tmp / f"r{i}",
            mysql=self.mysql,
            bootstrap=self.bootstrap,
            mapping=single_table_mapping(self.prefix),
            start=self.start,
            instance=self.prefix,
            include=f"{self.prefix}_\\d+\\..*",
            extra=extra,
        )

    def _extra(self, i: int) -> dict[str, Any]:
        return dict(
            {
                "ha": {
                    "enabled": True,
                    "zookeeper": self.zk.hosts,
                    "root": self.root,
                    "session_timeout_seconds": SESSION,
                    "member_id": f"relay-{i}",
                },
                "positions": {"backend": "zookeeper"},
                # One record per producer batch: Tansu's high watermark is then exact (the records of a
                # partition's last multi-record batch are otherwise not served to consumers).
                "kafka": {"settings": {"batch.num.messages": "1"}},
                "store": {"buffer_size": 256, "batch_mode": "ITEMSIZE"},
                "publish": {
                    "batch_size": 32,
                    "drain_seconds": 5.0,
                    "retry": {"initial": 0.2, "maximum": 2.0},
                },
                "logging": {"level": "DEBUG"},
                **({"mapping": {"file": str(self.mapping_file)}} if self.mapping_file else {}),
            }
        )

    def relay(self, i: int) -> RelayProcess:
        proc = RelayProcess(self.config(i), self.tmp / f"relay{i}.log").start()
        self.procs.append(proc)
        return proc

    def active(self) -> RelayProcess | None:
        running = [p for p in self.procs if p.alive() and p.status().get("state") == "running"]
        assert len(running) <= 1, f"two relays report running: {[p.pid for p in running]}"
        return running[0] if running else None

    def read(self, changes: int) -> list[Rec]:
        return read_topic(self.bootstrap, self.topic, until=distinct_changes(changes), timeout=90)

    def assert_complete(self, records: list[Rec], changes: int) -> int:
        assert len(row_sequences(records)) == changes
        assert apply_records(records) == select_orders(self.conn, self.prefix, SHARDS, TABLES)
        return check_exact_repeats(records)

    def assert_mirrored(self, spark: Any, records: list[Rec]) -> None:
        """The Spark mirror of ``records`` (``apply_changes``) equals SELECT over the shards, every column."""
        mirrored = mirror_records(spark, records, self.tmp / "mirror", f"{self.prefix}.orders")
        want = select_rows(self.conn, orders_tables(self.prefix, SHARDS, TABLES))
        assert_mirror_equals(rows_by_key(mirrored), want)


def distinct_changes(wanted: int) -> Callable[[list[Rec]], bool]:
    """``read_topic``'s condition: ``wanted`` distinct row sequences, parsing each record once (it is
    asked after every record: re-parsing them all each time would make the read quadratic)."""
    seen: set[int] = set()
    done = 0

    def until(records: list[Rec]) -> bool:
        nonlocal done
        seen.update(row_sequences(records[done:]))
        done = len(records)
        return len(seen) >= wanted

    return until


@pytest.fixture
def cluster(
    mysql_service: Any, kafka_service: KafkaService, zk_service: ZooKeeperService, tmp_path: Path
) -> Iterator[Cluster]:
    prefix = f"ha{time.monotonic_ns() % 10**8}"
    conn = mysql_service.connect()
    create_shards(conn, prefix, SHARDS, TABLES)
    made = Cluster(
        prefix,
        tmp_path,
        mysql_service,
        kafka_service.bootstrap_servers,
        zk_service,
        f"/relay-test/{uuid.uuid4().hex}",
        conn,
        master_position(conn),
    )
    yield made
    for proc in made.procs:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGCONT)
        proc.stop()
    drop_shards(conn, prefix, SHARDS)
    conn.close()


def acked_beyond(proc: RelayProcess, batches: int) -> Callable[[], bool]:
    return lambda: int(proc.status().get("batches_acked", 0)) > batches


def relay_status(cfg: Path) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "relay.cli", "status", "--json", "-c", str(cfg)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return dict(json.loads(out.stdout))


# ---------------------------------------------------------------------------------------------------------


def test_a_suspended_session_fences_the_leader_before_anyone_else_can_lead(tmp_path: Path) -> None:
    try:
        running = services.start_zookeeper(services.StartOptions(tmp_path / "zk"))
    except ServiceError as exc:
        pytest.skip(f"no embedded ZooKeeper to freeze: {exc}")
    try:
        config = HAConfig(enabled=True, zookeeper=running.service.hosts, session_timeout_seconds=SESSION)
        leader = Leadership(config, "frozen")
        leader.start()
        assert leader.acquire(threading.Event())
        leader.check()
        assert leader.fenced() is None
        os.kill(running.process.pid, signal.SIGSTOP)
        frozen = time.monotonic()
        try:
            wait_for(
                lambda: leader.fenced() is not None, SESSION, "the leader fenced while ZooKeeper is frozen"
            )
            took = time.monotonic() - frozen
            with pytest.raises(LeadershipError, match="no longer the active relay"):
                leader.guard()
        finally:
            os.kill(running.process.pid, signal.SIGCONT)
        # A standby can only be elected once the session has expired: after the session timeout.
        assert took < SESSION, f"fenced only after {took:.1f}s"
        leader.close()
    finally:
        running.stop(remove_dir=True)


def test_sigkill_of_the_active_relay_under_load_a_standby_takes_over_and_nothing_is_lost(
    cluster: Cluster,
) -> None:
    writer = Writer(cluster.mysql, cluster.prefix, SHARDS, TABLES, rate=250.0, seed=3)
    writer.start()
    for i in range(3):
        cluster.relay(i)
    wait_for(lambda: cluster.active() is not None, 60, "one relay elected and running")
    wait_for(
        lambda: sum(p.status().get("state") == "standby" for p in cluster.procs) == 2, 30, "two standing by"
    )
    status = relay_status(cluster.procs[0].cfg)
    first = cluster.active()
    assert first is not None
    assert status["ha_active"] == f"relay-{cluster.procs.index(first)}"
    assert sorted(status["ha_standby"]) == sorted(
        f"relay-{i}" for i, p in enumerate(cluster.procs) if p is not first
    )
    epoch = status["ha_epoch"]
    assert epoch >= 1

    for _ in range(2):
        active = cluster.active()
        assert active is not None
        acked = active.status().get("batches_acked", 0)
        wait_for(acked_beyond(active, acked + 3), 60, "the active relay publishing")
        active.signal(signal.SIGKILL)
        killed = time.monotonic()
        assert active.wait(10) == -signal.SIGKILL
        wait_for(lambda: cluster.active() is not None, SESSION + 8, "a standby took over")
        took = time.monotonic() - killed
        successor = cluster.active()
        assert successor is not None and successor is not active
        wait_for(acked_beyond(successor, 0), 30, "the successor publishes")
        status = relay_status(successor.cfg)
        assert status["ha_active"] == f"relay-{cluster.procs.index(successor)}"
        assert status["ha_epoch"] > epoch
        epoch = status["ha_epoch"]
        print(f"SIGKILL: relay-{cluster.procs.index(successor)} took over in {took:.1f}s, epoch {epoch}")

    wait_for(lambda: writer.changes >= 1500, 60, "the writer wrote 1500 row changes")
    changes = writer.stop()
    records = cluster.read(changes)
    repeats = cluster.assert_complete(records, changes)
    print(f"HA SIGKILL x2: {changes} row changes, {len(records)} records, {repeats} exact repeats")


def test_a_relay_frozen_past_its_session_publishes_nothing_after_losing_leadership(cluster: Cluster) -> None:
    a = cluster.relay(0)
    wait_for(lambda: a.status().get("state") == "running", 60, "relay-0 active")
    b = cluster.relay(1)
    wait_for(lambda: b.status().get("state") == "standby", 30, "relay-1 standing by")
    writer = Writer(cluster.mysql, cluster.prefix, SHARDS, TABLES, rate=250.0, seed=5)
    writer.start()
    wait_for(lambda: a.status().get("batches_acked", 0) >= 5, 60, "relay-0 publishing")

    a.signal(signal.SIGSTOP)  # under load: it freezes with batches in flight
    wait_for(lambda: b.status().get("state") == "running", SESSION + 10, "relay-1 took over")
    wait_for(lambda: b.status().get("batches_acked", 0) >= 3, 30, "relay-1 publishing")
    zk = KazooClient(hosts=cluster.zk.hosts)
    zk.start(timeout=30)
    try:
        _, epoch_b = read_position_node(zk, cluster.layout.position)
        resumed_at = len(a.log_path.read_bytes())
        resumed_wall = time.time()
        a.signal(signal.SIGCONT)
        assert a.wait(30) == 3, a.log()[-3000:]  # fenced: LeadershipError, exit status 3
        grown = writer.changes + 300
        wait_for(lambda: writer.changes >= grown, 60, "more writes after relay-0 resumed")
        changes = writer.stop()
        records = cluster.read(changes)

        after = a.log_path.read_bytes()[resumed_at:].decode(errors="replace")
        assert "no longer the active relay" in after, after[-3000:]
        # A process can be frozen anywhere: between a fence check and the send or ack it allowed, or
        # between stamping a line and writing it. What must not happen is a check that passes after the
        # resume: the pipeline's send and ack lines say when theirs passed.
        sent = [line for line in after.splitlines() if _allowed_at(line) >= resumed_wall]
        assert not sent, f"relay-0 sent or acked after it was resumed: {sent[:5]}"
        point, epoch = read_position_node(zk, cluster.layout.position)
        assert epoch == epoch_b, "the position was written by another epoch than relay-1's"
        assert point is not None
    finally:
        zk.stop()
        zk.close()
    repeats = cluster.assert_complete(records, changes)
    print(f"SIGSTOP: {changes} row changes, {len(records)} records, {repeats} exact repeats")


def _allowed_at(line: str) -> float:
    """When the fence check behind a send or ack line of the pipeline passed; -inf for other lines."""
    if "relay.daemon.pipeline" not in line or not (": sent " in line or "acked, position" in line):
        return float("-inf")
    found = re.search(r"\(fence passed at ([0-9.]+)\)", line)
    assert found is not None, f"a send or ack line without its fence time: {line}"
    return float(found.group(1))


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    """Each partition's log end (read_uncommitted: records of open transactions included)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"ends-{uuid.uuid4().hex}",
            "isolation.level": "read_uncommitted",
        }
    )
    try:
        count = len(consumer.list_topics(topic, timeout=30).topics[topic].partitions)
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(count)
        }
    finally:
        consumer.close()


def open_transaction_at_freeze(log: str) -> int:
    """Records the relay had sent (produced) in its open transaction when it froze, from its DEBUG log."""
    records = 0
    for line in log.splitlines():
        if "transaction of batches" in line and "committed" in line:
            records = 0
        elif ": sent " in line and " records (" in line:
            records += int(line.split(": sent ", 1)[1].split()[0])
    return records


def freeze_in_a_transaction(relay: RelayProcess) -> int:
    """SIGSTOP the relay while a transaction of its is open with records sent; returns how many.

    Frozen just after a commit, it would have none open: it is then resumed at once (a freeze of half a
    second ends long before its ZooKeeper session, so nobody takes over) and frozen again.
    """
    deadline = time.monotonic() + 60
    while True:
        wait_for(lambda: open_transaction_at_freeze(relay.log()) > 0, 30, "a transaction open")
        relay.signal(signal.SIGSTOP)
        time.sleep(0.5)  # what was on the wire lands; nobody is elected before the session (4 s) ends
        pending = open_transaction_at_freeze(relay.log())
        if pending > 0:
            return pending
        assert time.monotonic() < deadline, "the relay was never frozen with a transaction open"
        relay.signal(signal.SIGCONT)


def test_a_transactional_relay_frozen_in_a_transaction_commits_nothing_after_its_successor(
    cluster: Cluster, spark: Any
) -> None:
    # Long transactions (1 s) and records lingering in the producer (200 ms): frozen at any moment, the
    # relay has a transaction open with records sent to the broker and records still queued in librdkafka.
    cluster.overrides = {
        "kafka": {
            "settings": {"batch.num.messages": "1", "linger.ms": "200"},
            "transactions": True,
            "transaction_linger_seconds": 1.0,
        },
        "publish": {"max_inflight_batches": 1000},
        "store": {"buffer_size": 4096},
    }
    a = cluster.relay(0)
    wait_for(lambda: a.status().get("state") == "running", 60, "relay-0 active")
    assert a.status().get("kafka_mode") == "transactional"
    b = cluster.relay(1)
    wait_for(lambda: b.status().get("state") == "standby", 30, "relay-1 standing by")
    writer = Writer(cluster.mysql, cluster.prefix, SHARDS, TABLES, rate=250.0, seed=7)
    writer.start()
    wait_for(lambda: a.status().get("batches_acked", 0) >= 5, 60, "relay-0 publishing")

    pending = freeze_in_a_transaction(a)
    frozen_ends = end_offsets(cluster.bootstrap, cluster.topic)
    wait_for(lambda: b.status().get("state") == "running", SESSION + 10, "relay-1 took over")
    wait_for(lambda: b.status().get("batches_acked", 0) >= 3, 30, "relay-1 publishing")
    zk = KazooClient(hosts=cluster.zk.hosts)
    zk.start(timeout=30)
    try:
        _, epoch_b = read_position_node(zk, cluster.layout.position)
        resumed_at = len(a.log_path.read_bytes())
        resumed_wall = time.time()
        a.signal(signal.SIGCONT)
        assert a.wait(60) == 3, a.log()[-3000:]
        grown = writer.changes + 300
        wait_for(lambda: writer.changes >= grown, 60, "more writes after relay-0 resumed")
        changes = writer.stop()
        records = cluster.read(changes)
        after = a.log_path.read_bytes()[resumed_at:].decode(errors="replace")
        assert "no longer the active relay" in after, after[-3000:]
        # A send that passed its fence check just before the freeze may log "sent" once it resumes: in
        # transactional mode that is harmless as long as nothing commits and no ack is allowed after the
        # resume (the broker fences the old producer) — which is what is checked here and, below, in
        # the log. An ack whose check passed before the freeze may log after it, as in the test above.
        acked = [
            line
            for line in after.splitlines()
            if "acked, position" in line and _allowed_at(line) >= resumed_wall
        ]
        assert not acked, f"relay-0 acked after it was resumed: {acked[:5]}"
        assert "committed" not in after, "relay-0 committed a transaction after it was resumed"
        point, epoch = read_position_node(zk, cluster.layout.position)
        assert epoch == epoch_b and point is not None, "the position was written by another epoch"
    finally:
        zk.stop()
        zk.close()
    assert pending > 0, "relay-0 froze with no transaction open: the case was not exercised"
    # From the freeze on, the log is relay-1's alone: if anything relay-0 had queued had landed after
    # relay-1's records, a key's sequence would repeat or go back there.
    late = [r for r in records if r.offset >= frozen_ends.get(r.partition, 0)]
    last: dict[tuple[int, bytes], int] = {}
    for rec in sorted(late, key=lambda r: (r.partition, r.offset)):
        seq = int(rec.json["sequence"])
        ident = (rec.partition, rec.key or b"")
        assert seq > last.get(ident, -1), (
            f"key {rec.key!r} repeats or regresses at {rec.partition}@{rec.offset}"
        )
        last[ident] = seq
    repeats = cluster.assert_complete(records, changes)
    cluster.assert_mirrored(spark, records)
    refused = after.count("newer producer with the same transactionalId")  # librdkafka's log of the refusal
    print(
        f"SIGSTOP (transactional): {pending} records in relay-0's open transaction at the freeze, "
        f"{refused} of its produce requests refused by the broker as fenced after SIGCONT, "
        f"{changes} row changes, {len(records)} records, {repeats} exact repeats, "
        f"{len(late)} records after the freeze, all relay-1's"
    )


def test_a_mapping_edit_then_sigkill_the_successor_republishes_the_tail_under_the_saved_version(
    cluster: Cluster, spark: Any
) -> None:
    # One mapping file shared by the relays (file store with history). Version 2 adds a tag: every record
    # published under it carries a relay.tag header, so a tail re-published under the wrong version
    # would not be a byte-identical repeat.
    shared = cluster.tmp / "mapping.yaml"
    shared.write_text(yaml.safe_dump(single_table_mapping(cluster.prefix)))
    cluster.mapping_file = shared
    writer = Writer(cluster.mysql, cluster.prefix, SHARDS, TABLES, rate=250.0, seed=9)
    writer.start()
    a = cluster.relay(0)
    wait_for(lambda: a.status().get("state") == "running", 60, "relay-0 active")
    b, c = cluster.relay(1), cluster.relay(2)
    wait_for(lambda: {b.status().get("state"), c.status().get("state")} == {"standby"}, 30, "two standing by")
    wait_for(acked_beyond(a, 5), 60, "relay-0 publishing")

    a.signal(signal.SIGSTOP)  # under load: it stops with batches in flight, all under version 1
    edited = yaml.safe_load(shared.read_text())
    edited["logical_dbs"][cluster.prefix]["tables"]["orders"]["tag"] = "v2"
    # Edited from another state directory than the relays': each relay kept version 1 in its own history
    # when it read it at start, which is what the successor resumes under.
    editor = FileMappingStore(shared, cluster.tmp / "editor" / "mapping-history")
    editor.write(parse_mapping(yaml.safe_dump(edited)), expected=1, note="tag orders")
    a.signal(signal.SIGKILL)
    assert a.wait(10) == -signal.SIGKILL

    wait_for(lambda: cluster.active() is not None, SESSION + 10, "a standby took over")
    successor = cluster.active()
    assert successor is not None
    wait_for(lambda: successor.status().get("mapping_version") == 2, 60, "the successor switched to v2")
    acked = int(successor.status().get("batches_acked", 0))
    wait_for(acked_beyond(successor, acked + 3), 60, "the successor publishing under version 2")
    changes = writer.stop()
    records = cluster.read(changes)
    cluster.assert_complete(records, changes)  # log order per key, repeats byte-identical, state == SELECT
    cluster.assert_mirrored(spark, records)
    log = successor.log()
    assert "resuming under mapping version 1" in log, log[-3000:]
    assert "mapping switched from version 1 to version 2" in log, log[-3000:]
    tagged = [r for r in records if r.headers.get("relay.tag") == b"v2"]
    assert tagged, "nothing was published under version 2"
    # Everything under version 2 comes after everything under version 1, per partition.
    for p in {r.partition for r in records}:
        offsets = [(r.offset, r.headers.get("relay.tag") == b"v2") for r in records if r.partition == p]
        flags = [v2_tag for _, v2_tag in sorted(offsets)]
        assert flags == sorted(flags), f"partition {p}: a version-1 record after a version-2 one"
