"""``FingerprintSkip``'s state machine: every transition of ``TRANSITIONS`` taken by a real sequence of
re-read entries, with what it passes; the one guard (an uncovered standby ending before any match)."""

from __future__ import annotations

import pytest

from relay.canal.entry import Entry
from relay.errors import SourceError
from relay.source.failover import Event, FingerprintSkip, History, State
from relay.source.failover.fingerprint import TRANSITIONS
from tests.unit.test_failover import txn, values

S, E = State, Event

Put = tuple[int, list[str], bool]  # a master transaction put: binlog time (ms), its changes, put whole
Read = tuple[int, list[str]]  # a standby transaction re-read

# Master transactions put (binlog time ms, its changes, put whole), and the standby's re-read of them.
A: Put
B: Put
C: Put
A, B, C = (100_000, ["a"], True), (101_000, ["b"], True), (102_000, ["c"], True)
P = (101_000, ["p1"], False)  # the master died inside it: only its first change was put
OLD, NEW = (50_000, ["old"]), (200_000, ["new"])
A_, B_, C_ = (100_000, ["a"]), (101_000, ["b"]), (102_000, ["c"])
P_ = (101_000, ["p1", "p2"])  # the standby's copy of P, whole
X_ = (100_500, ["x"])  # within the recorded times, matching nothing put

# (history, standby transactions, the transition the last standby transaction takes, what passes)
CASES: dict[tuple[State, Event, State], tuple[list[Put], list[Read], list[str]]] = {
    (S.START, E.WITHIN, S.MATCHING_FIRST): ([A, B], [A_], []),
    (S.START, E.OLDER, S.DROPPING_PRECEDING): ([A, B], [OLD], []),
    (S.START, E.NEWER, S.DONE): ([A, B], [NEW], ["TRANSACTIONBEGIN", "new", "TRANSACTIONEND"]),
    (S.DROPPING_PRECEDING, E.WITHIN, S.MATCHING_FIRST): ([A, B], [OLD, A_], []),
    (S.DROPPING_PRECEDING, E.OLDER, S.DROPPING_PRECEDING): ([A, B], [OLD, OLD], []),
    (S.DROPPING_PRECEDING, E.NEWER, S.DONE): (
        [A, B],
        [OLD, NEW],
        ["TRANSACTIONBEGIN", "new", "TRANSACTIONEND"],
    ),
    (S.MATCHING_FIRST, E.WHOLE, S.DROPPING_MATCHED): ([A, B], [A_], []),
    (S.MATCHING_FIRST, E.WHOLE_LAST, S.MATCHED_LAST): ([A, B], [B_], []),
    (S.MATCHING_FIRST, E.PART, S.PASSING): ([P, C], [P_], ["p2", "TRANSACTIONEND"]),
    (S.MATCHING_FIRST, E.PART_LAST, S.DONE): ([P], [P_], ["p2", "TRANSACTIONEND"]),
    (S.MATCHING_FIRST, E.UNMATCHED, S.DROPPING_PRECEDING): ([A, B], [X_], []),
    (S.MATCHING, E.WHOLE, S.DROPPING_MATCHED): ([A, B, C], [A_, B_], []),
    (S.MATCHING, E.WHOLE_LAST, S.MATCHED_LAST): ([A, B], [A_, B_], []),
    (S.MATCHING, E.PART, S.PASSING): ([A, P, C], [A_, P_], ["p2", "TRANSACTIONEND"]),
    (S.MATCHING, E.PART_LAST, S.DONE): ([A, P], [A_, P_], ["p2", "TRANSACTIONEND"]),
    (S.MATCHING, E.UNMATCHED, S.PASSING): ([A, B], [A_, X_], ["TRANSACTIONBEGIN", "x", "TRANSACTIONEND"]),
    (S.DROPPING_MATCHED, E.WITHIN, S.MATCHING): ([A, B], [A_, B_], []),
    (S.DROPPING_MATCHED, E.OLDER, S.DROPPING_MATCHED): ([A, B], [A_, OLD], []),
    (S.DROPPING_MATCHED, E.NEWER, S.DONE): ([A, B], [A_, NEW], ["TRANSACTIONBEGIN", "new", "TRANSACTIONEND"]),
    (S.PASSING, E.WITHIN, S.MATCHING): ([A, B], [A_, X_, B_], ["TRANSACTIONBEGIN", "x", "TRANSACTIONEND"]),
    (S.PASSING, E.OLDER, S.DROPPING_MATCHED): (
        [A, B],
        [A_, X_, OLD],
        ["TRANSACTIONBEGIN", "x", "TRANSACTIONEND"],
    ),
    (S.PASSING, E.NEWER, S.DONE): (
        [A, B],
        [A_, X_, NEW],
        ["TRANSACTIONBEGIN", "x", "TRANSACTIONEND", "TRANSACTIONBEGIN", "new", "TRANSACTIONEND"],
    ),
    (S.MATCHED_LAST, E.NEXT, S.DONE): ([A, B], [A_, B_, X_], ["TRANSACTIONBEGIN", "x", "TRANSACTIONEND"]),
}


