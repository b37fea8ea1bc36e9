"""The publisher's logic without a broker: configuration checks, error verdicts, the in-order delivered
prefix, dead-lettering and aborts, driven by a scripted producer whose delivery reports the test fires."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from relay.errors import (
    ConfigError,
    LeadershipError,
    MissingTopicError,
    ProducerFatalError,
    ProducerFencedError,
    PublishError,
    RecordRejectedError,
)
from relay.kafka.delivery import DEAD_LETTER_ERROR, DEAD_LETTER_PARTITION, DEAD_LETTER_TOPIC
from relay.kafka.partitioner import partition_for_key
from relay.kafka.publisher import KafkaPublisher
from relay.kafka.records import Record
from relay.kafka.settings import PublisherConfig
from relay.kafka.verdicts import classify

Callback = Callable[[KafkaError | None, Any], None]


@dataclass
class Produced:
    topic: str
    value: bytes
    key: bytes | None
    partition: int
    headers: list[tuple[str, bytes]]
    on_delivery: Callback

    offset: int | None = None  # where it landed, once delivered

    def deliver(self, offset: int = 0) -> None:
        self.offset = offset
        self.on_delivery(None, self.message())

    def deliver_implicitly(self) -> None:
        """What librdkafka reports for a record it acks because a later request of its partition succeeded:
        no error, and no offset."""
        self.on_delivery(None, self.message())

    def message(self) -> Any:
        return SimpleNamespace(
            partition=lambda: self.partition, offset=lambda: self.offset, topic=lambda: self.topic
        )

    def fail(self, code: int, fatal: bool = False) -> None:
        self.on_delivery(KafkaError(code, "scripted", fatal=fatal), None)


@dataclass
class ScriptedProducer:
    settings: dict[str, Any]
    produced: list[Produced] = field(default_factory=list)
    full_for: int = 0  # raise BufferError this many times first
    polls: int = 0
    purged: bool = False

    def produce(
        self,
        topic: str,
        value: bytes,
        key: bytes | None = None,
        partition: int = -1,
        on_delivery: Callback | None = None,
        *,
        headers: list[tuple[str, bytes]],
    ) -> None:
        """The client's signature: topic, value, key, partition, on_delivery (positional), headers."""
        assert on_delivery is not None
        if self.full_for:
            self.full_for -= 1
            raise BufferError("Local: Queue full")
        self.produced.append(Produced(topic, value, key, partition, headers, on_delivery))

    def poll(self, timeout: float = 0.0) -> int:
        self.polls += 1
        return 0

    def flush(self, timeout: float = 0.0) -> int:
        return 0

    def purge(self, **kw: bool) -> None:
        self.purged = True

    def __len__(self) -> int:
        return 0


class ScriptedAdmin:
    def __init__(self, topics: dict[str, int]) -> None:
        self.topics = topics

    def list_topics(self, timeout: float = 0.0) -> Any:
        meta = {
            n: SimpleNamespace(partitions=dict.fromkeys(range(c)), error=None) for n, c in self.topics.items()
        }
        return SimpleNamespace(topics=meta)


class Harness:
    def __init__(self, **config: Any) -> None:
        self.producers: list[ScriptedProducer] = []
        self.admin = ScriptedAdmin({"t": 6, "dlq": 2})
        cfg = PublisherConfig(bootstrap_servers="127.0.0.1:9", **config)
        self.pub = KafkaPublisher(cfg, producer_factory=self._producer, admin_factory=self._admin)

    def _admin(self, settings: dict[str, Any]) -> Any:
        return self.admin

    def _producer(self, settings: dict[str, Any]) -> Any:
        self.producers.append(ScriptedProducer(settings))
        return self.producers[-1]

    @property
    def producer(self) -> ScriptedProducer:
        return self.producers[-1]


def rec(key: bytes | None, value: bytes = b"v", partition: int | None = None) -> Record:
    return Record("t", partition, key, value, (("h", b"1"),))


