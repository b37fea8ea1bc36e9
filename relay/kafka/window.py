"""The publisher's in-flight window: the batches sent and not yet handed back, in send order.

Owns the ``BatchHandle`` of every batch in flight and answers what the relay contract asks of them: which
batches at the head are delivered in full, with every earlier one (``completed_prefix``: only those may be
acked and their position saved), and which batch failed first (``failed``). The sessions
(``relay.kafka.session``, ``relay.kafka.transaction``) mark handles committed, failed or aborted through it;
the delivery reports (``relay.kafka.delivery``) count each handle's records down.

Threads: the publisher thread only (delivery reports are served there too, inside ``poll``): no lock.
"""

from __future__ import annotations

import logging
from collections import deque

from relay.errors import PublishError
from relay.kafka.records import BatchHandle

log = logging.getLogger(__name__)


class InflightWindow:
    """The handles of the batches in flight, oldest first."""

    def __init__(self) -> None:
        self._handles: deque[BatchHandle] = deque()

    def add(self, handle: BatchHandle) -> None:
        self._handles.append(handle)

    def count(self) -> int:
        return len(self._handles)

    def ids(self) -> list[int]:
        """The batch ids in send order."""
        return [h.batch_id for h in self._handles]

    def labels(self) -> list[str]:
        return [h.label for h in self._handles]

    def first_label(self) -> str | None:
        """The oldest batch's label (what a producer-wide error is logged against), or None."""
        return self._handles[0].label if self._handles else None

    def last(self) -> BatchHandle:
        return self._handles[-1]

    def completed_prefix(self) -> list[BatchHandle]:
        """Remove and return, in send order, the batches at the head whose every record is delivered."""
        done: list[BatchHandle] = []
        handles = self._handles
        while handles and handles[0].delivered:
            handle = handles.popleft()
            log.debug(
                "%s: all %d records delivered (%d dead-lettered)",
                handle.label,
                handle.records,
                handle.dead_lettered,
            )
            done.append(handle)
        return done

    def settled_through(self, batch_id: int) -> BatchHandle | None:
        """Batch ``batch_id``'s handle when it and every batch before it have all their records delivered
        (in transactional mode: still uncommitted, ``delivered`` waits for the commit); else None."""
        for handle in self._handles:
            if handle.pending or handle.error is not None:
                return None
            if handle.batch_id == batch_id:
                return handle
        return None

    def failed(self) -> BatchHandle | None:
        """The first batch with a failed record (its ``error`` says why), or None."""
        for handle in self._handles:
            if handle.error is not None:
                return handle
        return None

    def landed(self) -> object:
        """The delivery report of the last record delivered in the newest batch that has one, or None."""
        for handle in reversed(self._handles):
            if handle.landed is not None:
                return handle.landed
        return None

    def pending(self) -> bool:
        """Whether a record of some batch still waits for its delivery report."""
        return any(h.pending for h in self._handles)

    def fail_all(self, error: PublishError) -> None:
        """Fail every batch (each keeps its first error)."""
        for handle in self._handles:
            handle.fail(error)

    def forget_error(self, error: PublishError) -> None:
        """Clear ``error`` from the batches it failed, so that a better-known cause takes its place."""
        for handle in self._handles:
            if handle.error is error:
                handle.error = None

    def commit_all(self) -> None:
        """The open transaction committed: every batch in it counts as delivered."""
        for handle in self._handles:
            handle.committed = True

    def disown(self) -> list[BatchHandle]:
        """Give up every batch (their late delivery reports are ignored); returns them, oldest first."""
        handles = list(self._handles)
        for handle in handles:
            handle.aborted = True
        self._handles.clear()
        return handles
