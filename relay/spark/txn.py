"""Which records of a micro-batch the mirror may apply: whole source transactions, in the source's order.

Owns the rule of the mirror's hold-back (``relay.spark.holdback`` runs it once per micro-batch, on the
driver) and the values it keeps between micro-batches: pure logic, no Spark, no I/O.

The relay publishes transaction boundaries (``kafka.transaction_topic``): every data record of a source
transaction carries ``relay.txn.id``, and an END record (``relay.kafka.txn_meta``) counts the transaction's
data records per Kafka topic (``topics``) and gives the range of its change identities
(``first_sequence`` … ``last_sequence``). One source's ENDs are in one partition, in the order its
transactions committed; the relay produces an END only after every record it counts was delivered, and
sequences grow along the source's binlog. So, per source:

1. the transactions after the last one applied (the ``Frontier``) are taken in order of their END; each is
   *complete* when the mirror holds as many distinct records (change identities) of it in each topic it
   reads as the END counts there (an END without per-topic counts, from an older relay: its
   ``event_count`` over every topic read);
2. the complete ones up to the first incomplete one are applied; that one and every change after it wait.
   A transaction whose records are read but whose END is not yet is after every END read: it waits too;
3. a DDL is a barrier: the relay writes it to every partition of its table's topic, after every earlier
   record of that topic. It is *complete* when the mirror holds its copy from every partition (then it
   holds every earlier record of the topic too, so every earlier transaction writing the topic is known);
   an incomplete one waits like an incomplete transaction, and so does everything after it;
4. the rule is one number per source, the *bound*: the first sequence of the first transaction or DDL that
   waits. A record of the source (a row of a transaction, a DDL, a snapshot read, a repeat of something
   already applied) is applied when its sequence is below the bound and waits otherwise. Sequences order
   the source's changes, so the applied records are exactly the source's changes up to the new frontier
   (plus DDLs and snapshot reads after it, before the next transaction: no transaction is cut).

What this does not order: a DDL with a transaction that writes none of its topic's tables (they commute:
neither sees the other's tables), and a snapshot read, which holds a row as the snapshot's SELECT read it.

A source that publishes no boundaries (its relay runs without ``kafka.transaction_topic``) has no bound:
its records are applied as they come, and it has no frontier — ``relay spark cut`` refuses cuts of it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Boundary:
    """A transaction's END record, as the mirror reads it."""

    source: str
    id: str
    position: str  # the binlog ``file:offset`` where the transaction starts
    ts_ms: int  # its commit time at the source
    first: int  # first_sequence
    last: int  # last_sequence
    event_count: int
    topics: Mapping[str, int] | None = None  # data records per topic; None: an older relay's END


@dataclass(frozen=True)
class Seen:
    """A transaction's records the mirror holds in one topic: distinct change identities, their sequences."""

    source: str
    txn: str
    topic: str
    count: int
    low: int
    high: int


@dataclass(frozen=True)
class Barrier:
    """A DDL's copies the mirror holds: from how many partitions of its topic."""

    source: str
    sequence: int
    topic: str
    copies: int


@dataclass(frozen=True)
class Frontier:
    """The last transaction of a source the mirror applied whole (and every one before it)."""

    id: str
    position: str
    ts_ms: int
    sequence: int  # its last change's sequence: the source's changes up to it are applied

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "position": self.position, "ts_ms": self.ts_ms, "sequence": self.sequence}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Frontier:
        return cls(str(data["id"]), str(data["position"]), int(data["ts_ms"]), int(data["sequence"]))

    @classmethod
    def of(cls, end: Boundary) -> Frontier:
        return cls(end.id, end.position, end.ts_ms, end.last)