def history_of(spec: list[Put]) -> History:
    history = History(window_ms=600_000)
    for i, (time_ms, rows, whole) in enumerate(spec):
        entries = txn("master", 1_000 * (i + 1), "", time_ms, rows)
        history.record(entries if whole else entries[: 1 + len(rows)])
    return history


def standby_of(spec: list[Read]) -> list[Entry]:
    out: list[Entry] = []
    for i, (time_ms, rows) in enumerate(spec):
        out += txn("replica", 500 * (i + 1), "", time_ms, rows, xid=str(900 + i))
    return out


def test_every_transition_has_a_case() -> None:
    assert set(CASES) == {(state, event, after) for (state, event), after in TRANSITIONS.items()}


@pytest.mark.parametrize("transition", list(CASES), ids=lambda t: f"{t[0].name}-{t[1].name}-{t[2].name}")
@pytest.mark.parametrize("batch", ["whole", "entry_by_entry"])
def test_transition(transition: tuple[State, Event, State], batch: str) -> None:
    history, standby, passed = CASES[transition]
    skip = FingerprintSkip(history_of(history))
    entries = standby_of(standby)
    out: list[Entry] = []
    for part in [entries] if batch == "whole" else [[e] for e in entries]:
        out += skip.filter(part)
    # the last standby transaction takes it (WITHIN: when it begins; it is then decided at its END)
    taken = list(skip.trace)
    assert transition in taken[-2:], taken
    assert skip.state is taken[-1][2] and skip.done == (skip.state is S.DONE)
    assert values(out) == passed
    for before, event, after in skip.trace:  # every step it took is in the table
        assert TRANSITIONS[(before, event)] is after


@pytest.mark.parametrize("standby", [[NEW], [OLD, NEW], [X_, NEW]])
def test_an_uncovered_standby_ending_before_any_match_stops(standby: list[Read]) -> None:
    skip = FingerprintSkip(history_of([A, B]), covered=False, address="standby:3306")
    with pytest.raises(SourceError, match="purged from the standby's binlog"):
        skip.filter(standby_of(standby))
    assert skip.state is not S.DONE


@pytest.mark.parametrize("standby", [[A_, NEW], [P_], [A_, B_, X_]])
def test_an_uncovered_standby_ending_after_a_match_passes(standby: list[Read]) -> None:
    history = [P] if standby == [P_] else [A, B]
    skip = FingerprintSkip(history_of(history), covered=False, address="standby:3306")
    skip.filter(standby_of(standby))
    assert skip.done


def test_nothing_recorded_is_done_at_once() -> None:
    skip = FingerprintSkip(History(window_ms=1_000))
    assert skip.state is S.DONE and skip.done
    entries = standby_of([A_])
    assert skip.filter(entries) == entries


def test_a_pair_not_in_the_table_is_a_bug() -> None:
    skip = FingerprintSkip(history_of([A, B]))
    with pytest.raises(AssertionError, match="no transition from START on WHOLE"):
        skip._go(Event.WHOLE)
