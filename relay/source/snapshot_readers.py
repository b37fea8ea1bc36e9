"""A snapshot's reader threads: each reads tables in key order, chunk by chunk, between two watermarks.

``snapshot.parallelism`` readers (``snapshot-N``), one connection each, take tables from one queue. A
chunk is read with plain SELECTs::

    low  = SHOW MASTER STATUS      (the binlog end before the SELECT)
    rows = SELECT … WHERE key > last ORDER BY key LIMIT chunk_rows
    high = SHOW MASTER STATUS      (the binlog end after it: every change the SELECT saw is below it)

and submitted to the parser side (``relay.source.snapshot_watermarks``); the reader waits until it is put
or voided (a DDL came in between: read again) before reading the next. A table without a usable key (no
PRIMARY KEY, no UNIQUE key over NOT NULL columns) is read whole, as ONE chunk in one watermark window
(``_read_whole``), up to ``KEYLESS_TRIES`` times; keys asked for (``relay.source.snapshot_keys``) are read
in batches. A lost connection is retried with ``source.retry``; anything else stops the snapshot, and
the relay with it (``Readers.failure``). The readers only read the source and wait.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

import pymysql

from relay.common import mysql
from relay.common.mysql import binlog_status
from relay.config.sections import SnapshotConfig, SourceConfig
from relay.errors import NoSuchTableError, RelayError, SourceConnectionError, SourceError
from relay.source import snapshot_keys
from relay.source.snapshot_tables import TableSpec, describe_table
from relay.source.snapshot_watermarks import Chunk, Pos, Row, Watermarks, position

log = logging.getLogger(__name__)

ER_NO_SUCH_TABLE = 1146
KEYLESS_TRIES = 5  # reads of a table without a usable key before the snapshot stops
# Server-side codes that mean the connection is gone: killed, server shutting down, gone away.
_LOST = frozenset({1053, 1927, 2006, 2013})


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


class Readers:
    """The reader threads of one snapshot run; they stop when ``stop`` is set."""

    def __init__(
        self, config: SnapshotConfig, source: SourceConfig, marks: Watermarks, stop: threading.Event
    ) -> None:
        self.config = config
        self.source = source
        self.failure: BaseException | None = None
        self.rows_read = 0
        self._marks = marks
        self._stop = stop
        self._id = marks.state["id"]
        self._where = str(marks.state.get("where") or "")
        self._keys: dict[str, Any] = marks.state.get("keys") or {}
        self._todo: queue.Queue[str] = queue.Queue()
        self._threads: list[threading.Thread] = []
        self._rate = _RateLimit(config.max_rows_per_second, stop)

    def start(self, tables: list[str]) -> int:
        """Start the readers on ``tables`` (``db.table``); how many were started."""
        for name in tables:
            self._todo.put(name)
        for i in range(min(self.config.parallelism, max(1, self._todo.qsize()))):
            th = threading.Thread(target=self._read_tables, name=f"snapshot-{i}", daemon=True)
            self._threads.append(th)
            th.start()
        return len(self._threads)

    def join(self, timeout: float) -> None:
        for th in self._threads:
            th.join(timeout)

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
                    log.warning("snapshot %s: reading %s: %s; reconnecting", self._id, name, exc)
                    if not backoff.wait():
                        raise SourceError(f"snapshot: gave up reconnecting to read {name}: {exc}") from exc
        except (RelayError, pymysql.err.MySQLError) as exc:
            if not self._stop.is_set():
                log.error("snapshot %s: reader stopped: %s", self._id, exc)
                self.failure = exc if isinstance(exc, RelayError) else SourceError(f"snapshot: {exc}")
        except BaseException as exc:
            log.exception("snapshot reader crashed")
            self.failure = exc
        finally:
            if conn is not None:
                conn.close()

    def _read_table(self, conn: Any, name: str) -> None:
        db, table = name.split(".", 1)
        after, estimated = self._marks.progress(name)
        try:
            spec = describe_table(conn, db, table, estimated)
        except NoSuchTableError:
            self._marks.skip(TableSpec(db, table, (), (), (), ""), after, "dropped or renamed")
            return
        keys = self._keys.get(name)
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
            self._marks.unwatch(spec)
            self._marks.skip(spec, after, "dropped or renamed")

    def _hand_over(self, chunk: Chunk) -> bool:
        """Submit ``chunk`` and wait until the parser put or voided it; False when stopped meanwhile."""
        self.rows_read += len(chunk.rows)
        self._marks.submit(chunk)
        while not chunk.emitted.wait(0.2):
            if self._stop.is_set():
                return False
        return True

    def _read_chunks(self, conn: Any, spec: TableSpec, after: list[str | None] | None) -> None:
        marks = self._marks
        # Before the first low: every later change of the table is seen.
        marks.watch(spec, since=master_position(conn))
        ddls = -1  # read the definition again now: a DDL before the watch began is not counted
        while not self._stop.is_set():
            if ddls != marks.ddls(spec):
                ddls = marks.ddls(spec)
                new = describe_table(conn, spec.db, spec.table, spec.estimated_rows)
                same_key = [new.columns[i].name for i in new.key] == [spec.columns[i].name for i in spec.key]
                if not same_key:
                    log.warning("snapshot: table %s has a new key; reading it from its start", spec.name)
                    after = None
                spec = new
                marks.watch(spec, keep_changes=same_key)
            low = master_position(conn)
            sql, params = spec.chunk_query(after, self.config.chunk_rows, self._where)
            rows = spec.read(conn, sql, params)
            high = master_position(conn)
            last = list(spec.key_of(rows[-1])) if rows else after
            chunk = Chunk(spec, low, high, rows, last, len(rows) < self.config.chunk_rows, ddls)
            if not self._hand_over(chunk):
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
        self._marks.watch(spec, since=master_position(conn))
        while done < len(keys) and not self._stop.is_set():
            ddls = self._marks.ddls(spec)
            batch = keys[done : done + self.config.chunk_rows]
            sql, params = snapshot_keys.key_query(spec, batch)
            low = master_position(conn)
            rows = spec.read(conn, sql, params)
            high = master_position(conn)
            last = done + len(batch)
            chunk = Chunk(spec, low, high, rows, [str(last)], last >= len(keys), ddls)
            chunk.deleted = [
                snapshot_keys.delete_image(spec, k) for k in snapshot_keys.absent(spec, batch, rows)
            ]
            if not self._hand_over(chunk):
                return
            if chunk.redo:
                log.info("snapshot: table %s changed its definition; reading the keys again", spec.name)
                spec = snapshot_keys.key_spec(describe_table(conn, spec.db, spec.table), request["columns"])
                self._marks.watch(spec, keep_changes=True)
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
        limit = self.config.keyless_max_rows
        for attempt in range(1, KEYLESS_TRIES + 1):
            self._marks.watch(spec, since=master_position(conn))  # a fresh window: only later changes void it
            spec = describe_table(conn, spec.db, spec.table, spec.estimated_rows)
            if spec.key:  # a key was added meanwhile: read in key chunks
                self._read_chunks(conn, spec, None)
                return
            low = master_position(conn)
            raw = spec.read(conn, spec.whole_query(limit + 1, self._where))
            high = master_position(conn)
            if len(raw) > limit:
                self._marks.unwatch(spec)
                raise SourceError(
                    f"snapshot: table {spec.name} has no PRIMARY KEY and no UNIQUE key over NOT NULL "
                    f"columns, so it is read in one chunk, and it has more than snapshot.keyless_max_rows "
                    f"({limit}) rows: add a key, raise the setting, or leave the table out (filter.exclude)"
                )
            # ddls 0: the watch is fresh, so a DDL seen since (also one before the SELECT) voids it.
            chunk = Chunk(spec, low, high, sorted(raw, key=_row_order), None, True, 0, whole=True)
            if not self._hand_over(chunk):
                return
            if not chunk.redo:
                self._rate.take(len(chunk.rows))
                return
            log.warning(
                "snapshot: table %s (no usable key, read in one chunk) changed while it was read; "
                "reading it again (read %d of %d)",
                spec.name,
                attempt,
                KEYLESS_TRIES,
            )
        self._marks.unwatch(spec)
        raise SourceError(
            f"snapshot: table {spec.name} has no PRIMARY KEY and no UNIQUE key over NOT NULL columns, so it "
            f"is read in one chunk, and the binlog changed it during each of {KEYLESS_TRIES} reads: add a "
            "key, snapshot it when it is quiet (`relay snapshot run`), or leave it out (filter.exclude)"
        )


def _connection_lost(exc: BaseException) -> bool:
    """A lost or refused connection (client-side CR_* codes, a killed connection): worth reconnecting."""
    if isinstance(exc, SourceConnectionError):
        return True
    code = mysql.error_code(exc)
    return 2000 <= code < 3000 or code in _LOST


def _row_order(row: Row) -> tuple[tuple[bool, str], ...]:
    return tuple((v is not None, v or "") for v in row)


def master_position(conn: Any) -> Pos:
    """The binlog end now (SHOW MASTER STATUS; SHOW BINARY LOG STATUS on MySQL >= 8.4): a watermark."""
    with conn.cursor() as cur:
        row = binlog_status(cur)
    if not row:
        raise SourceError("snapshot: SHOW MASTER STATUS is empty: binary logging is off")
    journal = row[0].decode() if isinstance(row[0], bytes) else str(row[0])
    offset = int(row[1].decode() if isinstance(row[1], bytes) else row[1])
    return position(journal, offset)
