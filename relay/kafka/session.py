"""The publisher's producer session: the librdkafka producer in use, behind one interface for both modes.

``ProducerSession`` owns the confluent-kafka ``Producer`` (always ``enable.idempotence=true``,
``acks=all``), its fatal latch (``fatal``: once set, the publisher is unusable and every batch in flight
fails with it) and what both modes do alike: ``produce`` with a bounded wait while librdkafka's local queue
is full, ``poll``, ``flush`` and librdkafka's error callback. What differs between the modes is in the
subclass, chosen once when the publisher is built, so nothing on the per-record path asks which mode runs:

- ``IdempotentSession`` (here): a batch counts as delivered once its records are; an abort disowns the
  batches and starts a fresh producer (librdkafka's idempotence state still covers the disowned records).
- ``TransactionalSession`` (``relay.kafka.transaction``): the batches in flight form one Kafka transaction
  and count only once it commits; an abort aborts it and keeps the producer (and its epoch).

Threads: the publisher thread. librdkafka sends from its own threads, but the error callback
(``on_error``) and the delivery reports run only inside ``poll``/``flush``/``produce`` here.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from relay.common.kafka_log import quiet
from relay.errors import ProducerFatalError, ProducerFencedError, PublishError
from relay.kafka.records import BatchHandle, Record
from relay.kafka.settings import PublisherConfig
from relay.kafka.verdicts import describe
from relay.kafka.window import InflightWindow

log = logging.getLogger(__name__)


# Called once every record of the open transaction is delivered and before it commits, with the delivery
# report (a ``Message``) of one of its records, or None when it holds none (transactional mode's commit
# intent is written there: ``relay.kafka.commit_intent``). It may raise: the transaction does not commit.
BeforeEnd = Callable[[object], None]


class Report(Protocol):
    """One produced record's delivery report: librdkafka calls it with (error or None, message); a record
    the client refuses before sending (``produce`` raised) is reported with ``refused``."""

    def __call__(self, err: KafkaError | None, msg: Message | None) -> None: ...

    def refused(self, err: KafkaError) -> None: ...


class ProducerSession:
    """What both modes share; the mode-specific calls are overridden (see the module docstring)."""

    def __init__(
        self,
        config: PublisherConfig,
        window: InflightWindow,
        producer_factory: Callable[[dict[str, Any]], Producer],
    ) -> None:
        self._config = config
        self._window = window
        self._settings = config.producer_settings()
        self._producer_factory = producer_factory
        self.fatal: ProducerFatalError | None = None
        self.producer = self._new_producer()

    # -- the mode-specific calls ----------------------------------------------------------------------

    def init(self) -> None:
        """Before anything is sent (transactional mode: fence older producers of our id)."""
        raise NotImplementedError

    def open_batch(self, batch_id: int, records: int, where: str) -> BatchHandle:
        """A new batch in the window, before its records are produced."""
        raise NotImplementedError

    def may_commit(self) -> bool:
        """Whether ``commit`` has anything to commit."""
        raise NotImplementedError

    def commit(self, last: BatchHandle, before_end: BeforeEnd | None = None) -> bool:
        """Commit what is in flight once every record of it (``last`` holds the extra ones) is delivered;
        ``before_end`` is called between the last delivery and the commit (with where a record landed)."""
        raise NotImplementedError

    def abort(self, term_over: bool = False) -> list[int]:
        """Give up every batch in flight (the caller resends them); returns their ids. ``term_over``: the
        leadership is over (transactional mode leaves the open transaction to the successor)."""
        raise NotImplementedError

    def close_open(self) -> None:
        """Closing: end what is open without committing it (what is not committed is resent)."""
        raise NotImplementedError

    def age(self) -> float | None:
        """Seconds since the open transaction began; None when none is open."""
        raise NotImplementedError

    def dead_letters_broker_refusals(self) -> bool:
        """Whether a record the *broker* refused may still go to the dead-letter topic."""
        raise NotImplementedError

    # -- shared ---------------------------------------------------------------------------------------

    def produce(
        self,
        handle: BatchHandle,
        out: Record,
        partition: int | None,
        report: Report,
        *,
        may_poll: bool = True,
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
                self.producer.produce(
                    out.topic,
                    out.value,
                    out.key,
                    -1 if partition is None else partition,  # -1: librdkafka's "unassigned"
                    report,
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
                report.refused(exc.args[0])
                return

    def poll(self, timeout: float = 0.0) -> int:
        """Serve delivery reports for up to ``timeout`` seconds; returns how many were served."""
        try:
            return int(self.producer.poll(timeout))
        except KafkaException as exc:  # confluent-kafka raises fatal errors from poll as well
            self.set_fatal(exc.args[0])
            return 0

    def flush(self, timeout: float) -> int:
        """Wait up to ``timeout`` seconds for everything queued; returns how many records are left."""
        try:
            return int(self.producer.flush(timeout))
        except KafkaException as exc:
            self.set_fatal(exc.args[0])
            return len(self.producer)
        except SystemError as exc:
            # confluent-kafka 2.16's flush (in 200 ms chunks, checking for signals between them) has been
            # seen returning NULL without an exception in a relay fenced after a SIGSTOP: what was queued
            # is then simply not known to be delivered (and the error that ended the relay is kept).
            log.warning("kafka producer: flush failed inside the client (%s); treated as not flushed", exc)
            return len(self.producer)

    def purge(self) -> None:
        """Drop everything queued or in flight (their reports are served: all ignored, disowned)."""
        self.producer.purge(in_queue=True, in_flight=True, blocking=True)
        self.producer.poll(0)

    def set_fatal(self, err: KafkaError, batch: str | None = None) -> None:
        """The producer is unusable: keep the first cause (a fencing beats a bare ``_FATAL``), fail every
        batch in flight with it."""
        fenced = self._fenced(err)
        if fenced and self.fatal is not None and not isinstance(self.fatal, ProducerFencedError):
            # librdkafka fails calls with a bare _FATAL; the cause (fenced) comes with the error callback.
            old, self.fatal = self.fatal, None
            self._window.forget_error(old)
        if self.fatal is None:
            where = f"{batch}: " if batch is not None else ""
            if fenced:
                self.fatal = ProducerFencedError(
                    f"{where}kafka producer fenced: a newer producer with transactional.id "
                    f"{self._config.transactional_id!r} took over ({describe(err)}); "
                    "this relay is no longer the active relay"
                )
            else:
                self.fatal = ProducerFatalError(f"{where}kafka producer failed fatally: {describe(err)}")
            log.error("%s", self.fatal)
        self._window.fail_all(self.fatal)

    def on_error(self, err: KafkaError) -> None:
        """librdkafka's error callback (served inside poll): only fatal errors change anything here."""
        if err.fatal():
            self.set_fatal(err, self._window.first_label())
        else:
            log.debug("kafka client: %s", describe(err))

    def _fenced(self, err: KafkaError) -> bool:
        """Whether ``err`` means a newer producer with our ``transactional.id`` took over."""
        return False

    def _new_producer(self) -> Producer:
        return self._producer_factory(quiet({**self._settings, "error_cb": self.on_error}))


