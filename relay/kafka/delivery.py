"""What the publisher does with a failed delivery: retry the batch, reject or dead-letter the record, or stop.

Owns the per-record delivery reports (``RecordReport``, and ``DeadLetterReport`` for a record sent to the
dead-letter topic) and ``FailedDeliveries``, which acts on ``relay.kafka.verdicts.classify``'s verdict:

- fatal: the producer is unusable; the session's fatal latch fails every batch in flight.
- retriable: the batch fails with a ``PublishError`` (the caller aborts, rolls back, resends after a backoff);
  a topic the broker says it does not know is checked again before the next send.
- acknowledged without an offset: librdkafka reports a record delivered *implicitly*, with no offset, when
  a later request of the same partition succeeded while the record's own request had failed — assuming the
  broker keeps the idempotent sequence order. Kafka accepts any first sequence from a producer it holds no
  state for (a new producer id, a partition just created or just moved), so when that first request failed
  with NOT_LEADER_OR_FOLLOWER and the next one landed, the record is reported delivered and is not in the
  log (seen on Apache Kafka 4.1 with librdkafka 2.16: the first records to a freshly created topic lost).
  Its landing is unknown: the batch fails retriably and is sent again (in a transaction: aborted first).
- rejected: the record can never be sent. With a dead-letter topic it goes there (value cut to
  ``dead_letter_value_bytes`` when it was too large, the original topic, partition, size and error in
  headers) and the batch completes once that is delivered; otherwise — or when the dead-letter topic
  refuses it too — the batch fails with ``RecordRejectedError`` and the relay stops. Inside a Kafka
  transaction a record the *broker* refused cannot be dead-lettered (the transaction is abortable from then
  on): the session says so (``dead_letters_broker_refusals``); one the client refused before sending it
  (``refused_locally``: too large for ``message.max.bytes``, a topic that cannot be created) still can.

Threads: the publisher thread; librdkafka calls the reports inside ``poll``/``flush``/``produce`` there.
"""

from __future__ import annotations

import logging

from confluent_kafka import KafkaError, Message

from relay.errors import ConfigError, PublishError, RecordRejectedError, RelayError
from relay.kafka.partitioner import partition_for_key
from relay.kafka.records import BatchHandle, Record
from relay.kafka.session import ProducerSession
from relay.kafka.settings import PublisherConfig
from relay.kafka.topics import TopicCatalog
from relay.kafka.verdicts import SIZE_CODES, UNKNOWN_TOPIC_CODES, classify, describe

log = logging.getLogger(__name__)

# The headers a dead-letter record carries besides the original record's.
DEAD_LETTER_ERROR = "relay.error"
DEAD_LETTER_TOPIC = "relay.original.topic"
DEAD_LETTER_PARTITION = "relay.original.partition"
DEAD_LETTER_SIZE = "relay.original.size"


