"""Transactional mode's producer session: the batches in flight form one Kafka transaction.

``TransactionalSession`` (a ``relay.kafka.session.ProducerSession``) gives the producer a stable
``transactional.id`` (``PublisherConfig.transactional_id``, ``kafka.transactions``). ``init`` (after the HA
election) fences every older producer of that id, so nothing a frozen predecessor still had queued can
commit. A batch opens a transaction when none is open; ``commit`` waits for every record of it (dead letters
included: they are produced inside it; the caller's extra records, the exactly-once position, too) and
commits; only then do its batches count as delivered. ``abort`` aborts the open transaction and keeps the
producer and its epoch. A fenced producer raises ``ProducerFencedError`` (a ``LeadershipError``).

The session's state is explicit — ``TxnState``, moved only by ``TxnEvent`` through ``TRANSITIONS``
(docs/architecture.md has the diagram)::

    IDLE ──BEGIN──▶ OPEN ──COMMIT──▶ COMMITTING ──COMMITTED──▶ IDLE
                    │ ▲                  │  └──COMMIT_IN_DOUBT──▶ FATAL   (unanswered: outcome unknown)
                    │ └──COMMIT_FAILED───┘   (still open, its batches failed: aborted next)
                    ├──ABORT──▶ ABORTING ──ABORTED──▶ IDLE
                    │              └──ABORT_FAILED──▶ FATAL   (the outcome is unknown)
                    └──ABANDON──▶ IDLE   (term over: the successor aborts it)
    any state ──FATAL_ERROR──▶ FATAL   (final: every event leaves it there)

FATAL is final, whatever else happens after it: callbacks run inside calls (``commit_transaction`` flushes
first, which serves them), so a fencing can move the session to FATAL before the call that was under way
returns and reports its own outcome.

Threads: the publisher thread.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from enum import Enum
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from relay.errors import ProducerFatalError, PublishError
from relay.kafka.records import BatchHandle
from relay.kafka.session import BeforeEnd, ProducerSession
from relay.kafka.settings import PublisherConfig
from relay.kafka.verdicts import FENCED_CODES, describe
from relay.kafka.window import InflightWindow

log = logging.getLogger(__name__)

# The longest wait for a transaction's commit or abort once its records are delivered (EndTxn is one round
# trip to the coordinator). Longer means doubt: a fenced producer on some brokers (Tansu) gets no answer.
TXN_CONTROL_TIMEOUT_S = 10.0


class TxnState(Enum):
    IDLE = "no transaction"
    OPEN = "open"
    COMMITTING = "committing"
    ABORTING = "aborting"
    FATAL = "fatal"


class TxnEvent(Enum):
    BEGIN = "begin_transaction succeeded"
    COMMIT = "commit_transaction called"
    COMMITTED = "commit_transaction succeeded"
    COMMIT_FAILED = "commit_transaction failed, abortable"
    COMMIT_IN_DOUBT = "commit_transaction unanswered at the delivery timeout: the outcome is unknown"
    ABORT = "abort_transaction called"
    ABORTED = "abort_transaction succeeded"
    ABORT_FAILED = "abort_transaction failed: the outcome is unknown"
    ABANDON = "leadership over: the open transaction is left to the successor"
    FATAL_ERROR = "a fatal error (fenced, unusable producer)"


TRANSITIONS: dict[tuple[TxnState, TxnEvent], TxnState] = {
    (TxnState.IDLE, TxnEvent.BEGIN): TxnState.OPEN,
    (TxnState.OPEN, TxnEvent.COMMIT): TxnState.COMMITTING,
    (TxnState.COMMITTING, TxnEvent.COMMITTED): TxnState.IDLE,
    (
        TxnState.COMMITTING,
        TxnEvent.COMMIT_FAILED,
    ): TxnState.OPEN,  # still open, its batches failed: aborted next
    (TxnState.COMMITTING, TxnEvent.COMMIT_IN_DOUBT): TxnState.FATAL,  # no abort while it may be under way
    (TxnState.OPEN, TxnEvent.ABORT): TxnState.ABORTING,
    (TxnState.ABORTING, TxnEvent.ABORTED): TxnState.IDLE,
    (TxnState.ABORTING, TxnEvent.ABORT_FAILED): TxnState.FATAL,
    (TxnState.OPEN, TxnEvent.ABANDON): TxnState.IDLE,  # the successor's init_transactions aborts it
    **{(state, TxnEvent.FATAL_ERROR): TxnState.FATAL for state in TxnState},
    **{(TxnState.FATAL, event): TxnState.FATAL for event in TxnEvent},
}


def next_state(state: TxnState, event: TxnEvent) -> TxnState:
    """The state after ``event``; an event the table does not allow in ``state`` is a bug: it stops."""
    after = TRANSITIONS.get((state, event))
    if after is None:
        raise ProducerFatalError(f"transactional producer: {event.value} while {state.value} (a relay bug)")
    return after


class TransactionalSession(ProducerSession):
    """Transactional mode (see the module docstring)."""

    def __init__(
        self,
        config: PublisherConfig,
        window: InflightWindow,
        producer_factory: Callable[[dict[str, Any]], Producer],
    ) -> None:
        super().__init__(config, window, producer_factory)
        self.state = TxnState.IDLE
        # When the open transaction began: set while OPEN or COMMITTING, and in FATAL until it is abandoned.
        self._since: float | None = None

    def init(self) -> None:
        """Register our ``transactional.id`` with the broker, fencing older producers.

        Called once this process leads (after the HA election), before anything is read or sent: the
        broker aborts whatever transaction a predecessor left open, and refuses its queued records.
        """
        try:
            self.producer.init_transactions(self._config.admin_timeout_s)
        except KafkaException as exc:
            raise self._txn_failure(exc.args[0], "init_transactions") from exc
        log.info("kafka publisher: transactional.id %s initialised", self._config.transactional_id)

    def open_batch(self, batch_id: int, records: int, where: str) -> BatchHandle:
        if self._since is None:
            self._begin()
        handle = BatchHandle(batch_id, records, records, where=where)
        handle.committed = False  # until its transaction commits
        self._window.add(handle)
        return handle

    def may_commit(self) -> bool:
        return self._since is not None and self._window.count() > 0

    def age(self) -> float | None:
        return None if self._since is None else time.monotonic() - self._since

    def dead_letters_broker_refusals(self) -> bool:
        # The broker refused a record: the transaction is abortable now, a dead letter in it would be lost.
        return False

    def set_fatal(self, err: KafkaError, batch: str | None = None) -> None:
        super().set_fatal(err, batch)
        self._move(TxnEvent.FATAL_ERROR)

    def _fenced(self, err: KafkaError) -> bool:
        return err.code() in FENCED_CODES

    def _move(self, event: TxnEvent) -> None:
        self.state = next_state(self.state, event)

    def _begin(self) -> None:
        try:
            self.producer.begin_transaction()
        except KafkaException as exc:
            raise self._txn_failure(exc.args[0], "begin_transaction") from exc
        self._move(TxnEvent.BEGIN)
        self._since = time.monotonic()

    # -- commit ---------------------------------------------------------------------------------------

    def commit(self, last: BatchHandle, before_end: BeforeEnd | None = None) -> bool:
        """Commit once every record in flight is delivered; True when it committed. ``before_end`` runs
        between the last delivery and the commit (what it raises stops the commit; the caller aborts).

        False: a record failed or the commit did — the window's ``failed()`` says why, and the caller
        aborts. Raises the producer's fatal error (``ProducerFencedError`` when fenced).
        """
        self._await_delivery(last)
        if self.fatal is not None:
            raise self.fatal
        if self._window.failed() is not None:
            return False
        if before_end is not None:
            before_end(self._window.landed())
        self._move(TxnEvent.COMMIT)
        try:
            self._commit_transaction()
        except KafkaException as exc:
            error = self._txn_failure(exc.args[0], "commit_transaction")
            self._window.fail_all(error)
            log.warning("%s: %s", last.label, error)
            if isinstance(error, ProducerFatalError):
                raise error from exc
            self._move(TxnEvent.COMMIT_FAILED)
            return False
        self._move(TxnEvent.COMMITTED)
        self._since = None
        self._window.commit_all()
        log.debug("%s: transaction of batches %s committed", last.label, self._window.ids())
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
                self.producer.commit_transaction(min(self._control_timeout(), left))
                return
            except KafkaException as exc:
                err = exc.args[0]
                # A fencing that arrived while the commit was under way is reported to the error callback,
                # served only by poll: without it the commit would be called again until the deadline
                # (seen: a relay fenced mid-commit still retrying a minute later).
                self.poll(0)
                fatal = self._fatal_now()
                if fatal is not None:
                    raise fatal from exc
                if not err.retriable() or err.txn_requires_abort() or err.fatal():
                    raise
                if time.monotonic() >= deadline:
                    self._move(TxnEvent.COMMIT_IN_DOUBT)
                    raise self._in_doubt(
                        f"commit_transaction unanswered for {timeout:g} s ({describe(err)})"
                    ) from exc
                log.warning("commit_transaction: %s; calling it again to resume", describe(err))

    def _in_doubt(self, what: str) -> ProducerFatalError:
        """The open transaction's outcome is unknown (the caller moved the session to FATAL): the publisher
        is unusable, nothing more is acked, every batch in flight fails."""
        fatal = ProducerFatalError(
            f"{what}: the open transaction's outcome is unknown; stopping (nothing of it is acked; a "
            "restart's init_transactions settles it)"
        )
        self.fatal = fatal
        log.error("%s", fatal)
        self._window.fail_all(fatal)
        return fatal

    def _await_delivery(self, last: BatchHandle) -> None:
        deadline = time.monotonic() + self._config.delivery_timeout_s
        window = self._window
        while window.pending() and window.failed() is None and self.fatal is None:
            if time.monotonic() >= deadline:
                last.fail(PublishError(f"{last.label}: not delivered within the delivery timeout"))
                return
            self.poll(0.05)

    # -- abort ----------------------------------------------------------------------------------------

    def abort(self, term_over: bool = False) -> list[int]:
        """Abort the open transaction: nothing of it becomes visible to read_committed consumers; the
        producer (and its epoch) stays, no new session is needed.

        ``term_over`` (leadership lost): the open transaction is left to the broker, never aborted from
        here: the successor's ``init_transactions`` aborts it (or ``transaction.timeout.ms`` does), and an
        abort sent by a process that is already a zombie would only wait on the records the broker refuses
        as fenced, for up to the delivery timeout."""
        handles = self._window.disown()
        if term_over:
            self._abandon_transaction()
        else:
            self._abort_transaction()
        if handles:
            left = term_over or self.fatal is not None
            done = "abandoned (the broker aborts it)" if left else "aborted"
            labels = ", ".join(h.label for h in handles)
            log.warning("%s the transaction of %s; they will be sent again", done, labels)
        return [h.batch_id for h in handles]

    def close_open(self) -> None:
        if self._since is not None:  # never commit on close: what is not committed is resent
            self._window.disown()
            self._abort_transaction()

    def _abandon_transaction(self) -> None:
        """Leave the open transaction to the successor (or the broker's timeout); nothing is sent."""
        if self._since is None:
            return
        self._since = None
        self._move(TxnEvent.ABANDON)

    def _abort_transaction(self) -> None:
        """Abort the open transaction; when even that fails, its outcome is unknown: the publisher stops.

        It does not start a new session itself: ``init_transactions`` by a process that may be a zombie
        would fence the rightful successor. A restart re-initialises (and so aborts) it, after the HA
        election where there is one.
        """
        if self._since is None:
            return
        self._since = None
        if self.fatal is not None:
            return  # unusable: the broker aborts it (fenced, or at transaction.timeout.ms)
        self._move(TxnEvent.ABORT)
        try:
            self._call_abort()
        except KafkaException as exc:
            error = self._txn_failure(exc.args[0], "abort_transaction")
            if not isinstance(error, ProducerFatalError):
                # The reason may already wait in the client (fenced by a successor): serve it first, so the
                # relay stops for what happened (fenced: exit 3) rather than for the timeout it caused.
                self.poll(0.5)
            if self._fatal_now() is None:
                self._move(TxnEvent.ABORT_FAILED)
                self._in_doubt(str(error))
            return
        self._move(TxnEvent.ABORTED)

    def _fatal_now(self) -> ProducerFatalError | None:
        """``fatal`` read afresh: ``poll`` serves callbacks that may set it, and a type checker (and mypyc,
        which compiles its checks in) keeps a narrowing of the attribute across such calls."""
        return self.fatal

    def _call_abort(self) -> None:
        """``abort_transaction``, called again while it fails retriably ("retry call to resume": under load
        a timeout, while the reason — a successor's fencing — is still on its way) and no fatal error
        arrived, up to the delivery timeout."""
        deadline = time.monotonic() + self._config.delivery_timeout_s
        while True:
            try:
                self.producer.abort_transaction(self._control_timeout())
                return
            except KafkaException as exc:
                err = exc.args[0]
                self.poll(0)  # a fencing reported to the error callback ends the retries
                if self._fatal_now() is not None or not err.retriable() or err.fatal():
                    raise
                if time.monotonic() >= deadline:
                    raise
                log.warning("abort_transaction: %s; calling it again to resume", describe(err))

    def _control_timeout(self) -> float:
        return min(self._config.delivery_timeout_s, TXN_CONTROL_TIMEOUT_S)

    def _txn_failure(self, err: KafkaError, what: str) -> PublishError:
        """A transactional API's error as ours; a fatal one (fenced included) makes the publisher unusable."""
        if err.code() in FENCED_CODES or err.fatal():
            self.set_fatal(err)
            fatal = self._fatal_now()
            assert fatal is not None
            return fatal
        return PublishError(f"{what} failed: {describe(err)}")
