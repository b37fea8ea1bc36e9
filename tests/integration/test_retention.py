"""Retention and compaction on Apache Kafka, for real: segments deleted and compacted under the topics.

- ``relay replay --remap`` resumed from its checkpoint after retention deleted records the checkpoint still
  needed (a topic with ``retention.ms`` 1 s and ``segment.ms`` 200 ms: its old segments really go) stops
  with exit status 2 naming the gap — partition, offsets, how many records — and never skips them silently;
  ``--accept-gaps`` goes on from where the log starts and lists the gaps in its report.
- A compacted topic (``cleanup.policy=compact``, small segments, cleanable at once) after Kafka's log
  cleaner really ran (fewer records left than the relay published): per key, what is left is in the relay's
  order (sequences growing with the offsets) and the last record of each key is its latest state — the row
  SELECT shows, or a DELETE and its tombstone for a row that is gone.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from relay.dev.services import KafkaService
from tests.integration.eos_proof import read_partitions
from tests.integration.relay_harness import (
    REPO_ROOT,
    RelayThread,
    Writer,
    master_position,
    select_orders,
    sharded_schema,
    wait_for,
    write_configs,
)

SHARDS, TABLES, PARTITIONS = 2, 2, 2


@pytest.fixture
def shards(mysql_service: Any) -> Iterator[str]:
    with sharded_schema(mysql_service, "rt", SHARDS, TABLES) as prefix:
        yield prefix


def mapping(prefix: str, version: int, orders_topic: str | None, config: dict[str, str]) -> dict[str, Any]:
    orders: dict[str, Any] = {"physical": ["orders_\\d+"]}
    if orders_topic:
        orders["topic"] = orders_topic
    return {
        "version": version,
        "topics": {"partitions": PARTITIONS, "create": True, "config": config},
        "unmapped": {"action": "drop"},
        "logical_dbs": {prefix: {"physical": [f"{prefix}_\\d+"], "tables": {"orders": orders}}},
    }


def log_starts(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"lw-{time.monotonic_ns()}"})
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[0]
            for p in range(PARTITIONS)
        }
    finally:
        consumer.close()


def set_topic_config(bootstrap: str, topic: str, **values: str) -> None:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    for key, value in values.items():
        resource.add_incremental_config(
            ConfigEntry(key.replace("_", "."), value, incremental_operation=AlterConfigOpType.SET)
        )
    admin = AdminClient({"bootstrap.servers": bootstrap})  # held until the answer: a dropped client aborts it
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


def roll_segments(bootstrap: str, topic: str, until: Any, what: str) -> None:
    """Append a record to every partition now and then (segments roll on an append once ``segment.ms`` has
    passed; the active segment is never deleted nor compacted) until ``until()`` holds."""
    producer = Producer({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + 90
    try:
        while not until():
            assert time.monotonic() < deadline, f"not within 90 s: {what}"
            for p in range(PARTITIONS):
                producer.produce(topic, b"not a relay record", b"filler", p)
            producer.flush(10)
            time.sleep(0.3)  # paces the appends; the condition above is what is waited for
    finally:
        producer.flush(10)


def caught_up(point: Any, end: tuple[str, int]) -> bool:
    return point is not None and (point.journal, point.offset) >= end


def replay(cfg: Path, topic: str, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "relay.cli", "replay", "-c", str(cfg), "--remap", "--from", topic, *extra],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_replay_resumed_after_retention_deleted_what_it_needed_reports_the_gap(
    mysql_service: Any, kafka_service: KafkaService, shards: str, tmp_path: Path
) -> None:
    prefix, bootstrap = shards, kafka_service.bootstrap_servers
    origin = prefix  # the logical db's topic: every table's changes until orders get their own
    conn = mysql_service.connect()
    cfg = write_configs(
        tmp_path, mysql=mysql_service, bootstrap=bootstrap, start=master_position(conn), instance=prefix,
        mapping=mapping(prefix, 1, None, {"segment.ms": "200"}), include=f"{prefix}_\\d+\\..*",
    )  # fmt: skip
    mfile = cfg.parent / "mapping.yaml"
    writer = Writer(mysql_service, prefix, SHARDS, TABLES, rate=400.0, seed=5)
    with RelayThread(cfg) as running:
        writer.start()
        wait_for(
            lambda: running.relay.stats.rows_published >= 1500, 120, "1500 rows published to the old topic"
        )
        writer.stop()
    # orders get a topic of their own; the replay that moves their history is SIGKILLed after a few chunks
    mfile.write_text(yaml.safe_dump(mapping(prefix, 2, f"{prefix}.orders", {})))
    checkpoint = tmp_path / "replay.json"
    first = replay(cfg, origin, "--chunk", "20", "--checkpoint", str(checkpoint))
    try:
        wait_for(lambda: checkpoint.exists() or first.poll() is not None, 60, "the replay's first checkpoint")
        assert first.poll() is None, "the replay finished before it could be interrupted"
        first.send_signal(signal.SIGKILL)
        first.wait(30)
    finally:
        if first.poll() is None:
            first.kill()
    needed = json.loads(checkpoint.read_text())["offsets"][origin]
    # retention deletes what the checkpoint still needs: old segments go once they are 1 s old
    set_topic_config(bootstrap, origin, retention_ms="1000")
    roll_segments(
        bootstrap,
        origin,
        lambda: all(log_starts(bootstrap, origin)[int(p)] > o for p, o in needed.items()),
        "retention past the checkpoint",
    )
    set_topic_config(bootstrap, origin, retention_ms="-1")
    lows = log_starts(bootstrap, origin)

    refused = replay(cfg, origin, "--checkpoint", str(checkpoint))
    out, err = refused.communicate(timeout=120)
    assert refused.returncode == 2, out + err
    assert "no longer in the log" in err and "--accept-gaps" in err, err
    for p, o in needed.items():
        assert f"{origin} [{p}] offsets {o}..{lows[int(p)] - 1} ({lows[int(p)] - o} records)" in err, err
    assert "Traceback" not in err

    accepted = replay(cfg, origin, "--checkpoint", str(checkpoint), "--accept-gaps")
    out, err = accepted.communicate(timeout=180)
    assert accepted.returncode == 0, out + err
    assert "GAPS (deleted before they were replayed)" in out, out
    for p, o in needed.items():
        assert f"{origin} [{p}] offsets {o}..{lows[int(p)] - 1}" in out, out
    conn.close()


def test_a_compacted_topic_keeps_the_latest_change_of_every_key_in_the_relays_order(
    mysql_service: Any, kafka_service: KafkaService, shards: str, tmp_path: Path
) -> None:
    prefix, bootstrap = shards, kafka_service.bootstrap_servers
    topic = f"{prefix}.orders"
    compact = {
        "cleanup.policy": "compact",
        "segment.ms": "200",
        "min.cleanable.dirty.ratio": "0.01",
        "min.compaction.lag.ms": "0",
        "delete.retention.ms": "86400000",  # tombstones stay: a deleted row's last word is visible
    }
    conn = mysql_service.connect()
    cfg = write_configs(
        tmp_path, mysql=mysql_service, bootstrap=bootstrap, start=master_position(conn), instance=prefix,
        mapping=mapping(prefix, 1, topic, compact), include=f"{prefix}_\\d+\\..*",
    )  # fmt: skip
    writer = Writer(mysql_service, prefix, SHARDS, TABLES, rate=400.0, seed=7)
    with RelayThread(cfg) as running:
        writer.start()
        wait_for(lambda: running.relay.stats.rows_published >= 2000, 120, "2000 rows published")
        changes = writer.stop()
        end = master_position(conn)
        wait_for(lambda: caught_up(running.relay.instance.last_saved, end), 60, "the relay caught up")
        published = running.relay.stats.records_published

    def per_key() -> dict[bytes | None, int]:
        counts: dict[bytes | None, int] = {}
        for rec in read_partitions(bootstrap, topic, "read_committed"):
            counts[rec.key] = counts.get(rec.key, 0) + 1
        return counts

    several = {key for key, n in per_key().items() if n >= 3 and key != b"filler"}
    assert several, "no key has several changes: nothing to compact"
    roll_segments(
        bootstrap,
        topic,
        lambda: any(per_key().get(key, 0) == 1 for key in several),
        "the log cleaner compacting a key's older changes away",
    )
    records = [r for r in read_partitions(bootstrap, topic, "read_committed") if r.key != b"filler"]
    assert len(records) < published, "compaction removed nothing"
    last: dict[bytes, Any] = {}
    order: dict[bytes, int] = {}
    for rec in records:  # partition by partition, in offset order
        if rec.value is not None:
            seq = int(rec.json["sequence"]) * 2 + int(rec.json.get("part") or 0)
            assert seq > order.get(rec.key or b"", -1), (
                f"key {rec.key!r} out of the relay's order at {rec.offset}"
            )
            order[rec.key or b""] = seq
        last[rec.key or b""] = rec
    state = {
        json.loads(key)["id"]: {k: rec.json["data"][0].get(k) for k in ("id", "status", "amount", "note")}
        for key, rec in last.items()
        if rec.value is not None and rec.json["type"] != "DELETE"
    }
    assert state == select_orders(conn, prefix, SHARDS, TABLES)
    print(
        f"compaction: {changes} changes, {published} records published, {len(records)} left after compaction"
    )
    conn.close()