# -- configuration ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kafka", "key"),
    [
        ({"acks": "1"}, "kafka.acks"),
        ({"acks": 0}, "kafka.acks"),
        ({"request.required.acks": "1"}, "kafka.request.required.acks"),
        ({"enable.idempotence": False}, "kafka.enable.idempotence"),
        ({"enable.idempotence": "false"}, "kafka.enable.idempotence"),
        ({"retries": 0}, "kafka.retries"),
        ({"max.in.flight.requests.per.connection": 10}, "kafka.max.in.flight.requests.per.connection"),
        ({"transactional.id": "x"}, "kafka.transactional.id"),
        ({"message.timeout.ms": 1000}, "kafka.message.timeout.ms"),
        ({"bootstrap.servers": "elsewhere:9092"}, "kafka.bootstrap.servers"),
    ],
)
def test_weakening_settings_are_refused_naming_the_key(kafka: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        PublisherConfig(bootstrap_servers="127.0.0.1:9", kafka=kafka)
    assert info.value.key == key
    assert key in str(info.value)


def test_acks_all_and_idempotence_are_always_set_and_the_dict_is_copied() -> None:
    mine = {"acks": "-1", "enable.idempotence": "true", "linger.ms": 20}
    config = PublisherConfig(bootstrap_servers="127.0.0.1:9", kafka=mine, delivery_timeout_s=7)
    mine["acks"] = "0"
    settings = config.producer_settings()
    assert settings["acks"] == "all"
    assert settings["enable.idempotence"] is True
    assert settings["message.timeout.ms"] == 7000
    assert settings["linger.ms"] == 20
    assert config.kafka["acks"] == "-1"
    settings["linger.ms"] = 1
    assert config.kafka["linger.ms"] == 20


def test_secrets_are_redacted_in_descriptions_and_repr() -> None:
    kafka = {
        "sasl.username": "relay",
        "sasl.password": "hunter2",
        "ssl.key.password": "pw-secret-1",
        "sasl.oauthbearer.client.secret": "s3",
        "security.protocol": "SASL_SSL",
    }
    config = PublisherConfig(bootstrap_servers="127.0.0.1:9", kafka=kafka)
    text = f"{config.describe()} {config!r}"
    for secret in ("relay", "hunter2", "pw-secret-1", "s3"):
        assert f"'{secret}'" not in text
    assert config.describe()["security.protocol"] == "SASL_SSL"


# -- error verdicts ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "verdict"),
    [
        (KafkaError.MSG_SIZE_TOO_LARGE, "rejected"),
        (KafkaError.RECORD_LIST_TOO_LARGE, "rejected"),
        (KafkaError.INVALID_RECORD, "rejected"),
        (KafkaError.TOPIC_AUTHORIZATION_FAILED, "rejected"),
        (KafkaError.TOPIC_EXCEPTION, "rejected"),
        (KafkaError._INVALID_ARG, "rejected"),
        # A metadata glitch, whether topic creation is on or off: retried, never dead-lettered.
        (KafkaError.UNKNOWN_TOPIC_OR_PART, "retriable"),
        (KafkaError._UNKNOWN_TOPIC, "retriable"),
        (KafkaError._MSG_TIMED_OUT, "retriable"),
        (KafkaError._TRANSPORT, "retriable"),
        (KafkaError.NOT_ENOUGH_REPLICAS, "retriable"),
        (KafkaError.NOT_LEADER_FOR_PARTITION, "retriable"),
        (KafkaError._FATAL, "fatal"),
        (KafkaError._FENCED, "fatal"),
    ],
)
def test_classify(code: int, verdict: str) -> None:
    assert classify(KafkaError(code)) == verdict


def test_a_fatal_flag_wins_over_the_code() -> None:
    assert classify(KafkaError(KafkaError._MSG_TIMED_OUT, fatal=True)) == "fatal"


# -- batches -----------------------------------------------------------------------------------------