class FailedDeliveries:
    """Turns a failed delivery into its consequence for the batch (see the module docstring)."""

    def __init__(self, config: PublisherConfig, topics: TopicCatalog, session: ProducerSession) -> None:
        self._config = config
        self._topics = topics
        self._session = session
        self._dead_letters_broker_refusals = session.dead_letters_broker_refusals()

    def reported(
        self, handle: BatchHandle, record: Record, partition: int | None, err: KafkaError, msg: Message | None
    ) -> None:
        """The broker's (or librdkafka's) delivery report for ``record`` says it failed."""
        if handle.aborted:
            return  # a batch we gave up on: the caller resends it
        reported = msg.partition() if msg is not None else None
        if reported is not None and reported >= 0:
            partition = reported
        elif partition is None and record.key is not None:
            count = self._topics.count(record.topic)
            if count is not None:
                partition = partition_for_key(record.key, count)  # where it was headed
        self._failed(handle, record, partition, err, self._dead_letters_broker_refusals)

    def refused_locally(
        self, handle: BatchHandle, record: Record, partition: int | None, err: KafkaError
    ) -> None:
        """The client refused ``record`` before sending it (``produce`` raised): nothing reached the broker,
        so a transaction stays intact and the record may be dead-lettered in it."""
        if handle.aborted:
            return
        if partition is None and record.key is not None:
            count = self._topics.count(record.topic)
            if count is not None:
                partition = partition_for_key(record.key, count)
        self._failed(handle, record, partition, err, True)

    def unplaced(self, handle: BatchHandle, record: Record, partition: int | None) -> None:
        """librdkafka reported ``record`` delivered without an offset (see the module docstring): whether it
        is in the log is unknown, so its batch fails retriably and is sent again."""
        if handle.aborted:
            return
        log_failure = log.warning if handle.error is None else log.debug
        log_failure(
            "%s: a record to %s [%s] was acknowledged without an offset (implicitly, after a later request "
            "succeeded): whether it landed is unknown; the batch will be sent again, after records of that "
            "partition that may have landed before it (a key's changes may be out of order there)",
            handle.label,
            record.topic,
            partition,
        )
        handle.fail(
            PublishError(
                f"{handle.label}: a record to {record.topic} [{partition}] was acknowledged without an "
                "offset (its landing is unknown)"
            )
        )

    def uncreatable_topic(self, handle: BatchHandle, record: Record, exc: ConfigError) -> None:
        """A topic that cannot be created (a bad name, a policy): a rejection like any other. (One that
        does not exist with creation off is no fault of the record: ``TopicCatalog.ensure`` raises the
        retriable ``MissingTopicError`` for it, and the batch is sent again after a backoff.)"""
        self.refused_locally(
            handle, record, record.partition, KafkaError(KafkaError.TOPIC_EXCEPTION, str(exc))
        )

    def _failed(
        self,
        handle: BatchHandle,
        record: Record,
        partition: int | None,
        err: KafkaError,
        may_dead_letter: bool,
    ) -> None:
        verdict = classify(err)
        if err.code() in UNKNOWN_TOPIC_CODES:
            self._topics.forget(record.topic)  # the next send checks (or creates) it again
        if verdict == "fatal":
            self._session.set_fatal(err, handle.label)
        elif verdict == "retriable":
            # Logged once per batch: an outage fails every record of it alike (a timeout fails hundreds).
            log_failure = log.warning if handle.error is None else log.debug
            log_failure(
                "%s: delivery to %s [%s] failed, will retry the batch: %s",
                handle.label,
                record.topic,
                partition,
                describe(err),
            )
            handle.fail(
                PublishError(
                    f"{handle.label}: delivery to {record.topic} [{partition}] failed: {describe(err)}"
                )
            )
        elif not may_dead_letter:
            self._reject(handle, record, partition, err, " (refused by the broker inside a transaction)")
        elif self._config.dead_letter_topic and record.topic != self._config.dead_letter_topic:
            self._dead_letter(handle, record, partition, err)
        else:
            self._reject(handle, record, partition, err)

    def _reject(
        self, handle: BatchHandle, record: Record, partition: int | None, err: KafkaError, context: str = ""
    ) -> None:
        key = record.key[:64] if record.key is not None else None
        message = (
            f"{handle.label}: record to topic {record.topic!r} partition {partition} "
            f"key {key!r} size {record.size} bytes rejected: {describe(err)}{context}"
        )
        log.error("%s", message)
        handle.fail(
            RecordRejectedError(
                message,
                topic=record.topic,
                key=record.key,
                size=record.size,
                reason=err.name(),
                partition=partition,
            )
        )

    def _dead_letter(
        self, handle: BatchHandle, record: Record, partition: int | None, err: KafkaError
    ) -> None:
        """Route a rejected record to the dead-letter topic; the batch completes when that is delivered."""
        topic = self._config.dead_letter_topic
        assert topic is not None
        value = record.value
        if err.code() in SIZE_CODES and value is not None:
            value = value[: self._config.dead_letter_value_bytes]
        headers = (
            *record.headers,
            (DEAD_LETTER_ERROR, describe(err).encode()),
            (DEAD_LETTER_TOPIC, record.topic.encode()),
            (DEAD_LETTER_PARTITION, str(-1 if partition is None else partition).encode()),
            (DEAD_LETTER_SIZE, str(record.size).encode()),
        )
        log.warning(
            "%s: record to %s [%s] (%d bytes) rejected (%s); sent to dead-letter topic %s",
            handle.label,
            record.topic,
            partition,
            record.size,
            err.name(),
            topic,
        )
        out = Record(topic, None, record.key, value, headers)
        try:
            count = self._topics.partitions(topic)
        except RelayError as exc:  # raising here would escape from poll(); fail the batch instead
            self._reject(handle, record, partition, err, f" (dead-letter topic unusable: {exc})")
            return
        dl_partition = None if record.key is None else partition_for_key(record.key, count)
        report = DeadLetterReport(self, handle, record, partition)
        self._session.produce(handle, out, dl_partition, report, may_poll=False)

    def dead_letter_reported(
        self, handle: BatchHandle, record: Record, partition: int | None, err: KafkaError | None
    ) -> None:
        """The delivery report of ``record``'s dead letter."""
        if handle.aborted:
            return
        if err is None:
            handle.pending -= 1
            handle.dead_lettered += 1
            return
        verdict = classify(err)
        if verdict == "fatal":
            self._session.set_fatal(err, handle.label)
        elif verdict == "retriable":
            handle.fail(PublishError(f"{handle.label}: dead-letter delivery failed: {describe(err)}"))
            log.warning("%s: dead-letter delivery failed: %s", handle.label, describe(err))
        else:
            context = f" (and by the dead-letter topic {self._config.dead_letter_topic!r})"
            self._reject(handle, record, partition, err, context)


class RecordReport:
    """One record's delivery report (``relay.kafka.session.Report``). A ``functools.partial`` costs three
    objects a record (librdkafka's client keeps a state per message besides): measured 2.5 against 2.2 µs a
    ``produce``. A delivered record only counts its batch down; a failed one goes to ``FailedDeliveries``."""

    def __init__(
        self, failures: FailedDeliveries, handle: BatchHandle, record: Record, partition: int | None
    ) -> None:
        self.failures = failures
        self.handle = handle
        self.record = record
        self.partition = partition

    def __call__(self, err: KafkaError | None, msg: Message | None) -> None:
        handle = self.handle
        if err is None:
            if handle.aborted:
                return
            if msg is not None and msg.offset() is None:  # acked implicitly: see the module docstring
                self.failures.unplaced(handle, self.record, msg.partition())
                return
            handle.pending -= 1
            handle.landed = msg
            return
        self.failures.reported(handle, self.record, self.partition, err, msg)

    def refused(self, err: KafkaError) -> None:
        self.failures.refused_locally(self.handle, self.record, self.partition, err)


class DeadLetterReport:
    """The delivery report of a dead letter: counts as its original record's, plus one dead-lettered."""

    def __init__(
        self, failures: FailedDeliveries, handle: BatchHandle, record: Record, partition: int | None
    ) -> None:
        self.failures = failures
        self.handle = handle
        self.record = record
        self.partition = partition

    def __call__(self, err: KafkaError | None, msg: Message | None) -> None:
        self.failures.dead_letter_reported(self.handle, self.record, self.partition, err)

    def refused(self, err: KafkaError) -> None:
        self.failures.dead_letter_reported(self.handle, self.record, self.partition, err)
