"""canal's DDL-isolating memory ring store (``MemoryEventStoreWithBuffer``) for canal ``Entry`` objects.

Owned here: the ring of slots, the three sequences ``ack <= get <= put`` (all starting at -1, slot of
sequence ``s`` is ``s & (buffer_size - 1)``), the memory accounting (an entry weighs its binlog event
length, ``Entry.size``, as in canal; or, with ``entry_weight: memory`` — the relay's default — its
decoded size, ``Entry.footprint``, so that the budget bounds the memory the store really holds), and
the batches handed out by ``get`` (``Events``, with a ``PositionRange`` whose ``ack`` is the last
transaction boundary of the batch).

Threads: one producer (the sink) calls ``put``; consumers (the server, on behalf of the publisher) call
``get``/``ack``/``rollback``. One lock and two conditions (``not_full`` for puts, ``not_empty`` for gets);
every blocking call takes a timeout and nothing polls. ``close()`` wakes every waiter: a blocked or
later ``put``/``get`` raises ``StoreClosedError`` so threads can stop; ``ack``/``rollback`` still work so
a publisher can finish the batch it has in hand.

Choices where canal is silent or where we deliberately differ (each one tested):

* Room for a put (as canal): ``put + n - buffer_size <= ack``; in MEMSIZE mode also the held bytes
  (put minus acked) must be *below* ``buffer_size * memunit`` before the put. A put admitted under the
  budget may end above it: a single entry, or a transaction's batch, larger than the whole budget is
  still stored once the store has drained, instead of deadlocking the producer. A batch with more
  entries than slots can never fit and raises ``StoreError``.
* A blocking ``get`` waits for a *complete* batch: ``batch_size`` entries (ITEMSIZE) or
  ``batch_size * memunit`` bytes (MEMSIZE). canal's ITEMSIZE check returns as soon as one entry is
  there; here both modes wait for a full batch, as the streaming API documents. A batch also counts as
  complete when DDL isolation cuts it (waiting longer could not make it bigger) and when the producer
  cannot add anything (no room for its pending put): otherwise a batch larger than the store would wait
  for its timeout, or forever.
* MEMSIZE batches take entries while the bytes taken so far are *below* ``batch_size * memunit``: the
  entry that crosses the limit is included (every batch holds at least one entry, however large), and
  the batch stops when it reaches the limit exactly. canal compares with ``<=`` and so takes one more
  entry when the total lands exactly on the limit; that extra entry serves no purpose and we do not.
* The ack point is the last ``Entry.is_transaction_boundary`` entry (TRANSACTIONBEGIN, TRANSACTIONEND,
  DDL). canal skips a BEGIN that carries a GTID; here resume points come from ``relay.positions.store``, which
  re-reads a transaction from its start, so a BEGIN is a safe ack point.

Hands to the next stage (``relay.canal.server``): ``Events`` batches, and sequences to
``ack``/``rollback_to``.
"""

from __future__ import annotations

import bisect
import logging
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple, cast

from mypy_extensions import mypyc_attr

from relay.canal.entry import Entry, EntryPosition
from relay.config.sections import BatchMode, StoreConfig
from relay.errors import StoreClosedError, StoreError

log = logging.getLogger(__name__)

INIT_SEQUENCE = -1


@dataclass(frozen=True, slots=True)
class PositionRange:
    """Binlog positions of a batch: first and last entry, and the last place it is safe to ack at."""

    start: EntryPosition
    end: EntryPosition
    ack: EntryPosition | None


@dataclass(frozen=True, slots=True)
class Events:
    """One batch taken by ``get``: store sequences ``first_seq..last_seq`` (inclusive).

    An empty batch has ``first_seq == last_seq + 1`` (both just after the get sequence) and no range.
    """

    entries: tuple[Entry, ...]
    first_seq: int
    last_seq: int
    position_range: PositionRange | None

    def __len__(self) -> int:
        return len(self.entries)


class Fill(NamedTuple):
    """What the store holds (put but not acked): entries and bytes."""

    entries: int
    bytes: int


def _position_range(entries: Sequence[Entry]) -> PositionRange:
    ack = next((e.position for e in reversed(entries) if e.is_transaction_boundary), None)
    return PositionRange(entries[0].position, entries[-1].position, ack)


def _remaining(deadline: float | None) -> float | None:
    return None if deadline is None else deadline - time.monotonic()


