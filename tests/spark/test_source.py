"""The reading tests, run against Spark's own ``kafka`` source and the relay's ``relay-kafka`` source alike
(the ``source`` parameter), on the session's real broker: schema, one task per partition range, the true end
of partitions whose last batch holds many records, offsets JSON, assign/pattern, timestamps,
``maxOffsetsPerTrigger`` with ``availableNow``, and data-loss checks."""

from __future__ import annotations

import contextlib
import json
import re
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.errors import StreamingQueryException

from relay.spark.schema import KAFKA_SCHEMA
from tests.integration.relay_harness import wait_for

PARTITIONS = 3
PER_PARTITION = 40
BASE_TS = 1_700_000_000_000


def make_topic(bootstrap: str, partitions: int = PARTITIONS) -> str:
    name = f"spark-src-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    # Kept forever: the records carry 2023 timestamps (BASE_TS), which Kafka's default retention (7 days,
    # by record time) would delete within a second on the test broker.
    keep = {"retention.ms": "-1"}
    for future in admin.create_topics([NewTopic(name, partitions, 1, config=keep)]).values():
        future.result(30)
    return name


def produce(bootstrap: str, topic: str, partitions: int = PARTITIONS, count: int = PER_PARTITION) -> None:
    """``count`` records per partition, in multi-record batches (linger), timestamps BASE_TS + i s."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 100})
    for i in range(count):
        for p in range(partitions):
            producer.produce(
                topic,
                f"v{p}-{i}".encode(),
                f"k{i}".encode(),
                partition=p,
                timestamp=BASE_TS + i * 1000,
                headers=[("h", str(i).encode())],
            )
    assert producer.flush(30) == 0


SOURCES = ("kafka", "relay-kafka")
# What each source says when a start is below what the broker retains, or no record has the timestamp.
DATA_LOSS = r"data loss|data may have been lost|OFFSET_OUT_OF_RANGE|out of range"
NO_TIMESTAMP = r"no record at or after timestamp|No offset matched|NO_OFFSET|KAFKA_START_OFFSET"


@pytest.fixture(params=SOURCES)
def source(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def reader(spark: Any, bootstrap: str, source: str, **options: str) -> Any:
    r = spark.read.format(source).option("kafka.bootstrap.servers", bootstrap)
    for key, value in options.items():
        r = r.option(key, value)
    return r.load()


@pytest.fixture(scope="module")
def topic(kafka_service: Any) -> str:
    name = make_topic(kafka_service.bootstrap_servers)
    produce(kafka_service.bootstrap_servers, name)
    return name


def test_batch_reads_every_record_one_task_per_partition(
    spark: Any, kafka_service: Any, topic: str, source: str
) -> None:
    bs = kafka_service.bootstrap_servers
    df = reader(spark, bs, source, subscribe=topic)
    assert df.schema == KAFKA_SCHEMA
    assert df.rdd.getNumPartitions() == PARTITIONS
    rows = df.collect()
    # Every record, including the tail of each partition's last multi-record batch.
    assert sorted((r["partition"], r["offset"]) for r in rows) == [
        (p, o) for p in range(PARTITIONS) for o in range(PER_PARTITION)
    ]
    first = min(rows, key=lambda r: (r["partition"], r["offset"]))
    assert (first["key"], first["value"], first["topic"], first["timestampType"]) == (
        b"k0",
        b"v0-0",
        topic,
        0,
    )
    headers = reader(spark, bs, source, subscribe=topic, includeHeaders="true").where(
        "partition = 0 and offset = 5"
    )
    assert headers.first()["headers"][0].asDict() == {"key": "h", "value": b"5"}


def test_offsets_json_assign_and_pattern(spark: Any, kafka_service: Any, topic: str, source: str) -> None:
    bs = kafka_service.bootstrap_servers
    # -2: earliest; -1 (latest) is refused as a batch start by Spark's source: partition 2 starts at its end.
    start = json.dumps({topic: {"0": 10, "1": -2, "2": PER_PARTITION}})
    end = json.dumps({topic: {"0": 15, "1": 3, "2": -1}})
    rows = reader(spark, bs, source, subscribe=topic, startingOffsets=start, endingOffsets=end).collect()
    assert sorted((r["partition"], r["offset"]) for r in rows) == [(0, o) for o in range(10, 15)] + [
        (1, o) for o in range(3)
    ]
    assigned = reader(spark, bs, source, assign=json.dumps({topic: [1]})).collect()
    assert {r["partition"] for r in assigned} == {1} and len(assigned) == PER_PARTITION
    pattern = reader(spark, bs, source, subscribePattern=topic[:-1] + ".")
    assert pattern.count() == PARTITIONS * PER_PARTITION


def test_starting_timestamp_follows_kafka_semantics(
    spark: Any, kafka_service: Any, topic: str, source: str
) -> None:
    """The earliest offset whose timestamp is >= the given one, per partition (the relay's source scans
    forward where a broker answers offsets_for_times wrongly)."""
    bs = kafka_service.bootstrap_servers
    rows = reader(spark, bs, source, subscribe=topic, startingTimestamp=str(BASE_TS + 30_500)).collect()
    assert sorted((r["partition"], r["offset"]) for r in rows) == [
        (p, o) for p in range(PARTITIONS) for o in range(31, PER_PARTITION)
    ]
    by_partition = json.dumps({topic: {"0": BASE_TS + 10_000}})
    # Spark's source wants a timestamp for every partition it reads: assign the one named.
    assigned = json.dumps({topic: [0]})
    rows = reader(spark, bs, source, assign=assigned, startingOffsetsByTimestamp=by_partition).collect()
    assert min(r["offset"] for r in rows if r["partition"] == 0) == 10
    with pytest.raises(Exception, match=NO_TIMESTAMP):
        reader(spark, bs, source, subscribe=topic, startingTimestamp=str(BASE_TS + 10**9)).collect()
    late = reader(
        spark,
        bs,
        source,
        subscribe=topic,
        startingTimestamp=str(BASE_TS + 10**9),
        startingOffsetsByTimestampStrategy="latest",
    )
    assert late.count() == 0


def test_stream_bounded_by_max_offsets_per_trigger(
    spark: Any, kafka_service: Any, topic: str, tmp_path: Path, source: str
) -> None:
    bs = kafka_service.bootstrap_servers
    name = f"m_{uuid.uuid4().hex[:6]}"
    stream = (
        spark.readStream.format(source)
        .option("kafka.bootstrap.servers", bs)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "16")
        .load()
    )
    query = (
        stream.writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert max(sizes) <= 16 and sum(sizes) == PARTITIONS * PER_PARTITION
    assert (
        spark.sql(f"select count(distinct partition, offset) from {name}").first()[0]
        == PARTITIONS * PER_PARTITION
    )
    end = json.loads(query.lastProgress["sources"][0]["endOffset"])
    assert end == {topic: {str(p): PER_PARTITION for p in range(PARTITIONS)}}


def _stream_once(spark: Any, bs: str, source: str, topic: str, checkpoint: Path, **options: str) -> Any:
    stream = (
        spark.readStream.format(source)
        .option("kafka.bootstrap.servers", bs)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
    )
    for key, value in options.items():
        stream = stream.option(key, value)
    query = (
        stream.load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    with contextlib.suppress(StreamingQueryException):  # inspected by the caller via query.exception()
        query.awaitTermination(120)
    return query


def test_start_beyond_retained_range_is_data_loss(
    spark: Any, kafka_service: Any, tmp_path: Path, source: str
) -> None:
    """A checkpoint whose offsets the broker no longer has (topic deleted and recreated, as after a
    broker lost its data) fails the query, or with failOnDataLoss=false warns and reads what is there."""
    bs = kafka_service.bootstrap_servers
    name = make_topic(bs, 1)
    produce(bs, name, 1, 20)
    assert _stream_once(spark, bs, source, name, tmp_path / "ck").exception() is None
    admin = AdminClient({"bootstrap.servers": bs})
    for future in admin.delete_topics([name]).values():
        future.result(30)
    wait_for(lambda: name not in admin.list_topics(timeout=10).topics, 30, "topic deleted")
    for future in admin.create_topics([NewTopic(name, 1, 1, config={"retention.ms": "-1"})]).values():
        future.result(30)
    produce(bs, name, 1, 5)
    failed = _stream_once(spark, bs, source, name, tmp_path / "ck")
    assert failed.exception() is not None
    assert re.search(DATA_LOSS, str(failed.exception()), re.IGNORECASE), str(failed.exception())[:2000]
    passed = _stream_once(spark, bs, source, name, tmp_path / "ck", failOnDataLoss="false")
    assert passed.exception() is None
    # Where the checkpoint is past the recreated partition's end, Spark's source counts the records up to
    # that end as lost and goes on from it; the relay's source reads them. Both go on with what comes next.
    lost = {"kafka": 0, "relay-kafka": 5}[source]
    assert sum(p["numInputRows"] for p in passed.recentProgress) == lost
    produce(bs, name, 1, 3)
    after = _stream_once(spark, bs, source, name, tmp_path / "ck", failOnDataLoss="false")
    assert after.exception() is None
    assert sum(p["numInputRows"] for p in after.recentProgress) == 3


def test_start_below_log_start_offset_is_data_loss(spark: Any, kafka_service: Any, source: str) -> None:
    """Records deleted (``DeleteRecords``, what retention does) before the start offset."""
    bs = kafka_service.bootstrap_servers
    name = make_topic(bs, 1)
    produce(bs, name, 1, 20)
    admin = AdminClient({"bootstrap.servers": bs, "socket.timeout.ms": 5000})
    for future in admin.delete_records([TopicPartition(name, 0, 10)], request_timeout=10).values():
        assert future.result(15).low_watermark == 10  # the partition's log start offset is now 10
    start = json.dumps({name: {"0": 2}})
    with pytest.raises(Exception, match=f"(?i){DATA_LOSS}"):
        reader(spark, bs, source, subscribe=name, startingOffsets=start).collect()
    rows = reader(spark, bs, source, subscribe=name, startingOffsets=start, failOnDataLoss="false").collect()
    assert sorted(r["offset"] for r in rows) == list(range(10, 20))
