"""One canal instance: source → entry builder → XA buffer → sink → ring store, behind canal's streaming API.

Fail closed on changes that cannot be captured exactly: the decoder refuses incomplete row images
(``IncompleteRowImageError``), ``relay.canal.statements`` statement-logged DML on captured tables, and
``relay.canal.xa`` holds prepared XA transactions until their decision. A transaction's entries are
kept back from the store until it ends (up to half the store), so such a refusal stops the relay before
anything of that transaction can be published; what closed before it is still published and
acknowledged, then the failure is raised to the consumer.

``CanalInstance`` is a facade over parts with one job each, built by ``relay.wiring.canal_instance``
and injected (``InstanceParts``):

- ``relay.source.parser.ParserLoop`` — the parser thread: reads the binlog, builds, filters, holds back
  or reads ahead (``relay.source.read_ahead``) and puts entries into the store; fails over to the
  standby (``relay.source.failover``);
- ``relay.source.acks.AckPath`` — the ack path: batches handed out → acknowledged → the resume point
  saved (by the position writer thread), with its two locks in one enforced order;
- ``relay.source.snapshot_control.SnapshotControl`` — snapshots and their checkpoint in resume points;
- ``relay.source.reading.Reading`` — where the parser reads (server, start point, generation).

Like canal's ``CanalInstanceWithSpring`` it starts the downstream end first (positions → store →
server) and the parser last, and stops the parser first.

Threads: ``start()`` checks the server and resolves the start position in the caller's thread (so a
misconfigured server is refused before anything runs), then the parser thread runs. Consumers call
``get_without_ack`` / ``ack`` / ``rollback`` from their own thread; ``ack`` saves the resume point of the
acknowledged prefix.

With a standby configured (``source.standby``), a master that stays unreachable for
``source.failover.attempts`` reconnects is replaced, on the parser thread, by the standby, continuing
right after the last entry put (``relay.source.failover``); the entries read from the standby carry
the next generation (``Entry.generation``, saved in the resume point after them).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from relay.canal.entry import Entry
from relay.canal.ring_store import RingStore
from relay.canal.server import EmbeddedServer, Message
from relay.config.sections import InstanceConfig
from relay.positions.store import PositionStore, ResumePoint, resume_after
from relay.schema.history import SchemaHistory
from relay.source.acks import AckPath
from relay.source.binlog_source import BinlogSource
from relay.source.reading import Reading
from relay.source.server import ServerInfo
from relay.source.snapshot import Snapshot
from relay.source.snapshot_control import SnapshotControl
from relay.source.start_point import StartPoint

log = logging.getLogger(__name__)


class Parser(Protocol):
    """What the facade needs of the parser loop (``relay.source.parser.ParserLoop``)."""

    failure: BaseException | None

    def open(self, saved: ResumePoint | None) -> None: ...

    def start(self) -> None: ...

    @property
    def running(self) -> bool: ...

    @property
    def last_event_ms(self) -> int: ...

    def join(self, timeout: float) -> None: ...


@dataclass(frozen=True)
class InstanceParts:
    """The parts of one canal instance (``relay.wiring.canal_instance`` builds them)."""

    reading: Reading
    store: RingStore
    server: EmbeddedServer
    acks: AckPath
    snapshots: SnapshotControl
    parser: Parser
    stopping: threading.Event  # set once by ``stop``; every thread of the instance watches it
    schema_history: SchemaHistory | None = None


class CanalInstance:
    """A running canal instance. ``start`` → ``get_without_ack``/``ack``/``rollback`` → ``stop``."""

    def __init__(self, config: InstanceConfig, parts: InstanceParts) -> None:
        self.config = config
        self.parts = parts
        self.reading = parts.reading
        self.store = parts.store
        self.server = parts.server
        self.acks = parts.acks
        self.snapshots = parts.snapshots
        self.parser = parts.parser
        self.started = threading.Event()  # set once the server is checked and the parser thread runs

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> None:
        saved = self.acks.load()
        self.parser.open(saved)
        self.snapshots.begin(saved)  # on whichever server the parser reads
        self.parser.start()
        self.started.set()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the parser first, then the store; unacknowledged batches are simply not saved."""
        self.parts.stopping.set()
        self.acks.stop(timeout)  # what was acked is in Kafka: its position is written, not re-read
        self.snapshots.stop()
        self.store.close()
        self.parser.join(timeout)
        self.reading.source.close()
        if self.parts.schema_history is not None:
            self.parts.schema_history.close()

    @property
    def running(self) -> bool:
        return self.parser.running

    @property
    def failure(self) -> BaseException | None:
        return self.parser.failure

    # -- where it reads and what it saved ----------------------------------------------------------
    @property
    def positions(self) -> PositionStore:
        return self.acks.positions

    @property
    def source(self) -> BinlogSource:
        return self.reading.source

    @property
    def info(self) -> ServerInfo | None:
        return self.reading.info

    @property
    def start_point(self) -> StartPoint | None:
        return self.reading.start_point

    @property
    def generation(self) -> int:
        return self.reading.generation

    @property
    def saved_point(self) -> ResumePoint | None:
        """The position after the last acknowledged batch (written, or written by the next
        ``save_pending``), else the one this run started from."""
        return self.acks.saved_point

    @property
    def last_saved(self) -> ResumePoint | None:
        return self.acks.last_saved

    @property
    def last_acked(self) -> ResumePoint | None:
        return self.acks.last_acked

    @property
    def last_event_ms(self) -> int:
        """The binlog time (ms) of the last entry the parser read, captured or filtered out; 0 before
        the first (heartbeats report it as the source time, ``relay.daemon.heartbeats``)."""
        return self.parser.last_event_ms

    def caught_up(self) -> bool:
        """Everything read is published and acknowledged, the parser waits at the binlog end
        (``AckPath.caught_up``): the lag is 0, however old the last change."""
        return self.acks.caught_up()

    def oldest_pending_ms(self) -> int:
        """The binlog time (ms) of the oldest change not yet acknowledged: the first entry the store holds
        unacked, else the last event the parser read (everything before it is acknowledged); 0: unknown.
        After a quiet hour, a new change makes the relay behind by its own age, not by the hour."""
        return self.store.first_unacked_ms() or self.parser.last_event_ms

    @property
    def save_failure(self) -> BaseException | None:
        return self.acks.save_failure

    @property
    def mapping_version(self) -> int | None:
        return self.acks.mapping_version

    @property
    def acked_sequence(self) -> int:
        """The store's ack sequence (the last entry acknowledged); -1 before any."""
        return self.store.sequences[2]

    # -- streaming API ---------------------------------------------------------------------------
    def _raise_failure(self) -> None:
        failure = self.parser.failure or self.snapshots.failure()
        if failure is not None:
            raise failure

    def get_without_ack(self, batch_size: int, timeout: float | None = None) -> Message:
        """The next batch. Once the parser has failed, what it put before is still handed out; the
        failure is raised when nothing is left and every batch handed out was acknowledged (or rolled
        back), so the saved position reaches the failing transaction but never passes it."""
        if self.parser.failure is not None:
            message = self.server.get_without_ack(batch_size, None)  # None: take what is there, no wait
            if not message.entries:
                if not self.acks.outstanding():
                    self._raise_failure()
                self.parts.stopping.wait(min(timeout or 0.0, self.config.poll_seconds))
        else:
            message = self.server.get_without_ack(batch_size, timeout)
        if message.entries:
            self.acks.hand_out(message.batch_id, self._point_after(message.entries))
        return message

    def _point_after(self, entries: Sequence[Entry]) -> ResumePoint:
        return replace(
            resume_after(entries[-1]),
            source=self.reading.source.identity,
            mapping_version=self.acks.mapping_version,
            extra=self.snapshots.extra(entries),
        )

    def resume_point(self, batch_id: int) -> ResumePoint:
        """The point ``ack(batch_id)`` will save (exactly-once mode writes it before the ack)."""
        return self.acks.resume_point(batch_id)

    def carry(self, batch_id: int, key: str, value: Any) -> None:
        """Keep ``value`` (JSON) under ``key`` in the point saved after ``batch_id`` (``AckPath.carry``)."""
        self.acks.carry(batch_id, key, value)

    def intend(self, make: Callable[[ResumePoint], ResumePoint]) -> ResumePoint | None:
        """Save ``make(saved point)`` now, before a commit (``AckPath.intend``); None: nothing saved yet."""
        return self.acks.intend(make)

    def ack(self, *batch_ids: int) -> ResumePoint:
        """Acknowledge batches (``AckPath.ack``); returns the resume point after the last."""
        return self.acks.ack(*batch_ids)

    def rollback(self, batch_id: int | None = None) -> None:
        """Hand the batches from ``batch_id`` (all: None) out again; the snapshot checkpoint goes back
        with them."""
        self.acks.rollback(batch_id, then=self.snapshots.rolled_back)

    def save_pending(self) -> ResumePoint | None:
        """Write the point after the last acked batch now, if it is not written yet."""
        return self.acks.save_pending()

    def publish_under(self, mapping_version: int) -> ResumePoint | None:
        """From now on batches are published under ``mapping_version`` (``AckPath.publish_under``)."""
        return self.acks.publish_under(mapping_version)

    # -- snapshots -------------------------------------------------------------------------------
    @property
    def snapshot(self) -> Snapshot | None:
        return self.snapshots.snapshot

    def snapshot_status(self) -> dict[str, Any] | None:
        """The running snapshot's progress (read by the status file and the metrics), or None."""
        return self.snapshots.status(self.acks.saved_point)

    def request_snapshot(
        self,
        only: Callable[[str, str], bool],
        snapshot_id: str,
        where: str = "",
        keys: dict[str, Any] | None = None,
        above_generation: int | None = None,
    ) -> str | None:
        """Start an on-demand snapshot of the physical tables ``only`` names (and the sink filters
        keep) while streaming; returns why not, or None once it runs. ``keys``: only these keys of these
        tables (``relay.source.snapshot_keys``; the tables must be among those). ``above_generation``:
        first move the relay to a binlog generation above it (``SnapshotControl.request``). Publisher
        thread."""
        return self.snapshots.request(only, snapshot_id, where, keys, above_generation)

    def captured_tables(self) -> list[tuple[str, str]]:
        """(db, table) of the base tables on the server read now that the sink's filters keep."""
        return self.snapshots.captured_tables()

    def cancel_snapshot(self) -> str | None:
        """Cancel the running snapshot; returns why not, or None. Publisher thread."""
        return self.snapshots.cancel()