# Where compiled (scripts/build-compiled), still subclassed by interpreted code (test doubles).
@mypyc_attr(allow_interpreted_subclasses=True)
class RingStore:
    """The ring buffer. See the module docstring for the semantics and thread model."""

    def __init__(self, config: StoreConfig | None = None) -> None:
        self.config = config or StoreConfig()
        size = self.config.buffer_size
        self._mask = size - 1
        self._slots: list[Entry | None] = [None] * size
        # Bytes put up to and including the sequence in that slot: any range's weight in O(1), and a
        # MEMSIZE batch end by binary search, without walking the entries.
        self._cum: list[int] = [0] * size
        self._put = self._get = self._ack = INIT_SEQUENCE
        self._put_bytes = self._get_bytes = self._ack_bytes = 0
        self._ddls: deque[int] = deque()  # sequences of unacked DDL entries (DDL isolation only)
        self._last_put: Entry | None = None  # its position is made when asked: not per put
        self._put_waiting = 0  # entries in the put currently waiting for room; 0 when none
        self._by_memory = self.config.by_memory  # weigh entries by Entry.footprint, not Entry.size
        self._draining = False  # the producer waits in ``await_below`` for what is held to be acked
        self._closed = False
        self._lock = threading.Lock()
        self._not_full = threading.Condition(self._lock)
        self._not_empty = threading.Condition(self._lock)

    # ---- put side ----

    def put(self, entries: Sequence[Entry], timeout: float | None = None) -> bool:
        """Store ``entries`` when there is room; wait at most ``timeout`` seconds (None: until room).

        Returns False when the timeout expired first; nothing was stored then.
        """
        if not entries:
            return True
        n = self._check_put_size(entries)
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            try:
                while True:
                    self._check_open()
                    if self._has_room(n):
                        self._do_put(entries)
                        return True
                    remaining = _remaining(deadline)
                    if remaining is not None and remaining <= 0:
                        log.debug("put of %d entries timed out, fill %s", n, self._fill())
                        return False
                    # A get waiting for a full batch must learn that the producer is stuck.
                    self._put_waiting = n
                    self._not_empty.notify_all()
                    self._not_full.wait(remaining)
            finally:
                self._put_waiting = 0

    def try_put(self, entries: Sequence[Entry]) -> bool:
        """Store ``entries`` if there is room now; never waits."""
        if not entries:
            return True
        n = self._check_put_size(entries)
        with self._lock:
            self._check_open()
            if not self._has_room(n):
                return False
            self._do_put(entries)
            return True

    def _check_put_size(self, entries: Sequence[Entry]) -> int:
        n = len(entries)
        if n > self.config.buffer_size:
            raise StoreError(
                f"a put of {n} entries can never fit a store of {self.config.buffer_size} slots; "
                "raise buffer_size or put smaller batches"
            )
        return n

    def _has_room(self, n: int) -> bool:
        # ack <= get always, so canal's min(get, ack) is the ack sequence.
        if self._put + n - self.config.buffer_size > self._ack:
            return False
        if self.config.batch_mode is BatchMode.MEMSIZE:
            return self._put_bytes - self._ack_bytes < self.config.memory_budget
        return True

    def _do_put(self, entries: Sequence[Entry]) -> None:
        seq, total = self._put, self._put_bytes
        track_ddl = self.config.ddl_isolation
        by_memory = self._by_memory
        for entry in entries:
            seq += 1
            total += entry.footprint if by_memory else entry.size
            slot = seq & self._mask
            self._slots[slot] = entry
            self._cum[slot] = total
            if track_ddl and entry.is_ddl:
                self._ddls.append(seq)
        self._put, self._put_bytes = seq, total
        self._last_put = entries[-1]
        self._not_empty.notify_all()

    # ---- get side ----

    def get(self, batch_size: int, timeout: float | None = None) -> Events:
        """Take the next complete batch, waiting for it at most ``timeout`` seconds (None: no limit).

        When the timeout expires, returns what there is (possibly nothing).
        """
        _check_batch_size(batch_size)
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while True:
                self._check_open()
                end, complete = self._plan(batch_size)
                if complete or self._producer_stuck():
                    return self._do_get(end)
                remaining = _remaining(deadline)
                if remaining is not None and remaining <= 0:
                    return self._do_get(end)
                self._not_empty.wait(remaining)

    def try_get(self, batch_size: int) -> Events:
        """Take what there is now, up to one batch; never waits."""
        _check_batch_size(batch_size)
        with self._lock:
            self._check_open()
            end, _ = self._plan(batch_size)
            return self._do_get(end)

    def _plan(self, batch_size: int) -> tuple[int, bool]:
        """The last sequence the next batch would take, and whether that batch is complete."""
        get, limit = self._get, self._put
        if get == limit:
            return get, False
        cut = False
        if self.config.ddl_isolation:
            ddl = self._next_ddl(get + 1)
            if ddl == get + 1:
                return ddl, True  # a DDL always travels alone
            if ddl is not None:
                limit, cut = ddl - 1, True
        if self.config.batch_mode is BatchMode.ITEMSIZE:
            if limit - get >= batch_size:
                return get + batch_size, True
            return limit, cut
        target = self._get_bytes + batch_size * self.config.memunit
        seqs = range(get + 1, limit + 1)
        i = bisect.bisect_left(seqs, target, key=lambda s: self._cum[s & self._mask])
        if i < len(seqs):
            return seqs[i], True
        return limit, cut

    def _next_ddl(self, first: int) -> int | None:
        # Few DDLs sit between ack and get (each is a batch of its own): a linear scan is enough.
        return next((s for s in self._ddls if s >= first), None)

    def _producer_stuck(self) -> bool:
        """True when entries are waiting and the producer cannot add more until something is acked."""
        if self._put <= self._get:
            return False
        return self._draining or not self._has_room(max(1, self._put_waiting))

    def _do_get(self, end: int) -> Events:
        first = self._get + 1
        if end < first:
            return Events((), first, end, None)
        mask, slots = self._mask, self._slots
        # Slots between ack and put are never None: only ack clears slots.
        batch = tuple(cast(Entry, slots[s & mask]) for s in range(first, end + 1))
        self._get = end
        self._get_bytes = self._cum[end & mask]
        return Events(batch, first, end, _position_range(batch))

    # ---- ack / rollback ----

    def ack(self, seq: int) -> None:
        """Free every entry up to and including store sequence ``seq``; acking again is a no-op."""
        with self._lock:
            if seq > self._get:
                raise StoreError(f"ack of sequence {seq} beyond what was read (get sequence {self._get})")
            if seq <= self._ack:
                return
            mask, slots = self._mask, self._slots
            for s in range(self._ack + 1, seq + 1):
                slots[s & mask] = None  # let acked entries be collected
            while self._ddls and self._ddls[0] <= seq:
                self._ddls.popleft()
            self._ack = seq
            self._ack_bytes = self._cum[seq & mask]
            self._not_full.notify_all()

    def rollback(self) -> None:
        """Forget what was read and not acked: those entries are returned again, in the same order."""
        with self._lock:
            self._rewind(self._ack)

    def rollback_to(self, seq: int) -> None:
        """Reset the get sequence to ``seq`` (``ack <= seq <= get``): entries after it come back."""
        with self._lock:
            if not self._ack <= seq <= self._get:
                raise StoreError(
                    f"rollback to sequence {seq} outside the unacked range [{self._ack}, {self._get}]"
                )
            self._rewind(seq)

    def _rewind(self, seq: int) -> None:
        if seq == self._get:
            return
        self._get = seq
        self._get_bytes = self._ack_bytes if seq == self._ack else self._cum[seq & self._mask]
        self._not_empty.notify_all()  # another consumer may be waiting for these entries

    # ---- state ----

    def first_position(self) -> EntryPosition | None:
        """Position of the first entry not yet acked, or None when the store holds nothing."""
        with self._lock:
            if self._ack == self._put:
                return None
            entry = self._slots[(self._ack + 1) & self._mask]
            return entry.position if entry is not None else None

    def first_unacked_ms(self) -> int:
        """The binlog time (ms) of the first entry not yet acked (taken or not); 0 when the store holds
        nothing, or that entry has no binlog time (a snapshot chunk)."""
        with self._lock:
            if self._ack == self._put:
                return 0
            entry = self._slots[(self._ack + 1) & self._mask]
            return entry.header.execute_time if entry is not None else 0

    def latest_position(self) -> EntryPosition | None:
        """Position of the last entry put, even when already acked; None before the first put."""
        with self._lock:
            last = self._last_put
        return None if last is None else last.position

    def fill(self) -> Fill:
        with self._lock:
            return self._fill()

    def await_below(self, weight: int, timeout: float) -> bool:
        """Wait at most ``timeout`` seconds until the store holds (put, not acked) less than ``weight``
        bytes; True when it does. The parser thread calls it while it holds a transaction's entries
        back: they count against the store's budget too (``relay.source.instance``)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._put_bytes - self._ack_bytes >= weight:
                self._check_open()
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                # A get waiting for a full batch must learn that the producer waits for it.
                self._draining = True
                self._not_empty.notify_all()
                try:
                    self._not_full.wait(remaining)
                finally:
                    self._draining = False
            return True

    def _fill(self) -> Fill:
        return Fill(self._put - self._ack, self._put_bytes - self._ack_bytes)

    @property
    def sequences(self) -> tuple[int, int, int]:
        """``(put, get, ack)`` store sequences, for metrics and tests."""
        with self._lock:
            return self._put, self._get, self._ack

    def close(self) -> None:
        """Wake every waiter; later puts and gets raise ``StoreClosedError``. Idempotent."""
        with self._lock:
            if not self._closed:
                log.info("ring store closed, fill %s", self._fill())
            self._closed = True
            self._not_full.notify_all()
            self._not_empty.notify_all()

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError()


def _check_batch_size(batch_size: int) -> None:
    if batch_size <= 0:
        raise StoreError(f"batch_size: must be at least 1, got {batch_size}")
