"""The mirror's hold-back rule (``relay.spark.txn.release``) against a simulated relay and Kafka.

A seeded generator makes a source's history: transactions over two topics (some only in a topic the mirror
does not read), DDLs and snapshot reads between them (no transaction), a transaction whose END never comes
(an "orphan", as the relay logs when a transaction ends without its closing event), ENDs of an older relay
(no per-topic counts: every topic read), and a relay crash that
publishes a suffix again (records and ENDs repeated). Kafka is modelled as the relay fills it: each record in
its partition in binlog order, a transaction's END (one partition, commit order) only after all its records.
The mirror reads micro-batches that end anywhere in each partition — independently per partition, as a
rate limit or planning skew makes them — and carries what waits, exactly as ``relay.spark.holdback`` does
with the rule's ``Release.holds`` / ``end_waits``. After every micro-batch:

- no transaction is applied in part (each has 0 or all of its records in the mirror's topics applied);
- the applied transactions are a prefix of the source's commit order, and the frontier names its last;
- a DDL is applied neither before a transaction before it that writes its topic, nor after one after it;
- once every record is read, every transaction is applied (the rule never stalls).

Seeds: a fixed set here; ``RELAY_FUZZ_SEEDS=N`` runs N more; a failure prints its seed.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field

import pytest

from relay.spark.txn import Barrier, Boundary, Ledger, Seen, release

SOURCE = "src"
TOPICS = ("t0", "t1")
READ = ("t0",)  # the mirror's topics: t1 holds tables it does not mirror


@dataclass(frozen=True)
class Rec:
    topic: str
    partition: int
    seq: int
    txn: str | None  # None: a DDL or a snapshot read
    kind: str = "row"


@dataclass
class History:
    txns: list[tuple[str, list[Rec]]] = field(default_factory=list)  # commit order
    bare: list[Rec] = field(default_factory=list)  # DDL / snapshot reads
    ends: list[Boundary] = field(default_factory=list)
    logs: dict[tuple[str, int], list[Rec | Boundary]] = field(default_factory=dict)  # the partitions
    orphan: str | None = None


def make_history(rng: random.Random, old_ends: bool) -> History:
    h = History()
    seq = 1000
    parts = {(t, p): [] for t in (*TOPICS, "txn") for p in range(2 if t != "txn" else 1)}
    h.logs = parts  # type: ignore[assignment]
    for i in range(rng.randint(4, 14)):
        if rng.random() < 0.3:  # a DDL (a barrier: a copy in every partition of its topic) or a snapshot read
            seq += 10
            kind = rng.choice(("ddl", "snapshot"))
            copies = range(2) if kind == "ddl" else [rng.randrange(2)]
            for p in copies:
                rec = Rec("t0", p, seq, None, kind)
                h.bare.append(rec)
                parts[(rec.topic, rec.partition)].append(rec)
        txn = f"g-{i}"
        topics = rng.choice([("t0",), ("t1",), ("t0", "t1"), ("t0", "t0", "t1")])
        recs = []
        for _ in range(rng.randint(1, 5)):
            seq += 10
            topic = rng.choice(topics)
            recs.append(Rec(topic, rng.randrange(2), seq, txn))
        for r in recs:
            parts[(r.topic, r.partition)].append(r)
        counts: dict[str, int] = {}
        for r in recs:
            counts[r.topic] = counts.get(r.topic, 0) + 1
        if i == 2 and rng.random() < 0.3:
            h.orphan = txn  # its END never comes
            h.txns.append((txn, recs))
            continue
        end = Boundary(
            SOURCE, txn, f"bin.000001:{recs[0].seq}", seq, recs[0].seq, recs[-1].seq, len(recs),
            None if old_ends else counts,
        )  # fmt: skip
        h.txns.append((txn, recs))
        h.ends.append(end)
        parts[("txn", 0)].append(end)  # type: ignore[arg-type]
    if rng.random() < 0.5:  # a relay crash: a suffix published again (same identities), ENDs too
        cut = rng.randrange(len(h.txns))
        for txn, recs in h.txns[cut:]:
            for r in recs:
                parts[(r.topic, r.partition)].append(r)
            found = [e for e in h.ends if e.id == txn]
            parts[("txn", 0)].extend(found)  # type: ignore[arg-type]
    return h


@dataclass
class Mirror:
    reads: tuple[str, ...] = READ
    ledger: Ledger = field(default_factory=Ledger)
    held: list[Rec | Boundary] = field(default_factory=list)
    applied: set[tuple[int, str | None]] = field(default_factory=set)
    read_to: dict[tuple[str, int], int] = field(default_factory=dict)

    def batch(self, h: History, upto: dict[tuple[str, int], int]) -> None:
        new: list[Rec | Boundary] = []
        for tp, log in h.logs.items():
            if tp[0] in (*self.reads, "txn"):
                start = self.read_to.get(tp, 0)
                new += log[start : upto[tp]]
                self.read_to[tp] = max(start, upto[tp])
        rows = self.held + new
        ends = [r for r in rows if isinstance(r, Boundary)]
        groups: dict[tuple[str, str], set[int]] = {}
        for r in rows:
            if isinstance(r, Rec) and r.txn is not None:
                groups.setdefault((r.txn, r.topic), set()).add(r.seq)
        seen = [Seen(SOURCE, t, topic, len(s), min(s), max(s)) for (t, topic), s in groups.items()]
        copies: dict[tuple[int, str], set[int]] = {}
        for r in rows:
            if isinstance(r, Rec) and r.kind == "ddl":
                copies.setdefault((r.seq, r.topic), set()).add(r.partition)
        ddl = [Barrier(SOURCE, seq, topic, len(p)) for (seq, topic), p in copies.items()]
        counts = {t: 2 for t in TOPICS}
        verdict = release(self.ledger, ends, seen, self.reads, barriers=ddl, partitions=counts)
        self.held = []
        for r in rows:
            if isinstance(r, Boundary):
                if verdict.end_waits(r):
                    self.held.append(r)
            elif verdict.holds(SOURCE, r.seq):
                self.held.append(r)
            else:
                self.applied.add((r.seq, r.txn))
        self.ledger = verdict.ledger


def check(h: History, m: Mirror, seed: int, final: bool) -> None:
    order, READ = [t for t, _ in h.txns], m.reads  # noqa: N806 (the module's constant, per run)
    done = []
    for txn, recs in h.txns:
        if txn == h.orphan:
            continue  # no END ever: it cannot be counted whole (the relay logged it)
        mine = {(r.seq, r.txn) for r in recs if r.topic in READ}
        have = mine & m.applied
        assert have in (set(), mine), f"seed {seed}: {txn} applied in part: {sorted(have)} of {sorted(mine)}"
        if mine and have == mine:
            done.append(txn)
    applied_txns = [t for t in order if t in done or not any(r.topic in READ for r in dict(h.txns)[t])]
    frontier = m.ledger.frontiers.get(SOURCE)
    if frontier is not None:
        upto = order.index(frontier.id)
        for txn, recs in h.txns[: upto + 1]:
            if txn != h.orphan:
                mine = {(r.seq, r.txn) for r in recs if r.topic in READ}
                assert mine <= m.applied, f"seed {seed}: {txn} is before the frontier but not applied"
        for txn, recs in h.txns[upto + 1 :]:
            if txn != h.orphan:
                assert not {(r.seq, r.txn) for r in recs} & m.applied, f"seed {seed}: {txn} past the frontier"
    # A DDL is ordered with every transaction that writes its topic (the others commute with it).
    for rec in h.bare:
        if rec.kind != "ddl":
            continue
        writes = [(t, rs) for t, rs in h.txns if t != h.orphan and any(r.topic == rec.topic for r in rs)]
        for txn, recs in writes:
            mine = {(r.seq, r.txn) for r in recs if r.topic in READ}
            if recs[0].seq < rec.seq and (rec.seq, None) in m.applied:
                assert mine <= m.applied, f"seed {seed}: the DDL at {rec.seq} applied before {txn}"
            if recs[0].seq > rec.seq and mine & m.applied:
                assert (rec.seq, None) in m.applied, f"seed {seed}: {txn} applied before the DDL at {rec.seq}"
    if final:
        missing = [t for t in order if t not in applied_txns and t != h.orphan]
        assert not missing, f"seed {seed}: everything was read, yet {missing} wait"
        assert not [r for r in m.held if isinstance(r, Rec)], f"seed {seed}: records still wait: {m.held}"


def run(seed: int) -> None:
    rng = random.Random(seed)
    # Every fifth seed: ENDs of an older relay (no per-topic counts): the mirror must read every topic.
    old = seed % 5 == 0
    h = make_history(rng, old_ends=old)
    m = Mirror(TOPICS if old else READ)
    # The relay fills Kafka in production order; the mirror's batches each end anywhere up to what exists.
    produced = {tp: 0 for tp in h.logs}
    for _ in range(rng.randint(3, 12)):
        for tp, log in h.logs.items():
            produced[tp] = min(len(log), produced[tp] + rng.randint(0, 4))
        upto = {tp: rng.randint(m.read_to.get(tp, 0), produced[tp]) for tp in h.logs}
        m.batch(h, upto)
        check(h, m, seed, final=False)
    every = {tp: len(log) for tp, log in h.logs.items()}
    m.batch(h, every)
    m.batch(h, every)  # one more: the ENDs carried from the last reads are counted again
    check(h, m, seed, final=True)


SEEDS = list(range(60)) + list(range(1000, 1000 + int(os.environ.get("RELAY_FUZZ_SEEDS", "0"))))


@pytest.mark.parametrize("seed", SEEDS)
def test_the_rule_never_applies_part_of_a_transaction_and_never_stalls(seed: int) -> None:
    run(seed)


def test_a_source_without_boundaries_is_never_held_and_has_no_frontier() -> None:
    verdict = release(Ledger(), [], [], READ, without_boundaries=["plain"])
    assert verdict.bounds == {} and "plain" in verdict.ledger.unbounded
    assert not verdict.holds("plain", 10**12) and verdict.ledger.frontiers == {}
    # once it publishes boundaries it is bounded
    end = Boundary("plain", "x", "f.1:1", 0, 5, 6, 2, {"t0": 2})
    later = release(verdict.ledger, [end], [Seen("plain", "x", "t0", 2, 5, 6)], READ)
    assert "plain" not in later.ledger.unbounded and later.ledger.frontiers["plain"].id == "x"


def test_ledger_round_trips_through_json() -> None:
    end = Boundary("a", "0-1-9", "bin.000003:77", 1234, 5, 9, 3, {"t0": 3})
    verdict = release(Ledger(), [end], [Seen("a", "0-1-9", "t0", 3, 5, 9)], READ, ["b"])
    text = verdict.ledger.to_json()
    assert Ledger.from_json(text) == verdict.ledger and Ledger.from_json(text).to_json() == text