def test_keyed_records_are_placed_by_librdkafkas_murmur2_explicit_ones_where_they_say() -> None:
    h = Harness()
    h.pub.send(1, [rec(b"order-17"), rec(b"order-17", partition=5), rec(None)])
    parts = [p.partition for p in h.producer.produced]
    assert parts == [-1, 5, -1]  # -1: the producer's partitioner (murmur2_random, as partition_for_key)
    assert PublisherConfig("localhost:9092").producer_settings()["partitioner"] == "murmur2_random"
    assert h.producer.produced[0].headers == [("h", b"1")]


def test_only_the_fully_delivered_prefix_is_returned_in_order() -> None:
    h = Harness()
    for batch_id in (10, 11, 12):
        h.pub.send(batch_id, [rec(b"a"), rec(b"b")])
    p = h.producer.produced
    for produced in p[2:]:  # batches 11 and 12 complete first
        produced.deliver()
    p[0].deliver()
    assert h.pub.completed_prefix() == []
    p[1].deliver()
    assert [b.batch_id for b in h.pub.completed_prefix()] == [10, 11, 12]
    assert h.pub.completed_prefix() == []
    assert h.pub.inflight() == 0


def test_an_empty_batch_completes_in_its_turn() -> None:
    h = Harness()
    h.pub.send(1, [rec(b"a")])
    h.pub.send(2, [])
    assert h.pub.completed_prefix() == []
    h.producer.produced[0].deliver()
    assert [b.batch_id for b in h.pub.completed_prefix()] == [1, 2]


def test_a_retriable_failure_blocks_the_prefix_until_abort_then_resend_works() -> None:
    h = Harness()
    h.pub.send(1, [rec(b"a"), rec(b"b")])
    h.pub.send(2, [rec(b"c")])
    first = h.producer
    first.produced[2].deliver()
    first.produced[0].fail(KafkaError._MSG_TIMED_OUT)
    failed = h.pub.failed()
    assert failed is not None and failed.batch_id == 1
    assert isinstance(failed.error, PublishError) and failed.error.retriable
    assert "batch 1" in str(failed.error) and "_MSG_TIMED_OUT" in str(failed.error)
    assert h.pub.completed_prefix() == []
    with pytest.raises(PublishError):
        h.pub.send(3, [rec(b"d")])
    assert h.pub.abort_inflight() == [1, 2]
    assert first.purged and h.producer is not first  # a fresh producer session
    first.produced[1].deliver()  # a late report of an aborted batch changes nothing
    assert h.pub.failed() is None
    h.pub.send(1, [rec(b"a")])
    h.producer.produced[0].deliver()
    assert [b.batch_id for b in h.pub.completed_prefix()] == [1]


def test_a_record_acknowledged_without_an_offset_fails_its_batch_retriably_to_be_sent_again() -> None:
    """librdkafka acks a record implicitly when a later request of its partition succeeded; on a partition
    where the producer had no state yet the broker accepted that later request although the record's own
    failed, and the record is not in the log: its landing is unknown, so the batch goes again."""
    h = Harness()
    h.pub.send(1, [rec(b"a"), rec(b"b")])
    first = h.producer
    first.produced[0].deliver_implicitly()
    first.produced[1].deliver(offset=7)
    failed = h.pub.failed()
    assert failed is not None and failed.batch_id == 1 and failed.error is not None
    assert failed.error.retriable and "without an offset" in str(failed.error)
    assert h.pub.completed_prefix() == []
    assert h.pub.abort_inflight() == [1]
    h.pub.send(1, [rec(b"a"), rec(b"b")])
    for produced in h.producer.produced:
        produced.deliver(offset=8)
    assert [b.batch_id for b in h.pub.completed_prefix()] == [1]


