"""canal's embedded streaming API (``CanalServerWithEmbedded``) over one ring store: batch ids on top of
store sequences.

Owned here: the table of outstanding batches (handed out by ``get_without_ack``, neither acked nor
rolled back yet), the batch id counter (1, 2, 3, ... for the life of the server, as canal), and the
rules canal enforces: acks in batch order (only the oldest outstanding batch may be acked), an empty
get hands out batch id -1 and registers nothing.

Rollback differs from canal on purpose: canal's ``rollback(batch_id)`` rewinds the whole store;
here it undoes that batch and every later one only (their entries come back, in the same order, on
the next get), while earlier outstanding batches stay and can still be acked — a pipelined publisher
that failed on batch 7 keeps batches 5 and 6 it already delivered. ``rollback()`` undoes them all.

Timeouts (as canal's server): ``timeout=None`` takes what there is now and never waits;
``timeout <= 0`` waits for a complete batch with no limit (``RingStore.close()`` ends the wait);
``timeout > 0`` waits up to that many seconds for a complete batch, then returns what there is.

Threads: safe to call from several threads — typically the publisher's loop calls
``get_without_ack`` while delivery callbacks ``ack``. Gets and rollbacks are serialized (a rollback
must not interleave with a get that is taking entries), and a short lock guards the batch table, so
an ``ack`` never waits for a blocking get. Hands to the next stage: ``Message`` batches for the
publisher; acks free the store, whose caller then saves the resume point.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass

from relay.canal.entry import Entry
from relay.canal.ring_store import Events, PositionRange, RingStore
from relay.errors import ServerError

log = logging.getLogger(__name__)

EMPTY_BATCH_ID = -1


@dataclass(frozen=True, slots=True)
class Message:
    """One batch as the client sees it (canal's ``Message``); ``batch_id`` -1 means nothing was there."""

    batch_id: int
    entries: tuple[Entry, ...]
    position_range: PositionRange | None

    @property
    def is_empty(self) -> bool:
        return self.batch_id == EMPTY_BATCH_ID


EMPTY_MESSAGE = Message(EMPTY_BATCH_ID, (), None)


@dataclass(frozen=True, slots=True)
class _Batch:
    first_seq: int
    last_seq: int
    position_range: PositionRange | None


class EmbeddedServer:
    """The streaming get / ack / rollback API for one instance's ring store."""

    def __init__(self, store: RingStore) -> None:
        self.store = store
        self._next_id = 1
        self._batches: OrderedDict[int, _Batch] = OrderedDict()
        self._get_lock = threading.Lock()  # serializes gets and rollbacks
        self._lock = threading.Lock()  # guards the batch table; never held while waiting

    def get_without_ack(self, batch_size: int, timeout: float | None = None) -> Message:
        """The next batch, registered as outstanding until it is acked or rolled back."""
        with self._get_lock:
            events = self._take(batch_size, timeout)
            if not events.entries:
                return EMPTY_MESSAGE
            with self._lock:
                batch_id = self._next_id
                self._next_id += 1
                self._batches[batch_id] = _Batch(events.first_seq, events.last_seq, events.position_range)
        log.debug(
            "batch %d: %d entries, sequences %d..%d, range %s",
            batch_id,
            len(events.entries),
            events.first_seq,
            events.last_seq,
            events.position_range,
        )
        return Message(batch_id, events.entries, events.position_range)

    def get(self, batch_size: int, timeout: float | None = None) -> Message:
        """``get_without_ack`` and ``ack`` at once; refused while other batches are outstanding."""
        with self._lock:
            if self._batches:
                raise ServerError(
                    f"get with auto-ack while batches {list(self._batches)} are outstanding: "
                    "ack or roll them back first"
                )
        message = self.get_without_ack(batch_size, timeout)
        if not message.is_empty:
            self.ack(message.batch_id)
        return message

    def _take(self, batch_size: int, timeout: float | None) -> Events:
        if timeout is None:
            return self.store.try_get(batch_size)
        return self.store.get(batch_size, None if timeout <= 0 else timeout)

    def ack(self, batch_id: int) -> PositionRange | None:
        """Confirm the oldest outstanding batch and free its entries; returns its position range."""
        with self._lock:
            expected = self._oldest(batch_id)
            if batch_id != expected:
                raise ServerError(
                    f"batch {batch_id} acked out of order: expected batch {expected}, the oldest outstanding"
                )
            batch = self._batches.pop(batch_id)
            self.store.ack(batch.last_seq)
        log.debug("batch %d acked to sequence %d, range %s", batch_id, batch.last_seq, batch.position_range)
        return batch.position_range

    def rollback(self, batch_id: int | None = None) -> None:
        """Undo ``batch_id`` and every later outstanding batch, or every outstanding batch (None)."""
        with self._get_lock, self._lock:
            if batch_id is None:
                undone = list(self._batches)
                self._batches.clear()
                self.store.rollback()
            else:
                self._oldest(batch_id)  # raises when nothing is outstanding
                if batch_id not in self._batches:
                    raise ServerError(
                        f"batch {batch_id} is not outstanding (outstanding: {list(self._batches)})"
                    )
                undone = [b for b in self._batches if b >= batch_id]
                first_seq = self._batches[batch_id].first_seq
                for b in undone:
                    del self._batches[b]
                self.store.rollback_to(first_seq - 1)
        log.info("rolled back batches %s", undone)

    def outstanding(self) -> list[int]:
        """Ids of the batches handed out and neither acked nor rolled back, oldest first."""
        with self._lock:
            return list(self._batches)

    def _oldest(self, batch_id: int) -> int:
        if not self._batches:
            raise ServerError(f"batch {batch_id} is not outstanding: no batch is outstanding")
        return next(iter(self._batches))
