"""Hot reload on real MariaDB, a real broker and real ZooKeeper: a relay under load switches a table to its
new topic at a batch boundary when the mapping node changes — no change lost, none published live to both
topics, the history copied into the new topic before the switch (tests/integration/test_table_move.py
checks its order) —; an invalid edit (refused by the CLI, or written by hand into the file) leaves the
running relay unchanged and says why, naming the key."""

from __future__ import annotations

import logging
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from mapping import editor, parse_mapping
from mapping.store_zk import ZooKeeperMappingStore, ZooKeeperStoreConfig
from tests.integration.relay_harness import (
    REPO_ROOT,
    Rec,
    RelayThread,
    Writer,
    master_position,
    partitions_of,
    read_to_end,
    read_topic,
    sharded_schema,
    wait_for,
    write_configs,
)

SHARDS, TABLES = 2, 2
FROM = "relay.replay.from"  # a copy's header: the history copied by the switch's table move


@pytest.fixture()
def shards(mysql_service: Any) -> Iterator[str]:
    with sharded_schema(mysql_service, "hr", SHARDS, TABLES) as prefix:
        yield prefix


def mapping_v1(prefix: str) -> dict[str, Any]:
    return {
        "version": 1,
        "topics": {"partitions": 2},
        "unmapped": {"action": "drop"},
        "logical_dbs": {
            prefix: {
                "physical": [f"{prefix}_\\d+"],
                "tables": {
                    "orders": {"physical": ["orders_\\d+"], "topic": f"{prefix}.v1"},
                    "customers": {"physical": ["customers"]},
                },
            }
        },
    }


