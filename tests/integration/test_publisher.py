"""The Kafka publisher against a real Apache Kafka (``kafka_service``).

Records are read back with an ``assign``-based consumer. Every wait is on a condition with a deadline. The
broker-loss test kills a broker of its own (``spare_broker``) and starts it again on its ports and data.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from relay.dev import services
from relay.dev.services import KafkaService
from relay.errors import MissingTopicError, PublishError, RecordRejectedError
from relay.kafka.delivery import DEAD_LETTER_ERROR, DEAD_LETTER_PARTITION, DEAD_LETTER_SIZE, DEAD_LETTER_TOPIC
from relay.kafka.partitioner import partition_for_key
from relay.kafka.publisher import KafkaPublisher
from relay.kafka.records import BatchHandle, Record
from relay.kafka.settings import PublisherConfig, TopicDefaults

PARTITIONS = 5


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def make_publisher(service: KafkaService, **overrides: object) -> KafkaPublisher:
    settings: dict[str, object] = {
        "bootstrap_servers": service.bootstrap_servers,
        "client_id": "relay-test",
        "create_topics": True,
        "delivery_timeout_s": 30.0,
        "topic_defaults": TopicDefaults(partitions=PARTITIONS, config={"retention.ms": "3600000"}),
    }
    settings.update(overrides)
    return KafkaPublisher(PublisherConfig(**settings))  # type: ignore[arg-type]


@pytest.fixture
def publishers() -> Iterator[Callable[..., KafkaPublisher]]:
    made: list[KafkaPublisher] = []

    def make(service: KafkaService, **overrides: object) -> KafkaPublisher:
        made.append(make_publisher(service, **overrides))
        return made[-1]

    yield make
    for pub in made:
        pub.close(timeout=5)


def drive(pub: KafkaPublisher, done: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll the publisher (serving delivery reports) until ``done()``; fail at the deadline."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout}s (failed: {pub.failed()})")
        pub.poll(0.1)


def collect(pub: KafkaPublisher, ids: list[int], timeout: float = 30.0) -> list[BatchHandle]:
    done: list[BatchHandle] = []

    def all_done() -> bool:
        assert pub.failed() is None, pub.failed()
        done.extend(pub.completed_prefix())
        return len(done) >= len(ids)

    drive(pub, all_done, timeout, f"batches {ids} delivered")
    assert [h.batch_id for h in done] == ids
    return done


def read_back(service: KafkaService, topic: str, partitions: int, expected: int) -> list[Message]:
    """Every record of ``topic``, read from the beginning of each partition with ``assign``."""
    consumer = Consumer(
        {
            **service.client_config(),
            "group.id": unique("reader"),
            "enable.auto.commit": False,
            "enable.partition.eof": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    messages: list[Message] = []
    deadline = time.monotonic() + 30
    try:
        while len(messages) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                raise AssertionError(f"consumer error: {msg.error()}")
            messages.append(msg)
    finally:
        consumer.close()
    assert len(messages) == expected, f"read {len(messages)} of {expected} records from {topic}"
    return messages


def topics_on(service: KafkaService) -> set[str]:
    # All topics, never one by name: naming a topic in a metadata request auto-creates it on Tansu.
    return set(AdminClient(service.client_config()).list_topics(timeout=10).topics)


def create_topic(service: KafkaService, topic: str, partitions: int) -> None:
    admin = AdminClient(service.client_config())  # kept referenced until the result is in
    admin.create_topics([NewTopic(topic, partitions, -1)])[topic].result(30)
    services.wait_until(lambda: topic in topics_on(service), 30, f"topic {topic}")


def keyed(topic: str, batch: int, n: int) -> list[Record]:
    return [
        Record(
            topic, None, f"row-{batch}-{i}".encode(), f"v{batch}.{i}".encode(), (("b", str(batch).encode()),)
        )
        for i in range(n)
    ]


# -- delivery and partitioning ---------------------------------------------------------------------------


def test_batches_arrive_on_murmur2_partitions_with_keys_and_headers(
    kafka_service: KafkaService, publishers: Callable[..., KafkaPublisher]
) -> None:
    topic = unique("orders")
    pub = publishers(kafka_service)
    pub.ensure_topics([topic])
    assert pub.partitions(topic) == PARTITIONS
    batches = {1: keyed(topic, 1, 20), 2: keyed(topic, 2, 15), 3: keyed(topic, 3, 25)}
    batches[3].append(Record(topic, 4, b"row-explicit", b"x", ()))  # an explicit partition is kept
    for batch_id, records in batches.items():
        pub.send(batch_id, records)
    assert pub.completed_prefix() == []  # reports are served only by poll: nothing is known delivered yet
    assert pub.inflight() == 3
    for handle in collect(pub, [1, 2, 3]):
        assert handle.pending == 0 and handle.records == len(batches[handle.batch_id])

    sent = {r.key: r for records in batches.values() for r in records}
    got = read_back(kafka_service, topic, PARTITIONS, len(sent))
    for msg in got:
        record = sent[msg.key()]
        assert msg.value() == record.value
        assert tuple(msg.headers() or ()) == record.headers
        want = record.partition
        if want is None:
            assert record.key is not None
            want = partition_for_key(record.key, PARTITIONS)
        assert msg.partition() == want, msg.key()
    assert len({m.partition() for m in got}) > 1  # the keys really spread


def test_the_first_batches_to_fresh_topics_land_in_the_order_sent(
    kafka_service: KafkaService, publishers: Callable[..., KafkaPublisher]
) -> None:
    """Batches sent, pipelined, the moment the publisher has created their topics land in each partition in
    the order they were sent, with no batch failing: a broker that shows a new partition's leader in metadata
    before serving it answered the first request with NOT_LEADER_OR_FOLLOWER and took the next one first (a
    key's later change at offset 0, its earlier one resent after it). The publisher waits for the leaders
    (ListOffsets) before it sends. Several fresh topics, since the window is a race."""
    pub = publishers(kafka_service)
    for round_ in range(4):
        topic = unique(f"fresh{round_}")
        pub.ensure_topics([topic])
        sent = {b: keyed(topic, b, 40) for b in range(1, 9)}  # 8 batches in flight at once
        for batch_id, records in sent.items():
            pub.send(batch_id, records)
        for handle in collect(pub, list(sent)):
            assert handle.pending == 0
        order = {r.key: n for n, r in enumerate(r for records in sent.values() for r in records)}
        got = read_back(kafka_service, topic, PARTITIONS, len(order))
        for p in range(PARTITIONS):
            landed = [m for m in sorted(got, key=lambda m: m.offset()) if m.partition() == p]
            positions = [order[m.key()] for m in landed]
            assert positions == sorted(positions), f"{topic} [{p}]: sent order {positions}"
        pub = publishers(kafka_service)  # a new producer id as well as new topics


def test_librdkafka_murmur2_random_places_keys_where_we_do(kafka_service: KafkaService) -> None:
    topic = unique("hash")
    create_topic(kafka_service, topic, 7)
    producer = Producer({**kafka_service.client_config(), "partitioner": "murmur2_random", "acks": "all"})
    placed: dict[bytes, int] = {}

    def report(err: KafkaError | None, msg: Message) -> None:
        key, partition = msg.key(), msg.partition()
        assert err is None and isinstance(key, bytes) and partition is not None, err
        placed[key] = partition

    keys = [f"key-{i}".encode() for i in range(200)] + [b"", b"kafka", "Ünïcödé".encode()]
    for key in keys:
        producer.produce(topic, value=b"v", key=key, on_delivery=report)  # no partition: librdkafka decides
    assert producer.flush(30) == 0
    assert placed == {key: partition_for_key(key, 7) for key in keys}


# -- records that can never be sent ---------------------------------------------------------------------


def test_an_oversized_record_is_rejected_at_once_and_only_once(
    kafka_service: KafkaService, publishers: Callable[..., KafkaPublisher], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="relay.kafka.publisher")
    topic = unique("big")
    pub = publishers(kafka_service, kafka={"message.max.bytes": 10_000})
    pub.ensure_topics([topic])
    big = Record(topic, None, b"huge-row", b"x" * 20_000, (("h", b"1"),))
    started = time.monotonic()
    pub.send(7, [*keyed(topic, 7, 2), big, *keyed(topic, 8, 2)])
    drive(pub, lambda: pub.failed() is not None, 5.0, "the rejection")
    assert time.monotonic() - started < 5.0
    assert pub.flush(30) == 0  # every outstanding report served: no further error may appear

    failed = pub.failed()
    assert failed is not None and failed.batch_id == 7
    err = failed.error
    assert isinstance(err, RecordRejectedError) and not err.retriable
    assert (err.topic, err.key, err.size, err.reason) == (topic, b"huge-row", big.size, "MSG_SIZE_TOO_LARGE")
    assert err.partition == partition_for_key(b"huge-row", PARTITIONS)
    assert topic in str(err) and str(big.size) in str(err) and "batch 7" in str(err)
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1, [r.getMessage() for r in errors]
    assert "batch 7" in errors[0].getMessage()
    assert pub.completed_prefix() == []
    with pytest.raises(RecordRejectedError):
        pub.send(8, keyed(topic, 9, 1))  # no new work on top of a failure: the caller must stop


def test_an_oversized_record_goes_to_the_dead_letter_topic(
    kafka_service: KafkaService, publishers: Callable[..., KafkaPublisher]
) -> None:
    topic, dlq = unique("big"), unique("dead")
    pub = publishers(kafka_service, kafka={"message.max.bytes": 10_000}, dead_letter_topic=dlq,
                     dead_letter_value_bytes=100)  # fmt: skip
    pub.ensure_topics([topic])
    assert dlq in topics_on(kafka_service)  # created with the relay's topics, not on first use
    big = Record(topic, None, b"huge-row", b"0123456789" * 2_000, (("h", b"1"),))
    pub.send(1, [*keyed(topic, 1, 3), big])
    pub.send(2, keyed(topic, 2, 2))
    first, _ = collect(pub, [1, 2])
    assert first.dead_lettered == 1

    [dead] = read_back(kafka_service, dlq, PARTITIONS, 1)
    assert dead.key() == b"huge-row"
    assert dead.value() == big.value[:100]
    assert dead.partition() == partition_for_key(b"huge-row", PARTITIONS)
    headers = dict(dead.headers() or [])
    assert headers["h"] == b"1"
    assert headers[DEAD_LETTER_TOPIC] == topic.encode()
    assert headers[DEAD_LETTER_PARTITION] == str(partition_for_key(b"huge-row", PARTITIONS)).encode()
    assert headers[DEAD_LETTER_SIZE] == str(big.size).encode()
    error = headers[DEAD_LETTER_ERROR]
    assert isinstance(error, bytes) and error.startswith(b"MSG_SIZE_TOO_LARGE"), error
    read_back(kafka_service, topic, PARTITIONS, 5)  # the rest of both batches, and not the big one


def test_an_unknown_topic_with_creation_off_is_retried_never_dead_lettered(
    kafka_service: KafkaService, publishers: Callable[..., KafkaPublisher]
) -> None:
    known, missing, dlq = unique("known"), unique("missing"), unique("dlq")
    make_publisher(kafka_service).ensure_topics([known, dlq])
    pub = publishers(kafka_service, create_topics=False, dead_letter_topic=dlq)
    pub.ensure_topics([known])
    with pytest.raises(MissingTopicError, match=missing) as info:
        pub.ensure_topics([known, missing])
    assert info.value.retriable
    pub.send(1, [*keyed(known, 1, 2), Record(missing, None, b"k", b"v")])
    drive(pub, lambda: pub.failed() is not None, 5.0, "the failure")
    failed = pub.failed()
    assert failed is not None and isinstance(failed.error, MissingTopicError)
    assert failed.error.retriable and missing in str(failed.error)
    assert failed.dead_lettered == 0
    assert missing not in topics_on(kafka_service)
    # Once the topic exists, the batch sent again is delivered whole.
    pub.abort_inflight()
    make_publisher(kafka_service).ensure_topics([missing])
    pub.send(2, [*keyed(known, 1, 2), Record(missing, None, b"k", b"v")])
    collect(pub, [2])


def test_a_full_local_queue_is_waited_out(
    kafka_service: KafkaService, publishers: Callable[..., KafkaPublisher]
) -> None:
    topic = unique("queue")
    pub = publishers(kafka_service, kafka={"queue.buffering.max.messages": 5})
    pub.ensure_topics([topic])
    pub.send(1, keyed(topic, 1, 200))
    collect(pub, [1])
    read_back(kafka_service, topic, PARTITIONS, 200)


# -- losing the broker ----------------------------------------------------------------------------------


def test_a_lost_broker_fails_the_batch_retriably_and_a_resend_succeeds_after_restart(
    spare_broker: services.KafkaCluster, publishers: Callable[..., KafkaPublisher]
) -> None:
    """The broker is SIGKILLed between two batches and started again on its ports and data."""
    topic = unique("loss")
    service = spare_broker.service
    pub = publishers(service, delivery_timeout_s=3.0)
    pub.ensure_topics([topic])
    pub.send(1, keyed(topic, 1, 5))
    collect(pub, [1])

    spare_broker.kill(1)
    started = time.monotonic()
    pub.send(2, keyed(topic, 2, 5))
    pub.send(3, keyed(topic, 3, 5))
    drive(pub, lambda: pub.failed() is not None, 20.0, "the delivery failure")
    assert time.monotonic() - started < 15.0
    failed = pub.failed()
    assert failed is not None and failed.batch_id == 2
    assert isinstance(failed.error, PublishError) and failed.error.retriable
    assert not isinstance(failed.error, RecordRejectedError)
    assert "_MSG_TIMED_OUT" in str(failed.error)
    assert pub.completed_prefix() == []
    assert pub.abort_inflight() == [2, 3]

    spare_broker.start_node(1)  # its data on disk: batch 1 is still there
    pub.send(2, keyed(topic, 2, 5))
    pub.send(3, keyed(topic, 3, 5))
    collect(pub, [2, 3])
    got = read_back(service, topic, PARTITIONS, 15)
    want = keyed(topic, 1, 5) + keyed(topic, 2, 5) + keyed(topic, 3, 5)
    assert sorted(m.key() for m in got) == sorted(r.key for r in want)