def test_a_rejected_record_without_dead_letter_topic_fails_the_batch_permanently() -> None:
    h = Harness()
    h.pub.send(4, [rec(b"big", b"x" * 50)])
    h.producer.produced[0].fail(KafkaError.MSG_SIZE_TOO_LARGE)
    failed = h.pub.failed()
    assert failed is not None
    err = failed.error
    assert isinstance(err, RecordRejectedError) and not err.retriable
    assert (err.topic, err.key, err.reason) == ("t", b"big", "MSG_SIZE_TOO_LARGE")
    assert err.partition == partition_for_key(b"big", 6)
    assert err.size == 3 + 50 + 2  # key, value, one header
    assert "batch 4" in str(err) and "'t'" in str(err)


def test_a_rejected_record_goes_to_the_dead_letter_topic_and_the_batch_completes_after_it() -> None:
    h = Harness(dead_letter_topic="dlq", dead_letter_value_bytes=8)
    h.pub.send(5, [rec(b"k1", b"y" * 100), rec(b"k2")])
    p = h.producer.produced
    p[1].deliver()
    p[0].fail(KafkaError.MSG_SIZE_TOO_LARGE)
    assert h.pub.failed() is None
    dead = h.producer.produced[2]
    assert dead.topic == "dlq" and dead.key == b"k1" and dead.value == b"y" * 8
    headers = dict(dead.headers)
    assert headers[DEAD_LETTER_TOPIC] == b"t"
    assert headers[DEAD_LETTER_PARTITION] == str(partition_for_key(b"k1", 6)).encode()
    assert b"MSG_SIZE_TOO_LARGE" in headers[DEAD_LETTER_ERROR]
    assert dead.partition == partition_for_key(b"k1", 2)
    assert h.pub.completed_prefix() == []  # not before the dead-letter record is delivered
    dead.deliver()
    [done] = h.pub.completed_prefix()
    assert done.batch_id == 5 and done.dead_lettered == 1


@pytest.mark.parametrize("create", [False, True])
def test_an_unknown_topic_delivery_report_is_retried_not_dead_lettered(create: bool) -> None:
    # A metadata glitch (the broker briefly not knowing the topic or partition) with a dead-letter topic
    # configured: the batch fails retriably, nothing goes to the dead letters, the topic is looked up
    # again on the next send.
    h = Harness(dead_letter_topic="dlq", create_topics=create)
    h.pub.send(9, [rec(b"k1"), rec(b"k2")])
    h.producer.produced[1].deliver()
    h.producer.produced[0].fail(KafkaError.UNKNOWN_TOPIC_OR_PART)
    failed = h.pub.failed()
    assert failed is not None and failed.error is not None and failed.error.retriable
    assert not isinstance(failed.error, RecordRejectedError)
    assert [p.topic for p in h.producer.produced] == ["t", "t"]  # no dead-letter record
    assert failed.dead_lettered == 0
    assert h.pub.abort_inflight() == [9]
    h.pub.send(10, [rec(b"k1")])
    h.producer.produced[-1].deliver()
    assert [b.batch_id for b in h.pub.completed_prefix()] == [10]


def test_a_dead_letter_send_that_is_rejected_too_stops() -> None:
    h = Harness(dead_letter_topic="dlq")
    h.pub.send(6, [rec(b"k1")])
    h.producer.produced[0].fail(KafkaError.TOPIC_AUTHORIZATION_FAILED)
    h.producer.produced[1].fail(KafkaError.TOPIC_AUTHORIZATION_FAILED)
    failed = h.pub.failed()
    assert failed is not None and isinstance(failed.error, RecordRejectedError)
    assert "dead-letter" in str(failed.error)


def test_a_fatal_error_fails_every_batch_and_refuses_new_sends() -> None:
    h = Harness()
    h.pub.send(7, [rec(b"a")])
    h.pub.send(8, [rec(b"b")])
    on_error = h.producer.settings["error_cb"]
    on_error(KafkaError(KafkaError.PRODUCER_FENCED, "fenced", fatal=True))
    failed = h.pub.failed()
    assert failed is not None and isinstance(failed.error, ProducerFatalError)
    assert not failed.error.retriable
    h.pub.abort_inflight()
    with pytest.raises(ProducerFatalError):
        h.pub.send(9, [rec(b"c")])


