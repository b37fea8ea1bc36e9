"""Where a snapshot's chunks meet the live binlog: DBLog's watermark reconciliation, on the parser side.

A reader (``relay.source.snapshot_readers``) reads a chunk between two binlog ends, ``low`` and ``high``,
and submits it here. The parser thread tells ``Watermarks`` every event it reads (``observe``): where it
is, and the keys of watched tables the event's rows change. Once the parser has read up to ``high`` and
is at a transaction boundary ``P`` (``P >= high``), ``due`` drops the chunk's rows whose key the binlog
changed since the table's previous chunk's ``low`` (``[low_prev, P)``; for the first chunk, since the
table's watch began) — those keys' current state comes with that change, which the live stream publishes
in full (binlog_row_image=FULL) — and puts the rest as ONE entry in the binlog's place ``P``
(``relay.source.snapshot_entry``), moving the checkpoint on (``relay.source.snapshot_checkpoint``).

A DDL on the table between the definition a chunk was read under and its place voids the chunk (its
rows have the old shape): nothing is put, the reader reads it again (``Chunk.redo``). So does any change
of a table read whole for want of a usable key (which rows it superseded cannot be told). A watch
records only what the parser reads at or after the binlog end at its start (``Watch.since``): what lies
below was written before the table was read.

Threads: readers call ``watch``/``unwatch``/``ddls``/``submit``/``skip``/``progress``; the parser thread
``observe`` and ``due``; the snapshot's control ``moved_state``/``cancel``/``tables``. One lock guards the
watches, the submitted chunks, the skipped tables and the checkpoint (``state``).
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from relay.binlog.events import BinlogEvent, HeartbeatEvent
from relay.canal.entry import Entry, EntryType, RowChange
from relay.common.binlog_names import file_order
from relay.source.snapshot_checkpoint import advance
from relay.source.snapshot_entry import SnapshotEntry, chunk_entry
from relay.source.snapshot_tables import TableSpec

log = logging.getLogger(__name__)

Pos = tuple[tuple[str, int], int]  # (file_order(journal), offset): binlog positions in order
Row = tuple[str | None, ...]


def position(journal: str, offset: int) -> Pos:
    return (file_order(journal), offset)


@dataclass
class Chunk:
    """One chunk read by a reader, waiting for the parser to reach ``high``."""

    spec: TableSpec
    low: Pos
    high: Pos
    rows: list[Row]
    last_key: list[str | None] | None
    done: bool  # the table's last chunk
    ddls: int = 0  # the table's DDL count (``Watch.ddls``) when ``spec`` was read
    redo: bool = False  # set instead of putting it: a DDL came in between, read it again
    whole: bool = False  # the whole of a table without a usable key: any change in its window voids it
    emitted: threading.Event = field(default_factory=threading.Event)
    deleted: list[Row] = field(default_factory=list)  # keys asked for, not found
    read_ms: int = field(default_factory=lambda: int(time.time() * 1000))  # made as its SELECT returns


@dataclass
class Watch:
    """Keys of one table changed in the binlog since ``since`` (parser thread writes, under the lock)."""

    spec: TableSpec
    changes: list[tuple[Pos, Row]] = field(default_factory=list)
    key_index: dict[tuple[str, ...], tuple[int, ...] | None] = field(default_factory=dict)
    ddls: int = 0  # DDL statements on the table the parser has seen since the watch began
    # The binlog end when the watch began: what the parser reads below it (a relay behind, or started
    # from an old source.start) was written before the table's definition and rows were read, so it
    # neither supersedes a row nor voids a chunk; not recording it keeps a long replay from piling up.
    since: Pos | None = None


def place_of(state: dict[str, Any] | None) -> tuple[Pos, int] | None:
    """The last place a snapshot's checkpoint records a chunk put at, and its ordinal there (None: none)."""
    saved = (state or {}).get("place")
    if not saved:
        return None
    (name, order), offset, ordinal = saved
    return ((str(name), int(order)), int(offset)), int(ordinal)


