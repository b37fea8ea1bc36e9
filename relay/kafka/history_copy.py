"""Copying retained records into the topics a mapping names for them now, in an order consumers can apply.

Owns ``HistoryCopy`` — the copy a table move makes (``relay.kafka.history``, on the move's thread) and
the one ``relay replay --remap`` makes (``relay.ops.replay``, on the CLI's thread) — with what it stands
on: ``DestinationIndex`` (what the destination topics already hold), ``TopicReader`` (a consumer that
knows which partitions it has read to their end) and ``CopySettings``. A ``CopyPlan`` says which records
move and where (``route``); ``relay.kafka.remap`` makes the records; a ``KafkaPublisher`` delivers them.

How a copy keeps each key's changes in order, and copies nothing twice:

- The records of the origin partitions are merged by change identity (each partition's own order kept):
  a record is taken only once every origin partition has a record at hand or has been read to its end,
  and the lowest identity goes first. So in every destination partition the copies arrive in identity
  order, and a DDL barrier — one copy in every origin partition, placed once — lands after every row
  change before it and before every one after it, in every destination partition.
- ``DestinationIndex``: before copying, the destinations are read once (to the end of every partition):
  per (topic, partition, source id, physical table), the lowest and highest change identity there. A
  record at or below the highest is not copied: a destination partition holds a table's changes in
  identity order, so the destination has it already (an earlier, interrupted copy; a re-run) — or, for a
  table moved back, its history from the time it was routed there.
- ``round(bound)``: a fresh consumer reads the origins from where the last round stopped and copies the
  records at or below ``bound`` (sequence, part) — everything with None. A consumer opened after the bound
  was taken reaches the end of a partition only past every record at or below it that had landed, so the
  merge never passes a record still to come. Copies are delivered in chunks (each committed, with a
  transactional producer); the caller's ``fence`` is checked before each.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from mapping.model import Route
from relay.common.kafka_log import quiet
from relay.common.retry import RetryPolicy
from relay.errors import PublishError
from relay.kafka.publisher import KafkaPublisher
from relay.kafka.records import Record
from relay.kafka.remap import Consumed, Identity, Remapper
from relay.kafka.settings import PublisherConfig
from relay.kafka.verdicts import describe

__all__ = [
    "CopyPlan",
    "CopySettings",
    "DestinationIndex",
    "HistoryCopy",
    "Slot",
    "TopicReader",
    "partitions_of",
]

log = logging.getLogger(__name__)

_BUFFER_BYTES = 8 << 20  # records held for the merge; a partition with one at hand pauses beyond it

Partition = tuple[str, int]
Slot = tuple[str, int, str, str, str]
"""(topic, partition, source id, db, table)"""


class CopyPlan(Protocol):
    """Which records a copy moves, and where. ``source_id`` None: every source's."""

    @property
    def origins(self) -> tuple[str, ...]: ...
    @property
    def destinations(self) -> tuple[str, ...]: ...
    @property
    def source_id(self) -> str | None: ...
    def route(self, rec: Consumed) -> Route | None: ...


@dataclass(frozen=True)
class CopySettings:
    """How a copy reads and writes. ``consumer``: librdkafka consumer settings (bootstrap, security,
    isolation level); ``publisher``: the copy's producer; ``rate``: records written per second at most
    (0: no limit); ``chunk``: records delivered (and, transactional, committed) at a time."""

    consumer: dict[str, Any]
    publisher: PublisherConfig
    retry: RetryPolicy = field(default_factory=lambda: RetryPolicy(initial=0.5, maximum=30.0))
    rate: float = 0.0
    chunk: int = 500
    poll_seconds: float = 0.2