def test_a_full_local_queue_is_waited_out_with_polls() -> None:
    h = Harness()
    h.producer.full_for = 3
    h.pub.send(1, [rec(b"a")])
    assert len(h.producer.produced) == 1
    assert h.producer.polls >= 3


def test_a_queue_that_stays_full_fails_the_batch_retriably_within_the_bound() -> None:
    h = Harness(delivery_timeout_s=0.3)
    h.producer.full_for = 10**9
    h.pub.send(1, [rec(b"a"), rec(b"b")])
    failed = h.pub.failed()
    assert failed is not None and isinstance(failed.error, PublishError) and failed.error.retriable
    assert "queue full" in str(failed.error)


def test_unknown_topic_with_creation_off_is_a_retriable_failure_naming_the_topic() -> None:
    h = Harness()
    with pytest.raises(MissingTopicError, match="'nope'"):
        h.pub.ensure_topics(["nope"])
    h.pub.send(1, [Record("nope", None, b"k", b"v")])
    failed = h.pub.failed()
    assert failed is not None and isinstance(failed.error, MissingTopicError)
    assert failed.error.retriable and "'nope'" in str(failed.error)
    assert not isinstance(failed.error, RecordRejectedError)  # never dead-lettered, never skipped
    assert h.producer.produced == []


# -- transactional mode -----------------------------------------------------------------------------


@dataclass
class TxnProducer(ScriptedProducer):
    """A scripted producer with the transactional API; ``fail_commit`` is raised by the next commit."""

    calls: list[str] = field(default_factory=list)
    fail_commit: KafkaError | None = None
    fail_produce: KafkaError | None = None  # raised by the next produce only
    # raised by the next aborts, in order (a callable: called first, its error raised)
    fail_abort: list[Any] = field(default_factory=list)
    auto_deliver: bool = False  # poll delivers everything produced

    def init_transactions(self, timeout: float = 0.0) -> None:
        self.calls.append("init")

    def begin_transaction(self) -> None:
        self.calls.append("begin")

    def commit_transaction(self, timeout: float = 0.0) -> None:
        self.calls.append("commit")
        if self.fail_commit is not None:
            err, self.fail_commit = self.fail_commit, None
            raise KafkaException(err)

    def abort_transaction(self, timeout: float = 0.0) -> None:
        self.calls.append("abort")
        if self.fail_abort:
            err = self.fail_abort.pop(0)
            if callable(err):
                err = err()
            raise KafkaException(err)

    def produce(self, topic: str, *args: Any, **kw: Any) -> None:
        if self.fail_produce is not None:
            err, self.fail_produce = self.fail_produce, None
            raise KafkaException(err)
        self.calls.append(f"produce {topic}")
        super().produce(topic, *args, **kw)

    def poll(self, timeout: float = 0.0) -> int:
        delivered, self.produced = (self.produced, []) if self.auto_deliver else ([], self.produced)
        for produced in delivered:
            produced.deliver()
        return len(delivered)


class TxnHarness(Harness):
    def __init__(self, **config: Any) -> None:
        super().__init__(transactional_id="canal-relay-t", **config)
        self.pub.init_transactions()

    def _producer(self, settings: dict[str, Any]) -> Any:
        self.producers.append(TxnProducer(settings))
        return self.producers[-1]

    @property
    def producer(self) -> TxnProducer:
        last = self.producers[-1]
        assert isinstance(last, TxnProducer)
        return last

    def deliver_all(self) -> None:
        for produced in self.producer.produced:
            produced.deliver()
        self.producer.produced.clear()


