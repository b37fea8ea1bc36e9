"""The transactional producer session's state machine (``relay.kafka.transaction``): the table against the
diagram, every transition driven through a ``TransactionalSession`` over a scripted producer (no broker),
and the in-flight window it keeps (``relay.kafka.window``)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from relay.errors import ProducerFatalError, ProducerFencedError, PublishError
from relay.kafka.records import BatchHandle
from relay.kafka.settings import PublisherConfig
from relay.kafka.transaction import TRANSITIONS, TransactionalSession, TxnEvent, TxnState, next_state
from relay.kafka.window import InflightWindow
from tests.unit.test_publisher import TxnProducer

S, E = TxnState, TxnEvent

# The diagram (docs/architecture.md, relay.kafka.transaction), edge by edge; FATAL_ERROR and FATAL apart.
DIAGRAM = {
    (S.IDLE, E.BEGIN): S.OPEN,
    (S.OPEN, E.COMMIT): S.COMMITTING,
    (S.COMMITTING, E.COMMITTED): S.IDLE,
    (S.COMMITTING, E.COMMIT_FAILED): S.OPEN,
    (S.COMMITTING, E.COMMIT_IN_DOUBT): S.FATAL,
    (S.OPEN, E.ABORT): S.ABORTING,
    (S.ABORTING, E.ABORTED): S.IDLE,
    (S.ABORTING, E.ABORT_FAILED): S.FATAL,
    (S.OPEN, E.ABANDON): S.IDLE,
}
FENCED = KafkaError(KafkaError._FENCED, "fenced", fatal=True)


def test_the_table_is_the_diagram() -> None:
    ordinary = {k: v for k, v in TRANSITIONS.items() if k[0] is not S.FATAL and k[1] is not E.FATAL_ERROR}
    assert ordinary == DIAGRAM
    assert all(TRANSITIONS[(state, E.FATAL_ERROR)] is S.FATAL for state in S)
    assert all(TRANSITIONS[(S.FATAL, event)] is S.FATAL for event in E)


@pytest.mark.parametrize(
    ("state", "event"), [pair for pair in itertools.product(S, E) if pair not in TRANSITIONS]
)
def test_an_event_the_table_does_not_allow_stops_the_publisher(state: TxnState, event: TxnEvent) -> None:
    with pytest.raises(ProducerFatalError, match="a relay bug"):
        next_state(state, event)


@dataclass
class Observed(TxnProducer):
    """A transactional producer that notes the session's state whenever commit or abort is called, and
    can serve an error callback inside the commit (as librdkafka's flush does)."""

    session: Any = None
    seen: list[tuple[str, TxnState]] = field(default_factory=list)
    during_commit: KafkaError | None = None  # handed to the error callback inside commit_transaction
    commit_errors: Iterator[KafkaError] | None = None  # raised by every commit while it yields

    def commit_transaction(self, timeout: float = 0.0) -> None:
        self.seen.append(("commit", self.session.state))
        if self.during_commit is not None:
            self.settings["error_cb"](self.during_commit)
        if self.commit_errors is not None:
            err = next(self.commit_errors, None)
            if err is not None:
                raise KafkaException(err)
        super().commit_transaction(timeout)

    def abort_transaction(self, timeout: float = 0.0) -> None:
        self.seen.append(("abort", self.session.state))
        super().abort_transaction(timeout)


class Session:
    """A ``TransactionalSession`` over an ``Observed`` producer, initialised, with its window."""

    def __init__(self) -> None:
        self.window = InflightWindow()
        config = PublisherConfig("127.0.0.1:9", transactional_id="canal-relay-t", delivery_timeout_s=0.5)
        factory: Any = Observed  # a scripted stand-in for confluent-kafka's Producer
        self.session = TransactionalSession(config, self.window, factory)
        self.producer.session = self.session
        self.session.init()

    @property
    def producer(self) -> Observed:
        producer: Any = self.session.producer
        assert isinstance(producer, Observed)
        return producer

    def state(self) -> TxnState:
        """The session's state, read afresh (calls change it)."""
        return self.session.state

    def open_delivered(self, batch_id: int = 1) -> BatchHandle:
        """A batch with no record left to deliver, in the open transaction."""
        return self.session.open_batch(batch_id, 0, "")


def test_begin_opens_a_transaction() -> None:  # IDLE --BEGIN--> OPEN
    s = Session()
    assert s.state() is S.IDLE and s.session.age() is None
    s.open_delivered()
    assert s.state() is S.OPEN and s.session.age() is not None
    assert s.producer.calls == ["init", "begin"]
    s.open_delivered(2)  # a second batch joins the open transaction
    assert s.producer.calls == ["init", "begin"]


def test_a_commit_passes_through_committing_back_to_no_transaction() -> None:  # OPEN→COMMITTING→IDLE
    s = Session()
    last = s.open_delivered()
    assert s.session.commit(last)
    assert s.producer.seen == [("commit", S.COMMITTING)]
    assert s.state() is S.IDLE and s.session.age() is None
    assert [h.batch_id for h in s.window.completed_prefix()] == [1]


def test_a_failed_commit_leaves_the_transaction_open_to_be_aborted() -> None:  # COMMITTING→OPEN
    s = Session()
    last = s.open_delivered()
    s.producer.fail_commit = KafkaError(KafkaError._TIMED_OUT, "scripted", txn_requires_abort=True)
    assert not s.session.commit(last)
    assert s.state() is S.OPEN
    failed = s.window.failed()
    assert failed is not None and isinstance(failed.error, PublishError) and failed.error.retriable


def test_an_abort_passes_through_aborting_back_to_no_transaction() -> None:  # OPEN→ABORTING→IDLE
    s = Session()
    s.open_delivered()
    assert s.session.abort() == [1]
    assert s.producer.seen == [("abort", S.ABORTING)]
    assert s.state() is S.IDLE and s.window.count() == 0


def test_a_relay_whose_term_is_over_abandons_the_transaction_without_aborting() -> None:  # OPEN→IDLE
    s = Session()
    s.open_delivered()
    assert s.session.abort(term_over=True) == [1]
    assert s.producer.seen == []  # no abort_transaction: the successor's init_transactions aborts it
    assert s.state() is S.IDLE and s.window.count() == 0 and s.session.age() is None
    s.open_delivered(2)  # (a relay that stays up would begin a new one)
    assert s.state() is S.OPEN


def test_an_abort_after_a_failed_commit_goes_through_aborting() -> None:  # COMMITTING→OPEN→ABORTING→IDLE
    s = Session()
    last = s.open_delivered()
    s.producer.fail_commit = KafkaError(KafkaError._TIMED_OUT, "scripted", txn_requires_abort=True)
    assert not s.session.commit(last)
    assert s.session.abort() == [1]
    assert s.producer.seen == [("commit", S.COMMITTING), ("abort", S.ABORTING)]
    assert s.state() is S.IDLE


def test_an_abort_that_fails_leaves_the_outcome_unknown_and_stops() -> None:  # ABORTING→FATAL
    s = Session()
    s.open_delivered()
    s.producer.fail_abort = [KafkaError(KafkaError._STATE, "scripted")]  # neither retriable nor fatal
    s.session.abort()
    assert s.state() is S.FATAL
    assert isinstance(s.session.fatal, ProducerFatalError) and "outcome is unknown" in str(s.session.fatal)


@pytest.mark.parametrize("state", [S.IDLE, S.OPEN])
def test_a_fatal_error_from_the_error_callback_is_final(state: TxnState) -> None:  # IDLE/OPEN→FATAL
    s = Session()
    if state is S.OPEN:
        s.open_delivered()
    assert s.state() is state
    s.producer.settings["error_cb"](FENCED)
    assert s.state() is S.FATAL and isinstance(s.session.fatal, ProducerFencedError)
    s.session.abort()  # abandoned: the broker aborts it; nothing moves the session out of FATAL
    assert s.state() is S.FATAL and ("abort", S.ABORTING) not in s.producer.seen


def test_a_fenced_commit_is_final() -> None:  # COMMITTING→FATAL
    s = Session()
    last = s.open_delivered()
    s.producer.fail_commit = KafkaError(KafkaError.PRODUCER_FENCED, "scripted")
    with pytest.raises(ProducerFencedError):
        s.session.commit(last)
    assert s.producer.seen == [("commit", S.COMMITTING)]
    assert s.state() is S.FATAL


def test_a_commit_unanswered_at_the_delivery_timeout_is_in_doubt_and_final() -> None:  # COMMITTING→FATAL
    s = Session()
    last = s.open_delivered()
    unanswered = KafkaError(KafkaError._TIMED_OUT, "scripted", retriable=True)
    s.producer.commit_errors = itertools.repeat(unanswered)  # e.g. Tansu: a fenced EndTxn gets no answer
    with pytest.raises(ProducerFatalError, match=r"commit_transaction unanswered .*outcome is unknown"):
        s.session.commit(last)
    assert len(s.producer.seen) > 1 and all(seen == ("commit", S.COMMITTING) for seen in s.producer.seen)
    assert s.state() is S.FATAL
    assert s.window.completed_prefix() == [] and s.window.failed() is last
    assert s.session.abort() == [1]  # no abort beside a commit that may be under way (librdkafka: _CONFLICT)
    assert ("abort", S.ABORTING) not in s.producer.seen and s.state() is S.FATAL


def test_a_fencing_during_an_abort_is_final() -> None:  # ABORTING→FATAL
    s = Session()
    s.open_delivered()

    def fenced_now() -> KafkaError:
        s.producer.settings["error_cb"](FENCED)  # what the poll between two abort calls serves
        return KafkaError(KafkaError._TIMED_OUT, "scripted", retriable=True)

    s.producer.fail_abort = [KafkaError(KafkaError._TIMED_OUT, "scripted", retriable=True), fenced_now]
    s.session.abort()
    assert s.producer.seen == [("abort", S.ABORTING), ("abort", S.ABORTING)]
    assert s.state() is S.FATAL and isinstance(s.session.fatal, ProducerFencedError)


def test_a_fencing_served_inside_a_commit_that_then_succeeds_stays_fatal() -> None:  # FATAL absorbs COMMITTED
    s = Session()
    last = s.open_delivered()
    s.producer.during_commit = FENCED
    assert s.session.commit(last)  # the broker committed it
    assert s.state() is S.FATAL and isinstance(s.session.fatal, ProducerFencedError)
    # Nothing more is acked by a fenced relay: its successor resumes from what was committed.
    assert s.window.completed_prefix() == [] and s.window.failed() is last


def test_a_failed_begin_opens_nothing() -> None:
    s = Session()

    def refuse() -> None:
        raise KafkaException(KafkaError(KafkaError._STATE, "scripted"))

    s.producer.begin_transaction = refuse  # type: ignore[method-assign]
    with pytest.raises(PublishError, match="begin_transaction failed"):
        s.session.open_batch(1, 0, "")
    assert s.state() is S.IDLE and s.window.count() == 0


# -- the in-flight window ------------------------------------------------------------------------------


def test_the_window_hands_back_the_delivered_prefix_and_names_the_first_failure() -> None:
    window = InflightWindow()
    one, two, three = (BatchHandle(i, 1, 1) for i in (1, 2, 3))
    for handle in (one, two, three):
        window.add(handle)
    two.pending = three.pending = 0
    assert window.completed_prefix() == [] and window.pending()
    one.pending = 0
    assert window.completed_prefix() == [one, two, three] and window.count() == 0


def test_the_window_fails_forgets_and_disowns() -> None:
    window = InflightWindow()
    one, two = BatchHandle(1, 1, 1), BatchHandle(2, 1, 1)
    window.add(one)
    window.add(two)
    two.fail(PublishError("two"))
    assert window.failed() is two
    bare = ProducerFatalError("bare")
    window.fail_all(bare)
    assert (_error(one), _error(two)) == (bare, two.error) and two.error is not bare  # the first stays
    window.forget_error(bare)
    assert _error(one) is None and window.failed() is two
    assert window.disown() == [one, two] and one.aborted and two.aborted and window.count() == 0


def _error(handle: BatchHandle) -> PublishError | None:
    return handle.error
