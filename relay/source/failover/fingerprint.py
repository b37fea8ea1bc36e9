"""The timestamp fallback's fingerprint matching (``FingerprintSkip``) as an explicit state machine.

A standby re-read from a time before the last change put holds copies of transactions already put from the
master; ``FingerprintSkip`` drops them by comparing their changes with ``History``. Its control state is
one ``State``; what moves it is one ``Event``; ``TRANSITIONS`` is the only place that says which state an
event leads to (``FingerprintSkip._go``; a pair not in it is a bug and raises ``AssertionError``). The
data of the transaction being matched (the held entries, the recorded transactions still matching it, how
many of its changes matched, a partial match) is not control state: it is reset at each transition.

    START --WITHIN--> MATCHING_FIRST      START --OLDER--> DROPPING_PRECEDING      START --NEWER--> DONE*
    DROPPING_PRECEDING --WITHIN--> MATCHING_FIRST  | --OLDER--> DROPPING_PRECEDING | --NEWER--> DONE*
    MATCHING_FIRST --UNMATCHED--> DROPPING_PRECEDING (it precedes the first transaction put)
    MATCHING_FIRST, MATCHING --WHOLE--> DROPPING_MATCHED   --WHOLE_LAST--> MATCHED_LAST
                             --PART--> PASSING             --PART_LAST--> DONE
    MATCHING --UNMATCHED--> PASSING (a new transaction, after the first match)
    DROPPING_MATCHED, PASSING --WITHIN--> MATCHING | --OLDER--> DROPPING_MATCHED | --NEWER--> DONE
    MATCHED_LAST --NEXT--> DONE

``DONE*``: entered before any match on a standby whose binlog may have lost transactions (``covered``
False), the relay stops (``SourceError``) instead. The diagram is in ``docs/architecture.md`` too.

Threads: the instance's parser thread.
"""

from __future__ import annotations

import logging
from collections import deque
from enum import Enum

from relay.canal.entry import Entry, EntryPosition, EntryType
from relay.errors import SourceError
from relay.source.failover.history import HOLD_BYTES, History, digest

log = logging.getLogger(__name__)


class State(Enum):
    """Where ``FingerprintSkip`` is; the entries of the current standby transaction are matched (held),
    passed or dropped accordingly (``MATCHED``, ``DROPPED``, the rest pass)."""

    START = "start"  # no standby transaction read yet
    MATCHING_FIRST = "matching first"  # a transaction held and compared; none matched yet
    DROPPING_PRECEDING = "dropping preceding"  # one that precedes the first transaction put: dropped
    MATCHING = "matching"  # a transaction held and compared, after some transaction was matched
    DROPPING_MATCHED = "dropping matched"  # after a match (the copy of one put, or one older than all)
    PASSING = "passing"  # a new transaction between copies (unmatched, or the rest of a partial match)
    MATCHED_LAST = "matched last"  # the copy of the last transaction put: done at the next one
    DONE = "done"  # nothing more can match: everything passes


class Event(Enum):
    """What happened: a standby transaction began (``WITHIN``, ``OLDER``, ``NEWER`` than the recorded
    binlog times; ``NEXT`` after the last one put was matched), or the one being matched was decided."""

    WITHIN = "within"  # began within the recorded binlog times: compare it
    OLDER = "older"  # began before the oldest recorded transaction
    NEWER = "newer"  # began after the newest recorded transaction
    NEXT = "next"  # began after the copy of the last transaction put
    WHOLE = "whole"  # ended as the copy of a recorded transaction put whole (not the last one)
    WHOLE_LAST = "whole last"  # ... of the last one put
    PART = "part"  # began as a recorded partial transaction and went on (the master died inside it)
    PART_LAST = "part last"  # ... the last one put: the master died inside it
    UNMATCHED = "unmatched"  # matches no recorded transaction


