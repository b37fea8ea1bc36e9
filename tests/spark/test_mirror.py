"""Done-when: a real relay (real MariaDB binlog → real broker) mirrored by real local Spark.

A workload of inserts, updates and deletes across shards goes through the relay; part of it is published
twice (a second relay re-reads the binlog from the middle, as after a crash before the position was
saved). The mirror streams the topic with ``maxOffsetsPerTrigger``, is stopped and restarted from its
checkpoint, and must end equal to ``SELECT *`` over the shards with the right Spark types; a replay from
the start into a fresh directory rebuilds the same table; the protobuf codec mirrors the same way.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from pyspark.sql.types import DecimalType, LongType, StringType

from relay.spark.apply import apply_changes, table_path
from relay.spark.decode import changes
from relay.spark.mirror import MirrorConfig, start
from tests.integration.relay_harness import (
    RelayThread,
    create_shards,
    drop_shards,
    master_position,
    read_topic,
    select_orders,
    sharded_mapping,
    wait_for,
    write_configs,
)
from tests.integration.test_relay import workload

SHARDS, TABLES = 3, 2
MAX_PER_TRIGGER = 25


@pytest.fixture()
def shards(mysql_service: Any) -> Iterator[str]:
    prefix = f"sp{time.monotonic_ns() % 10**8}"
    with contextlib.closing(mysql_service.connect()) as conn:
        create_shards(conn, prefix, SHARDS, TABLES)
    yield prefix
    with contextlib.closing(mysql_service.connect()) as conn:
        drop_shards(conn, prefix, SHARDS)


def relay_run(
    tmp: Path, mysql: Any, bootstrap: str, prefix: str, start_at: tuple[str, int], codec: str, instance: str
) -> RelayThread:
    cfg = write_configs(
        tmp,
        mysql=mysql,
        bootstrap=bootstrap,
        mapping=sharded_mapping(prefix, partitions=3, codec=codec),
        start=start_at,
        instance=instance,
    )
    return RelayThread(cfg)


def mirrored(spark: Any, out: Path, table: str) -> dict[str, dict[str, Any]]:
    rows = spark.read.parquet(str(table_path(out, table))).collect()
    return {str(r["id"]): {k: r[k] for k in ("id", "status", "amount", "note")} for r in rows}


def as_text(rows: dict[str, dict[str, Any]]) -> dict[str, dict[str, str | None]]:
    return {k: {c: None if v is None else str(v) for c, v in row.items()} for k, row in rows.items()}


def row_count(bootstrap: str, topic: str, changes_: int) -> list[Any]:
    return read_topic(
        bootstrap,
        topic,
        until=lambda rs: len({r.json["sequence"] for r in rs if not r.json["isDdl"]}) >= changes_,
    )


def run_mirror(spark: Any, config: MirrorConfig) -> list[dict[str, Any]]:
    query = start(spark, config)
    query.awaitTermination(180)
    assert not query.isActive, "availableNow query did not finish"
    assert query.exception() is None, query.exception()
    return list(query.recentProgress)


def test_mirror_equals_select_through_restart_and_replay(
    spark: Any, mysql_service: Any, kafka_service: Any, shards: str, tmp_path: Path
) -> None:
    prefix, bootstrap = shards, kafka_service.bootstrap_servers
    topic, table = f"{prefix}.orders", f"{prefix}.orders"
    conn = mysql_service.connect()
    begin = master_position(conn)
    with relay_run(tmp_path / "r1", mysql_service, bootstrap, prefix, begin, "canal-json", prefix):
        changes_ = workload(conn, prefix) - 1  # one change goes to customers
        records = row_count(bootstrap, topic, changes_)
    # Publish a third of the row records again, byte for byte, to the same partitions: what a producer
    # retry outside a transaction leaves on any broker (after newer records of the same keys).
    rows = [r for r in records if not r.json["isDdl"]]
    producer = Producer({"bootstrap.servers": bootstrap})
    for rec in rows[::3]:
        producer.produce(
            topic, rec.value, rec.key, partition=rec.partition, headers=list(rec.headers.items())
        )
    assert producer.flush(30) == 0
    again = read_topic(bootstrap, topic, until=lambda rs: len(rs) >= len(records) + len(rows[::3]))
    total = len(again)
    assert len([r for r in again if not r.json["isDdl"]]) > changes_, "nothing was published twice"
    expected = select_orders(conn, prefix, SHARDS, TABLES)

    out, checkpoint = tmp_path / "out", tmp_path / "ck"
    config = MirrorConfig(
        bootstrap, (topic,), out, checkpoint, max_offsets_per_trigger=MAX_PER_TRIGGER, trigger_seconds=0.5
    )
    # First run: a continuous query, stopped after a few micro-batches (mid-way through the topic).
    query = start(spark, config)
    wait_for(lambda: query.lastProgress is not None and query.lastProgress["batchId"] >= 2, 120, "3 batches")
    query.stop()
    first = [p for p in query.recentProgress if p["numInputRows"] > 0]
    # Second run: the same checkpoint, until caught up.
    second = [
        p
        for p in run_mirror(spark, MirrorConfig(**{**config.__dict__, "available_now": True}))
        if p["numInputRows"] > 0
    ]
    progress = first + second
    assert all(p["numInputRows"] <= MAX_PER_TRIGGER for p in progress)
    # Neither lost nor read twice: the batches tile the topic exactly once.
    assert sum(p["numInputRows"] for p in progress) == total
    assert json.loads(second[0]["sources"][0]["startOffset"]) == json.loads(
        first[-1]["sources"][0]["endOffset"]
    )

    got = mirrored(spark, out, table)
    assert as_text(got) == expected
    schema = {f.name: f.dataType for f in spark.read.parquet(str(table_path(out, table))).schema.fields}
    assert schema["id"] == LongType() and schema["amount"] == DecimalType(12, 2)
    assert schema["status"] == StringType() and schema["note"] == StringType()
    assert isinstance(next(iter(got.values()))["amount"], Decimal)
    assert "extra" in schema  # the ALTER TABLE … ADD COLUMN of one shard appears as a column

    # Replay from the start (earliest, then a timestamp before every record) rebuilds the same table.
    for name, start_opts in (("earliest", "earliest"), ("timestamp", None)):
        replay = MirrorConfig(
            bootstrap,
            (topic,),
            tmp_path / f"replay-{name}",
            tmp_path / f"ck-{name}",
            available_now=True,
            starting_offsets=start_opts or "earliest",
        )
        if start_opts is None:
            batch = (
                spark.read.format("relay-kafka")
                .option("kafka.bootstrap.servers", bootstrap)
                .option("subscribe", topic)
                .option("startingTimestamp", "0")
                .load()
            )
            apply_changes(changes(batch), replay.out)
        else:
            run_mirror(spark, replay)
        assert as_text(mirrored(spark, replay.out, table)) == expected
    # Applying everything once more to the mirrored table changes nothing.
    batch = (
        spark.read.format("relay-kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .load()
    )
    apply_changes(changes(batch), out)
    assert as_text(mirrored(spark, out, table)) == expected


def test_protobuf_topic_mirrors_the_same(
    spark: Any, mysql_service: Any, kafka_service: Any, shards: str, tmp_path: Path
) -> None:
    prefix, bootstrap = shards, kafka_service.bootstrap_servers
    topic = f"{prefix}.orders"
    conn = mysql_service.connect()
    begin = master_position(conn)
    with relay_run(tmp_path / "r", mysql_service, bootstrap, prefix, begin, "canal-protobuf", prefix):
        changes_ = workload(conn, prefix) - 1
        wait_for(lambda: _count(spark, bootstrap, topic) >= changes_, 60, "protobuf records")
    out = tmp_path / "out"
    df = (
        spark.read.format("relay-kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .load()
    )
    ch = changes(df, codec="canal-protobuf")
    sample = ch.where("type = 'UPDATE'").first()
    assert (
        sample is not None
        and sample["before"] is not None
        and sample["source"]["database"].startswith(prefix)
    )
    apply_changes(changes(df), out)
    assert as_text(mirrored(spark, out, topic)) == select_orders(conn, prefix, SHARDS, TABLES)


def _count(spark: Any, bootstrap: str, topic: str) -> int:
    df = (
        spark.read.format("relay-kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .load()
    )
    return int(changes(df).where("not is_ddl").count())