def test_transactional_batches_complete_only_once_their_transaction_commits() -> None:
    h = TxnHarness()
    assert h.producer.settings["transactional.id"] == "canal-relay-t"
    h.pub.send(1, [rec(b"a"), rec(b"b")])
    h.pub.send(2, [rec(b"c")])
    h.deliver_all()
    assert h.pub.completed_prefix() == [] and h.pub.transaction_age() is not None
    assert h.pub.commit()
    assert [b.batch_id for b in h.pub.completed_prefix()] == [1, 2]
    assert h.producer.calls == ["init", "begin", "produce t", "produce t", "produce t", "commit"]
    assert h.pub.transaction_age() is None


def test_an_extra_record_goes_into_the_transaction_before_the_commit() -> None:
    h = TxnHarness()
    h.admin.topics["positions"] = 1
    h.producer.auto_deliver = True
    h.pub.send(1, [rec(b"a")])
    assert h.pub.commit([Record("positions", 0, b"instance", b"{}")])
    assert h.producer.calls == ["init", "begin", "produce t", "produce positions", "commit"]
    assert [b.batch_id for b in h.pub.completed_prefix()] == [1]


def test_a_commit_that_times_out_is_called_again_to_resume_not_aborted() -> None:
    """librdkafka: a retriable commit error ("retry call to resume") means the commit may still be under
    way; an abort then conflicts with it and leaves the outcome unknown. The commit is called again."""
    h = TxnHarness()
    h.pub.send(1, [rec(b"a")])
    h.deliver_all()
    h.producer.fail_commit = KafkaError(KafkaError._TIMED_OUT, "scripted", retriable=True)
    assert h.pub.commit()
    assert h.producer.calls[-2:] == ["commit", "commit"] and "abort" not in h.producer.calls
    assert [b.batch_id for b in h.pub.completed_prefix()] == [1]


def test_a_failed_commit_aborts_the_transaction_and_keeps_the_producer() -> None:
    h = TxnHarness()
    h.pub.send(1, [rec(b"a")])
    h.deliver_all()
    h.producer.fail_commit = KafkaError(KafkaError._TIMED_OUT, "scripted", txn_requires_abort=True)
    assert not h.pub.commit()
    failed = h.pub.failed()
    assert failed is not None and isinstance(failed.error, PublishError) and failed.error.retriable
    assert h.pub.abort_inflight() == [1]
    assert h.producer.calls[-1] == "abort" and len(h.producers) == 1
    h.pub.send(1, [rec(b"a")])  # resent in a new transaction
    assert h.producer.calls[-2:] == ["begin", "produce t"]


def test_an_abort_that_times_out_is_called_again_and_stops_for_the_fencing_that_arrives_meanwhile() -> None:
    """Under load an abort can time out while the successor's fencing is still on its way: it is called
    again ("retry call to resume"), and the relay stops for the fencing (exit 3), not for the timeout."""
    h = TxnHarness()
    h.pub.send(1, [rec(b"a")])

    def fenced_now() -> KafkaError:
        h.producer.settings["error_cb"](
            KafkaError(KafkaError._FENCED, "fenced", fatal=True)
        )  # poll serves it
        return KafkaError(KafkaError._TIMED_OUT, "scripted", retriable=True)

    h.producer.fail_abort = [KafkaError(KafkaError._TIMED_OUT, "scripted", retriable=True), fenced_now]
    h.pub.abort_inflight()
    assert h.producer.calls[-2:] == ["abort", "abort"]
    with pytest.raises(ProducerFencedError):
        h.pub.send(2, [rec(b"b")])


def test_a_fenced_commit_stops_as_lost_leadership() -> None:
    h = TxnHarness()
    h.pub.send(1, [rec(b"a")])
    h.deliver_all()
    h.producer.fail_commit = KafkaError(KafkaError.PRODUCER_FENCED, "scripted")
    with pytest.raises(ProducerFencedError) as info:
        h.pub.commit()
    assert isinstance(info.value, LeadershipError) and not info.value.retriable
    assert h.pub.completed_prefix() == []
    with pytest.raises(ProducerFencedError):
        h.pub.send(2, [rec(b"b")])