class DestinationIndex:
    """What topics hold: per ``Slot``, the lowest and highest change identity there."""

    def __init__(self) -> None:
        self.span: dict[Slot, tuple[Identity, Identity]] = {}

    @classmethod
    def read(
        cls, settings: dict[str, Any], topics: Iterable[str], source_id: str | None, stop: threading.Event
    ) -> DestinationIndex:
        """Read ``topics`` to the end of every partition; only ``source_id``'s records (None: all)."""
        index = cls()
        reader = TopicReader(settings, {tp: OFFSET_BEGINNING for tp in partitions_of(settings, topics)})
        try:
            while not reader.at_end() and not stop.is_set():
                rec = reader.poll(0.2)
                if rec is None or (physical := rec.physical) is None:
                    continue
                if source_id is not None and rec.source_id != source_id:
                    continue
                index.add((rec.topic, rec.partition, rec.source_id or "", *physical), rec.identity)
        finally:
            reader.close()
        return index

    def add(self, slot: Slot, identity: Identity) -> None:
        low, high = self.span.get(slot, (identity, identity))
        self.span[slot] = (min(low, identity), max(high, identity))

    def holds(self, record: Record, source_id: str, physical: tuple[str, str], identity: Identity) -> bool:
        """True when the record's partition already holds this change of its table, or a later one;
        otherwise it counts as held from now on."""
        assert record.partition is not None
        slot = (record.topic, record.partition, source_id, *physical)
        span = self.span.get(slot)
        if span is not None and span[1] >= identity:
            return True
        self.add(slot, identity)
        return False


def partitions_of(settings: dict[str, Any], topics: Iterable[str], timeout: float = 30.0) -> list[Partition]:
    """Every (topic, partition) of ``topics``; a topic that does not exist has none."""
    consumer = Consumer(quiet({**settings, "group.id": f"relay-copy-{uuid.uuid4().hex[:8]}"}))
    try:
        meta = consumer.list_topics(timeout=timeout)
    except KafkaException as exc:
        raise PublishError(
            f"kafka {settings.get('bootstrap.servers')} (kafka.bootstrap_servers) did not answer within "
            f"{timeout:g} s: {describe(exc.args[0])}"
        ) from exc
    finally:
        consumer.close()
    out: list[Partition] = []
    for topic in topics:
        info = meta.topics.get(topic)
        if info is not None and info.error is None:
            out.extend((topic, p) for p in sorted(info.partitions))
    return out


def log_starts(settings: dict[str, Any], partitions: list[Partition]) -> dict[Partition, int]:
    """Where each partition's log starts now (its low watermark: retention and DeleteRecords move it)."""
    consumer = Consumer(quiet({**settings, "group.id": f"relay-copy-{uuid.uuid4().hex[:8]}"}))
    try:
        return {
            (t, p): int(consumer.get_watermark_offsets(TopicPartition(t, p), timeout=30)[0])
            for t, p in partitions
        }
    except KafkaException as exc:
        raise PublishError(f"cannot read where the logs start: {exc.args[0]}") from exc
    finally:
        consumer.close()


class TopicReader:
    """A fresh consumer over partitions from given offsets; ``eof`` holds the partitions that reached
    their end since it opened (left again when a record arrives there)."""

    def __init__(self, settings: dict[str, Any], starts: dict[Partition, int]) -> None:
        self.partitions = list(starts)
        self.eof: set[Partition] = set()
        self.paused: set[Partition] = set()
        self._consumer = Consumer(
            quiet(
                {
                    **settings,
                    "group.id": f"relay-copy-{uuid.uuid4().hex[:8]}",  # assign() only: no group offsets
                    "enable.auto.commit": False,
                    "enable.partition.eof": True,
                    "queued.max.messages.kbytes": 8192,
                    # An offset no longer in the log (retention deleted it under us) is an error, never a
                    # silent jump to the end or the start.
                    "auto.offset.reset": "error",
                }
            )
        )
        self._consumer.assign([TopicPartition(t, p, o) for (t, p), o in starts.items()])

    def at_end(self) -> bool:
        return len(self.eof) == len(self.partitions)

    def poll(self, timeout: float) -> Consumed | None:
        msg = self._consumer.poll(timeout)
        if msg is None:
            return None
        where = (str(msg.topic()), int(msg.partition() or 0))
        err = msg.error()
        if err is not None:
            if err.code() == KafkaError._PARTITION_EOF:
                self.eof.add(where)
                return None
            if err.code() == KafkaError._AUTO_OFFSET_RESET:
                raise PublishError(
                    f"cannot read {where[0]} [{where[1]}]: the records to read next were deleted from the "
                    f"log (retention, DeleteRecords) while they were read: {err.str()}"
                )
            raise PublishError(f"cannot read {where[0]} [{where[1]}]: {err.str()}")
        self.eof.discard(where)
        return Consumed.of(msg)

    def pause(self, where: Partition) -> None:
        if where not in self.paused:
            self._consumer.pause([TopicPartition(*where)])
            self.paused.add(where)

    def resume_all(self) -> None:
        if self.paused:
            self._consumer.resume([TopicPartition(*w) for w in self.paused])
            self.paused.clear()

    def close(self) -> None:
        self._consumer.close()