class Watermarks:
    """The parser side of one snapshot: watched tables, chunks waiting for their place, the checkpoint."""

    def __init__(
        self,
        state: dict[str, Any],
        *,
        server_id: int,
        mariadb: bool,
        after: tuple[Pos, int] | None = None,
    ) -> None:
        """``after``: the last place an earlier snapshot put a chunk at, and its ordinal there: a chunk of
        this one put at the same place (no binlog written since) takes the next ordinal, so its rows sort
        after the earlier snapshot's (``relay verify --repair`` of a key snapshotted at that place)."""
        self.state = state  # the emitted state (parser thread), copied into each chunk entry
        self.server_id = server_id
        self.mariadb = mariadb
        self.skipped: dict[str, str] = dict(state.get("skipped", {}))
        self._lock = threading.Lock()
        self._watches: dict[tuple[str, str], Watch] = {}
        self._submitted: list[Chunk] = []
        # The last place a chunk was put at and its ordinal there; kept in the checkpoint ("place"), so a
        # snapshot continued after a restart, or the next snapshot, goes on counting at that place.
        self._place: tuple[Pos, int] | None = place_of(state) or after
        self._pos: Pos | None = None
        self._journal = ""  # the binlog file of ``_pos``

    def last_place(self) -> tuple[Pos, int] | None:
        return self._place

    def start_at(self, at: tuple[str, int] | None) -> None:
        """Where the parser starts reading (None or no file: not known yet)."""
        if at is not None and at[0]:
            self._journal, self._pos = at[0], position(*at)

    # -- readers ----------------------------------------------------------------------------------
    def progress(self, table: str) -> tuple[Any, int]:
        """The last key put of ``table`` (None: none) and its row estimate."""
        with self._lock:
            entry = self.state["tables"][table]
            return entry["after"], entry.get("estimated_rows", 0)

    def watch(self, spec: TableSpec, keep_changes: bool = False, since: Pos | None = None) -> None:
        """From now on the parser records the keys of ``spec`` the binlog changes (and its DDLs) at or
        after ``since`` (None: the watch's before, else all); ``keep_changes``: a new definition of a
        watched table, what was recorded stays."""
        with self._lock:
            old = self._watches.get((spec.db, spec.table))
            w = Watch(spec, since=since if since is not None or old is None else old.since)
            if keep_changes and old is not None:
                w.changes, w.ddls = old.changes, old.ddls
            self._watches[(spec.db, spec.table)] = w

    def ddls(self, spec: TableSpec) -> int:
        """The DDLs on ``spec``'s table the parser has seen since its watch began."""
        with self._lock:
            w = self._watches.get((spec.db, spec.table))
            return w.ddls if w is not None else 0

    def unwatch(self, spec: TableSpec) -> None:
        with self._lock:
            self._watches.pop((spec.db, spec.table), None)

    def submit(self, chunk: Chunk) -> None:
        """Hand a chunk read to the parser; its ``emitted`` is set once it is put or voided."""
        with self._lock:
            self._submitted.append(chunk)

    def skip(self, spec: TableSpec, after: list[str | None] | None, why: str) -> None:
        """Done with ``spec`` without reading (more of) it: listed under ``skipped``, logged."""
        self.skipped[spec.name] = why
        log.error("snapshot: table %s skipped: %s", spec.name, why)
        self.submit(Chunk(spec, (("", 0), 0), (("", 0), 0), [], after, True))

    # -- the snapshot's control -------------------------------------------------------------------
    def moved_state(self) -> dict[str, Any]:
        """The state of what was put; the chunks read but not put are dropped."""
        with self._lock:
            self._submitted = []
            return copy.deepcopy(self.state)

    def cancel(self) -> dict[str, Any]:
        """Drop the chunks not yet put and mark the checkpoint cancelled (and so done); its copy."""
        with self._lock:
            self._submitted = []
            self.state["cancelled"] = True
            self.state["done"] = True
            return copy.deepcopy(self.state)

    def tables(self) -> dict[str, Any]:
        """A copy of the checkpoint's tables."""
        with self._lock:
            return copy.deepcopy(self.state["tables"])

    # -- parser thread ----------------------------------------------------------------------------
    def observe(self, event: BinlogEvent, entries: list[Entry]) -> None:
        """Record where the parser is, and the keys of watched tables the event's rows change."""
        h = event.header
        if h.log_pos and (not h.artificial or isinstance(event, HeartbeatEvent)):
            self._journal, self._pos = h.log_file, position(h.log_file, h.log_pos)
        if not entries or not self._watches:
            return
        with self._lock:
            for e in entries:
                rc = e.store_value
                if e.entry_type != EntryType.ROWDATA or not isinstance(rc, RowChange):
                    continue
                w = self._watches.get((e.header.schema_name, e.header.table_name))
                if w is None:
                    continue
                at = position(e.header.logfile_name, e.header.logfile_offset)
                if w.since is not None and at < w.since:
                    continue
                if rc.is_ddl:
                    w.ddls += 1  # chunks read under the old definition are read again
                    continue
                index = _key_index(w, rc)
                for row in rc.rows:
                    for image in (row.before, row.after):
                        if image is not None:
                            key = tuple(image[i] for i in index) if index is not None else ()
                            w.changes.append((at, key))

    def due(self, in_transaction: bool, gtid_set: str | None) -> list[Entry]:
        """The chunk entries to put now: those whose ``high`` the parser has reached, at a boundary."""
        if in_transaction or self._pos is None or not self._submitted:
            return []
        pos, journal = self._pos, self._journal
        out: list[Entry] = []
        with self._lock:
            ready = [c for c in self._submitted if c.high <= pos]
            if not ready:
                return []
            self._submitted = [c for c in self._submitted if c.high > pos]
            for chunk in ready:
                entry = self._put(chunk, pos, journal, gtid_set)
                if entry is not None:
                    out.append(entry)
        for chunk in ready:
            chunk.emitted.set()
        return out

    def _put(self, chunk: Chunk, pos: Pos, journal: str, gtid_set: str | None) -> SnapshotEntry | None:
        """The entry of ``chunk`` at ``pos`` without the rows the binlog superseded, the checkpoint
        moved on; None (and ``chunk.redo``) when the chunk is void."""
        kept = self._reconcile(chunk, pos)
        if kept is None:
            chunk.redo = True
            return None
        rows, deleted = kept
        advance(self.state, chunk.spec.name, chunk.last_key, len(rows), chunk.done, self.skipped)
        ordinal = self._place[1] + 1 if self._place is not None and self._place[0] == pos else 0
        self._place = (pos, ordinal)
        self.state["place"] = [[pos[0][0], pos[0][1]], pos[1], ordinal]
        entry = chunk_entry(
            chunk.spec, rows, deleted, journal, pos[1], ordinal=ordinal, server_id=self.server_id,
            mariadb=self.mariadb, gtid_set=gtid_set, checkpoint=self.state, read_ms=chunk.read_ms,
        )  # fmt: skip
        if self.state["done"]:
            log.info("snapshot %s: done", self.state["id"])
        return entry

    def _reconcile(self, chunk: Chunk, pos: Pos) -> tuple[list[Row], list[Row]] | None:
        """The rows (and delete rows) of ``chunk`` the binlog did not change in its window, which ends at
        ``pos``; None when the chunk is void. Moves the table's window on to the chunk's ``low``."""
        spec = chunk.spec
        w = self._watches.get((spec.db, spec.table))
        rows, deleted = chunk.rows, chunk.deleted
        if w is not None and (w.ddls != chunk.ddls or (chunk.whole and w.changes)):
            # A DDL between the definition this chunk was read under and its place: its rows have the
            # old shape (or its place follows the DDL). Or a change of a table read whole without a
            # key: which of its rows it superseded cannot be told. Nothing is put; the reader reads
            # it again.
            return None
        if w is not None:
            changed = {key for at, key in w.changes if at < pos}
            if changed:
                rows = [r for r in rows if spec.key_of(r) not in changed]
                deleted = [r for r in deleted if spec.key_of(r) not in changed]
            # The next chunk's window starts at this chunk's low: a change logged before its SELECT but
            # not yet visible to it (binlog written, engine commit pending) still supersedes.
            w.changes = [(at, key) for at, key in w.changes if at >= chunk.low]
            if chunk.done:
                del self._watches[(spec.db, spec.table)]
        return rows, deleted


def _key_index(w: Watch, rc: RowChange) -> tuple[int, ...] | None:
    names = tuple(c.name for c in rc.columns)
    index = w.key_index.get(names)
    if index is None and names not in w.key_index:
        where = {n: i for i, n in enumerate(names)}
        wanted = [w.spec.columns[i].name for i in w.spec.key]
        index = tuple(where[n] for n in wanted) if all(n in where for n in wanted) else None
        w.key_index[names] = index
    return index