S, E = State, Event
TRANSITIONS: dict[tuple[State, Event], State] = {
    (S.START, E.WITHIN): S.MATCHING_FIRST,
    (S.START, E.OLDER): S.DROPPING_PRECEDING,
    (S.START, E.NEWER): S.DONE,
    (S.DROPPING_PRECEDING, E.WITHIN): S.MATCHING_FIRST,
    (S.DROPPING_PRECEDING, E.OLDER): S.DROPPING_PRECEDING,
    (S.DROPPING_PRECEDING, E.NEWER): S.DONE,
    (S.MATCHING_FIRST, E.WHOLE): S.DROPPING_MATCHED,
    (S.MATCHING_FIRST, E.WHOLE_LAST): S.MATCHED_LAST,
    (S.MATCHING_FIRST, E.PART): S.PASSING,
    (S.MATCHING_FIRST, E.PART_LAST): S.DONE,
    (S.MATCHING_FIRST, E.UNMATCHED): S.DROPPING_PRECEDING,
    (S.MATCHING, E.WHOLE): S.DROPPING_MATCHED,
    (S.MATCHING, E.WHOLE_LAST): S.MATCHED_LAST,
    (S.MATCHING, E.PART): S.PASSING,
    (S.MATCHING, E.PART_LAST): S.DONE,
    (S.MATCHING, E.UNMATCHED): S.PASSING,
    (S.DROPPING_MATCHED, E.WITHIN): S.MATCHING,
    (S.DROPPING_MATCHED, E.OLDER): S.DROPPING_MATCHED,
    (S.DROPPING_MATCHED, E.NEWER): S.DONE,
    (S.PASSING, E.WITHIN): S.MATCHING,
    (S.PASSING, E.OLDER): S.DROPPING_MATCHED,
    (S.PASSING, E.NEWER): S.DONE,
    (S.MATCHED_LAST, E.NEXT): S.DONE,
}
del S, E

MATCHED = frozenset({State.MATCHING_FIRST, State.MATCHING})  # the current transaction's entries are held
DROPPED = frozenset({State.DROPPING_PRECEDING, State.DROPPING_MATCHED, State.MATCHED_LAST})
# No recorded transaction has been matched yet (a new one before the first match precedes it).
BEFORE_MATCH = frozenset({State.START, State.MATCHING_FIRST, State.DROPPING_PRECEDING})

# The events that are a match of a recorded transaction.
MATCHES = frozenset({Event.WHOLE, Event.WHOLE_LAST, Event.PART, Event.PART_LAST})

# Why the filtering ends (logs, the error of an uncovered standby).
_WHY = {
    Event.NEWER: "a transaction newer than every one put from the master",
    Event.NEXT: "matched the last transaction put from the master",
    Event.PART_LAST: "matched the last (partial) transaction put from the master",
}


