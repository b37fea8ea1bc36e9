"""The comparison: passes over the source, each read placed in the binlog, judged against the target.

Pass 1 reads every shard once (``relay.ops.verify.shards`` says how): chunk digests, then per-row digests
of the chunks whose digests differ (``range``); per-row digests of every chunk (``rows``); hash-bucket
digests, then the rows of differing buckets (``multiset``). Equal digests settle rows at once; every other
key — digests differ, a key only the target has — becomes *pending*. Before any comparison the target is
brought up to the reads (``relay.ops.verify.catchup.TargetSync``): the relay's saved position has passed
the binlog end after them (what it published before is in the topic), or the binlog in between holds
nothing of these tables (``SourceReader.gap_touches``); then the target is read again.

Later passes re-read the pending keys in full, in batches, each a ``Window`` of the binlog, and judge
each key (``relay.ops.verify.judge``): a key whose latest change on the topic is at or after the window's
start changed while it was read — pending again; a mirror that has not applied the topic's latest change
— pending again; otherwise the source's row and the target's row are compared. A difference must be seen
by two such reads in a row (the same finding) before it is reported, so a change in flight (logged but
not yet visible to a SELECT, as group commit allows) cannot make one. Keys the target has not applied
keep the passes going until ``--wait`` has passed since the first was found (a mirror job catching up).
Pending keys left after the last pass are reported as skipped: not verified, and the run is not equal.
Nothing is locked or written on the source. Runs on the caller's thread (one helper thread reads the
target during the first source reads).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from relay.errors import VerifyError
from relay.kafka.codec import sequence
from relay.ops.verify import judge
from relay.ops.verify.catchup import KeyRanges, TargetSync
from relay.ops.verify.report import Difference, Report, ShardResult, Skipped
from relay.ops.verify.shards import MULTISET, RANGE, JoinKey, Shard
from relay.ops.verify.source import ChunkKey, Place, SourceReader, Window
from relay.ops.verify.target import Identity, Target
from relay.positions.store import ResumePoint

log = logging.getLogger(__name__)

HASH_BUFFER = 200_000  # per-row digests held before they are compared
KEY_BATCH = 500


@dataclass(frozen=True)
class VerifyOptions:
    table: str
    chunk_rows: int = 10_000
    where: str = ""
    passes: int = 6
    wait_seconds: float = 60.0  # how long the target may take to catch up with a read
    buckets_rows: int = 10_000  # rows per hash bucket of a table without a key


class Published(Protocol):
    """Where the relay has published up to: its saved resume point."""

    def point(self) -> ResumePoint | None: ...


Progress = Callable[[str, int, int], None]  # (what, rows done, rows expected)


@dataclass
class Pending:
    shard: Shard
    reason: str  # digest / changed / behind
    seen: tuple[Any, ...] | None = None  # a finding waiting for its confirming read


@dataclass
class _State:
    results: dict[str, ShardResult]
    pending: dict[tuple[str, JoinKey], Pending] = field(default_factory=dict)
    counted: set[tuple[str, JoinKey]] = field(default_factory=set)
    differences: list[Difference] = field(default_factory=list)
    # keyless shards not settled yet: the differences seen by the last read (None: none seen yet)
    multiset_open: dict[str, tuple[Difference, ...] | None] = field(default_factory=dict)
    behind_since: float | None = None  # when a key was first found not applied by the target

    def work_left(self) -> bool:
        return bool(self.pending) or bool(self.multiset_open)

    def unconfirmed(self) -> bool:
        return any(p.seen is not None for p in self.pending.values()) or any(
            v is not None for v in self.multiset_open.values()
        )

    def waiting_for_target(self, wait_seconds: float) -> bool:
        """Keys the target has not applied yet, and ``--wait`` not spent since the first was found: the
        passes go on for them (a mirror job catching up), whatever ``--passes`` says."""
        if self.behind_since is None or not any(p.reason == "behind" for p in self.pending.values()):
            return False
        return time.monotonic() - self.behind_since < wait_seconds


class Verifier:
    """One ``relay verify`` run over the shards of one logical table."""

    def __init__(
        self,
        options: VerifyOptions,
        reader: SourceReader,
        target: Target,
        published: Published,
        shards: list[Shard],
        *,
        progress: Progress | None = None,
        stop: threading.Event | None = None,
    ) -> None:
        self.options, self.reader, self.target, self.published = options, reader, target, published
        self.shards = {s.name: s for s in shards}
        self.progress = progress or (lambda what, done, total: None)
        self.stop = stop or threading.Event()
        self.state = _State({s.name: ShardResult(s.name, s.method, s.reason) for s in shards})
        self.passes = 0
        self.notes: list[str] = []
        self.ranges = KeyRanges(target)
        self.catchup = TargetSync(
            reader,
            target,
            published.point,
            set(self.shards),
            options.wait_seconds,
            self.stop,
            self.ranges.clear,
        )
        self._rows_read = 0
        self._expected = sum(max(s.spec.estimated_rows, 1) for s in shards)

    # -- the run --------------------------------------------------------------------------------------
    def run(
        self, *, pending_only: dict[str, list[JoinKey] | None] | None = None, deadline: float | None = None
    ) -> Report:
        """Compare; ``pending_only``: only these keys (None: a keyless table, whole), re-checked until they
        settle or ``deadline`` (a repair's check)."""
        began = time.monotonic()
        point = self.published.point()
        if point is None:
            raise VerifyError("the relay has saved no position: nothing it published can be compared yet")
        self.catchup.generation = point.generation
        if pending_only is None:
            self.catchup.start_prefetch()
            self._first_pass()
        else:
            for name, keys in pending_only.items():
                if keys is None:
                    self.state.multiset_open[name] = None
                for key in keys or ():
                    self.state.pending[(name, key)] = Pending(self.shards[name], "repaired")
        pause = 0.25
        while self.state.work_left() and not self.stop.is_set():
            waiting = self.state.waiting_for_target(self.options.wait_seconds)
            if (
                deadline is None
                and self.passes >= self.options.passes
                and not (self.state.unconfirmed() or waiting)
            ):
                break
            if deadline is None and self.passes >= self.options.passes + 3 and not waiting:
                break
            if deadline is not None and time.monotonic() > deadline:
                break
            self.stop.wait(pause)
            pause = min(pause * 2, 5.0)
            self._recheck_pass()
        return _report(self, time.monotonic() - began)

    @property
    def generation(self) -> int:
        return self.catchup.generation

    @property
    def horizon(self) -> Identity:
        return self.catchup.horizon

    @property
    def buckets_rows(self) -> int:
        return self.options.buckets_rows

    def result(self, shard: str) -> ShardResult:
        return self.state.results[shard]

    def start_identity(self, window: Window) -> Identity:
        return (sequence(window.start.journal, window.start.offset, 0, self.generation), -1)

    # -- pass 1 ---------------------------------------------------------------------------------------
    def _first_pass(self) -> None:
        self.passes = 1
        began = time.monotonic()
        suspects: list[tuple[Shard, ChunkKey | None, ChunkKey | None]] = []
        digests: list[tuple[Shard, ChunkKey | None, ChunkKey | None, int, int]] = []
        for shard in self.shards.values():
            if shard.method == RANGE:
                digests.extend(self._digests(shard))
            elif shard.method == MULTISET:
                self.state.multiset_open[shard.name] = None
        log.info("%d chunk digest(s) read in %.2f s", len(digests), time.monotonic() - began)
        if digests or any(s.method == MULTISET for s in self.shards.values()):
            self.sync_or_note(self.reader.binlog_end())
        for shard, lo, hi, count, total in digests:
            if self.ranges.chunk_equal(shard, lo, hi, count, total, self.horizon):
                result = self.state.results[shard.name]
                result.rows += count
                result.equal += count
            else:
                self.state.results[shard.name].chunks_differing += 1
                suspects.append((shard, lo, hi))
        self._hash_ranges(suspects)
        for shard in self.shards.values():
            if shard.method not in (RANGE, MULTISET):
                self._rows_method(shard)
        for shard in self.shards.values():
            if shard.method == MULTISET:
                self._multiset(shard)

    def sync_or_note(self, high: Place) -> bool:
        ok = self.catchup.sync(high)
        if not ok:
            note = f"the relay had not published up to {high} within {self.options.wait_seconds:.0f} s"
            if note not in self.notes:
                self.notes.append(note)
        return ok

    def _digests(self, shard: Shard) -> list[tuple[Shard, ChunkKey | None, ChunkKey | None, int, int]]:
        out = []
        lo: ChunkKey | None = None
        while not self.stop.is_set():
            hi = self.reader.boundary(shard, lo, self.options.chunk_rows)
            count, total = self.reader.range_digest(shard, lo, hi)
            out.append((shard, lo, hi, count, total))
            self.state.results[shard.name].chunks += 1
            self.note_read(f"{shard.name} chunk digests", count)
            if hi is None:
                break
            lo = hi
        return out

    def note_read(self, what: str, rows: int) -> None:
        self._rows_read += rows
        self.progress(what, self._rows_read, max(self._expected, self._rows_read))

    def _hash_ranges(self, ranges: list[tuple[Shard, ChunkKey | None, ChunkKey | None]]) -> None:
        """Per-row digests of key ranges whose chunk digests differed, compared key by key."""
        batch: list[tuple[Shard, ChunkKey | None, ChunkKey | None, list[tuple[JoinKey, ChunkKey, int]]]] = []
        held = 0
        for shard, lo, hi in ranges:
            rows = self.reader.hashes(shard, lo, hi)
            batch.append((shard, lo, hi, rows))
            held += len(rows)
            if held >= HASH_BUFFER:
                self._compare_ranges(batch)
                batch, held = [], 0
        if batch:
            self._compare_ranges(batch)

    def _compare_ranges(self, batch: list[tuple[Shard, ChunkKey | None, ChunkKey | None, list[Any]]]) -> None:
        self.sync_or_note(self.reader.binlog_end())
        for shard, lo, hi, rows in batch:
            seen = self._compare_hashes(shard, rows)
            for key in self.ranges.in_range(shard, lo, hi):
                if key not in seen and self._live(key):
                    self._suspect(shard, key, "digest")

    def _compare_hashes(self, shard: Shard, rows: list[tuple[JoinKey, ChunkKey, int]]) -> set[JoinKey]:
        seen = set()
        for key, _, digest in rows:
            seen.add(key)
            held = self.target.held(key)
            if (
                held is not None
                and not held.deleted
                and held.digest == digest
                and held.identity < self.horizon
                and not self.target.behind(key)
            ):
                self._count(shard, key, "equal")
            else:
                self._suspect(shard, key, "digest")
        return seen

    def _rows_method(self, shard: Shard) -> None:
        """Per-row digests of every chunk (``rows``): compared as they come, in buffers."""
        seen: set[JoinKey] = set()
        buffer: list[tuple[JoinKey, ChunkKey, int]] = []
        lo: ChunkKey | None = None
        while not self.stop.is_set():
            rows = self.reader.hashes(shard, lo, None, self.options.chunk_rows)
            self.state.results[shard.name].chunks += 1
            self.note_read(f"{shard.name} row digests", len(rows))
            buffer.extend(rows)
            last = len(rows) < self.options.chunk_rows or not shard.spec.key
            if len(buffer) >= HASH_BUFFER or last:
                self.sync_or_note(self.reader.binlog_end())
                seen |= self._compare_hashes(shard, buffer)
                buffer = []
            if last:
                break
            lo = rows[-1][1]
        for key in list(self.target.keys_of(shard.name)):
            if key not in seen and self._live(key):
                self._suspect(shard, key, "digest")

    # -- bookkeeping -----------------------------------------------------------------------------------
    def _live(self, key: JoinKey) -> bool:
        """Whether the target holds a row for ``key`` (a key it holds deleted is no row to compare)."""
        held = self.target.held(key)
        return held is not None and not held.deleted

    def _count(self, shard: Shard, key: JoinKey, kind: str) -> None:
        mark = (shard.name, key)
        self.state.pending.pop(mark, None)
        if mark in self.state.counted:
            return
        self.state.counted.add(mark)
        result = self.state.results[shard.name]
        result.rows += 1
        setattr(result, kind, getattr(result, kind) + 1)

    def _suspect(self, shard: Shard, key: JoinKey, reason: str) -> None:
        mark = (shard.name, key)
        if mark not in self.state.counted and mark not in self.state.pending:
            self.state.pending[mark] = Pending(shard, reason)

    # -- later passes: keys in full --------------------------------------------------------------------
    def _recheck_pass(self) -> None:
        self.passes += 1
        log.info("pass %d: %d key(s) to check again", self.passes, len(self.state.pending))
        by_shard: dict[str, list[JoinKey]] = {}
        for name, key in self.state.pending:
            by_shard.setdefault(name, []).append(key)
        total = sum(len(v) for v in by_shard.values())
        self.progress(f"pass {self.passes}: re-checking {total} key(s)", 0, max(total, 1))
        reads: list[tuple[Shard, list[JoinKey], dict[JoinKey, Any], Window]] = []
        start = self.reader.binlog_end()
        for name, keys in by_shard.items():
            shard = self.shards[name]
            for i in range(0, len(keys), KEY_BATCH):
                batch = keys[i : i + KEY_BATCH]
                low = self.reader.binlog_end()
                rows = self.reader.rows_by_keys(shard, batch)
                high = self.reader.binlog_end()
                reads.append((shard, batch, rows, Window(start, high)))
                start = low
        if reads:
            caught_up = self.sync_or_note(max((w.high for *_, w in reads), key=lambda p: p.pos))
            for shard, batch, rows, window in reads:
                self._judge_batch(shard, batch, rows, window, caught_up)
        for name in list(self.state.multiset_open):
            self._multiset(self.shards[name])

    def _judge_batch(
        self, shard: Shard, keys: list[JoinKey], rows: dict[JoinKey, Any], window: Window, caught_up: bool
    ) -> None:
        verdicts = judge.judge_keys(self, shard, keys, rows, window, caught_up)
        for key, verdict in verdicts.items():
            mark = (shard.name, key)
            pending = self.state.pending.get(mark)
            if pending is None:
                continue
            kind = verdict[0]
            if kind in ("equal", "out", "gone"):
                if kind == "equal":
                    self._count(shard, key, "equal")
                else:  # outside --where, or deleted on both sides: no row of the comparison
                    self.state.pending.pop(mark, None)
            elif kind in ("changed", "behind"):
                pending.reason, pending.seen = kind, None
                if kind == "behind" and self.state.behind_since is None:
                    self.state.behind_since = time.monotonic()
            elif pending.seen is not None and pending.seen[:2] == verdict[:2]:
                self._count(shard, key, kind)
                self.state.differences.append(verdict[2])
            else:
                pending.seen = verdict

    # -- tables without a key --------------------------------------------------------------------------
    def _multiset(self, shard: Shard) -> None:
        verdict = judge.multiset(self, shard)
        previous = self.state.multiset_open.get(shard.name)
        if verdict is None:  # changed during the read, or the target is behind: again next pass
            self.state.multiset_open[shard.name] = None
            return
        rows, differences = verdict
        if not differences or (previous is not None and previous == tuple(differences)):
            _settle_multiset(self.state, shard, rows, differences)
        else:
            self.state.multiset_open[shard.name] = tuple(differences)


def _settle_multiset(state: _State, shard: Shard, rows: int, differences: list[Difference]) -> None:
    """A keyless shard's outcome, its rows counted from the source's read and the target's extras."""
    result = state.results[shard.name]
    differing = sum(d.count for d in differences)
    extra = sum(d.count for d in differences if d.kind == "extra")
    result.rows = rows + extra
    result.equal = result.rows - differing
    result.missing = sum(d.count for d in differences if d.kind == "missing")
    result.extra = extra
    state.differences.extend(differences)
    state.multiset_open.pop(shard.name, None)


def _report(verifier: Verifier, seconds: float) -> Report:
    """The run's outcome: keys still pending are skipped, and counted so."""
    skipped = []
    wait = verifier.options.wait_seconds
    behind = 0
    for (name, key), pending in sorted(verifier.state.pending.items(), key=lambda item: str(item[0])):
        shard = pending.shard
        behind += pending.reason == "behind"
        reason = {
            "behind": f"the target had not applied the key's latest change within --wait {wait:g} s",
            "changed": "changed during every pass",
        }.get(pending.reason, "not settled")
        skipped.append(Skipped(name, shard.key_dict(key), reason))
        verifier._count(shard, key, "skipped")
    for name in verifier.state.multiset_open:
        skipped.append(Skipped(name, {}, "the table changed during every pass (compared whole)"))
    report = Report(verifier.options.table, verifier.target.description, verifier.reader.source.address)
    report.shards = list(verifier.state.results.values())
    report.differences = sorted(verifier.state.differences, key=lambda d: (d.shard, d.kind, str(d.key)))
    report.skipped = skipped
    report.passes = verifier.passes
    report.seconds = seconds
    report.notes = list(verifier.notes)
    if behind:
        report.notes.append(
            f"{behind} key(s) not verified: the target had not applied their latest change within --wait "
            f"{wait:g} s (a mirror whose job is stopped or behind; a longer --wait waits for it)"
        )
    return report
