"""Transactional mode's commit intent as a value (``relay.kafka.commit_intent``): written into the point
before the transaction, read back, and settled to that point whenever the outcome cannot be known — never to
the point after it. What Kafka answers for a real transaction (``probe_committed``) is in
tests/integration/test_transactions.py."""

from __future__ import annotations

import pytest

from relay.errors import ConfigError, PositionError
from relay.kafka.commit_intent import PENDING, Probe, Settler, intent, pending, settle, without_intent
from relay.positions.store import ResumePoint

BEFORE = ResumePoint("mysql-bin.000004", 1200, gtid="0-1-7", extra={"snapshot": {"done": True}})
AFTER = ResumePoint("mysql-bin.000004", 5400, skip=2, generation=3)
PROBE = Probe("shop.orders", 2, 4711)


def test_an_intent_keeps_the_point_before_and_carries_the_point_after_and_the_probe() -> None:
    written = intent(BEFORE, AFTER, PROBE)
    # An older relay, which ignores extra, reads the point before the transaction: repeats, never a loss.
    assert (written.journal, written.offset, written.skip, written.gtid) == (
        "mysql-bin.000004",
        1200,
        0,
        "0-1-7",
    )
    assert written.extra["snapshot"] == {"done": True}
    assert pending(written) == (AFTER, PROBE)
    assert pending(ResumePoint.from_json(written.to_json())) == (AFTER, PROBE)  # through the store's text
    assert without_intent(written) == BEFORE and pending(BEFORE) is None


def test_a_malformed_intent_is_a_position_error_naming_it() -> None:
    broken = ResumePoint("mysql-bin.000004", 1200, extra={PENDING: {"after": {"journal": "x"}}})
    with pytest.raises(PositionError, match=PENDING):
        pending(broken)


def test_where_the_broker_cannot_prove_it_hides_aborted_records_the_point_before_is_kept() -> None:
    def shows_aborted() -> None:
        raise ConfigError("kafka.exactly_once", "refused: a read_committed consumer sees an aborted record")

    point, why = settle(intent(BEFORE, AFTER, PROBE), Settler({}, 1.0, shows_aborted))
    assert point == BEFORE and "records may repeat" in why and "aborted record" in why


def test_a_point_without_an_intent_is_kept_as_it_is() -> None:
    def never() -> None:
        raise AssertionError("no proof is needed without an intent")

    assert settle(BEFORE, Settler({}, 1.0, never)) == (BEFORE, "no commit was pending")
