"""Snapshots: the existing rows of the captured tables, interleaved with the live binlog by watermarks.

The method is DBLog's / Flink CDC's, with binlog positions as the watermarks (nothing is written to the
source). A reader thread (``snapshot.parallelism`` of them, one connection each) reads a table in
key order, chunk by chunk, with plain SELECTs::

    low  = SHOW MASTER STATUS      (the binlog end before the SELECT)
    rows = SELECT … WHERE key > last ORDER BY key LIMIT chunk_rows
    high = SHOW MASTER STATUS      (the binlog end after it: every change the SELECT saw is below it)

and hands the chunk to the parser thread of the canal instance, which keeps reading the binlog. Once
the parser has read everything up to ``high`` and is at a transaction boundary ``P`` (``P >= high``),
it drops the chunk's rows whose key the binlog changed since the table's previous chunk's ``low``
(``[low_prev, P)``; for the first chunk, since the table's snapshot began) — those keys' current state
comes with that change, which the live stream publishes in full (binlog_row_image=FULL) — and puts the
rest into the store as ONE entry in the binlog's place ``P``. Store, publisher, ack and position save
then treat it like any transaction.

Identity of a snapshot row: the entry sits at ``P - 1`` (offset ``P - 1``, length 1: the resume point
after it is ``P``), so every row of the chunk gets ``sequence = (generation << 52) | (file << 32) |
(P - 1)``. Every change read before the chunk came from an event that ends at or before ``P``, and its
rows' sequences are below ``P - 19`` (an event is longer than its row count plus its 19-byte header);
every change after it has a sequence ``>= P``. So per key: earlier changes < snapshot row < later
changes, and the changes between the SELECT and ``P`` superseded the row (it was dropped). The rows of
one chunk share the sequence: the change identity of a snapshot row is (source id, sequence, key). A
chunk read again (after a restart) at the same ``P`` saw the same rows — no change was logged in
between — and gives byte-identical records; read at a later ``P'`` it gives new identities that sort
after everything the earlier copy could be ordered against.

A table without a usable key (no PRIMARY KEY, no UNIQUE key over NOT NULL columns) is read whole, as
ONE chunk in one watermark window (``_read_whole``): any change of the table the parser sees in that
window voids it (which rows it superseded cannot be told) and it is read again, up to
``KEYLESS_TRIES`` times, then the snapshot stops naming the table. A watch records only what the parser
reads at or after the binlog end at its start (``_Watch.since``): what lies below was written before the
table was read. After a failover the instance moves the snapshot to the standby (``moved_state``).

Progress is checkpointed with the position: each chunk entry carries the snapshot's state after it
(``SnapshotEntry.checkpoint``: per table the last key emitted, rows, chunks, done), and
``CanalInstance`` saves the state of the last acknowledged chunk in ``ResumePoint.extra["snapshot"]``.
A restart continues every table after its last acknowledged key. Threads: readers (``snapshot-N``)
only read the source and wait; ``observe``/``due`` run on the parser thread; ``status`` anywhere.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pymysql

from relay.binlog.events import BinlogEvent, HeartbeatEvent, RowImage
from relay.canal.entry import (
    Entry,
    EntryPosition,
    EntryType,
    EventType,
    Header,
    RowChange,
    TxnContext,
)
from relay.common import mysql
from relay.common.binlog_names import file_order
from relay.config.sections import SnapshotConfig, SourceConfig
from relay.errors import NoSuchTableError, RelayError, SourceConnectionError, SourceError
from relay.source import snapshot_keys
from relay.source.snapshot_tables import TableSpec, describe_table, list_tables, quote_name

log = logging.getLogger(__name__)

ER_NO_SUCH_TABLE = 1146
KEYLESS_TRIES = 5  # reads of a table without a usable key before the snapshot stops
SNAPSHOT_PROP = "relay.snapshot"  # RowChange.props marker of a snapshot chunk (read by the codec)
EXTRA_KEY = "snapshot"  # ResumePoint.extra key of the checkpoint
Pos = tuple[tuple[str, int], int]  # (file_order(journal), offset): binlog positions in order


def position(journal: str, offset: int) -> Pos:
    return (file_order(journal), offset)


def text_connection(s: SourceConfig, refuse: Callable[[str], RelayError]) -> Any:
    """A connection to the source that returns values as the server's text (bytes for binary columns: no
    float rounding) and renders TIMESTAMP in ``source.timezone``, the zone the binlog side renders it in
    (``relay.binlog.rows``). Used by snapshots and by ``relay verify``; a zone the server cannot set raises
    ``refuse(why)`` (the caller's error); connection errors are pymysql's (``mysql.connect``)."""
    conn = mysql.connect(
        s.host, s.port, s.user, s.password, tls=s.tls, connect_timeout=s.connect_timeout,
        read_timeout=max(s.read_timeout, 300.0),
    )  # fmt: skip
    zone = s.timezone
    if zone and zone != "server":
        try:
            with conn.cursor() as cur:
                cur.execute("SET SESSION time_zone = %s", ("+00:00" if zone.upper() == "UTC" else zone,))
        except pymysql.err.MySQLError as exc:
            conn.close()
            raise refuse(
                f"the server cannot render TIMESTAMP values in source.timezone {zone!r} ({exc}); load its "
                "time zone tables or use an offset like +08:00"
            ) from exc
    conn.decoders = {}
    return conn


class SnapshotEntry(Entry):
    """A chunk of snapshot rows in the store: an INSERT ROWDATA entry that is its own transaction, plus
    the snapshot's checkpoint after it and its memory size (the rows' text, not the length of 1 that
    places it in the binlog)."""

    __slots__ = ("checkpoint", "memory", "ordinal")

    checkpoint: dict[str, Any]
    memory: int
    # Chunks put at the same binlog place share its sequence: the ordinal of this one among them (0, 1, …),
    # part of its rows' ``part`` (relay.kafka.codec), so no two rows of one place share an identity.
    ordinal: int

    @property
    def size(self) -> int:
        return self.memory


def is_snapshot(entry: Entry) -> bool:
    return isinstance(entry, SnapshotEntry)


@dataclass
class Chunk:
    """One chunk read by a reader, waiting for the parser to reach ``high``."""

    spec: TableSpec
    low: Pos
    high: Pos
    rows: list[tuple[str | None, ...]]
    last_key: list[str | None] | None
    done: bool  # the table's last chunk
    ddls: int = 0  # the table's DDL count (``_Watch.ddls``) when ``spec`` was read
    redo: bool = False  # set instead of putting it: a DDL came in between, read it again
    whole: bool = False  # the whole of a table without a usable key: any change in its window voids it
    emitted: threading.Event = field(default_factory=threading.Event)
    deleted: list[tuple[str | None, ...]] = field(default_factory=list)  # keys asked for, not found


@dataclass
class _Watch:
    """Keys of one table changed in the binlog since ``since`` (parser thread writes, under the lock)."""

    spec: TableSpec
    changes: list[tuple[Pos, tuple[str | None, ...]]] = field(default_factory=list)
    key_index: dict[tuple[str, ...], tuple[int, ...] | None] = field(default_factory=dict)
    ddls: int = 0  # DDL statements on the table the parser has seen since the watch began
    # The binlog end when the watch began: what the parser reads below it (a relay behind, or started
    # from an old source.start) was written before the table's definition and rows were read, so it
    # neither supersedes a row nor voids a chunk; not recording it keeps a long replay from piling up.
    since: Pos | None = None


class _RateLimit:
    """At most ``rate`` rows per second over all readers (0: no limit)."""

    def __init__(self, rate: float, stop: threading.Event) -> None:
        self.rate = rate
        self.stop = stop
        self._next = time.monotonic()
        self._lock = threading.Lock()

    def take(self, rows: int) -> None:
        if self.rate <= 0 or rows <= 0:
            return
        with self._lock:
            now = time.monotonic()
            start = max(self._next, now)
            self._next = start + rows / self.rate
        if start > now:
            self.stop.wait(start - now)


def state_rows(state: dict[str, Any]) -> int:
    """Rows put by the snapshot a checkpoint describes (full or compacted)."""
    if "rows" in state:
        return int(state["rows"])
    return sum(int(t["rows"]) for t in state.get("tables", {}).values())


def read_percent(state: dict[str, Any]) -> float:
    """How much of a snapshot is read: rows read over the rows expected (a table's estimate from
    ``information_schema`` until it is done, then what it had); below 100 until every table is done."""
    if state.get("done"):
        return 100.0
    tables: dict[str, Any] = state.get("tables", {})
    read = sum(int(t["rows"]) for t in tables.values())
    expected = sum(
        int(t["rows"]) if t["done"] else max(int(t.get("estimated_rows") or 0), int(t["rows"]) + 1)
        for t in tables.values()
    )
    return min(99.9, 100.0 * read / expected) if expected else 0.0


def compacted(state: dict[str, Any]) -> dict[str, Any]:
    """A finished snapshot's checkpoint without its per-table entries: saved with every later position,
    it stays small however many shards there were."""
    if not state.get("done") or "rows" in state:
        return state
    tables = state.get("tables", {})
    return {
        "id": state.get("id"),
        "done": True,
        "cancelled": bool(state.get("cancelled")),
        "rows": state_rows(state),
        "table_count": len(tables),
        "skipped": state.get("skipped", {}),
    }


def new_state(tables: list[TableSpec], snapshot_id: str, where: str = "") -> dict[str, Any]:
    """A fresh checkpoint: every table to read, none read."""
    return {
        "id": snapshot_id,
        "where": where,
        "done": not tables,
        "tables": {
            s.name: {"after": None, "rows": 0, "chunks": 0, "done": False, "estimated_rows": s.estimated_rows}
            for s in tables
        },
    }


class Snapshot:
    """One snapshot run (initial, continued, or on demand) of one canal instance."""

    def __init__(
        self,
        config: SnapshotConfig,
        source: SourceConfig,
        state: dict[str, Any],
        *,
        server_id: int,
        mariadb: bool,
    ) -> None:
        self.config = config
        self.source = source
        self.state = state  # the emitted state (parser thread), copied into each chunk entry
        self.server_id = server_id
        self.mariadb = mariadb
        self.failure: BaseException | None = None
        self.cancelled = False
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._watches: dict[tuple[str, str], _Watch] = {}
        self._submitted: list[Chunk] = []
        self._place: tuple[Pos, int] | None = None  # the last place a chunk was put at, and how many there
        self._pos: Pos | None = None
        self._journal = ""  # the binlog file of ``_pos``
        self._todo: queue.Queue[str] = queue.Queue()
        self._threads: list[threading.Thread] = []
        self._rate = _RateLimit(config.max_rows_per_second, self._stop)
        self._started = time.monotonic()
        self._rows_read = 0
        self.skipped: dict[str, str] = dict(state.get("skipped", {}))

    # -- lifecycle (the instance's thread) --------------------------------------------------------
    @property
    def done(self) -> bool:
        return bool(self.state.get("done"))

    def start(self, at: tuple[str, int] | None) -> None:
        """Start the readers; ``at``: where the parser starts reading (None: not known yet)."""
        if at is not None and at[0]:
            self._journal, self._pos = at[0], position(*at)
        for name, t in self.state["tables"].items():
            if not t["done"]:
                self._todo.put(name)
        tables = self._todo.qsize()
        for i in range(min(self.config.parallelism, max(1, self._todo.qsize()))):
            th = threading.Thread(target=self._read_tables, name=f"snapshot-{i}", daemon=True)
            self._threads.append(th)
            th.start()
        log.info(
            "snapshot %s: %d table(s) to read, %d reader(s)", self.state["id"], tables, len(self._threads)
        )

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        for th in self._threads:
            th.join(timeout)

    def moved_state(self) -> dict[str, Any]:
        """The state of what was put, for the same snapshot on another server (after ``stop``): the
        chunks read but not put are dropped (their watermarks are this server's binlog places)."""
        with self._lock:
            self._submitted = []
            return copy.deepcopy(self.state)

    def cancel(self) -> dict[str, Any]:
        """Stop reading; chunks not yet put are dropped. Returns the state to save from now on."""
        self.stop()
        with self._lock:
            self._submitted = []
            self.cancelled = True
            self.state["cancelled"] = True
            self.state["done"] = True
            return copy.deepcopy(self.state)

    @property
    def active(self) -> bool:
        """True while chunks may still come (the parser then polls the binlog more often)."""
        return not self.done and self.failure is None and not self._stop.is_set()

    # -- reader threads ---------------------------------------------------------------------------
    def _connect(self) -> Any:
        return text_connection(self.source, lambda why: SourceError(f"snapshot: {why}"))

    def _read_tables(self) -> None:
        """One reader: tables from the queue until none is left. A lost connection is retried with
        ``source.retry`` (the table continues after its last chunk put); anything else stops the
        snapshot, and the relay with it (``failure``)."""
        conn = None
        name: str | None = None
        backoff = self.source.retry.start(sleep=self._stop.wait)
        try:
            while not self._stop.is_set():
                if name is None:
                    try:
                        name = self._todo.get_nowait()
                    except queue.Empty:
                        return
                try:
                    conn = conn or self._connect()
                    self._read_table(conn, name)
                    name = None
                    backoff.reset()
                except (SourceError, pymysql.err.MySQLError) as exc:
                    if not _connection_lost(exc):
                        raise
                    if conn is not None:
                        with contextlib.suppress(pymysql.err.MySQLError):
                            conn.close()
                    conn = None
                    log.warning("snapshot %s: reading %s: %s; reconnecting", self.state["id"], name, exc)
                    if not backoff.wait():
                        raise SourceError(f"snapshot: gave up reconnecting to read {name}: {exc}") from exc
        except (RelayError, pymysql.err.MySQLError) as exc:
            if not self._stop.is_set():
                log.error("snapshot %s: reader stopped: %s", self.state["id"], exc)
                self.failure = exc if isinstance(exc, RelayError) else SourceError(f"snapshot: {exc}")
        except BaseException as exc:
            log.exception("snapshot reader crashed")
            self.failure = exc
        finally:
            if conn is not None:
                conn.close()

    def _read_table(self, conn: Any, name: str) -> None:
        db, table = name.split(".", 1)
        with self._lock:
            entry = self.state["tables"][name]
            after = entry["after"]
            estimated = entry.get("estimated_rows", 0)
        try:
            spec = describe_table(conn, db, table, estimated)
        except NoSuchTableError:
            self._skip(TableSpec(db, table, (), (), (), ""), after, "dropped or renamed")
            return
        keys = (self.state.get("keys") or {}).get(name)
        try:
            if keys:
                self._read_keys(conn, spec, keys, after)
            elif spec.key:
                self._read_chunks(conn, spec, after)
            else:
                self._read_whole(conn, spec)
        except (NoSuchTableError, pymysql.err.ProgrammingError) as exc:
            # Gone while read: its definition read again (after a DDL) finds nothing, or the SELECT fails.
            if isinstance(exc, pymysql.err.ProgrammingError) and mysql.error_code(exc) != ER_NO_SUCH_TABLE:
                raise
            self.unwatch(spec)
            self._skip(spec, after, "dropped or renamed")

    def _skip(self, spec: TableSpec, after: list[str | None] | None, why: str) -> None:
        """Done with ``spec`` without reading (more of) it: listed under ``skipped``, logged."""
        self.skipped[spec.name] = why
        log.error("snapshot: table %s skipped: %s", spec.name, why)
        self._submit(Chunk(spec, (("", 0), 0), (("", 0), 0), [], after, True))

    def _read_chunks(self, conn: Any, spec: TableSpec, after: list[str | None] | None) -> None:
        # Before the first low: every later change of the table is seen.
        self.watch(spec, since=_master_position(conn))
        ddls = -1  # read the definition again now: a DDL before the watch began is not counted
        where = str(self.state.get("where") or "")
        while not self._stop.is_set():
            if ddls != self._ddls(spec):
                ddls = self._ddls(spec)
                new = describe_table(conn, spec.db, spec.table, spec.estimated_rows)
                same_key = [new.columns[i].name for i in new.key] == [spec.columns[i].name for i in spec.key]
                if not same_key:
                    log.warning("snapshot: table %s has a new key; reading it from its start", spec.name)
                    after = None
                spec = new
                self.watch(spec, keep_changes=same_key)
            low = _master_position(conn)
            sql, params = spec.chunk_query(after, self.config.chunk_rows, where)
            rows = spec.read(conn, sql, params)
            high = _master_position(conn)
            last = list(spec.key_of(rows[-1])) if rows else after
            chunk = Chunk(spec, low, high, rows, last, len(rows) < self.config.chunk_rows, ddls)
            self._rows_read += len(rows)
            self._submit(chunk)
            while not chunk.emitted.wait(0.2):
                if self._stop.is_set():
                    return
            if chunk.redo:
                log.info("snapshot: table %s changed its definition; reading the chunk again", spec.name)
                continue
            if chunk.done:
                return
            after = last
            self._rate.take(len(rows))

    def _read_keys(self, conn: Any, spec: TableSpec, request: dict[str, Any], after: Any) -> None:
        """Given keys of a table (``relay.source.snapshot_keys``), in batches of ``chunk_rows``: each
        batch's rows, and a delete row for each key not found, as one chunk with the usual watermarks."""
        spec = snapshot_keys.key_spec(spec, request["columns"])
        keys = [tuple(k) for k in request["values"]]
        done = int(after[0]) if after else 0
        self.watch(spec, since=_master_position(conn))
        while done < len(keys) and not self._stop.is_set():
            ddls = self._ddls(spec)
            batch = keys[done : done + self.config.chunk_rows]
            sql, params = snapshot_keys.key_query(spec, batch)
            low = _master_position(conn)
            rows = spec.read(conn, sql, params)
            high = _master_position(conn)
            last = done + len(batch)
            chunk = Chunk(spec, low, high, rows, [str(last)], last >= len(keys), ddls)
            chunk.deleted = [
                snapshot_keys.delete_image(spec, k) for k in snapshot_keys.absent(spec, batch, rows)
            ]
            self._rows_read += len(rows)
            self._submit(chunk)
            while not chunk.emitted.wait(0.2):
                if self._stop.is_set():
                    return
            if chunk.redo:
                log.info("snapshot: table %s changed its definition; reading the keys again", spec.name)
                spec = snapshot_keys.key_spec(describe_table(conn, spec.db, spec.table), request["columns"])
                self.watch(spec, keep_changes=True)
                continue
            done = last
            self._rate.take(len(rows) + len(chunk.deleted))

    def _read_whole(self, conn: Any, spec: TableSpec) -> None:
        """A table without a PRIMARY KEY or a UNIQUE key over NOT NULL columns: its rows cannot be told
        apart from the live changes of other rows with the same values, so they are read in ONE chunk
        (at most ``keyless_max_rows``) inside one watermark window. If the binlog changes the table (or
        its definition) between the start of that window and the chunk's place, the chunk is dropped
        and the table read again; after ``KEYLESS_TRIES`` reads the snapshot stops, naming the table.
        The rows are sorted by their text, so a read again at the same place gives the same records."""
        where = str(self.state.get("where") or "")
        limit = self.config.keyless_max_rows
        for attempt in range(1, KEYLESS_TRIES + 1):
            self.watch(spec, since=_master_position(conn))  # a fresh window: only later changes void it
            spec = describe_table(conn, spec.db, spec.table, spec.estimated_rows)
            if spec.key:  # a key was added meanwhile: read in key chunks
                self._read_chunks(conn, spec, None)
                return
            low = _master_position(conn)
            raw = spec.read(conn, spec.whole_query(limit + 1, where))
            high = _master_position(conn)
            if len(raw) > limit:
                self.unwatch(spec)
                raise SourceError(
                    f"snapshot: table {spec.name} has no PRIMARY KEY and no UNIQUE key over NOT NULL "
                    f"columns, so it is read in one chunk, and it has more than snapshot.keyless_max_rows "
                    f"({limit}) rows: add a key, raise the setting, or leave the table out (filter.exclude)"
                )
            rows = sorted(raw, key=_row_order)
            # ddls 0: the watch is fresh, so a DDL seen since (also one before the SELECT) voids it.
            chunk = Chunk(spec, low, high, rows, None, True, 0, whole=True)
            self._rows_read += len(rows)
            self._submit(chunk)
            while not chunk.emitted.wait(0.2):
                if self._stop.is_set():
                    return
            if not chunk.redo:
                self._rate.take(len(rows))
                return
            log.warning(
                "snapshot: table %s (no usable key, read in one chunk) changed while it was read; "
                "reading it again (read %d of %d)",
                spec.name,
                attempt,
                KEYLESS_TRIES,
            )
        self.unwatch(spec)
        raise SourceError(
            f"snapshot: table {spec.name} has no PRIMARY KEY and no UNIQUE key over NOT NULL columns, so it "
            f"is read in one chunk, and the binlog changed it during each of {KEYLESS_TRIES} reads: add a "
            "key, snapshot it when it is quiet (`relay snapshot run`), or leave it out (filter.exclude)"
        )

    def watch(self, spec: TableSpec, keep_changes: bool = False, since: Pos | None = None) -> None:
        """From now on the parser records the keys of ``spec`` the binlog changes (and its DDLs) at or
        after ``since`` (None: the watch's before, else all); ``keep_changes``: a new definition of a
        watched table, what was recorded stays."""
        with self._lock:
            old = self._watches.get((spec.db, spec.table))
            w = _Watch(spec, since=since if since is not None or old is None else old.since)
            if keep_changes and old is not None:
                w.changes, w.ddls = old.changes, old.ddls
            self._watches[(spec.db, spec.table)] = w

    def _ddls(self, spec: TableSpec) -> int:
        with self._lock:
            w = self._watches.get((spec.db, spec.table))
            return w.ddls if w is not None else 0

    def unwatch(self, spec: TableSpec) -> None:
        with self._lock:
            self._watches.pop((spec.db, spec.table), None)

    def _submit(self, chunk: Chunk) -> None:
        with self._lock:
            self._submitted.append(chunk)

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
                entry = self._emit(chunk, pos, journal, gtid_set)
                if entry is not None:
                    out.append(entry)
        for chunk in ready:
            chunk.emitted.set()
        return out

    def _emit(self, chunk: Chunk, pos: Pos, journal: str, gtid_set: str | None) -> SnapshotEntry | None:
        spec = chunk.spec
        w = self._watches.get((spec.db, spec.table))
        rows, deleted = chunk.rows, chunk.deleted
        if w is not None and (w.ddls != chunk.ddls or (chunk.whole and w.changes)):
            # A DDL between the definition this chunk was read under and its place: its rows have the
            # old shape (or its place follows the DDL). Or a change of a table read whole without a
            # key: which of its rows it superseded cannot be told. Nothing is put; the reader reads
            # it again.
            chunk.redo = True
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
        table = self.state["tables"][spec.name]
        table["after"] = chunk.last_key
        table["rows"] += len(rows)
        table["chunks"] += 1
        table["done"] = chunk.done
        if self.skipped:
            self.state["skipped"] = dict(self.skipped)
        self.state["done"] = all(t["done"] for t in self.state["tables"].values())
        ordinal = self._place[1] + 1 if self._place is not None and self._place[0] == pos else 0
        self._place = (pos, ordinal)
        entry = _chunk_entry(self, spec, rows, journal, pos[1], gtid_set, deleted)
        entry.ordinal = ordinal
        if self.state["done"]:
            log.info("snapshot %s: done", self.state["id"])
        return entry

    # -- status -----------------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        """Progress per table (rows, chunks, estimate, ETA), for the status file and metrics."""
        with self._lock:
            tables = copy.deepcopy(self.state["tables"])
        elapsed = max(1e-3, time.monotonic() - self._started)
        rate = self._rows_read / elapsed
        remaining = 0
        for t in tables.values():
            if not t["done"]:
                remaining += max(0, int(t.get("estimated_rows", 0)) - int(t["rows"]))
        return {
            "id": self.state["id"],
            "done": self.done,
            "cancelled": self.cancelled,
            "failure": None if self.failure is None else str(self.failure),
            "tables": tables,
            "skipped": dict(self.skipped),
            "rows": sum(int(t["rows"]) for t in tables.values()),
            "rows_per_second": round(rate, 1),
            "percent": round(read_percent({"done": self.done, "tables": tables}), 1),
            "eta_seconds": None if self.done or rate <= 0 else round(remaining / rate, 1),
        }


# Server-side codes that mean the connection is gone: killed, server shutting down, gone away.
_LOST = frozenset({1053, 1927, 2006, 2013})


def _connection_lost(exc: BaseException) -> bool:
    """A lost or refused connection (client-side CR_* codes, a killed connection): worth reconnecting."""
    if isinstance(exc, SourceConnectionError):
        return True
    code = mysql.error_code(exc)
    return 2000 <= code < 3000 or code in _LOST


def _key_index(w: _Watch, rc: RowChange) -> tuple[int, ...] | None:
    names = tuple(c.name for c in rc.columns)
    index = w.key_index.get(names)
    if index is None and names not in w.key_index:
        where = {n: i for i, n in enumerate(names)}
        wanted = [w.spec.columns[i].name for i in w.spec.key]
        index = tuple(where[n] for n in wanted) if all(n in where for n in wanted) else None
        w.key_index[names] = index
    return index


def _chunk_entry(
    snap: Snapshot,
    spec: TableSpec,
    rows: list[tuple[str | None, ...]],
    journal: str,
    offset: int,
    gtid_set: str | None,
    deleted: list[tuple[str | None, ...]] | None = None,
) -> SnapshotEntry:
    """The chunk's entry: an INSERT of its rows (after images) and, for a key snapshot, delete rows (before
    images only) for the keys asked for that the table does not have."""
    gone = deleted or []
    start = EntryPosition(journal, offset - 1, snap.server_id)
    header = Header(journal, offset - 1, snap.server_id, 0, 1, EventType.INSERT, spec.db, spec.table)
    header.props.append((SNAPSHOT_PROP, "true"))
    value = RowChange(
        event_type=EventType.INSERT,
        columns=spec.columns,
        rows=(*(RowImage(None, r) for r in rows), *(RowImage(r, None) for r in gone)),
        props=[(SNAPSHOT_PROP, "true")],
    )
    ctx = TxnContext(start=start, gtid_set_before=gtid_set, mariadb=snap.mariadb)
    entry = SnapshotEntry(header, EntryType.ROWDATA, value, ctx, 0, True)
    entry.checkpoint = copy.deepcopy(snap.state)
    entry.memory = 64 + sum(sum(len(v) for v in r if v is not None) + 8 * len(r) for r in [*rows, *gone])
    entry.ordinal = 0
    return entry


def _row_order(row: tuple[str | None, ...]) -> tuple[tuple[bool, str], ...]:
    return tuple((v is not None, v or "") for v in row)


def _master_position(conn: Any) -> Pos:
    """The binlog end now (SHOW MASTER STATUS; SHOW BINARY LOG STATUS on MySQL >= 8.4)."""
    with conn.cursor() as cur:
        try:
            cur.execute("SHOW MASTER STATUS")
        except pymysql.err.ProgrammingError:
            cur.execute("SHOW BINARY LOG STATUS")
        row = cur.fetchone()
    if not row:
        raise SourceError("snapshot: SHOW MASTER STATUS is empty: binary logging is off")
    journal = row[0].decode() if isinstance(row[0], bytes) else str(row[0])
    offset = int(row[1].decode() if isinstance(row[1], bytes) else row[1])
    return position(journal, offset)


def check_where(source: SourceConfig, tables: list[str], where: str) -> str | None:
    """Why ``where`` cannot select rows of every table in ``tables`` (``db.table``), or None: each is
    asked ``SELECT 1 … WHERE (where) LIMIT 0`` first, so a bad condition is refused at the request
    instead of stopping the snapshot (and the relay) at its first chunk."""
    conn = mysql.connect(
        source.host, source.port, source.user, source.password, tls=source.tls,
        connect_timeout=source.connect_timeout, read_timeout=source.read_timeout,
    )  # fmt: skip
    try:
        for name in tables:
            db, table = name.split(".", 1)
            qualified = f"{quote_name(db)}.{quote_name(table)}"
            try:
                with conn.cursor() as cur:
                    cur.execute(f"SELECT 1 FROM {qualified} WHERE ({where}) LIMIT 0")
            except pymysql.err.MySQLError as exc:
                text = exc.args[1] if len(exc.args) > 1 else str(exc)
                return f"--where {where!r} fails on {name}: {text}"
    finally:
        conn.close()
    return None


def captured_tables(source: SourceConfig, captures: Callable[[str, str], bool]) -> list[tuple[str, str]]:
    """(db, table) of the server's base tables ``captures`` keeps."""
    conn = mysql.connect(
        source.host, source.port, source.user, source.password, tls=source.tls,
        connect_timeout=source.connect_timeout, read_timeout=source.read_timeout,
    )  # fmt: skip
    try:
        return [(db, table) for db, table, _ in list_tables(conn, captures)]
    except pymysql.err.MySQLError as exc:
        raise mysql.translate(exc, "listing the tables") from exc
    finally:
        conn.close()


def plan(
    config: SnapshotConfig,
    source: SourceConfig,
    captures: Callable[[str, str], bool],
    snapshot_id: str,
    where: str = "",
    only: Callable[[str, str], bool] | None = None,
) -> dict[str, Any]:
    """A fresh checkpoint over the tables ``captures`` keeps (and ``only``, for an on-demand run)."""
    conn = mysql.connect(
        source.host, source.port, source.user, source.password, tls=source.tls,
        connect_timeout=source.connect_timeout, read_timeout=source.read_timeout,
    )  # fmt: skip
    try:
        found = list_tables(conn, captures)
        specs = [
            TableSpec(db, table, (), (), (), "", rows)
            for db, table, rows in found
            if only is None or only(db, table)
        ]
    except pymysql.err.MySQLError as exc:
        raise mysql.translate(exc, "snapshot: listing the tables") from exc
    finally:
        conn.close()
    return new_state(specs, snapshot_id, where)