def read_topics(bootstrap: str, topics: list[str], changes: int, timeout: float = 60.0) -> list[Rec]:
    """Every record of ``topics`` from the start (one assign-based consumer), until ``changes`` distinct
    row sequences have been read (tracked as records arrive: parsing them all again per record is slow).
    A table move's copies (header ``FROM``) do not count: they repeat records of the old topic, which
    would otherwise end the read before the old topic is read through."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"hr-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
        }
    )
    parts = [TopicPartition(t, p, 0) for t in topics for p in range(partitions_of(bootstrap, t))]
    consumer.assign(parts)
    out: list[Rec] = []
    seqs: set[int] = set()
    deadline = time.monotonic() + timeout
    try:
        while len(seqs) < changes:
            if time.monotonic() > deadline:
                raise AssertionError(f"{topics}: {len(seqs)} of {changes} changes after {timeout}s")
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            headers = dict(msg.headers() or [])
            rec = Rec(msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value(), headers)
            out.append(rec)
            if FROM not in headers:
                seqs |= row_seqs([rec])
    finally:
        consumer.close()
    return out


def row_seqs(records: list[Rec]) -> set[int]:
    return {int(r.json["sequence"]) for r in records if not r.json["isDdl"]}


def test_a_relay_under_load_switches_topics_at_a_batch_boundary(
    mysql_service: Any,
    kafka_service: Any,
    zk_service: Any,
    shards: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    prefix, bootstrap = shards, kafka_service.bootstrap_servers
    zk = ZooKeeperStoreConfig(zk_service.hosts, f"/relay-test/{uuid.uuid4().hex[:8]}/mapping")
    store = ZooKeeperMappingStore(zk)
    store.create(parse_mapping(mapping_v1(prefix)))
    conn = mysql_service.connect()
    cfg = write_configs(
        tmp_path,
        mysql=mysql_service,
        bootstrap=bootstrap,
        mapping={},
        start=master_position(conn),
        instance=prefix,
        include=f"{prefix}_.*\\..*",
        extra={
            "mapping": {
                "store": "zookeeper",
                "reload_check_seconds": 0.05,
                "zookeeper": {"hosts": zk.hosts, "path": zk.path},
            },
            "publish": {"batch_size": 8, "max_inflight_batches": 4},
            "logging": {"level": "INFO"},
        },
    )
    conn.close()
    writer = Writer(mysql_service, prefix, SHARDS, TABLES, rate=300.0, seed=4)
    caplog.set_level(logging.INFO, logger="mapping.watch")
    try:
        with RelayThread(cfg) as running:
            writer.start()
            read_topic(bootstrap, f"{prefix}.v1", until=lambda rs: len(rs) >= 60)
            new = editor.set_topic(store.read(), f"{prefix}.orders", f"{prefix}.v2")
            store.write(new, expected=1, note="orders get a new topic under load")
            wait_for(lambda: running.relay.mapping.version == 2, 30, "the relay to switch to version 2")
            read_topic(bootstrap, f"{prefix}.v2", until=lambda rs: len(rs) >= 60)
            changes = writer.stop()
            both = read_topics(bootstrap, [f"{prefix}.v1", f"{prefix}.v2"], changes)
    finally:
        writer.halt.set()
        store.close()
    old, new_seqs, copies = split_by_switch(both, bootstrap, prefix)
    assert len(old | new_seqs) == changes  # no change lost (and nothing unexpected)
    assert not old & new_seqs  # none published live to both topics
    assert max(old) < min(new_seqs)  # one switch point in binlog order: a batch boundary
    assert copies == old  # the history was copied into the new topic (before the switch)
    assert "mapping switched from version 1 to version 2" in caplog.text


def split_by_switch(both: list[Rec], bootstrap: str, prefix: str) -> tuple[set[int], set[int], set[int]]:
    """(row sequences published to .v1, published live to .v2, copied into .v2). Every copy was delivered
    before the switch: .v2 read to its end holds them all."""
    old = row_seqs([r for r in both if r.topic == f"{prefix}.v1"])
    new_seqs = row_seqs([r for r in both if r.topic == f"{prefix}.v2" and FROM not in r.headers])
    copies = row_seqs([r for r in read_to_end(bootstrap, f"{prefix}.v2") if FROM in r.headers])
    return old, new_seqs, copies


def test_an_invalid_edit_leaves_the_running_relay_unchanged_and_says_why(
    mysql_service: Any, kafka_service: Any, shards: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    prefix, bootstrap = shards, kafka_service.bootstrap_servers
    conn = mysql_service.connect()
    cfg = write_configs(
        tmp_path,
        mysql=mysql_service,
        bootstrap=bootstrap,
        mapping=mapping_v1(prefix),
        start=master_position(conn),
        instance=prefix,
        include=f"{prefix}_.*\\..*",
        extra={"mapping": {"reload_check_seconds": 0.05}},
    )
    mfile = cfg.parent / "mapping.yaml"
    original = mfile.read_text()
    cli = [sys.executable, "-m", "relay.cli", "mapping"]
    caplog.set_level(logging.INFO, logger="mapping.watch")

    def insert(first: int, n: int) -> None:
        with conn.cursor() as cur:
            for i in range(first, first + n):
                cur.execute(f"INSERT INTO {prefix}_00.orders_00 VALUES (%s, 'NEW', 1, NULL)", (i,))

    with RelayThread(cfg) as running:
        insert(0, 5)
        read_topic(bootstrap, f"{prefix}.v1", until=lambda rs: len(rs) >= 5)
        refused = subprocess.run(  # noqa: PLW1510 - the return code is asserted
            [*cli, "topic", "set", f"{prefix}.orders", "not a topic", "-c", str(cfg)],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert refused.returncode == 2
        assert f"logical_dbs.{prefix}.tables.orders.topic" in refused.stderr
        assert mfile.read_text() == original  # nothing stored

        mfile.write_text(original.replace("orders_\\d+", "orders_(\\d+"))  # a hand edit with a broken regex
        watcher = running.relay.watcher
        assert watcher is not None
        wait_for(lambda: watcher.rejected is not None, 30, "the relay to refuse the hand edit")
        insert(5, 5)
        after = read_topic(bootstrap, f"{prefix}.v1", until=lambda rs: len(rs) >= 10)
        assert len(after) == 10 and running.relay.mapping.version == 1
        assert "refused the new mapping" in caplog.text
        assert f"logical_dbs.{prefix}.tables.orders.physical[0]" in caplog.text

        mfile.write_text(original)  # repaired by hand: the same mapping, so no switch
        ok = subprocess.run(  # noqa: PLW1510 - the return code is asserted
            [*cli, "topic", "set", f"{prefix}.orders", f"{prefix}.v2", "-c", str(cfg)],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert ok.returncode == 0, ok.stderr
        wait_for(lambda: running.relay.mapping.version == 2, 30, "the relay to switch to version 2")
        insert(10, 3)
        moved = read_topic(
            bootstrap, f"{prefix}.v2", until=lambda rs: sum(FROM not in r.headers for r in rs) >= 3
        )
        assert sorted(int(r.json["data"][0]["id"]) for r in moved if FROM not in r.headers) == [10, 11, 12]
        assert sorted(int(r.json["data"][0]["id"]) for r in moved if FROM in r.headers) == list(range(10))
    conn.close()


@pytest.fixture()
def own_broker(spare_broker: Any) -> Any:
    """A broker of its own (the session's spare): freezing it must not stall the session's shared broker."""
    return spare_broker


def test_a_switch_waits_until_a_rolled_back_range_is_redelivered_under_the_old_mapping(
    mysql_service: Any, own_broker: Any, shards: str, tmp_path: Path
) -> None:
    """Batches sent under version 1 time out while the broker is frozen (some of their records reach it
    anyway) and are rolled back while version 2 is pending: they are re-sent under version 1 — never
    re-encoded into the new topic — and the switch comes after them."""
    import os
    import signal

    prefix, bootstrap = shards, own_broker.service.bootstrap_servers
    conn = mysql_service.connect()
    cfg = write_configs(
        tmp_path, mysql=mysql_service, bootstrap=bootstrap, mapping=mapping_v1(prefix),
        start=master_position(conn), instance=prefix, include=f"{prefix}_.*\\..*",
        extra={
            "mapping": {"reload_check_seconds": 0.05},
            "publish": {"batch_size": 8, "max_inflight_batches": 4, "retry": {"initial": 0.2, "maximum": 1}},
            "kafka": {"delivery_timeout_seconds": 2.0},
            "logging": {"level": "INFO"},
        },
    )  # fmt: skip
    conn.close()
    mfile = cfg.parent / "mapping.yaml"
    writer = Writer(mysql_service, prefix, SHARDS, TABLES, rate=300.0, seed=9)
    try:
        with RelayThread(cfg) as running:
            writer.start()
            read_topic(bootstrap, f"{prefix}.v1", until=lambda rs: len(rs) >= 40)
            os.kill(own_broker.process.pid, signal.SIGSTOP)
            try:
                edited = subprocess.run(  # noqa: PLW1510 - the return code is asserted
                    [sys.executable, "-m", "relay.cli", "mapping", "topic", "set", f"{prefix}.orders",
                     f"{prefix}.v2", "-f", str(mfile), "-c", str(cfg)],
                    cwd=REPO_ROOT, capture_output=True, text=True, timeout=60,
                )  # fmt: skip
                assert edited.returncode == 0, edited.stderr
                wait_for(lambda: running.relay.stats.batches_rolled_back > 0, 30, "a rollback while frozen")
                assert running.relay.mapping.version == 1  # nothing delivered: the switch waits
            finally:
                os.kill(own_broker.process.pid, signal.SIGCONT)
            wait_for(lambda: running.relay.mapping.version == 2, 60, "the switch after the re-delivery")
            read_topic(bootstrap, f"{prefix}.v2", until=lambda rs: len(rs) >= 40)
            changes = writer.stop()
            both = read_topics(bootstrap, [f"{prefix}.v1", f"{prefix}.v2"], changes)
    finally:
        writer.halt.set()
    old, new_seqs, copies = split_by_switch(both, bootstrap, prefix)
    assert len(old | new_seqs) == changes
    assert not old & new_seqs, f"{len(old & new_seqs)} changes published live under both mappings"
    assert max(old) < min(new_seqs)
    assert copies == old
