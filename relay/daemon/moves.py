"""Table moves at a mapping switch, from the publish loop's side: when a pending version may be switched to.

Owns ``MoveSwitch``, which the relay's publisher thread asks at every batch boundary while a new mapping
version is pending. A version that sends tables to another topic is switched to only after their retained
history has been copied there (``relay.kafka.history.TableMove``, on its own thread), so that per key the
new topic holds the history before the first change published into it. Until the copy has caught up the
relay keeps publishing under the version it runs (the moved tables still into their old topic, which the
copy follows); then it holds new batches, lets the ones in flight be acknowledged, has the copy take the
last records, and switches (``HotReload._switch`` saves the position under the new version before the next
batch). ``mapping.move: switch`` switches at once, the history left where it is.

The states, as the loop sees them::

    no move ──(pending version moves tables)──▶ copying ──(caught_up)──▶ holding
       ▲                                           │                        │ nothing in flight: finish()
       │                         (newer version: abandon, plan again)       ▼
       └──────────────────────── switched ◀──(finished)──────────────── final copy
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from mapping.model import Mapping
from relay.errors import SequenceError
from relay.kafka.codec import sequence
from relay.kafka.history import MovePlan, TableMove, plan_move
from relay.kafka.records import Record
from relay.positions.store import ResumePoint

__all__ = ["MoveSwitch", "last_identity"]

log = logging.getLogger(__name__)

_FIRST = (-1, -1)


class MoveSwitch:
    """Decides, for the publisher thread, whether a pending mapping version may be switched to yet.

    ``open_move`` None: moves are not copied (``mapping.move: switch``). ``tables`` lists the physical
    tables to plan a move over (the source's captured tables and those already published).
    """

    def __init__(
        self,
        open_move: Callable[[MovePlan], TableMove] | None,
        tables: Callable[[], Iterable[tuple[str, str]]],
        source_id: str,
    ) -> None:
        self._open_move = open_move
        self._tables = tables
        self._source_id = source_id
        self._planned: Mapping | None = None  # the pending version the current plan was made for
        self.move: TableMove | None = None
        self._acked: tuple[int, int] = _FIRST

    @property
    def active(self) -> bool:
        return self.move is not None

    def may_switch(self, current: Mapping, pending: Mapping, saved: ResumePoint | None) -> bool:
        """True once ``pending`` may be switched to by the ordinary rule (``mapping.watch``): no move, or
        its copy has caught up. Starts the copy the first time it sees a version that moves tables;
        raises ``InvalidMappingError`` for a version whose move cannot be copied (the caller refuses it)
        and the copy's error when it failed."""
        if self._open_move is None:
            return True
        if self._planned is not pending:
            self.abandon()
            self._planned = pending
            plan = plan_move(current, pending, self._tables(), self._source_id)
            if plan is not None:
                self.move = self._open_move(plan)
                self.move.acked_through(max(self._acked, _before(saved)))
                self.move.start()
        move = self.move
        if move is None:
            return True
        if move.error is not None:
            raise move.error
        return move.caught_up

    def finished(self) -> bool:
        """Nothing is in flight and no batch is taken: the copy takes the rest. True once it has."""
        move = self.move
        if move is None:
            return True
        move.finish()
        if move.error is not None:
            raise move.error
        return move.finished

    def acked(self, identity: tuple[int, int] | None) -> None:
        """The relay acknowledged batches whose last record has ``identity``."""
        if identity is None or identity <= self._acked:
            return
        self._acked = identity
        if self.move is not None:
            self.move.acked_through(identity)

    def switched(self) -> None:
        """The relay switched to the pending version: the move (if any) is done."""
        if self.move is not None:
            self.move.stop()
        self.move, self._planned = None, None

    def refused(self) -> None:
        """The pending version was refused: forget it (a later version is planned afresh)."""
        self.abandon()
        self._planned = None

    def abandon(self) -> None:
        if self.move is not None:
            log.info(
                "abandoning the history copy for mapping version %d: %s",
                self.move.plan.new.version,
                "a newer version is pending" if self._planned is not None else "stopping",
            )
            self.move.stop()
        self.move = None

    def progress(self) -> dict[str, Any] | None:
        return None if self.move is None else self.move.progress()


def last_identity(records: list[Record]) -> tuple[int, int] | None:
    """(sequence, part) of a batch's last record: the batch's records are in binlog order, so every
    record of it, and of the batches before it, is at or below it."""
    if not records:
        return None
    seq = part = None
    for name, value in records[-1].headers:
        if name == "relay.sequence":
            seq = int(value)
        elif name == "relay.part":
            part = int(value)
    return None if seq is None else (seq, part or 0)


def _before(point: ResumePoint | None) -> tuple[int, int]:
    """The identity bound of what was acknowledged before ``point``: every record after it has a greater
    sequence (records are numbered by their binlog offset)."""
    if point is None:
        return _FIRST
    try:
        return (sequence(point.journal, point.offset, 0, point.generation) - 1, 1 << 30)
    except SequenceError:
        return _FIRST
