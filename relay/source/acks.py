"""The ack path of a canal instance, top to bottom: a batch handed out → its resume point kept → the
batch acknowledged → the point after the last acked batch saved in the position store.

``hand_out`` keeps the point after each batch taken (``get_without_ack``); ``ack`` acknowledges the
oldest outstanding batches in the ring store and makes the point after the last of them the acked
point; the acked point is then written — at once on the acking thread when
``positions.save_interval_seconds`` is 0, else by the position writer thread (``_write_acked``), at most
once per interval while the relay is behind and at once when the point leaves it caught up. A crash
before a write re-publishes the batches acked since (byte-identical records), never skips one.
``rollback`` forgets the outstanding points from a batch on; ``save_pending`` writes what is acked and
not yet written (at stop, or when the publish loop fails).

Locks (``_Locks``): ``writing`` (one position write at a time) and ``state`` (the outstanding points and
the acked point). The only order is ``writing`` then ``state``: ``both()`` takes them so, and taking
``writing`` on a thread that holds ``state`` raises instead of deadlocking some day.

Threads: the publisher thread (hand_out, ack, rollback, publish_under, amend), the position writer
thread, the parser thread (``at_binlog_end``), the stopping thread (``stop``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from relay.canal.ring_store import RingStore
from relay.canal.server import EmbeddedServer
from relay.errors import RelayError, ServerError
from relay.positions.store import PositionStore, ResumePoint

log = logging.getLogger(__name__)


class _Locks:
    """The ack path's two locks, taken only through ``state()``, ``writing()`` and ``both()``."""

    def __init__(self) -> None:
        self._writing = threading.Lock()
        self._state = threading.Lock()
        self.acked = threading.Condition(self._state)  # the writer waits on it for a new acked point
        self._held = threading.local()

    @contextmanager
    def state(self) -> Iterator[None]:
        with self._state:
            self._held.state = True
            try:
                yield
            finally:
                self._held.state = False

    @contextmanager
    def writing(self) -> Iterator[None]:
        if getattr(self._held, "state", False):
            raise RuntimeError(
                "lock order: the position write lock is taken before the state lock, never after"
            )
        with self._writing:
            yield

    @contextmanager
    def both(self) -> Iterator[None]:
        with self.writing(), self.state():
            yield


