"""The Kafka publisher: sends batches of records and tells which batches Kafka has durably accepted.

``KafkaPublisher`` is the one interface the relay's publish loop, ``relay replay``, a table move's history
copy and ``relay bench`` use. The relay contract it serves (docs/architecture.md): a batch may be acked to
the ring store, and its position saved, only once EVERY record of it has been delivered; batches may be
pipelined, but only a *prefix* of fully delivered batches is ever handed back (``completed_prefix``).
It is a facade over parts with one job each, built here from one ``PublisherConfig``:

- ``relay.kafka.topics.TopicCatalog``: topic checks and creation, the partition-count cache;
- ``relay.kafka.window.InflightWindow``: the batches in flight, the delivered prefix, the first failure;
- ``relay.kafka.session``: the producer session — ``IdempotentSession``, or ``TransactionalSession``
  (``relay.kafka.transaction``) when ``PublisherConfig.transactional_id`` is set — chosen once here, so no
  mode flag is read per record;
- ``relay.kafka.delivery.FailedDeliveries``: what a failed delivery means (retry, reject, dead-letter, stop).

Threads: everything here runs on the one publisher thread. librdkafka sends from its own threads, but the
delivery reports are served only inside ``poll``/``flush``/``send`` (which polls while the local queue is
full) on the publisher thread, so the batch state needs no lock.

What it hands on: ``completed_prefix()`` → batches the caller acks in order; ``failed()`` → the first
batch with a failed record and why: a retriable ``PublishError`` (the caller calls ``abort_inflight()``,
rolls the store back and resends after a backoff), a ``RecordRejectedError`` (the record can never be
sent: the relay stops, unless a dead-letter topic takes it), or a ``ProducerFatalError`` (stop).
Keyed records without a partition are placed by librdkafka's ``murmur2_random`` partitioner, the Java
client's hash (``relay.kafka.partitioner`` computes the same, and a test holds librdkafka to it), so a key
lives in the same partition whichever Kafka client writes it.

Transactional mode (``kafka.transactions``): ``init_transactions()`` (after the HA election) fences every
older producer of the ``transactional.id``; ``send`` opens a transaction when none is open; ``commit()``
waits for every record of it, adds the caller's extra records (the exactly-once position) and commits; only
then do its batches count as delivered. ``abort_inflight`` aborts it. See ``relay.kafka.transaction``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from mypy_extensions import mypyc_attr

from relay.common.kafka_log import quiet
from relay.errors import ConfigError, PublishError
from relay.kafka.delivery import FailedDeliveries, RecordReport
from relay.kafka.records import BatchHandle, Record
from relay.kafka.session import BeforeEnd, IdempotentSession, ProducerSession
from relay.kafka.settings import PublisherConfig
from relay.kafka.topics import TopicCatalog
from relay.kafka.transaction import TransactionalSession
from relay.kafka.window import InflightWindow

log = logging.getLogger(__name__)


# Where compiled (scripts/build-compiled), still subclassed by interpreted code (relay bench's recorders).
@mypyc_attr(allow_interpreted_subclasses=True)
class KafkaPublisher:
    """Sends batches with an idempotent ``acks=all`` producer and reports the delivered prefix.

    Lifecycle: ``ensure_topics`` at start (and for each new topic the mapping brings), then a loop of
    ``send`` / ``poll`` / ``completed_prefix`` / ``failed``; ``abort_inflight`` after a failure;
    ``close`` at the end. One thread calls all of it (see the module docstring).
    """

    def __init__(
        self,
        config: PublisherConfig,
        *,
        producer_factory: Callable[[dict[str, Any]], Producer] = Producer,
        admin_factory: Callable[[dict[str, Any]], AdminClient] = AdminClient,
    ) -> None:
        """The factories are for tests (a scripted producer); production uses confluent-kafka's classes."""
        self._config = config
        self._topics = TopicCatalog(config, admin_factory(quiet(config.admin_settings())))
        self._window = InflightWindow()
        session_type = TransactionalSession if config.transactional else IdempotentSession
        self._session: ProducerSession = session_type(config, self._window, producer_factory)
        self._failures = FailedDeliveries(config, self._topics, self._session)
        self._closed = False
        log.info("kafka publisher %s: %s", config.client_id, config.describe())

    # -- topics ---------------------------------------------------------------------------------------

    def ensure_topics(self, names: Iterable[str]) -> None:
        """Learn the partition counts of ``names`` and the dead-letter topic; create missing ones if allowed
        (``MissingTopicError``, retriable, when one is missing and creation is off)."""
        self._topics.ensure(names)

    def partitions(self, topic: str) -> int:
        """The partition count of ``topic`` (checked, or created, on first use)."""
        return self._topics.partitions(topic)

    # -- sending --------------------------------------------------------------------------------------

    def send(self, batch_id: int, records: Sequence[Record], where: str = "") -> BatchHandle:
        """Produce every record of one batch; its handle completes when all are delivered.

        ``where`` (the batch's binlog positions) goes into every log line and error about the batch.
        Raises the failure already known (fatal, or an earlier batch's) instead of sending more: after
        a failure the caller must ``abort_inflight()`` first.
        """
        self._check_usable()
        handle = self._session.open_batch(batch_id, len(records), where)
        for record in records:
            if handle.error is not None:
                break  # the batch is lost anyway; the rest of it would only be re-sent later
            self._produce_record(handle, record)
        return handle

    def _produce_record(self, handle: BatchHandle, record: Record) -> None:
        if not self._topics.known(record.topic):
            try:
                self._topics.ensure([record.topic])
            except ConfigError as exc:
                self._failures.uncreatable_topic(handle, record, exc)
                return
            except PublishError as exc:
                handle.fail(exc)
                log.warning("%s: %s", handle.label, exc)
                return
        partition = record.partition  # None: librdkafka places it (murmur2_random, see the module doc)
        self._session.produce(
            handle, record, partition, RecordReport(self._failures, handle, record, partition)
        )

    def append(self, batch_id: int, records: Sequence[Record]) -> bool:
        """Produce ``records`` as part of batch ``batch_id`` once it and every batch before it were
        delivered (so they follow every record sent up to it); the batch then completes only when
        these are delivered too. False, nothing sent: some record up to that batch is not delivered yet
        (or failed; a failure of a LATER batch does not stop it: the batches before it are acked, with
        these). Transactional mode: the batch's transaction must still be open.
        """
        if self._closed:
            raise PublishError("publisher is closed")
        fatal = self._session.fatal
        if fatal is not None:
            raise fatal
        handle = self._window.settled_through(batch_id)
        if handle is None:
            return False
        if self._config.transactional and handle.committed:
            raise PublishError(f"{handle.label}: its transaction is no longer open; cannot add records to it")
        for record in records:
            handle.pending += 1
            handle.records += 1
            self._produce_record(handle, record)
        return True

    # -- transactions (transactional mode) ------------------------------------------------------------

    @property
    def transactional(self) -> bool:
        return self._config.transactional

    @property
    def transactional_id(self) -> str | None:
        return self._config.transactional_id

    def init_transactions(self) -> None:
        """Transactional mode: register our ``transactional.id`` with the broker, fencing older producers
        (a no-op in idempotent mode). Called once this process leads, before anything is read or sent."""
        self._session.init()

    def transaction_age(self) -> float | None:
        """Seconds since the open transaction began; None when none is open (or not transactional)."""
        return self._session.age()

    def batch_ids(self) -> list[int]:
        """The ids of the batches in flight, in send order (in transactional mode: the open transaction's)."""
        return self._window.ids()

    def commit(self, extra: Sequence[Record] = (), before_end: BeforeEnd | None = None) -> bool:
        """Commit the open transaction after every record of it was delivered; True when it committed.

        ``extra`` (the exactly-once position record) is produced into the transaction first; ``before_end``
        (transactional mode's commit intent) runs once all is delivered, before the commit. False: a record
        failed or the commit did — ``failed()`` says why, and the caller calls ``abort_inflight()`` (always
        False in idempotent mode: nothing is open). Raises the producer's fatal error (``ProducerFencedError``
        when fenced).
        """
        if not self._session.may_commit():
            return False
        self._check_usable()
        last = self._window.last()
        for record in extra:
            last.pending += 1
            self._produce_record(last, record)
        return self._session.commit(last, before_end)

    def diagnose(self) -> list[str]:
        """Why Kafka may not acknowledge: the metadata of the topics written to (``relay.kafka.health``);
        asked only while a batch waits too long (it blocks for up to a few seconds)."""
        return self._topics.diagnose()

    # -- the caller's loop ----------------------------------------------------------------------------

    def poll(self, timeout: float = 0.0) -> int:
        """Serve delivery reports for up to ``timeout`` seconds; returns how many were served."""
        return self._session.poll(timeout)

    def completed_prefix(self) -> list[BatchHandle]:
        """Remove and return, in send order, the batches at the head whose every record is delivered."""
        return self._window.completed_prefix()

    def failed(self) -> BatchHandle | None:
        """The first batch in flight with a failed record (its ``error`` says why), or None."""
        return self._window.failed()

    def inflight(self) -> int:
        """How many batches are sent but not yet handed back by ``completed_prefix``."""
        return self._window.count()

    def abort_inflight(self, *, term_over: bool = False) -> list[int]:
        """Forget every outstanding batch (the caller rolls back and resends); returns their ids.

        ``term_over``: this relay is no longer the active one (leadership lost). An open transaction is
        then left to the broker, never aborted from here: the successor's ``init_transactions`` aborts
        it (or ``transaction.timeout.ms`` does), and an abort sent by a process that is already a zombie
        would only wait on the records the broker refuses as fenced — for up to the delivery timeout.

        Idempotent mode starts a fresh producer session (see ``IdempotentSession.abort``); transactional
        mode aborts the open transaction (or abandons it, ``term_over``) and keeps the producer. A fatal
        error stays fatal.
        """
        return self._session.abort(term_over=term_over)

    def flush(self, timeout: float) -> int:
        """Wait up to ``timeout`` seconds for everything queued; returns how many records are left."""
        return self._session.flush(timeout)

    def close(self, timeout: float = 10.0) -> None:
        """Deliver what can be delivered within ``timeout``, then drop the rest (nothing more is acked)."""
        if self._closed:
            return
        self._closed = True
        self._session.close_open()  # never commit on close: what is not committed is resent
        left = self.flush(timeout)
        if left:
            labels = ", ".join(self._window.labels()) or "no batch in flight"
            log.warning("closing the kafka publisher: %d records undelivered (%s)", left, labels)
            self._session.purge()

    def _check_usable(self) -> None:
        if self._closed:
            raise PublishError("publisher is closed")
        fatal = self._session.fatal
        if fatal is not None:
            raise fatal
        first = self._window.failed()
        if first is not None and first.error is not None:
            raise first.error