def test_a_bare_fatal_error_becomes_fenced_when_the_error_callback_names_the_fence() -> None:
    h = TxnHarness()
    h.producer.fail_produce = KafkaError(KafkaError._FATAL, "scripted", fatal=True)
    h.pub.send(1, [rec(b"a")])
    failed = h.pub.failed()
    assert failed is not None and type(failed.error) is ProducerFatalError
    h.producer.settings["error_cb"](KafkaError(KafkaError._FENCED, "fenced", fatal=True))  # librdkafka's
    failed = h.pub.failed()
    assert failed is not None and isinstance(failed.error, ProducerFencedError)


def test_a_record_the_broker_refuses_inside_a_transaction_is_not_dead_lettered() -> None:
    h = TxnHarness(dead_letter_topic="dlq")
    h.pub.send(1, [rec(b"a")])
    h.producer.produced[0].fail(KafkaError.RECORD_LIST_TOO_LARGE)  # a broker's answer: txn abortable
    failed = h.pub.failed()
    assert failed is not None and isinstance(failed.error, RecordRejectedError)
    assert "inside a transaction" in str(failed.error)
    assert h.producer.produced[1:] == []  # no dead letter


def test_a_record_refused_locally_inside_a_transaction_goes_to_the_dead_letter_topic() -> None:
    h = TxnHarness(dead_letter_topic="dlq")
    h.producer.fail_produce = KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "scripted")
    h.pub.send(1, [rec(b"a", b"x" * 100)])
    assert h.pub.failed() is None
    assert h.producer.calls[-1] == "produce dlq"  # inside the open transaction
    h.deliver_all()
    assert h.pub.commit()
    assert [(b.batch_id, b.dead_lettered) for b in h.pub.completed_prefix()] == [(1, 1)]


# -- records appended to a delivered batch (the transaction topic's END) --------------------------------


def test_records_are_appended_only_once_the_batch_and_every_one_before_it_are_delivered() -> None:
    h = Harness()
    h.pub.send(1, [rec(b"a")])
    h.pub.send(2, [rec(b"b")])
    p = h.producer.produced
    p[1].deliver()
    assert not h.pub.append(2, [rec(b"end")])  # batch 1 is not delivered yet: nothing produced
    assert len(h.producer.produced) == 2
    p[0].deliver()
    assert h.pub.append(2, [rec(b"end")])
    assert [b.batch_id for b in h.pub.completed_prefix()] == [1]  # batch 2 now waits for its appended record
    h.producer.produced[2].deliver()
    assert [b.batch_id for b in h.pub.completed_prefix()] == [2]
    assert not h.pub.append(3, [rec(b"x")])  # not in flight


def test_a_failed_batch_takes_no_appended_records_a_batch_before_a_failed_one_does() -> None:
    h = Harness()
    h.pub.send(1, [rec(b"a")])
    h.pub.send(2, [rec(b"b")])
    h.producer.produced[1].fail(KafkaError._MSG_TIMED_OUT)
    assert not h.pub.append(2, [rec(b"end")])
    assert len(h.producer.produced) == 2
    h.producer.produced[0].deliver()
    assert h.pub.append(1, [rec(b"end")])  # stopping on batch 2's failure still acks batch 1 with it
    assert len(h.producer.produced) == 3


def test_in_transactional_mode_appended_records_join_the_open_transaction_never_a_committed_one() -> None:
    h = TxnHarness()
    h.pub.send(1, [rec(b"a")])
    h.deliver_all()
    assert h.pub.append(1, [rec(b"end")])
    assert h.producer.calls == ["init", "begin", "produce t", "produce t"]
    h.deliver_all()
    assert h.pub.commit()
    with pytest.raises(PublishError, match="no longer open"):
        h.pub.append(1, [rec(b"late")])