class AckPath:
    """Outstanding batches, acknowledgements and the saved position of one canal instance."""

    def __init__(
        self,
        name: str,
        positions: PositionStore,
        server: EmbeddedServer,
        store: RingStore,
        save_interval_seconds: float,
        stopping: threading.Event,
    ) -> None:
        self.name = name
        self.positions = positions
        self.server = server
        self.store = store
        self.save_interval_seconds = save_interval_seconds
        self._stopping = stopping
        self._locks = _Locks()
        self._resume: dict[int, ResumePoint] = {}  # batch id → the point after it, while outstanding
        self.loaded: ResumePoint | None = None  # the point this run started from
        self.last_saved: ResumePoint | None = None  # written to the position store
        self.last_acked: ResumePoint | None = None  # after the last acked batch (written, or about to be)
        self.save_failure: BaseException | None = None  # what stopped the position writer, if anything
        # The mapping version the batches taken now are published under (set by the publisher thread);
        # stamped on their resume points (``ResumePoint.mapping_version``).
        self.mapping_version: int | None = None
        # The parser waited a whole poll at the binlog end with nothing held back (set by the parser).
        self.idle = False
        self._saved_at = 0.0  # time.monotonic() of the last position write
        self._caught_up_saved_at = 0.0  # time.monotonic() of the last write of a caught-up point
        self._writer: threading.Thread | None = None

    def load(self) -> ResumePoint | None:
        """The saved point, read once at start."""
        self.loaded = self.positions.load()
        return self.loaded

    @property
    def saved_point(self) -> ResumePoint | None:
        """The position after the last acknowledged batch (written, or written by the next
        ``save_pending``), else the one this run started from."""
        return self.last_acked or self.last_saved or self.loaded

    @property
    def bound(self) -> bool:
        """An exactly-once store: it writes only what a Kafka transaction commits."""
        return bool(getattr(self.positions, "bound", False))

    # -- 1. a batch handed out -------------------------------------------------------------------
    def hand_out(self, batch_id: int, point: ResumePoint) -> None:
        with self._locks.state():
            self._resume[batch_id] = point

    def carry(self, batch_id: int, key: str, value: Any) -> None:
        """Keep ``value`` under ``key`` in the ``extra`` of the point ``ack(batch_id)`` saves (None: remove
        the key): state of the publish loop that a restart from that point continues from."""
        with self._locks.state():
            point = self._resume.get(batch_id)
            if point is None:
                raise ServerError(f"batch {batch_id} is not outstanding")
            extra = {k: v for k, v in point.extra.items() if k != key}
            if value is not None:
                extra[key] = value
            self._resume[batch_id] = replace(point, extra=extra)

    def outstanding(self) -> bool:
        with self._locks.state():
            return bool(self._resume)

    def resume_point(self, batch_id: int) -> ResumePoint:
        """The point ``ack(batch_id)`` will save (exactly-once mode writes it before the ack)."""
        with self._locks.state():
            point = self._resume.get(batch_id)
        if point is None:
            raise ServerError(f"batch {batch_id} is not outstanding")
        return point

    def intend(self, make: Callable[[ResumePoint], ResumePoint]) -> ResumePoint | None:
        """Write ``make(saved point)`` now, on this thread: transactional mode's commit intent (the saved
        point with the one after the transaction beside it, ``relay.kafka.commit_intent``), written before
        the transaction commits. The saved point counts as written (the intent holds it), so the position
        writer never overwrites the intent with it; the ack after the commit writes the point after.
        Returns what was written; None, and nothing written, when no point is saved yet (a first start
        without a position: its first transaction commits without an intent)."""
        with self._locks.both():
            base = self.saved_point
            if base is None:
                return None
            written = make(base)
            self._write(written)
            self.last_saved = base
        return written

    # -- 2. acknowledged -------------------------------------------------------------------------
    def ack(self, *batch_ids: int) -> ResumePoint:
        """Acknowledge batches (the oldest outstanding ones, in order; Kafka has every record of them)
        and have the resume point after the last saved (``_write_acked``): under load one write covers
        many acks. A crash before that write re-publishes those batches (byte-identical records), never
        skips."""
        if not batch_ids:
            raise ServerError("no batch to acknowledge")
        with self._locks.state():
            point = None
            for batch_id in batch_ids:
                point = self._resume.get(batch_id)
                if point is None:
                    raise ServerError(f"batch {batch_id} is not outstanding")
                self.server.ack(batch_id)
                del self._resume[batch_id]
            assert point is not None
            self.last_acked = point
            if self.save_interval_seconds <= 0:
                self._write(point)
            else:
                self._start_writer()
                self._locks.acked.notify()
        log.debug("instance %s: batches %s acked, position %s", self.name, batch_ids, point)
        return point

    def rollback(self, batch_id: int | None, then: Callable[[ResumePoint | None], None]) -> None:
        """Hand the batches from ``batch_id`` on (all: None) out again; ``then`` gets, under the state
        lock, the point after the last batch still outstanding (else the saved point)."""
        with self._locks.state():
            if batch_id is None:
                self.server.rollback()
                self._resume.clear()
            else:
                self.server.rollback(batch_id)
                for bid in [b for b in self._resume if b >= batch_id]:
                    del self._resume[bid]
            then(self._resume[max(self._resume)] if self._resume else self.saved_point)

    def amend(
        self,
        first: Callable[[], None],
        change: Callable[[ResumePoint], ResumePoint],
        idle: Callable[[ResumePoint], ResumePoint] | None,
    ) -> None:
        """Under both locks: ``first()``, then every outstanding point through ``change``; with nothing
        outstanding, the saved point through ``idle`` (when given), written now."""
        with self._locks.both():
            first()
            for batch_id, point in self._resume.items():
                self._resume[batch_id] = change(point)
            saved = self.saved_point
            if idle is not None and not self._resume and saved is not None:
                saved = idle(saved)
                self._write(saved)
                self.last_acked = saved

    def publish_under(self, mapping_version: int) -> ResumePoint | None:
        """From now on batches are published under ``mapping_version``; with nothing outstanding, the
        saved position is saved again naming it, so a restart re-publishes what follows it under that
        version (and not under the one before). Returns the point saved, if any."""
        with self._locks.both():
            self.mapping_version = mapping_version
            point = self.saved_point
            if point is None or self._resume or point.mapping_version == mapping_version:
                return None
            point = replace(point, mapping_version=mapping_version)
            self._write(point)
            self.last_acked = point
        log.info("instance %s: position %s saved under mapping version %d", self.name, point, mapping_version)
        return point

    def move_generation(self, generation: int) -> ResumePoint | None:
        """The relay continues under binlog generation ``generation`` (nothing outstanding, parser
        thread): the saved point is saved again under it now — before any record of the new generation
        is sent — so a restart re-reads what follows it under that generation too, and a key's later
        changes never sort below what was published under it. An exactly-once store writes only what a
        transaction commits: the next batch's point carries the generation. Returns the point, if any."""
        with self._locks.both():
            point = self.saved_point
            if point is None or self._resume or point.generation >= generation:
                return None
            point = replace(point, generation=generation)
            if not self.bound:
                self._write(point)
            self.last_acked = point
        log.warning("instance %s: position %s saved under binlog generation %d", self.name, point, generation)
        return point

    # -- 3. saved --------------------------------------------------------------------------------
    def save_pending(self) -> ResumePoint | None:
        """Write the point after the last acked batch now, if it is not written yet (stopping, failing:
        what Kafka has is never re-read for want of a write). Returns the point written, if any."""
        with self._locks.writing():
            point = self.last_acked
            if point is None or point is self.last_saved:
                return None
            self._write(point)
            return point

    def _write(self, point: ResumePoint) -> None:
        self.positions.save(point)
        self.last_saved, self._saved_at = point, time.monotonic()

    def _start_writer(self) -> None:
        if self._writer is None:
            self._writer = threading.Thread(
                target=self._write_acked, name=f"positions-{self.name}", daemon=True
            )
            self._writer.start()

    def _write_acked(self) -> None:
        """The position writer: the newest acked point, at most once per ``save_interval_seconds``
        while the relay is behind; a point that leaves it caught up (the parser waiting at the binlog end,
        nothing in the store, no batch outstanding) is written at once, at most once per interval too —
        so at most two writes per interval, and the saved position is current as soon as a backlog is
        through.

        Under load many acks share one write; a crash loses at most the acks since the last write, and
        the relay then re-publishes those batches (byte-identical records) — it never skips one. A write
        that fails is kept in ``save_failure`` (the publish loop raises it) and ends the writer.
        """
        while True:
            caught_up = self._await_due()
            if caught_up is None:
                return  # stopping: the caller writes what is pending (save_pending)
            try:
                self.save_pending()
            except BaseException as exc:
                self.save_failure = exc
                log.error("instance %s: could not save the position: %s", self.name, exc)
                return
            if caught_up:
                self._caught_up_saved_at = self._saved_at

    def _await_due(self) -> bool | None:
        """Wait until an acked point is due for writing; whether it leaves the relay caught up, or None
        when stopping."""
        interval = self.save_interval_seconds
        with self._locks.state():
            while not self._stopping.is_set():
                if self.last_acked is self.last_saved:
                    self._locks.acked.wait(1.0)
                    continue
                caught_up = self._caught_up()
                since = self._caught_up_saved_at if caught_up else self._saved_at
                pause = since + interval - time.monotonic()
                if pause <= 0:
                    return caught_up
                self._locks.acked.wait(pause)  # a later ack, or the parser reaching the end, notifies
        return None

    def _caught_up(self) -> bool:
        """The last acked point is all there is (under the state lock): the parser waits at the binlog
        end, the store holds nothing not taken, no batch is outstanding."""
        if not self.idle or self._resume:
            return False
        put, got, _ = self.store.sequences
        return put == got

    def caught_up(self) -> bool:
        """Whether everything read is published and acknowledged: the parser waits at the binlog end,
        the store holds nothing not taken, no batch is outstanding (any thread: the status file, the
        metrics, ``relay status``'s lag of 0)."""
        with self._locks.state():
            return self._caught_up()

    def at_binlog_end(self) -> None:
        """The parser reached the binlog end (parser thread): the writer may now write the last point."""
        self.idle = True
        with self._locks.state():
            self._locks.acked.notify()

    def stop(self, timeout: float) -> None:
        """After ``stopping`` is set: end the writer, then write what was acked (it is in Kafka: better
        written than re-read on the next start)."""
        with self._locks.state():
            self._locks.acked.notify()
        if self._writer is not None:
            self._writer.join(timeout)
        try:
            self.save_pending()
        except RelayError as exc:
            log.warning("instance %s: could not save the position at stop: %s", self.name, exc)
