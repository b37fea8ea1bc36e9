"""The target brought up to a source read, and the target's keys in the source's chunk order.

``TargetSync`` waits until what the relay published covers the binlog up to a read's end for these tables
— its saved position has passed that end (what it published before is in the topic), or the binlog in
between holds nothing of these tables (``SourceReader.gap_touches``) — then reads the target again. The
first read of the target runs on a helper thread while the source's chunk digests are read; the relay's
position read just before it tells how far that read already covers, so a digest pass that ends before
anything of these tables was logged again needs no second read. Every later sync reads the target again
after its wait: a mirror job, or a snapshot (a repair's), changes the target without a binlog event.
``KeyRanges`` sorts the target's keys once per target read, as MySQL orders the chunk key, so a chunk's
keys are a bisection away. Runs on the verify's thread (and the one helper thread).
"""

from __future__ import annotations

import bisect
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from relay.errors import VerifyError
from relay.kafka.codec import sequence
from relay.ops.verify.shards import JoinKey, Shard
from relay.ops.verify.source import ChunkKey, Place, SourceReader
from relay.ops.verify.target import Identity, Target
from relay.positions.store import ResumePoint

log = logging.getLogger(__name__)


class TargetSync:
    """Reads of the target placed after the source reads they are compared with."""

    def __init__(
        self,
        reader: SourceReader,
        target: Target,
        point: Callable[[], ResumePoint | None],
        tables: set[str],
        wait_seconds: float,
        stop: threading.Event,
        on_read: Callable[[], None],
    ) -> None:
        self.reader, self.target, self._point = reader, target, point
        self.tables, self.wait_seconds, self.stop = tables, wait_seconds, stop
        self.on_read = on_read  # called after each read of the target
        self.generation = 0
        # The identity no record the relay published by the last target read can reach: the binlog end
        # read after that read, in the relay's generation then. A target record at or beyond it is not
        # the relay's (forged, or another source's under this source id): a difference, never "in flight".
        self.horizon: Identity = (0, -1)
        self._covered: Place | None = None  # the relay's saved position read before the first target read
        self._prefetch: threading.Thread | None = None
        self._prefetch_error: BaseException | None = None

    def _saved(self) -> Place:
        point = self._point()
        if point is None:
            raise VerifyError("the relay's saved position disappeared")
        self.generation = point.generation
        return Place(point.journal, point.offset)

    def start_prefetch(self) -> None:
        """The first read of the target, on a helper thread (joined by the first ``sync``). A topic's is
        split over forked processes, forked here, before the helper thread starts
        (``relay.ops.verify.topic_fork``)."""
        self._covered = self._saved()  # read BEFORE the target: all the relay published is in what is read
        begin = getattr(self.target, "begin_refresh", None)
        finish: Callable[[], object] = begin() if begin is not None else self.target.refresh

        def read() -> None:
            try:
                finish()
            except BaseException as exc:
                self._prefetch_error = exc

        self._prefetch = threading.Thread(target=read, name="verify-target", daemon=True)
        self._prefetch.start()

    def _join_prefetch(self) -> None:
        if self._prefetch is not None:
            self._prefetch.join()
            self._prefetch = None
            self._read_done()
            if self._prefetch_error is not None:
                raise self._prefetch_error

    def _read_done(self) -> None:
        """After a read of the target: the horizon (read after it, so it bounds what it holds)."""
        end = self.reader.binlog_end()
        self._saved()
        self.horizon = (sequence(end.journal, end.offset, 0, self.generation), -1)
        self.on_read()

    def _covers(self, at: Place | None, high: Place, most: int) -> bool:
        """Whether a target read at the relay's position ``at`` holds all of these tables up to ``high``."""
        if at is None:
            return False
        if at.pos >= high.pos:
            return True
        return self.reader.gap_touches((at.journal, at.offset), high.pos, self.tables, most) is False

    def sync(self, high: Place) -> bool:
        """Wait until what the relay published covers the binlog up to ``high`` for these tables, then
        read the target again (unless its last read already covers ``high``); False when that did not
        happen within ``wait_seconds``."""
        self._join_prefetch()
        covered, self._covered = self._covered, None  # only the first read: later ones follow a wait
        if self._covers(covered, high, 10_000):
            return True
        began = time.monotonic()
        deadline = began + self.wait_seconds
        last: Place | None = None
        still = began
        delay = 0.02
        while True:
            at = self._saved()
            if at.pos >= high.pos:
                break
            now = time.monotonic()
            if at != last:
                last, still = at, now
            elif now - still > 0.5:  # the relay is not moving: is anything of ours still unpublished?
                if self._covers(at, high, 100_000):
                    break
                still = now
            if now > deadline:
                log.warning(
                    "the relay published up to %s, not %s, within %.0f s", at, high, self.wait_seconds
                )
                return False
            self.stop.wait(delay)
            delay = min(delay * 2, 0.5)
        waited = time.monotonic()
        self.target.refresh()
        self._read_done()
        log.info(
            "target caught up with %s: waited %.2f s for the relay, read the target in %.2f s",
            high, waited - began, time.monotonic() - waited,
        )  # fmt: skip
        return True


class KeyRanges:
    """The target's keys of each shard sorted as MySQL orders the chunk key (``RANGE`` shards)."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self._sorted: dict[str, tuple[list[Any], list[JoinKey]]] = {}

    def clear(self) -> None:
        """Forget the orders: the target was read again."""
        self._sorted.clear()

    def _sorted_keys(self, shard: Shard) -> tuple[list[Any], list[JoinKey]]:
        found = self._sorted.get(shard.name)
        if found is None:
            order = shard.sort_key()
            keys = list(self.target.keys_of(shard.name))
            values = keys if shard.shard_value is None else [k[1:] for k in keys]
            sorts = list(map(order, values))
            ranked = sorted(range(len(keys)), key=sorts.__getitem__)
            found = ([sorts[i] for i in ranked], [keys[i] for i in ranked])
            self._sorted[shard.name] = found
        return found

    def in_range(self, shard: Shard, lo: ChunkKey | None, hi: ChunkKey | None) -> list[JoinKey]:
        """The target's keys in the chunk ``(lo, hi]``."""
        order = shard.sort_key()
        sorts, keys = self._sorted_keys(shard)
        i = 0 if lo is None else bisect.bisect_right(sorts, order(lo))
        j = len(keys) if hi is None else bisect.bisect_right(sorts, order(hi))
        return keys[i:j]

    def chunk_equal(
        self,
        shard: Shard,
        lo: ChunkKey | None,
        hi: ChunkKey | None,
        count: int,
        total: int,
        horizon: Identity,
    ) -> bool:
        """Whether the target's rows in the chunk have the source's row count and digest sum, and none
        holds a change beyond ``horizon`` (not the relay's)."""
        t_count = t_total = 0
        of = self.target.held
        for key in self.in_range(shard, lo, hi):
            held = of(key)
            if held is not None:
                if held.identity >= horizon:
                    return False
                if not held.deleted:
                    t_count += 1
                    t_total += held.digest
        return (t_count, t_total) == (count, total)
