"""A table move: the retained history of the tables a new mapping version sends to another topic is
copied into that topic before their first new change is published there.

Owns ``plan_move`` (which physical tables a switch moves; refused where their history cannot be copied
exactly) and ``TableMove``: a thread, ``move-<instance>``, that copies with ``HistoryCopy``
(``relay.kafka.history_copy``: merged order, the destination index, chunks) and its own ``KafkaPublisher``.
Started, fed and finished by the relay's publisher thread (``relay.daemon.moves``).

Why the history goes first: every consumer that applies a topic in offset order (a keyed consumer, Flink's
``canal-json``, Kafka Connect, log compaction keeping the last offset per key) ends with the state of the
last record per key. A switch that publishes new changes into the new topic before the old ones are copied
there leaves them behind their history. So the relay keeps publishing under the old version while this
thread copies, then pauses at a batch boundary for the last stretch, and switches only after it:

1. The destination index is read (what an earlier, interrupted copy delivered, or the table's history
   from a time it was routed there before — a move back); nothing it holds is copied again.
2. Rounds over the origin topics copy this source's records of the moved tables that the relay has
   acknowledged (``acked_through``: every record at or below that identity has landed), in merged order.
   The first round that copies about one chunk or less sets ``caught_up``: the rest is short.
3. ``finish()`` (the relay holds new batches, nothing in flight): one last, unbounded round copies the
   rest; ``finished`` tells the relay to switch.

A crash anywhere restarts the move from the beginning of the origin topics (the saved position still names
the old version); the index skips what landed, so nothing is lost, repeated or placed out of order. A
retriable Kafka failure re-reads the index and carries on from the last delivered chunk. In transactional
mode every chunk is a transaction of the move's own ``transactional.id`` (``<id>.move``), so the next
leader's move fences a frozen predecessor's.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from mapping.diff import moves
from mapping.model import Mapping, Route
from relay.errors import InvalidMappingError, MappingError, PublishError
from relay.kafka.history_copy import CopySettings, HistoryCopy
from relay.kafka.publisher import KafkaPublisher
from relay.kafka.remap import Consumed
from relay.kafka.settings import PublisherConfig

__all__ = ["MovePlan", "TableMove", "move_publisher_config", "plan_move"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MovePlan:
    """A switch ``old`` → ``new`` that moves ``tables`` (physical ``db.table``) out of ``origins``."""

    old: Mapping
    new: Mapping
    source_id: str
    tables: tuple[tuple[str, str, str, str], ...]  # (db, table, old topic, new topic)
    origins: tuple[str, ...] = field(init=False)
    destinations: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "origins", tuple(sorted({t[2] for t in self.tables})))
        object.__setattr__(self, "destinations", tuple(sorted({t[3] for t in self.tables})))

    def route(self, rec: Consumed) -> Route | None:
        """The new route of a record this move copies; None for any other record: another source's,
        not a relay record, or a table that stays where it is under both versions."""
        physical = rec.physical
        if physical is None or rec.source_id != self.source_id:
            return None
        try:
            old, new = self.old.resolve(*physical), self.new.resolve(*physical)
        except MappingError:
            return None
        if old is None or new is None or old.topic != rec.topic or new.topic == rec.topic:
            return None
        return new

    def describe(self) -> str:
        pairs = sorted({(t[2], t[3]) for t in self.tables})
        shown = ", ".join(f"{a} -> {b}" for a, b in pairs)
        return f"{len(self.tables)} table(s) ({shown})"


def plan_move(
    old: Mapping, new: Mapping, tables: Iterable[tuple[str, str]], source_id: str
) -> MovePlan | None:
    """The move a switch from ``old`` to ``new`` makes for ``tables`` (the source's captured tables and
    those the relay has published); None when no table changes topic.

    Refuses (``InvalidMappingError``) what cannot be copied exactly: a table whose codec changes with its
    topic (its history is in the old codec), a canal-protobuf or debezium-json table whose key changes (its
    records' keys cannot be recomputed), or a debezium-json table whose logical names change (its values
    name them).
    """
    moved, problems = [], []
    for m in moves(old, new, sorted(set(tables))):
        if m.old is None or m.new is None or m.old.topic == m.new.topic:
            continue
        a, b = m.old, m.new
        name = f"{m.db}.{m.table}"
        if a.codec != b.codec:
            problems.append(
                MappingError(
                    name,
                    f"moves from {a.topic} ({a.codec}) to {b.topic} ({b.codec}): its history cannot be "
                    "copied into another codec; keep the codec, or set mapping.move: switch",
                )
            )
        elif b.codec != "canal-json" and (a.key_columns, a.key_shard) != (b.key_columns, b.key_shard):
            problems.append(
                MappingError(
                    name,
                    f"moves to {b.topic} with another key ({b.codec} keys are copied as they are); keep "
                    "the key, or set mapping.move: switch",
                )
            )
        elif b.codec == "debezium-json" and (a.logical_db, a.logical_table) != (
            b.logical_db,
            b.logical_table,
        ):
            problems.append(
                MappingError(
                    name,
                    f"moves to {b.topic} as {b.logical_db}.{b.logical_table}: debezium-json records name "
                    f"their logical table ({a.logical_db}.{a.logical_table}) and are copied as they are; "
                    "keep the logical names, or set mapping.move: switch",
                )
            )
        moved.append((m.db, m.table, a.topic, b.topic))
    if problems:
        raise InvalidMappingError(f"mapping version {new.version}", problems)
    return MovePlan(old, new, source_id, tuple(moved)) if moved else None


class TableMove:
    """Copies a ``MovePlan``'s history on a thread of its own (see the module docstring).

    The publisher thread calls ``start``, ``acked_through`` after its acks, ``finish`` once nothing is in
    flight, and reads ``caught_up``, ``finished``, ``error`` and ``progress()``; ``stop`` abandons it.
    """

    def __init__(
        self,
        plan: MovePlan,
        settings: CopySettings,
        *,
        fence: Callable[[], None] = lambda: None,
        name: str = "move",
        publisher_factory: Callable[[PublisherConfig], KafkaPublisher] = KafkaPublisher,
    ) -> None:
        self.plan, self.settings = plan, settings
        self._fence, self._name, self._publisher_factory = fence, name, publisher_factory
        self.caught_up = False
        self.finished = False
        self.error: BaseException | None = None
        self._bound: tuple[int, int] = (-1, -1)
        self._final = threading.Event()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._copy: HistoryCopy | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    # -- the publisher thread's side ------------------------------------------------------------
    def start(self) -> None:
        log.info("%s: copying the history of %s before switching", self._name, self.plan.describe())
        self._thread.start()

    def acked_through(self, identity: tuple[int, int]) -> None:
        """Every record of this source up to ``identity`` (sequence, part) has landed."""
        if identity > self._bound:
            self._bound = identity
            self._wake.set()

    def finish(self) -> None:
        """Nothing is in flight and nothing more is sent until ``finished``: copy the rest."""
        if not self._final.is_set():
            log.info("%s: new batches held; copying the last records before the switch", self._name)
        self._final.set()
        self._wake.set()

    def stop(self, timeout: float = 10.0) -> None:
        self._stopping.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def progress(self) -> dict[str, Any]:
        state = "finished" if self.finished else "final" if self._final.is_set() else "copying"
        copy = self._copy
        return {
            "state": "failed" if self.error is not None else state,
            "to_version": self.plan.new.version,
            "tables": len(self.plan.tables),
            "from": list(self.plan.origins),
            "to": list(self.plan.destinations),
            "read": 0 if copy is None else copy.read,
            "copied": 0 if copy is None else copy.copied,
            "already_there": 0 if copy is None else copy.skipped,
            "caught_up": self.caught_up,
            "error": None if self.error is None else str(self.error),
        }

    # -- the move thread ------------------------------------------------------------------------
    def _run(self) -> None:
        backoff = self.settings.retry.start(sleep=self._stopping.wait)
        while not self._stopping.is_set():
            publisher = None
            try:
                publisher = self._publisher_factory(self.settings.publisher)
                self._copy_all(publisher)
                return
            except PublishError as exc:
                if not exc.retriable:
                    self._fail(exc)
                    return
                log.warning("%s: %s; reading the destinations again and carrying on", self._name, exc)
                if not backoff.wait():
                    self._fail(exc)
                    return
            except BaseException as exc:
                self._fail(exc)
                return
            finally:
                if publisher is not None:
                    publisher.close(timeout=5.0)
                if self._copy is not None:
                    self._copy.publisher = None  # its librdkafka handle goes with its last reference

    def _fail(self, exc: BaseException) -> None:
        log.error("%s: the history copy failed: %s", self._name, exc)
        self.error = exc

    def _copy_all(self, publisher: KafkaPublisher) -> None:
        publisher.init_transactions()  # transactional: fences the move of a frozen predecessor
        publisher.ensure_topics(self.plan.destinations)
        starts = None if self._copy is None else self._copy.next_offsets  # after a failure: carry on
        copy = HistoryCopy(
            self.plan, self.settings, publisher, stop=self._stopping, fence=self._fence, starts=starts
        )
        copy.read_index()
        self._copy = copy
        while not self._stopping.is_set():
            final = self._final.is_set()
            self._wake.clear()
            before = copy.copied
            copy.round(None if final else self._bound)
            if self._stopping.is_set():
                return
            if final:
                self.finished = True
                log.info(
                    "%s: history copied (%d records, %d already there); switching",
                    self._name,
                    copy.copied,
                    copy.skipped,
                )
                return
            if not self.caught_up and copy.copied - before <= self.settings.chunk:
                # What the relay published during the last round is about one chunk: the pause for
                # the rest (``finish``) will be short.
                self.caught_up = True
                log.info("%s: caught up (%d records copied so far)", self._name, copy.copied)
            if copy.copied == before:
                self._wake.wait(1.0)


def move_publisher_config(config: PublisherConfig) -> PublisherConfig:
    """The move's own producer: the relay's settings, and in transactional mode an id of its own
    (``<transactional.id>.move``) so a new leader's move fences a frozen predecessor's."""
    txid = config.transactional_id
    return replace(config, client_id=f"{config.client_id}.move", transactional_id=txid and f"{txid}.move")