@dataclass
class _Held:
    rec: Consumed
    route: Route
    size: int


class HistoryCopy:
    """One copy: the destination index, then rounds (see the module docstring). One caller thread.

    ``publisher`` None counts what would be copied and writes nothing (a dry run). ``starts``: where to
    read each origin partition from (default: its beginning); ``next_offsets`` says, after every
    delivered chunk (``on_delivered`` is then called), where a later copy may start instead.
    """

    def __init__(
        self,
        plan: CopyPlan,
        settings: CopySettings,
        publisher: KafkaPublisher | None,
        *,
        stop: threading.Event,
        fence: Callable[[], None] = lambda: None,
        starts: dict[Partition, int] | None = None,
        on_delivered: Callable[[HistoryCopy], None] = lambda copy: None,
    ) -> None:
        self.plan, self.settings, self.publisher = plan, settings, publisher
        self._stop, self._fence, self._on_delivered = stop, fence, on_delivered
        self.next_offsets: dict[Partition, int] = dict(starts or {})
        self.index = DestinationIndex()
        self.read = self.moved = self.copied = self.skipped = self.barrier_copies = 0
        self.into: dict[str, int] = {}
        self._chunk: list[Record] = []
        self._remapper = Remapper()
        self._last_ddl: dict[tuple[str, str], Identity] = {}
        self._partitions: dict[str, int] = {}
        self._sent = 0

    def read_index(self) -> None:
        """What the destinations hold now (again after a failure: what landed of a lost chunk)."""
        self.index = DestinationIndex.read(
            self.settings.consumer, self.plan.destinations, self.plan.source_id, self._stop
        )
        self._chunk.clear()
        self._remapper = Remapper()
        origins = partitions_of(self.settings.consumer, self.plan.origins)
        self.next_offsets = {tp: self.next_offsets.get(tp, OFFSET_BEGINNING) for tp in origins}

    def round(self, bound: tuple[int, int] | None) -> None:
        """Copy the records at or below ``bound`` (all with None) not copied yet, in merged order."""
        reader = TopicReader(self.settings.consumer, dict(self.next_offsets))
        heads: dict[Partition, deque[_Held]] = {tp: deque() for tp in self.next_offsets}
        consumed = dict(self.next_offsets)
        held = 0
        try:
            while not self._stop.is_set():
                while (tp := merge_head(heads, reader.eof)) is not None:
                    item = heads[tp][0]
                    if bound is not None and item.rec.identity[:2] > bound:
                        break
                    heads[tp].popleft()
                    held -= item.size
                    sent = self._sent
                    self._copy(item)
                    if self._sent != sent:  # a chunk was delivered: what came before it is done
                        self._settle(heads, consumed)
                        self._on_delivered(self)
                if round_done(heads, reader.eof, bound):
                    break
                if held < _BUFFER_BYTES // 2:
                    reader.resume_all()
                rec = reader.poll(self.settings.poll_seconds)
                if rec is None:
                    continue
                where = (rec.topic, rec.partition)
                consumed[where] = rec.offset + 1
                self.read += 1
                route = self.plan.route(rec)
                if route is None:
                    continue
                size = len(rec.value or b"") + len(rec.key or b"") + 64
                heads[where].append(_Held(rec, route, size))
                held += size
                if held > _BUFFER_BYTES:
                    reader.pause(where)
            if self._stop.is_set():
                return  # abandoned: what was not delivered is copied by the next copy
            self._deliver()
            self._settle(heads, consumed)
            self._on_delivered(self)
        finally:
            reader.close()

    def partitions(self, topic: str) -> int:
        if topic not in self._partitions:
            if self.publisher is not None:
                self._partitions[topic] = self.publisher.partitions(topic)  # created if it may be
            else:
                self._partitions[topic] = max(1, len(partitions_of(self.settings.consumer, [topic])))
        return self._partitions[topic]

    def _copy(self, item: _Held) -> None:
        rec, route = item.rec, item.route
        physical = rec.physical
        assert physical is not None
        if not rec.is_row:  # a DDL barrier: one copy per origin partition, placed once
            if self._last_ddl.get(physical) == rec.identity:
                self.barrier_copies += 1
                return
            self._last_ddl[physical] = rec.identity
        added = 0
        for record in self._remapper.records(rec, route, self.partitions(route.topic)):
            if self.index.holds(record, rec.source_id or "", physical, rec.identity):
                continue
            self._chunk.append(record)
            added += 1
        if not added:
            self.skipped += 1
            return
        self.moved += 1
        self.into[route.topic] = self.into.get(route.topic, 0) + 1
        if len(self._chunk) >= self.settings.chunk:
            self._deliver()
        if self.settings.rate > 0:
            self._stop.wait(added / self.settings.rate)

    def _settle(self, heads: dict[Partition, deque[_Held]], consumed: dict[Partition, int]) -> None:
        for tp, queue in heads.items():
            self.next_offsets[tp] = queue[0].rec.offset if queue else consumed[tp]

    def _deliver(self) -> None:
        """Deliver the chunk (committed, in transactional mode); raises the failure that stopped it."""
        chunk, publisher = self._chunk, self.publisher
        if not chunk:
            return
        self._sent += 1
        if publisher is None:  # a dry run
            self.copied += len(chunk)
            self._chunk = []
            return
        self._fence()
        handle = publisher.send(self._sent, chunk, "history copy")
        deadline = time.monotonic() + self.settings.publisher.delivery_timeout_s + 10
        if publisher.transactional and not publisher.commit():
            failed = publisher.failed()
            publisher.abort_inflight()
            if failed is not None and failed.error is not None:
                raise failed.error
            raise PublishError(f"{handle.label}: the transaction did not commit")
        while not publisher.completed_prefix():
            failed = publisher.failed()
            if failed is not None and failed.error is not None:
                publisher.abort_inflight()
                raise failed.error
            if time.monotonic() > deadline:
                raise PublishError(f"{handle.label}: not delivered in time")
            publisher.poll(0.1)
        self.copied += len(chunk)
        self._chunk = []


def merge_head(heads: dict[Partition, deque[_Held]], eof: set[Partition]) -> Partition | None:
    """The partition whose head comes next, once every partition has one or is at its end."""
    best: Partition | None = None
    for tp, queue in heads.items():
        if not queue:
            if tp not in eof:
                return None
            continue
        if best is None or queue[0].rec.identity < heads[best][0].rec.identity:
            best = tp
    return best


def round_done(
    heads: dict[Partition, deque[_Held]], eof: set[Partition], bound: tuple[int, int] | None
) -> bool:
    """Every partition is at its end with nothing held, or holds only records past ``bound``."""
    for tp, queue in heads.items():
        if queue:
            if bound is None or queue[0].rec.identity[:2] <= bound:
                return False
        elif tp not in eof:
            return False
    return True