class IdempotentSession(ProducerSession):
    """Idempotent mode: a batch is delivered once its records are; an abort starts a fresh producer."""

    def init(self) -> None:
        return  # nothing to fence: no transactional.id

    def open_batch(self, batch_id: int, records: int, where: str) -> BatchHandle:
        handle = BatchHandle(batch_id, records, records, where=where)
        self._window.add(handle)
        return handle

    def may_commit(self) -> bool:
        return False  # nothing is ever open

    def commit(self, last: BatchHandle, before_end: BeforeEnd | None = None) -> bool:
        return False

    def abort(self, term_over: bool = False) -> list[int]:
        """Disown every batch in flight and start a fresh producer session (``term_over`` changes nothing
        here: no transaction is ever open).

        librdkafka's idempotence state (producer id, sequence numbers) still covers the records just
        disowned, and a broker that lost that state (a restart of a memory-backed broker, an expired
        producer id) would fail the next send fatally with UNKNOWN_PRODUCER_ID. Records of the old
        session may still land: consumers drop them by their source sequence. A fatal error stays fatal.
        """
        ids = self._window.ids()
        if not ids and not len(self.producer):
            return []  # nothing to disown: keep the session (e.g. a clean stop after the drain)
        labels = [h.label for h in self._window.disown()]
        old, self.producer = self.producer, self._new_producer()
        try:
            old.purge(in_queue=True, in_flight=True, blocking=True)
            old.poll(0)  # serves the purged records' reports: all ignored, their batches are aborted
        except KafkaException as exc:
            log.debug("purging the old producer: %s", describe(exc.args[0]))
        if ids:
            log.warning("aborted %s; they will be sent again", ", ".join(labels))
        return ids

    def close_open(self) -> None:
        return  # nothing is ever open

    def age(self) -> float | None:
        return None

    def dead_letters_broker_refusals(self) -> bool:
        return True
