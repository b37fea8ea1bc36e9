"""The binlog source: one server's binlog as an endless, gap-free sequence of decoded events.

Owns one replication stream (``relay.binlog.stream.BinlogStream``) for one canal instance. Runs on the
instance's parser thread (``check`` and ``open`` run on the thread that starts the instance). Hands
decoded events (``relay.binlog.events``) to the entry builder.

Before streaming the server is checked (``relay.source.server``: refused, with what to change, when it
cannot give a loss-free ROW stream, or when its TIMESTAMP rendering cannot be followed); where to start is
chosen by ``relay.source.start_point`` (a time, by ``relay.source.binlog_time``).

After a lost connection the source reconnects with backoff (one ``RetryPolicy`` budget, renewed once
the new connection delivers) at the start of the transaction it was in, and drops what the new
connection repeats, so the consumer sees the same event sequence as from one uninterrupted connection.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from relay.binlog.events import (
    BinlogEvent,
    GtidEvent,
    HeartbeatEvent,
    QueryEvent,
    RotateEvent,
    TableMapEvent,
    XaPrepareEvent,
    XidEvent,
)
from relay.binlog.stream import BinlogStream
from relay.common.binlog_names import file_order
from relay.common.retry import Backoff
from relay.config.sections import SourceConfig
from relay.errors import SourceConnectionError, SourceError, SourceUnavailableError
from relay.positions.store import SourceIdentity
from relay.schema.tracker import SchemaTracker
from relay.source.server import ServerInfo, inspect_server, stream_config
from relay.source.start_point import StartPoint

log = logging.getLogger(__name__)


class BinlogSource:
    """One server's binlog as an endless, gap-free sequence of decoded events (``read``)."""

    def __init__(self, config: SourceConfig) -> None:
        self.config = config
        self.info: ServerInfo | None = None
        self._stream: BinlogStream | None = None
        # Where to reconnect: the end of the last complete transaction (or the configured GTID set
        # before one is known), and the end of the last event handed out.
        self._boundary: tuple[str, int] | None = None
        self._gtid_start: str | None = None
        self._delivered: tuple[str, int] | None = None
        self._in_txn = False
        self._replaying = False  # after a reconnect, until the new connection passes ``_delivered``
        self._backoff: Backoff | None = None
        self._closed = False
        self.reconnects = 0
        # The schema history (relay.schema.tracker), attached by the instance where the server writes
        # no full row metadata: it fills each TABLE_MAP and follows each DDL, in binlog order.
        self.schema: SchemaTracker | None = None
        self.accept_schema_history = False  # check(): accept a server without binlog_row_metadata=FULL

    @property
    def identity(self) -> SourceIdentity:
        info = self.info
        return SourceIdentity(
            self.config.host,
            self.config.port,
            info.server_id if info else 0,
            info.server_uuid if info else "",
        )

    @property
    def connection_id(self) -> int | None:
        """The server's thread id of the current replication connection (None while disconnected)."""
        return self._stream.connection_id if self._stream is not None else None

    def check(self) -> ServerInfo:
        self.info = inspect_server(self.config, schema_history=self.accept_schema_history)
        return self.info

    def open(self, start: StartPoint) -> None:
        """Start streaming at ``start`` (a GTID set when ``journal`` is empty)."""
        if self.info is None:
            self.check()
        assert self.info is not None
        self.close()
        self._closed = False
        self._delivered, self._in_txn, self._replaying, self._backoff = None, False, False, None
        stream = BinlogStream(stream_config(self.config, self.info, self._resolver()))
        if start.journal:
            stream.open_at(start.journal, start.offset)
            self._boundary, self._gtid_start = (start.journal, start.offset), None
        else:
            stream.open_at_gtid(start.gtid_set or "")
            self._boundary, self._gtid_start = None, start.gtid_set or ""
        self._stream = stream
        log.info("binlog source %s streaming from %s", self.config.address, start.reason or start)

    def side_stream(self, journal: str, offset: int, *, checked: bool = False) -> BinlogStream:
        """A second dump connection reading from ``journal``:``offset`` (under another replica server id):
        for reading ahead without moving this source. ``checked``: its TABLE_MAPs are verified against
        the schema history as this source's are, without changing the history (``SchemaTracker.check``;
        within a transaction, which holds no DDL). The caller closes it."""
        if self.info is None:
            self.check()
        assert self.info is not None
        resolver = self.schema.check if checked and self.schema is not None else None
        stream = BinlogStream(stream_config(self.config, self.info, resolver, side=True))
        try:
            stream.open_at(journal, offset)
        except BaseException:
            stream.close()
            raise
        return stream

    def read(self, timeout: float) -> BinlogEvent | None:
        """The next event, reconnecting after a lost connection. None when nothing came within ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            if self._closed:
                raise SourceError(f"{self.config.address}: the binlog source is closed")
            if self._stream is None:
                raise SourceError(f"{self.config.address}: the binlog source is not open")
            try:
                event = self._stream.read(max(0.0, deadline - time.monotonic()))
            except SourceConnectionError as exc:
                self._reconnect(exc)
                continue
            if event is None:
                return None
            if self._pass(event):
                if self.schema is not None and isinstance(event, QueryEvent):
                    self.schema.on_query(event)  # before the next TABLE_MAP is parsed
                return event
            if time.monotonic() >= deadline:
                return None

    @property
    def delivered(self) -> tuple[str, int] | None:
        """(file, end offset) of the last real event handed out; None before the first."""
        return self._delivered

    def _pass(self, event: BinlogEvent) -> bool:
        """Track an event; False for what a new connection repeats of what was already delivered."""
        h = event.header
        if self._replaying:
            if not self._beyond_delivered(event):
                return False
            self._replaying = False
            log.info("binlog source %s: caught up after reconnecting", self.config.address)
        if not h.artificial and not isinstance(event, HeartbeatEvent):
            self._delivered = (h.log_file, h.log_pos)
            self._track_transaction(event)
        if not h.artificial or isinstance(event, HeartbeatEvent):
            self._backoff = None  # the connection delivers: a later loss gets a fresh retry budget
        return True

    def _beyond_delivered(self, event: BinlogEvent) -> bool:
        if isinstance(event, HeartbeatEvent):  # says where the server is, not what it sent: no proof
            return False
        if self._delivered is None:  # nothing real delivered yet: only the connect-time events repeat
            return not event.header.artificial
        done = (file_order(self._delivered[0]), self._delivered[1])
        if isinstance(event, RotateEvent) and event.header.artificial:
            # A new connection at the start of a later file announces it exactly as a file switch does.
            return (file_order(event.next_file), event.position) > done
        h = event.header
        return not h.artificial and (file_order(h.log_file), h.log_pos) > done

    def _track_transaction(self, event: BinlogEvent) -> None:
        """Keep ``_boundary`` at the end of the last complete transaction: a reconnect starts there.

        Restarting at a transaction's start (rather than at the last event) matters because a dump
        started inside a transaction lacks the TABLE_MAP its rows events refer to.
        """
        h = event.header
        if isinstance(event, GtidEvent):
            self._in_txn = not event.standalone if event.mariadb else False
        elif isinstance(event, QueryEvent):
            sql = event.sql.strip().upper()
            if sql in ("BEGIN", "XA START") or sql.startswith("XA START"):
                self._in_txn = True
                return
            if self._in_txn and sql != "COMMIT" and not sql.startswith("XA END"):
                return  # a statement inside the transaction (SAVEPOINT …)
            self._in_txn = False
            self._boundary = (h.log_file, h.log_pos)
        elif isinstance(event, XidEvent | XaPrepareEvent):
            self._in_txn = False
            self._boundary = (h.log_file, h.log_pos)
        elif isinstance(event, RotateEvent) and not self._in_txn:
            self._boundary = (event.next_file, event.position)

    def _resolver(self) -> Callable[[TableMapEvent], TableMapEvent] | None:
        return self.schema.resolve if self.schema is not None else None

    def _reconnect(self, cause: SourceConnectionError) -> None:
        """Open a new connection at the boundary, waiting out the backoff; SourceError when it runs out."""
        self._drop_stream()
        if self._backoff is None:
            self._backoff = self.config.retry.start()
        backoff = self._backoff
        while True:
            if self._closed:
                raise SourceError(f"{self.config.address}: the binlog source was closed") from cause
            log.warning(
                "binlog source %s: %s; reconnecting (try %d)", self.config.address, cause, backoff.tries + 1
            )
            if not backoff.wait():
                raise SourceUnavailableError(
                    f"{self.config.address}: gave up reconnecting after {backoff.tries} tries "
                    f"({time.monotonic() - backoff.started:.1f} s): {cause}. Check that the server is up "
                    "and reachable; the relay resumes from its saved position when restarted"
                ) from cause
            try:
                self._reopen()
            except SourceConnectionError as exc:
                cause = exc
                continue
            self.reconnects += 1
            self._replaying = True
            return

    def _reopen(self) -> None:
        assert self.info is not None
        stream = BinlogStream(stream_config(self.config, self.info, self._resolver()))
        try:
            if self._boundary is not None:
                stream.open_at(*self._boundary)
                at = f"{self._boundary[0]}:{self._boundary[1]}"
            elif self._gtid_start is not None:
                stream.open_at_gtid(self._gtid_start)
                at = f"GTID set {self._gtid_start}"
            else:
                raise SourceError("lost the connection before any position was known; restart the relay")
        except BaseException:
            stream.close()
            raise
        self._stream = stream
        log.info("binlog source %s reconnected at %s", self.config.address, at)

    def _drop_stream(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None

    def close(self) -> None:
        self._closed = True
        self._drop_stream()