class FingerprintSkip:
    """Drops re-read transactions that match ``history`` entry for entry (see the module docstring).

    Both sides are compared after the sink (``History`` records what was put; the instance filters the
    standby's entries through its sink first), and by their changes only: a transaction touching kept
    and filtered tables looks the same on both servers. The entries of a standby transaction are held
    back while its changes match the start of some recorded transaction. A recorded transaction that
    was put whole (``closed``) is matched only when the standby transaction ends there too (its END, or
    a statement that closes it, comes after the same number of changes): one that goes on past it is
    another transaction. A match drops the held entries; a divergence (or its END coming first) releases
    them — once some recorded transaction has been matched. Before that, a transaction that matches none
    is dropped: the standby's binlog holds the master's transactions in the master's order, so one that
    comes before the copy of every transaction put precedes the first one put — it was published before,
    or precedes where the relay started (its changes are in the snapshot, or were never asked for).
    Binlog times have a resolution of one second, so "older than the oldest recorded" alone does not
    tell such a transaction in the same second apart (a relay that started at the binlog end, e.g. for
    its initial snapshot, under load). The last recorded transaction may be partial (the master died
    inside it, ``closed`` False): matching its recorded entries drops just those, and everything after
    passes (the rest of that transaction included). A transaction older than the oldest one recorded is
    dropped (the same reason). One newer than every recorded one (by binlog time) ends the filtering.

    The held entries of a standby transaction being matched are bounded by ``hold_bytes`` (their
    ``Entry.footprint``): beyond it they are let go (``_discarded`` counts them), since every outcome but
    an improbable one drops them — a full match (the copy of a transaction put whole), or a partial one
    (the master died inside it: what was put is dropped, the rest passes). Should the transaction then
    need them — it differs after matching more than ``hold_bytes`` of changes put, or goes on past a
    partial one it matched beyond that — the relay stops (``SourceError``): which of them were published
    cannot be told any more, and it does not guess.
    """

    def __init__(
        self, history: History, *, covered: bool = True, address: str = "", hold_bytes: int = HOLD_BYTES
    ) -> None:
        self.history = list(history.txns)
        # False: the standby's binlog may have lost (purged) transactions before the first one it holds
        # (``locate_by_timestamp``); only a match proves that it holds the copy of one put and,
        # being gap-free from there, everything after it. Ending the filtering without a match stops
        # the relay (``_go`` to DONE): what comes then may follow a gap.
        self.covered, self.address = covered, address
        self.oldest_ms = self.history[0].time_ms if self.history else 0
        # The newest binlog time put, not the last one's: binlog times are statement starts, so one put
        # before the last can be newer (it started later and committed first); its copy must be matched.
        self.newest_ms = max((t.time_ms for t in self.history), default=0)
        self.state = State.START if self.history else State.DONE
        self.done = self.state is State.DONE  # ``EntryFilter``: kept equal to ``state is DONE`` by ``_go``
        # The last transitions taken (tests, debugging): one a standby transaction, so bounded.
        self.trace: deque[tuple[State, Event, State]] = deque(maxlen=256)
        self._current: EntryPosition | None = None
        self.hold_bytes = hold_bytes
        # The transaction being matched (reset by every transition):
        self._held: list[Entry] = []
        self._held_bytes = 0  # the footprint of ``_held``
        self._discarded = 0  # entries of the current transaction let go before ``_held`` (class docstring)
        self._matched = 0  # ROWDATA entries of the current transaction matched so far
        self._candidates: list[int] = []  # the recorded transactions it still matches
        # A partial (not closed) recorded transaction whose every recorded change the current standby
        # transaction matched: (its index, how many of its entries those are, counted from its start).
        self._partial: tuple[int, int] | None = None
        self.discards = 0  # transactions whose held entries were let go (tests, logs)
        self.preceding = 0  # unmatched transactions dropped before the first match (they precede it)

    def filter(self, entries: list[Entry]) -> list[Entry]:
        out: list[Entry] = []
        for e in entries:
            if not self.done and e.txn.start != self._current:
                out += self._begin(e)
            if self.state in MATCHED:
                out += self._match(e) if e.entry_type == EntryType.ROWDATA else self._hold(e)
            elif self.state not in DROPPED:
                out.append(e)
        return out

    # --- the one place the state changes ------------------------------------------------------------

    def _go(self, event: Event) -> None:
        """Take the transition of ``event`` (``TRANSITIONS``); entering DONE before any match on an
        uncovered standby stops the relay."""
        before = self.state
        after = TRANSITIONS.get((before, event))
        if after is None:
            raise AssertionError(f"FingerprintSkip: no transition from {before.name} on {event.name}")
        if after is State.DONE:
            self._finish(
                _WHY.get(event, event.value), matched_any=before not in BEFORE_MATCH or event in MATCHES
            )
        self._held, self._held_bytes, self._discarded, self._matched, self._partial = [], 0, 0, 0, None
        self._candidates = list(range(len(self.history))) if after in MATCHED else []
        self.state, self.done = after, after is State.DONE
        self.trace.append((before, event, after))

    def _finish(self, why: str, *, matched_any: bool) -> None:
        if not self.covered and not matched_any:
            last = self.history[-1] if self.history else None
            raise SourceError(
                f"failover to the standby {self.address}: its oldest binlog begins after the re-read's "
                "start (the last change put minus source.failover.fallback_interval_seconds), and it "
                f"reached {why} without holding the copy of any transaction put from the master (the "
                f"last one put: binlog time {last.time_ms if last else 0} ms): transactions after it may "
                "have been purged from the standby's binlog. Not guessing: switch by GTID (servers with "
                "GTIDs, source.failover.mode auto or gtid), or take a new snapshot on the promoted "
                "standby (stop the relay, set source.host to it, remove the saved position, start with "
                "snapshot.mode when_needed)"
            )
        log.info(
            "failover: re-read changes dropped up to here (%s); %d unmatched transaction(s) dropped as "
            "preceding the first one put",
            why,
            self.preceding,
        )

    # --- events -------------------------------------------------------------------------------------

    def _begin(self, e: Entry) -> list[Entry]:
        """A new standby transaction; the previous one, if still held, never closed: it matched a partial
        recorded one, or none."""
        released = self._settle([]) if self._held or self._discarded else []
        self._current = e.txn.start
        if self.done:  # that was the last (partial) transaction put
            return released
        t = e.header.execute_time
        if self.state is State.MATCHED_LAST:
            self._go(Event.NEXT)
        elif t > self.newest_ms:
            self._go(Event.NEWER)
        elif t < self.oldest_ms:
            self._go(Event.OLDER)
        else:
            self._go(Event.WITHIN)
        return released

    def _hold(self, e: Entry) -> list[Entry]:
        """BEGIN (or another entry without a change) of a transaction being matched: held with it; its
        END decides (``_ended``)."""
        self._keep(e)
        return self._ended() if e.closes_txn else []

    def _match(self, e: Entry) -> list[Entry]:
        k = self._matched
        d = digest(e)
        hist = self.history
        alive = [i for i in self._candidates if k < hist[i].changes and hist[i].digest(k) == d]
        if not alive:  # diverged: it goes on past (or differs from) every recorded transaction
            return self._settle([e])
        self._candidates = alive
        self._keep(e)
        self._matched += 1
        partial = next((i for i in alive if not hist[i].closed and hist[i].changes == self._matched), None)
        if partial is not None:
            self._partial = (partial, self._discarded + len(self._held))
        return self._ended() if e.closes_txn else []

    def _ended(self) -> list[Entry]:
        """The standby transaction closed (its last entry is held): it matches a closed recorded one with
        as many changes, else a partial one it started with, else none."""
        hist = self.history
        full = next(
            (i for i in self._candidates if hist[i].closed and hist[i].changes == self._matched),
            None,
        )
        if full is None:
            return self._settle([])
        log.debug("failover: dropped %d re-read entries already put", self._discarded + len(self._held))
        hist.pop(full)
        # the last one put: everything after it is new
        self._go(Event.WHOLE_LAST if full == len(hist) else Event.WHOLE)
        return []

    def _settle(self, rest: list[Entry]) -> list[Entry]:
        """The held entries (and ``rest`` of the transaction) match no closed recorded transaction: drop
        the changes a partial recorded one had put and pass the rest, or handle them as unmatched."""
        if self._partial is None:
            return self._unmatched([*self._held, *rest])
        index, put = self._partial
        self._let_go(put)
        released = [*self._held[put - self._discarded :], *rest]
        log.debug("failover: dropped %d re-read entries of a transaction put in part", put)
        self.history.pop(index)
        # the master died inside the last one put: the rest of it is new
        self._go(Event.PART_LAST if index == len(self.history) else Event.PART)
        return released

    def _unmatched(self, released: list[Entry]) -> list[Entry]:
        """The held entries of a standby transaction that matches no recorded one (and the rest of it):
        new once a recorded transaction was matched; before that, it precedes the first one put."""
        if self.state is State.MATCHING:
            self._let_go(0)
            self._go(Event.UNMATCHED)
            return released
        self.preceding += 1
        log.debug("failover: dropped a re-read transaction from before the first one put")
        self._go(Event.UNMATCHED)
        return []

    # --- holding ------------------------------------------------------------------------------------

    def _keep(self, e: Entry) -> None:
        self._held.append(e)
        self._held_bytes += e.footprint
        if self._held_bytes > self.hold_bytes:
            if not self._discarded:
                self.discards += 1
                log.info(
                    "failover: a re-read transaction at %s:%d matches changes put for more than %d bytes; "
                    "its matched changes are let go as they are read (class FingerprintSkip)",
                    e.txn.start.journal, e.txn.start.offset, self.hold_bytes,
                )  # fmt: skip
            self._discarded += len(self._held)
            self._held, self._held_bytes = [], 0

    def _let_go(self, needed_from: int) -> None:
        """Entries from ``needed_from`` (counted from the transaction's start) must be passed on: stop if
        some of them were let go (class docstring)."""
        if needed_from < self._discarded:
            start = self._current
            where = f"{start.journal}:{start.offset}" if start is not None else "?"
            raise SourceError(
                f"failover to the standby {self.address}: the re-read transaction at {where} matched "
                f"{self._discarded} changes put from the master — more than could be held (half the "
                "store's budget) — and then differed from every transaction put; which of its changes "
                "were published cannot be told any more. Not guessing: switch by GTID (servers with "
                "GTIDs, source.failover.mode auto or gtid), or raise store.memunit so the whole "
                "transaction can be held while it is matched"
            )
