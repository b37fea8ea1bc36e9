"""Snapshot control of a canal instance: start, continue, move, request and cancel snapshots
(``relay.source.snapshot``), and the snapshot checkpoint carried in every resume point's ``extra``.

A snapshot's checkpoint as of the last batch handed out goes into the resume point after it, so a
restart continues the snapshot from what Kafka has; a rollback takes it back with the batches; a cancel
rewrites the outstanding points (``AckPath.amend``) so no restart continues a cancelled snapshot.

Threads: ``begin`` at start (caller's thread), ``move`` on the parser thread after a failover, the rest
on the publisher thread.
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from relay.canal.entry import Entry
from relay.canal.sink import Sink
from relay.config.sections import SnapshotConfig
from relay.positions.store import MAX_GENERATION, ResumePoint
from relay.source.acks import AckPath
from relay.source.reading import Reading
from relay.source.snapshot import Snapshot
from relay.source.snapshot_checkpoint import EXTRA_KEY, READ_MS_KEY, compacted, state_rows
from relay.source.snapshot_entry import SnapshotEntry
from relay.source.snapshot_plan import captured_tables, check_where, plan
from relay.source.snapshot_watermarks import place_of

log = logging.getLogger(__name__)

NO_CAPTURED_TABLE = "no captured table matches"  # request_snapshot's answer when no table is left


class SnapshotControl:
    """The running snapshot of one instance, and its checkpoint as handed out."""

    def __init__(
        self,
        name: str,
        config: SnapshotConfig,
        captures: Callable[[str, str], bool] | None,
        sink: Sink,
        reading: Reading,
        acks: AckPath,
    ) -> None:
        self.name = name
        self.config = config
        self.captures = captures
        self.sink = sink
        self.reading = reading
        self.acks = acks
        self.snapshot: Snapshot | None = None
        # The running snapshot's checkpoint as of the last batch handed out, its state before any chunk,
        # and the id and end state of a cancelled one.
        self._state: dict[str, Any] | None = None
        self._fresh: dict[str, Any] | None = None
        self._cancelled: tuple[str, dict[str, Any]] | None = None

    def begin(self, saved: ResumePoint | None) -> None:
        """Start a snapshot if the mode asks for one, or continue the one the saved point records.

        ``initial`` and ``when_needed`` snapshot when no position is saved, also when ``source.start``
        names an old place: the parser then reads the binlog from there while the readers read the
        tables now, and a chunk is put only once the parser has reached the binlog end its SELECT saw
        (its ``high``), so the history before the chunk sorts before it and every change of its rows
        after the SELECT supersedes it (``relay.source.snapshot``). An unfinished snapshot recorded in
        the saved point is continued whatever the mode: it was asked for (``relay snapshot cancel``
        ends it, also with the relay stopped)."""
        start = self.reading.start_point
        if self.captures is None or self.reading.info is None or start is None:
            return
        state = saved.extra.get(EXTRA_KEY) if saved is not None else None
        if state is not None:
            if state.get("done"):
                self._state = state
                return
        elif saved is None and self.config.mode != "never":
            snapshot_id = f"{self.name}-{int(time.time())}"
            state = plan(self.config, self.reading.source_config(), self.captures, snapshot_id)
        else:
            return
        self._run(state, (start.journal, start.offset))

    def _run(self, state: dict[str, Any], at: tuple[str, int] | None, *, moved: bool = False) -> Snapshot:
        """Start readers for ``state`` on the server being read; ``at``: where the parser reads.
        ``moved``: the same snapshot on another server, whose checkpoints as handed out stay."""
        info = self.reading.info
        assert info is not None
        # Where the previous snapshot (this run's, or the saved point's) put its last chunk: a chunk of
        # this one at the same place numbers on from there (relay.source.snapshot_watermarks).
        after = self.snapshot.watermarks.last_place() if self.snapshot is not None else place_of(self._state)
        if not moved:
            # Copies: the snapshot moves its own state on as chunks are put, points carry what was
            # handed out.
            self._state = copy.deepcopy(state)
            self._fresh = copy.deepcopy(state)
        snap = Snapshot(
            self.config,
            self.reading.source_config(),
            state,
            server_id=info.server_id,
            mariadb=info.mariadb,
            after=after,
        )
        self.snapshot = snap  # before its readers start: the parser watches for it from the next event
        snap.start(at)
        return snap

    def move(self) -> None:
        """After a failover (parser thread): continue the running snapshot on the standby from what was
        put. The chunks read from the master and put stay (they are in the store, placed in the
        master's binlog); the chunks read but not put are dropped, their watermarks being the master's
        binlog places; every unfinished table is read on, after its last key put, with the standby's
        binlog as watermarks and the standby's generation in the sequences."""
        old = self.snapshot
        if old is None or old.done or old.failure is not None:
            return
        old.stop()
        state = old.moved_state()
        start = self.reading.start_point
        assert start is not None
        log.warning(
            "instance %s: snapshot %s continues on the standby from its checkpoint (%d rows put)",
            self.name,
            state["id"],
            state_rows(state),
        )
        # The master's chunks in the store are still handed out with their own checkpoints.
        self._run(state, (start.journal, start.offset), moved=True)

    def _kept(self, db: str, table: str) -> bool:
        name = f"{db}.{table}"
        return self.sink.include.matches(name) and not self.sink.exclude.matches(name)

    def request(
        self,
        only: Callable[[str, str], bool],
        snapshot_id: str,
        where: str,
        keys: dict[str, Any] | None,
        above_generation: int | None = None,
    ) -> str | None:
        """Start an on-demand snapshot (``CanalInstance.request_snapshot``); returns why not, or None.

        ``above_generation`` (``relay verify --repair`` of records beyond the relay's position: a forged or
        foreign record whose identity sorts after everything the relay published): the snapshot's rows must
        sort after those records, and so must every later change of their keys — so the relay first moves
        to binlog generation ``max(its own, above_generation) + 1``, as after a ``relay positions set``:
        the parser makes the move at a transaction boundary once everything put is acknowledged, saves the
        position under it before any record of it is sent (``AckPath.move_generation``), then starts
        the snapshot."""
        running = self.snapshot
        if running is not None and running.active:
            return f"snapshot {running.state['id']} is still running"
        if self.reading.move_to is not None:
            return "a snapshot waits for the move to a new binlog generation"
        if self.reading.info is None:
            return "the instance is not reading a server"
        source = self.reading.source_config()
        state = plan(self.config, source, lambda db, t: self._kept(db, t) and only(db, t), snapshot_id, where)
        if not state["tables"]:
            return NO_CAPTURED_TABLE
        if where:
            problem = check_where(source, list(state["tables"]), where)
            if problem is not None:
                return problem
        if keys is not None:
            unknown = sorted(set(keys) - set(state["tables"]))
            if unknown:
                return f"keys name tables this relay does not snapshot for it: {', '.join(unknown)}"
            state["keys"] = keys
        if above_generation is not None:
            target = max(self.reading.generation, above_generation) + 1
            if target > MAX_GENERATION:
                return (
                    f"the records to repair carry binlog generation {above_generation}: the relay cannot "
                    f"publish above it (generations end at {MAX_GENERATION}); publish to new topics"
                )
            self.reading.after_move = lambda: self._run(state, self.reading.source.delivered)
            self.reading.move_to = target
            log.warning(
                "instance %s: snapshot %s waits for the move to binlog generation %d (records beyond the "
                "relay's position are to be repaired)",
                self.name, snapshot_id, target,
            )  # fmt: skip
            return None
        self._run(state, self.reading.source.delivered)
        return None

    def captured_tables(self) -> list[tuple[str, str]]:
        """(db, table) of the base tables on the server read now that the sink's filters keep."""
        return captured_tables(self.reading.source_config(), self._kept)

    def cancel(self) -> str | None:
        """Cancel the running snapshot; returns why not, or None."""
        snap = self.snapshot
        if snap is None or not snap.active:
            return "no snapshot is running"
        state = compacted(snap.cancel())

        def first() -> None:
            self._cancelled = (str(state["id"]), state)
            self._state = state

        def change(point: ResumePoint) -> ResumePoint:
            # The batches handed out carry the checkpoint of their chunks: they save the cancel instead.
            if self._unless_cancelled(point.extra.get(EXTRA_KEY)) is state:
                return replace(point, extra={**point.extra, EXTRA_KEY: state})
            return point

        def idle(saved: ResumePoint) -> ResumePoint:
            return replace(saved, extra={**saved.extra, EXTRA_KEY: state})

        # Nothing outstanding (an idle source): written now, so a restart does not continue it. An
        # exactly-once store writes only what a transaction committed: there it waits for a batch.
        self.acks.amend(first, change, None if self.acks.bound else idle)
        log.info(
            "instance %s: snapshot %s cancelled (%d rows put)", self.name, state["id"], state_rows(state)
        )
        return None

    def _unless_cancelled(self, state: dict[str, Any] | None) -> dict[str, Any] | None:
        """``state``, or the cancelled end state when it is a checkpoint of the snapshot cancelled: the
        chunks put before the cancel still carry checkpoints saying it goes on, and a restart must not
        continue it."""
        cancelled = self._cancelled
        if cancelled is not None and isinstance(state, dict) and state.get("id") == cancelled[0]:
            return cancelled[1]
        return state

    def extra(self, entries: Sequence[Entry]) -> dict[str, Any]:
        """The ``extra`` of the resume point after ``entries``: the snapshot checkpoint as of them, and
        when the last one is a chunk, when its rows were read (``READ_MS_KEY``)."""
        for e in reversed(entries):
            if isinstance(e, SnapshotEntry):
                self._state = self._unless_cancelled(compacted(e.checkpoint))
                break
        out: dict[str, Any] = {EXTRA_KEY: self._state} if self._state is not None else {}
        last = entries[-1] if entries else None
        if isinstance(last, SnapshotEntry) and last.read_ms > 0:
            out[READ_MS_KEY] = last.read_ms
        return out

    def rolled_back(self, last: ResumePoint | None) -> None:
        """The checkpoint goes back with the batches: to ``last``, the point after the last one still
        outstanding. (A point of an earlier snapshot means none of the current one's chunks was handed
        out.)"""
        back = last.extra.get(EXTRA_KEY) if last is not None else None
        current = self._state
        if current is not None:
            same = isinstance(back, dict) and back.get("id") == current.get("id")
            self._state = self._unless_cancelled(back if same else self._fresh or current)

    def status(self, saved: ResumePoint | None) -> dict[str, Any] | None:
        """The running snapshot's progress (read by the status file and the metrics), or None."""
        if self.snapshot is None:
            return None
        status = self.snapshot.status()
        acked = saved.extra.get(EXTRA_KEY) if saved is not None else None
        # "read": every chunk is in the store; "done": every chunk is acknowledged (in Kafka).
        status["read"] = status["done"]
        if isinstance(acked, dict) and acked.get("id") == status["id"]:
            status["acked_rows"] = state_rows(acked)
            status["done"] = bool(acked.get("done"))
        else:
            status["acked_rows"] = 0
            status["done"] = False
        return status

    def failure(self) -> BaseException | None:
        return self.snapshot.failure if self.snapshot is not None else None

    def stop(self) -> None:
        if self.snapshot is not None:
            self.snapshot.stop()