@dataclass
class Ledger:
    """What the hold-back keeps between micro-batches: each source's frontier, and the sources seen
    publishing no boundaries."""

    frontiers: dict[str, Frontier] = field(default_factory=dict)
    unbounded: set[str] = field(default_factory=set)

    def to_json(self) -> str:
        data = {
            "frontiers": {s: f.to_json() for s, f in sorted(self.frontiers.items())},
            "unbounded": sorted(self.unbounded),
        }
        return json.dumps(data, separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Ledger:
        data = json.loads(text)
        frontiers = {str(s): Frontier.from_json(f) for s, f in dict(data.get("frontiers", {})).items()}
        return cls(frontiers, {str(s) for s in data.get("unbounded", [])})


@dataclass(frozen=True)
class Release:
    """The hold-back's verdict on one micro-batch."""

    bounds: dict[str, int]  # source → the lowest sequence that waits (sources absent: nothing waits)
    ledger: Ledger  # after this batch
    applied: dict[str, int]  # source → transactions this batch applies whole
    waiting: dict[str, int]  # source → transactions (with an END or not) that wait

    def holds(self, source: str | None, sequence: int | None) -> bool:
        """Whether a record of ``source`` with ``sequence`` waits (the rule ``holdback`` runs in Spark)."""
        bound = self.bounds.get(source or "")
        return bound is not None and sequence is not None and sequence >= bound

    def end_waits(self, end: Boundary) -> bool:
        """Whether an END record is kept for a later batch (its transaction is not applied yet)."""
        frontier = self.ledger.frontiers.get(end.source)
        return frontier is None or end.last > frontier.sequence


def _complete(end: Boundary, counts: Mapping[str, int], topics: frozenset[str]) -> bool:
    if end.topics is None:
        return sum(counts.values()) >= end.event_count
    return all(counts.get(t, 0) >= n for t, n in end.topics.items() if t in topics)


def _counts(seen: Iterable[Seen]) -> dict[tuple[str, str], dict[str, int]]:
    out: dict[tuple[str, str], dict[str, int]] = {}
    for s in seen:
        per_topic = out.setdefault((s.source, s.txn), {})
        per_topic[s.topic] = per_topic.get(s.topic, 0) + s.count
    return out


def _barrier_bound(barriers: list[Barrier], partitions: Mapping[str, int]) -> tuple[int | None, int]:
    """(the first sequence of an incomplete DDL, how many are incomplete): copies from fewer partitions
    than its topic has (a topic the metadata does not name: never complete)."""
    copies: dict[tuple[int, str], int] = {}
    for b in barriers:
        copies[(b.sequence, b.topic)] = copies.get((b.sequence, b.topic), 0) + b.copies
    waiting = sorted(seq for (seq, topic), n in copies.items() if n < partitions.get(topic, n + 1))
    return (waiting[0] if waiting else None), len(waiting)


def _source_bound(
    source: str, frontier: Frontier | None, ends: list[Boundary], seen: list[Seen], topics: frozenset[str]
) -> tuple[int | None, list[Boundary], int]:
    """(the bound, the ENDs applied whole in order, how many transactions wait) of one source."""
    done = -1 if frontier is None else frontier.sequence
    by_id: dict[str, Boundary] = {}
    for end in ends:  # an END repeated after a relay restart counts the same transaction: one is enough
        if end.last > done:
            by_id.setdefault(end.id, end)
    ordered = sorted(by_id.values(), key=lambda e: e.first)
    counts = _counts(seen)
    applied: list[Boundary] = []
    bound: int | None = None
    for end in ordered:
        if not _complete(end, counts.get((source, end.id), {}), topics):
            bound = end.first
            break
        applied.append(end)
    waiting = len(ordered) - len(applied)
    # Records of transactions whose END is not read: after every END read (ENDs are in commit order).
    last_end = max([done, *(e.last for e in ends)])
    ended = {e.id for e in ends}
    open_lows: dict[str, int] = {}
    for s in seen:
        if s.txn not in ended and s.high > last_end:
            open_lows[s.txn] = min(s.low, open_lows.get(s.txn, s.low))
    if open_lows:
        waiting += len(open_lows)
        low = min(open_lows.values())
        bound = low if bound is None else min(bound, low)
    if bound is not None:
        applied = [e for e in applied if e.last < bound]
    return bound, applied, waiting


def release(
    ledger: Ledger,
    ends: Iterable[Boundary],
    seen: Iterable[Seen],
    topics: Iterable[str],
    without_boundaries: Iterable[str] = (),
    barriers: Iterable[Barrier] = (),
    partitions: Mapping[str, int] | None = None,
) -> Release:
    """The verdict on a micro-batch: ``ends`` are the END records it holds (read now or kept from earlier
    batches), ``seen`` the transactions' records it holds per topic, ``topics`` the data topics the mirror
    reads, ``without_boundaries`` the sources of its live row changes that carry no transaction id,
    ``barriers`` its DDLs' copies and ``partitions`` the partition count of their topics."""
    wanted = frozenset(topics)
    by_source: dict[str, list[Boundary]] = {}
    for end in ends:
        by_source.setdefault(end.source, []).append(end)
    seen_by: dict[str, list[Seen]] = {}
    for s in seen:
        seen_by.setdefault(s.source, []).append(s)
    ddl_by: dict[str, list[Barrier]] = {}
    for b in barriers:
        ddl_by.setdefault(b.source, []).append(b)
    after = Ledger(dict(ledger.frontiers), set(ledger.unbounded))
    bounds: dict[str, int] = {}
    applied: dict[str, int] = {}
    waiting: dict[str, int] = {}
    for source in sorted(by_source.keys() | seen_by.keys() | ddl_by.keys()):
        frontier = ledger.frontiers.get(source)
        bound, done, held = _source_bound(
            source, frontier, by_source.get(source, []), seen_by.get(source, []), wanted
        )
        ddl, ddl_waiting = _barrier_bound(ddl_by.get(source, []), partitions or {})
        if ddl is not None:
            bound = ddl if bound is None else min(bound, ddl)
            done = [e for e in done if e.last < bound]
            held += ddl_waiting
        if bound is not None:
            bounds[source] = bound
        if done:
            after.frontiers[source] = Frontier.of(done[-1])
        applied[source], waiting[source] = len(done), held
        if source in by_source or source in seen_by:
            after.unbounded.discard(source)
    for source in without_boundaries:
        if source not in after.frontiers and source not in by_source and source not in seen_by:
            after.unbounded.add(source)
    return Release(bounds, after, applied, waiting)
