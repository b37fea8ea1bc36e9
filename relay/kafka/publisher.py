"""The Kafka publisher: sends batches of records and tells which batches Kafka has durably accepted.

Owns one idempotent confluent-kafka ``Producer`` (always ``enable.idempotence=true``, ``acks=all``), an
``AdminClient`` for topic checks and creation, the cache of known topics and their partition counts, and
the window of batches in flight. The relay contract it serves (docs/architecture.md): a batch may be acked to
the ring store, and its position saved, only once EVERY record of it has been delivered; batches may be
pipelined, but only a *prefix* of fully delivered batches is ever handed back (``completed_prefix``).

Threads: everything here runs on the one publisher thread. librdkafka sends from its own threads, but the
delivery callbacks (``_on_delivery``) are served only inside ``poll``/``flush``/``send`` (which polls while
the local queue is full) on the publisher thread, so the batch state needs no lock.

What it hands on: ``completed_prefix()`` → batches the caller acks in order; ``failed()`` → the first
batch with a failed record and why: a retriable ``PublishError`` (the caller calls ``abort_inflight()``,
rolls the store back and resends after a backoff), a ``RecordRejectedError`` (the record can never be
sent: the relay stops, unless a dead-letter topic takes it), or a ``ProducerFatalError`` (stop).
Keyed records without a partition are placed by librdkafka's ``murmur2_random`` partitioner, the Java
client's hash (``relay.kafka.partitioner`` computes the same, and a test holds librdkafka to it), so a key
lives in the same partition whichever Kafka client writes it.

Transactional mode (``PublisherConfig.transactional_id`` set, ``kafka.transactions``): the producer also has
a ``transactional.id``. ``init_transactions()`` (after the HA election) fences every older producer of that
id, so nothing a frozen predecessor still had queued can commit. ``send`` opens a transaction when none is
open; ``commit()`` waits for every record of the open transaction (dead letters included: they are produced
inside it), adds the caller's extra records (the exactly-once position) and commits; only then do its
batches count as delivered in ``completed_prefix``. ``abort_inflight`` aborts the open transaction. A fenced
producer raises ``ProducerFencedError`` (a ``LeadershipError``); a record the *broker* refused makes the
transaction abortable, so it cannot be dead-lettered there: it stops the relay (``RecordRejectedError``).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from mypy_extensions import mypyc_attr

from relay.common.retry import RetryPolicy
from relay.errors import (
    ConfigError,
    MissingTopicError,
    ProducerFatalError,
    ProducerFencedError,
    PublishError,
    RecordRejectedError,
    RelayError,
)
from relay.kafka.partitioner import partition_for_key
from relay.kafka.records import (
    DEAD_LETTER_ERROR,
    DEAD_LETTER_PARTITION,
    DEAD_LETTER_SIZE,
    DEAD_LETTER_TOPIC,
    FENCED_CODES,
    SIZE_CODES,
    TXN_CONTROL_TIMEOUT_S,
    UNKNOWN_TOPIC_CODES,
    BatchHandle,
    PublisherConfig,
    Record,
    classify,
)

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
        self._settings = config.producer_settings()
        self._producer_factory = producer_factory
        self._producer = self._new_producer()
        self._admin = admin_factory(self._admin_settings())
        self._partitions: dict[str, int] = {}
        self._inflight: deque[BatchHandle] = deque()
        self._fatal: ProducerFatalError | None = None
        self._closed = False
        self._txn_since: float | None = None  # transactional mode: when the open transaction began
        self._refused_locally = False  # set while produce()'s own refusal of a record is handled
        log.info("kafka publisher %s: %s", config.client_id, config.describe())

    # -- topics ---------------------------------------------------------------------------------------

    def ensure_topics(self, names: Iterable[str]) -> None:
        """Learn the partition counts of ``names`` and the dead-letter topic; create missing ones if allowed.

        Lists all topics rather than asking for the named ones: a metadata request for one topic
        auto-creates it on brokers with ``auto.create.topics.enable`` (and always on Tansu). A missing
        topic with creation off raises ``MissingTopicError`` (retriable, never a record rejection).
        """
        wanted = {*names, *([self._config.dead_letter_topic] if self._config.dead_letter_topic else [])}
        missing = wanted - self._partitions.keys()
        if not missing:
            return
        existing = self._list_topics()
        self._partitions.update({t: existing[t] for t in missing if t in existing})
        absent = sorted(missing - existing.keys())
        if not absent:
            return
        if not self._config.create_topics:
            # Retriable: at start the relay stops on it (a clear error before anything is sent); while
            # running, the batch is rolled back and retried with backoff until the topic exists.
            raise MissingTopicError(
                f"topic {absent[0]!r} does not exist and topics.create is false: create it "
                "(or allow creation); retrying with backoff"
            )
        self._create_topics(absent)

    def partitions(self, topic: str) -> int:
        """The partition count of ``topic`` (checked, or created, on first use)."""
        count = self._partitions.get(topic)
        if count is None:
            self.ensure_topics([topic])
            count = self._partitions[topic]
        return count

    def _list_topics(self) -> dict[str, int]:
        try:
            meta = self._admin.list_topics(timeout=self._config.admin_timeout_s)
        except KafkaException as exc:
            raise PublishError(f"cannot list topics: {_describe(exc.args[0])}") from exc
        return {name: len(t.partitions) for name, t in meta.topics.items() if t.error is None}

    def _create_topics(self, names: list[str]) -> None:
        d = self._config.topic_defaults
        new = [NewTopic(n, d.partitions, d.replication_factor, config=dict(d.config)) for n in names]
        futures = self._admin.create_topics(new, request_timeout=self._config.admin_timeout_s)
        for name, future in futures.items():
            try:
                future.result(timeout=self._config.admin_timeout_s)
                log.info("created topic %s (%d partitions)", name, d.partitions)
            except KafkaException as exc:
                err: KafkaError = exc.args[0]
                if err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                    continue  # another relay created it first
                if err.retriable() or err.code() in (KafkaError._TIMED_OUT, KafkaError._TRANSPORT):
                    raise PublishError(f"cannot create topic {name!r}: {_describe(err)}") from exc
                raise ConfigError(f"topic {name!r}", f"cannot be created: {_describe(err)}") from exc
        self._await_metadata(names)

    def _await_metadata(self, names: list[str]) -> None:
        # Creation returns before every broker's metadata shows the topic: wait for it, with a deadline.
        backoff = RetryPolicy(initial=0.05, maximum=1.0, deadline=self._config.admin_timeout_s).start()
        while True:
            existing = self._list_topics()
            self._partitions.update({n: existing[n] for n in names if existing.get(n)})
            if all(n in self._partitions for n in names):
                return
            if not backoff.wait():
                raise PublishError(f"created topics {names} did not show in metadata in time")

    # -- sending --------------------------------------------------------------------------------------

    def send(self, batch_id: int, records: Sequence[Record], where: str = "") -> BatchHandle:
        """Produce every record of one batch; its handle completes when all are delivered.

        ``where`` (the batch's binlog positions) goes into every log line and error about the batch.
        Raises the failure already known (fatal, or an earlier batch's) instead of sending more: after
        a failure the caller must ``abort_inflight()`` first.
        """
        self._check_usable()
        if self.transactional:
            self._begin()
        handle = BatchHandle(batch_id, len(records), len(records), where=where)
        handle.committed = not self.transactional
        self._inflight.append(handle)
        for record in records:
            if handle.error is not None:
                break  # the batch is lost anyway; the rest of it would only be re-sent later
            self._produce_record(handle, record)
        return handle

    # -- transactions (transactional mode) ------------------------------------------------------------

    @property
    def transactional(self) -> bool:
        return self._config.transactional

    @property
    def transactional_id(self) -> str | None:
        return self._config.transactional_id

    def init_transactions(self) -> None:
        """Transactional mode: register our ``transactional.id`` with the broker, fencing older producers.

        Called once this process leads (after the HA election), before anything is read or sent: the
        broker aborts whatever transaction a predecessor left open, and refuses its queued records.
        """
        if not self.transactional:
            return
        try:
            self._producer.init_transactions(self._config.admin_timeout_s)
        except KafkaException as exc:
            raise self._txn_failure(exc.args[0], "init_transactions") from exc
        log.info("kafka publisher: transactional.id %s initialised", self._config.transactional_id)

    def transaction_age(self) -> float | None:
        """Seconds since the open transaction began; None when none is open (or not transactional)."""
        return None if self._txn_since is None else time.monotonic() - self._txn_since

    def batch_ids(self) -> list[int]:
        """The ids of the batches in flight, in send order (in transactional mode: the open transaction's)."""
        return [h.batch_id for h in self._inflight]

    def _begin(self) -> None:
        if self._txn_since is not None:
            return
        try:
            self._producer.begin_transaction()
        except KafkaException as exc:
            raise self._txn_failure(exc.args[0], "begin_transaction") from exc
        self._txn_since = time.monotonic()

    def commit(self, extra: Sequence[Record] = ()) -> bool:
        """Commit the open transaction after every record of it was delivered; True when it committed.

        ``extra`` (the exactly-once position record) is produced into the transaction first. False: a
        record failed or the commit did — ``failed()`` says why, and the caller calls ``abort_inflight()``.
        Raises the producer's fatal error (``ProducerFencedError`` when fenced).
        """
        if self._txn_since is None or not self._inflight:
            return False
        self._check_usable()
        last = self._inflight[-1]
        for record in extra:
            last.pending += 1
            self._produce_record(last, record)
        self._await_delivery(last)
        if self._fatal is not None:
            raise self._fatal
        if self.failed() is not None:
            return False
        try:
            self._commit_transaction()
        except KafkaException as exc:
            error = self._txn_failure(exc.args[0], "commit_transaction")
            for handle in self._inflight:
                handle.fail(error)
            log.warning("%s: %s", last.label, error)
            if isinstance(error, ProducerFatalError):
                raise error from exc
            return False
        self._txn_since = None
        for handle in self._inflight:
            handle.committed = True
        log.debug("%s: transaction of batches %s committed", last.label, self.batch_ids())
        return True

    def _commit_transaction(self) -> None:
        """``commit_transaction``, called again while it fails retriably (librdkafka: "retry call to
        resume", e.g. a timeout: the commit may still be under way, and an abort then conflicts with it),
        up to the delivery timeout; any other error is the caller's.

        A commit still unanswered at the delivery timeout has an unknown outcome: the publisher becomes
        unusable (``ProducerFatalError``) and the relay stops with nothing of the transaction acked; a
        restart's ``init_transactions`` settles it. Aborting instead is not possible (librdkafka refuses an
        abort while the commit is under way: ``_CONFLICT``). One cause: a broker that answers a fenced
        producer's EndTxn by closing the connection rather than with PRODUCER_FENCED (Tansu) — the fence
        itself is then never reported.
        """
        timeout = self._config.delivery_timeout_s
        deadline = time.monotonic() + timeout
        while True:
            try:
                left = max(deadline - time.monotonic(), 0.1)
                self._producer.commit_transaction(min(self._control_timeout(), left))
                return
            except KafkaException as exc:
                err = exc.args[0]
                # A fencing that arrived while the commit was under way is reported to the error callback,
                # served only by poll: without it the commit would be called again until the deadline
                # (seen: a relay fenced mid-commit still retrying a minute later).
                self.poll(0)
                if self._fatal is not None:
                    raise self._fatal from exc
                if not err.retriable() or err.txn_requires_abort() or err.fatal():
                    raise
                if time.monotonic() >= deadline:
                    raise self._in_doubt(
                        f"commit_transaction unanswered for {timeout:g} s ({_describe(err)})"
                    ) from exc
                log.warning("commit_transaction: %s; calling it again to resume", _describe(err))

    def _in_doubt(self, what: str) -> ProducerFatalError:
        """The open transaction's outcome is unknown: the publisher is unusable, nothing more is acked."""
        self._fatal = ProducerFatalError(
            f"{what}: the open transaction's outcome is unknown; stopping (nothing of it is acked; a "
            "restart's init_transactions settles it)"
        )
        log.error("%s", self._fatal)
        for handle in self._inflight:
            handle.fail(self._fatal)
        return self._fatal

    def _await_delivery(self, last: BatchHandle) -> None:
        deadline = time.monotonic() + self._config.delivery_timeout_s
        while any(h.pending for h in self._inflight) and self.failed() is None and self._fatal is None:
            if time.monotonic() >= deadline:
                last.fail(PublishError(f"{last.label}: not delivered within the delivery timeout"))
                return
            self.poll(0.05)

    def _abort_transaction(self) -> None:
        """Abort the open transaction; when even that fails, its outcome is unknown: the publisher stops.

        It does not start a new session itself: ``init_transactions`` by a process that may be a zombie
        would fence the rightful successor. A restart re-initialises (and so aborts) it, after the HA
        election where there is one.
        """
        if self._txn_since is None:
            return
        self._txn_since = None
        if self._fatal is not None:
            return  # unusable: the broker aborts it (fenced, or at transaction.timeout.ms)
        try:
            self._call_abort()
        except KafkaException as exc:
            error = self._txn_failure(exc.args[0], "abort_transaction")
            if not isinstance(error, ProducerFatalError):
                # The reason may already wait in the client (fenced by a successor): serve it first, so the
                # relay stops for what happened (fenced: exit 3) rather than for the timeout it caused.
                self.poll(0.5)
            if self._fatal_now() is None:
                self._in_doubt(str(error))

    def _fatal_now(self) -> ProducerFatalError | None:
        """``_fatal`` read afresh: ``poll`` serves callbacks that may set it, and a type checker (and mypyc,
        which compiles its checks in) keeps a narrowing of the attribute across such calls."""
        return self._fatal

    def _call_abort(self) -> None:
        """``abort_transaction``, called again while it fails retriably ("retry call to resume": under load
        a timeout, while the reason — a successor's fencing — is still on its way) and no fatal error
        arrived, up to the delivery timeout."""
        deadline = time.monotonic() + self._config.delivery_timeout_s
        while True:
            try:
                self._producer.abort_transaction(self._control_timeout())
                return
            except KafkaException as exc:
                err = exc.args[0]
                self.poll(0)  # a fencing reported to the error callback ends the retries
                if self._fatal is not None or not err.retriable() or err.fatal():
                    raise
                if time.monotonic() >= deadline:
                    raise
                log.warning("abort_transaction: %s; calling it again to resume", _describe(err))

    def _control_timeout(self) -> float:
        return min(self._config.delivery_timeout_s, TXN_CONTROL_TIMEOUT_S)

    def _txn_failure(self, err: KafkaError, what: str) -> PublishError:
        """A transactional API's error as ours; a fatal one (fenced included) makes the publisher unusable."""
        if err.code() in FENCED_CODES or err.fatal():
            self._set_fatal(err)
            assert self._fatal is not None
            return self._fatal
        return PublishError(f"{what} failed: {_describe(err)}")

    def _check_usable(self) -> None:
        if self._closed:
            raise PublishError("publisher is closed")
        if self._fatal is not None:
            raise self._fatal
        first = self.failed()
        if first is not None and first.error is not None:
            raise first.error

    def _produce_record(self, handle: BatchHandle, record: Record) -> None:
        if record.topic not in self._partitions:
            try:
                self.ensure_topics([record.topic])
            except ConfigError as exc:
                self._reject_topic(handle, record, exc)
                return
            except PublishError as exc:
                handle.fail(exc)
                log.warning("%s: %s", handle.label, exc)
                return
        partition = record.partition  # None: librdkafka places it (murmur2_random, see the module doc)
        self._produce(handle, record, partition, _Report(self, handle, record, partition))

    def _produce(
        self, handle: BatchHandle, out: Record, partition: int | None, callback: Any, *, may_poll: bool = True
    ) -> None:
        """``produce`` with a bounded wait while the local queue is full; a local refusal fails the record.

        ``may_poll`` is False inside a delivery callback (dead-lettering), where polling would re-enter
        ``poll``: a full queue then fails the batch retriably at once.
        """
        deadline = None  # set at the first full queue: the common case does not read the clock
        while True:
            try:
                # Positional arguments (topic, value, key, partition, on_delivery): parsing keywords
                # costs the client 0.3 µs a record.
                self._producer.produce(
                    out.topic,
                    out.value,
                    out.key,
                    -1 if partition is None else partition,  # -1: librdkafka's "unassigned"
                    callback,
                    headers=list(out.headers),
                )
                return
            except BufferError:
                if deadline is None:
                    deadline = time.monotonic() + (self._config.delivery_timeout_s if may_poll else 0.0)
                if time.monotonic() >= deadline:
                    waited = self._config.delivery_timeout_s
                    log.error("%s: local producer queue stayed full", handle.label)
                    handle.fail(PublishError(f"{handle.label}: local queue full for {waited:.0f}s"))
                    return
                self.poll(0.1)  # serves delivery reports, which frees queue space
                if handle.error is not None:
                    return
            except KafkaException as exc:  # refused locally, e.g. larger than message.max.bytes
                self._refused_locally = True  # nothing reached the broker: a transaction stays intact
                try:
                    callback(exc.args[0], None)
                finally:
                    self._refused_locally = False
                return

    # -- delivery reports -------------------------------------------------------------------------

    def _on_delivery(
        self,
        handle: BatchHandle,
        record: Record,
        partition: int | None,
        err: KafkaError | None,
        msg: Message | None,
    ) -> None:
        if handle.aborted:
            return  # a batch we gave up on: the caller resends it
        if err is None:
            handle.pending -= 1
            return
        reported = msg.partition() if msg is not None else None
        if reported is not None and reported >= 0:
            partition = reported
        elif partition is None and record.key is not None and record.topic in self._partitions:
            partition = partition_for_key(record.key, self._partitions[record.topic])  # where it was headed
        verdict = classify(err)
        if err.code() in UNKNOWN_TOPIC_CODES:
            self._partitions.pop(record.topic, None)  # the next send checks (or creates) it again
        if verdict == "fatal":
            self._set_fatal(err, handle.label)
        elif verdict == "retriable":
            # Logged once per batch: an outage fails every record of it alike (a timeout fails hundreds).
            log_failure = log.warning if handle.error is None else log.debug
            log_failure(
                "%s: delivery to %s [%s] failed, will retry the batch: %s",
                handle.label,
                record.topic,
                partition,
                _describe(err),
            )
            handle.fail(
                PublishError(
                    f"{handle.label}: delivery to {record.topic} [{partition}] failed: {_describe(err)}"
                )
            )
        elif self.transactional and not self._refused_locally:
            # The broker refused it: the transaction is abortable now, a dead letter in it would be lost.
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
            f"key {key!r} size {record.size} bytes rejected: {_describe(err)}{context}"
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

    def _reject_topic(self, handle: BatchHandle, record: Record, exc: ConfigError) -> None:
        """A topic that cannot be created (a bad name, a policy): a rejection like any other. (One that
        does not exist with creation off is no fault of the record: ``ensure_topics`` raises the
        retriable ``MissingTopicError`` for it, and the batch is sent again after a backoff.)"""
        err = KafkaError(KafkaError.TOPIC_EXCEPTION, str(exc))
        self._refused_locally = True  # never sent: a transaction stays intact
        try:
            self._on_delivery(handle, record, record.partition, err, None)
        finally:
            self._refused_locally = False

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
            (DEAD_LETTER_ERROR, _describe(err).encode()),
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
            count = self.partitions(topic)
        except RelayError as exc:  # raising here would escape from poll(); fail the batch instead
            self._reject(handle, record, partition, err, f" (dead-letter topic unusable: {exc})")
            return
        dl_partition = None if record.key is None else partition_for_key(record.key, count)
        callback = partial(self._on_dead_letter, handle, record, partition)
        self._produce(handle, out, dl_partition, callback, may_poll=False)

    def _on_dead_letter(
        self,
        handle: BatchHandle,
        record: Record,
        partition: int | None,
        err: KafkaError | None,
        msg: Message | None,
    ) -> None:
        if handle.aborted:
            return
        if err is None:
            handle.pending -= 1
            handle.dead_lettered += 1
            return
        verdict = classify(err)
        if verdict == "fatal":
            self._set_fatal(err, handle.label)
        elif verdict == "retriable":
            handle.fail(PublishError(f"{handle.label}: dead-letter delivery failed: {_describe(err)}"))
            log.warning("%s: dead-letter delivery failed: %s", handle.label, _describe(err))
        else:
            self._reject(
                handle,
                record,
                partition,
                err,
                f" (and by the dead-letter topic {self._config.dead_letter_topic!r})",
            )

    def _set_fatal(self, err: KafkaError, batch: str | None = None) -> None:
        fenced = self.transactional and err.code() in FENCED_CODES
        if fenced and self._fatal is not None and not isinstance(self._fatal, ProducerFencedError):
            # librdkafka fails calls with a bare _FATAL; the cause (fenced) comes with the error callback.
            old, self._fatal = self._fatal, None
            for handle in self._inflight:
                if handle.error is old:
                    handle.error = None
        if self._fatal is None:
            where = f"{batch}: " if batch is not None else ""
            if fenced:
                self._fatal = ProducerFencedError(
                    f"{where}kafka producer fenced: a newer producer with transactional.id "
                    f"{self._config.transactional_id!r} took over ({_describe(err)}); "
                    "this relay is no longer the active relay"
                )
            else:
                self._fatal = ProducerFatalError(f"{where}kafka producer failed fatally: {_describe(err)}")
            log.error("%s", self._fatal)
        for handle in self._inflight:
            handle.fail(self._fatal)

    def _on_error(self, err: KafkaError) -> None:
        """librdkafka's error callback (served inside poll): only fatal errors change anything here."""
        if err.fatal():
            self._set_fatal(err, self._inflight[0].label if self._inflight else None)
        else:
            log.debug("kafka client: %s", _describe(err))

    # -- the caller's loop ----------------------------------------------------------------------------

    def poll(self, timeout: float = 0.0) -> int:
        """Serve delivery reports for up to ``timeout`` seconds; returns how many were served."""
        try:
            return int(self._producer.poll(timeout))
        except KafkaException as exc:  # confluent-kafka raises fatal errors from poll as well
            self._set_fatal(exc.args[0])
            return 0

    def completed_prefix(self) -> list[BatchHandle]:
        """Remove and return, in send order, the batches at the head whose every record is delivered."""
        done: list[BatchHandle] = []
        while self._inflight and self._inflight[0].delivered:
            handle = self._inflight.popleft()
            log.debug(
                "%s: all %d records delivered (%d dead-lettered)",
                handle.label,
                handle.records,
                handle.dead_lettered,
            )
            done.append(handle)
        return done

    def failed(self) -> BatchHandle | None:
        """The first batch in flight with a failed record (its ``error`` says why), or None."""
        for handle in self._inflight:
            if handle.error is not None:
                return handle
        return None

    def inflight(self) -> int:
        """How many batches are sent but not yet handed back by ``completed_prefix``."""
        return len(self._inflight)

    def abort_inflight(self, *, term_over: bool = False) -> list[int]:
        """Forget every outstanding batch (the caller rolls back and resends); returns their ids.

        ``term_over``: this relay is no longer the active one (leadership lost). An open transaction is
        then left to the broker, never aborted from here: the successor's ``init_transactions`` aborts
        it (or ``transaction.timeout.ms`` does), and an abort sent by a process that is already a zombie
        would only wait on the records the broker refuses as fenced — for up to the delivery timeout.

        Also starts a fresh producer session: librdkafka's idempotence state (producer id, sequence
        numbers) still covers the records we just disowned, and a broker that lost that state (a
        restart of a memory-backed broker, an expired producer id) would fail the next send fatally
        with UNKNOWN_PRODUCER_ID. Records of the old session may still land: consumers drop them by
        their source sequence. A fatal error stays fatal.
        """
        ids = [h.batch_id for h in self._inflight]
        labels = [h.label for h in self._inflight]
        if self.transactional:
            # Nothing of an aborted transaction becomes visible to read_committed consumers; the
            # producer (and its epoch) stays: no new session is needed.
            for handle in self._inflight:
                handle.aborted = True
            self._inflight.clear()
            if term_over:
                self._txn_since = None
            else:
                self._abort_transaction()
            if ids:
                left = term_over or self._fatal is not None
                done = "abandoned (the broker aborts it)" if left else "aborted"
                log.warning("%s the transaction of %s; they will be sent again", done, ", ".join(labels))
            return ids
        if not ids and not len(self._producer):
            return []  # nothing to disown: keep the session (e.g. a clean stop after the drain)
        for handle in self._inflight:
            handle.aborted = True
        self._inflight.clear()
        old, self._producer = self._producer, self._new_producer()
        try:
            old.purge(in_queue=True, in_flight=True, blocking=True)
            old.poll(0)  # serves the purged records' reports: all ignored, their batches are aborted
        except KafkaException as exc:
            log.debug("purging the old producer: %s", _describe(exc.args[0]))
        if ids:
            log.warning("aborted %s; they will be sent again", ", ".join(labels))
        return ids

    def flush(self, timeout: float) -> int:
        """Wait up to ``timeout`` seconds for everything queued; returns how many records are left."""
        try:
            return int(self._producer.flush(timeout))
        except KafkaException as exc:
            self._set_fatal(exc.args[0])
            return len(self._producer)

    def close(self, timeout: float = 10.0) -> None:
        """Deliver what can be delivered within ``timeout``, then drop the rest (nothing more is acked)."""
        if self._closed:
            return
        self._closed = True
        if self._txn_since is not None:  # never commit on close: what is not committed is resent
            for handle in self._inflight:
                handle.aborted = True
            self._inflight.clear()
            self._abort_transaction()
        left = self.flush(timeout)
        if left:
            labels = ", ".join(h.label for h in self._inflight) or "no batch in flight"
            log.warning("closing the kafka publisher: %d records undelivered (%s)", left, labels)
            self._producer.purge(in_queue=True, in_flight=True, blocking=True)
            self._producer.poll(0)

    # -- helpers --------------------------------------------------------------------------------------

    def _new_producer(self) -> Producer:
        return self._producer_factory({**self._settings, "error_cb": self._on_error})

    def _admin_settings(self) -> dict[str, Any]:
        # The admin client speaks to the same cluster with the same security settings, none of the producer's.
        drop = {"enable.idempotence", "acks", "message.timeout.ms"}
        drop |= {"transactional.id", "transaction.timeout.ms"}
        return {k: v for k, v in self._settings.items() if k not in drop}


class _Report:
    """One record's delivery callback. A ``functools.partial`` costs three objects a record (librdkafka's
    client keeps a state per message besides): measured 2.5 against 2.2 µs a ``produce``."""

    def __init__(
        self, publisher: KafkaPublisher, handle: BatchHandle, record: Record, partition: int | None
    ) -> None:
        self.publisher = publisher
        self.handle = handle
        self.record = record
        self.partition = partition

    def __call__(self, err: KafkaError | None, msg: Message | None) -> None:
        handle = self.handle
        if err is None and not handle.aborted:
            handle.pending -= 1
            return
        self.publisher._on_delivery(handle, self.record, self.partition, err, msg)


def _describe(err: KafkaError) -> str:
    return f"{err.name()} ({err.str()})"
