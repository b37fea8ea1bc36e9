"""The replication connection: log in, register as a replica, ask for a binlog dump, read events.

Owned here: ``StreamConfig`` and ``BinlogStream``. PyMySQL does the handshake and the few queries
before the dump; after COM_BINLOG_DUMP(_GTID) the stream reads the socket itself (``_PacketReader``:
one growing buffer, packets sliced out with one copy, 16 MB packets reassembled) and hands each
event to ``relay.binlog.parse.BinlogParser``. Runs on the one binlog reader thread of
``binlog_source``, which gets decoded events from ``read()`` and hands them to the entry builder.

Errors: a lost or killed connection, an EOF or error packet from the server, silence longer than
``read_timeout`` → ``SourceConnectionError`` (retriable, reconnect after a backoff); a position the
server cannot serve (ER_MASTER_FATAL_ERROR_READING_BINLOG, e.g. a purged file) or a wrong login →
``SourceError``; bytes that cannot be decoded → ``DecodeError`` naming the file and offset.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import struct
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import pymysql

from relay.binlog.events import BinlogEvent, TableMapEvent, TransactionPayloadEvent
from relay.binlog.gtid import GtidSet
from relay.binlog.gtidset import encode_mysql_gtid_set
from relay.binlog.parse import BinlogParser
from relay.common import mysql
from relay.common.tls import TlsConfig
from relay.errors import ConfigError, SourceConnectionError, SourceError

log = logging.getLogger(__name__)

COM_BINLOG_DUMP = 0x12
COM_REGISTER_SLAVE = 0x15
COM_BINLOG_DUMP_GTID = 0x1E
BINLOG_THROUGH_GTID = 0x04  # COM_BINLOG_DUMP_GTID flag: the GTID set follows
# MariaDB dump flag: also send ANNOTATE_ROWS events. Without it the server leaves them out and the
# stream has holes (an event's start is not the previous event's end), which hides real gaps.
BINLOG_SEND_ANNOTATE_ROWS_EVENT = 0x02
MARIA_SLAVE_CAPABILITY_GTID = 4  # MariaDB: the replica understands GTID events (MARIA_SLAVE_CAPABILITY_MINE)
_MAX_PACKET = 0xFFFFFF
_BUFFER_SIZE = 1 << 20
_UUID_NAMESPACE = uuid.UUID("6f1c0f5e-2b52-4c33-9a52-0d5c1f0e7a11")


@dataclass(frozen=True)
class StreamConfig:
    """How to reach the source and what to tell it. ``mariadb`` None: detect from ``SELECT VERSION()``."""

    host: str
    port: int = 3306
    user: str = "root"
    password: str = ""
    server_id: int = 1001  # our replica id; must differ from every real replica's
    heartbeat_seconds: float = 5.0
    connect_timeout: float = 10.0
    read_timeout: float = 30.0  # silence longer than this (no event, no heartbeat) = connection lost
    mariadb: bool | None = None
    tls: TlsConfig | None = None  # source.tls (relay.common.tls); None: plain
    # The zone TIMESTAMP values are rendered in: the server's time_zone, or source.timezone.
    timestamp_zone: str = "UTC"
    # Fills in (and verifies) each TABLE_MAP before its rows are decoded: the schema history, where the
    # server writes no full row metadata (relay.schema.tracker). None: the event as it is.
    table_resolver: Callable[[TableMapEvent], TableMapEvent] | None = field(
        default=None, compare=False, repr=False
    )
    # False: rows events are not decoded (OtherEvent), for a reader that only looks for statements (the
    # schema history's scan for DDL at start): a row image it cannot decode is not its business.
    decode_rows: bool = True

    def __post_init__(self) -> None:
        if not 0 < self.server_id < 2**32:
            raise ConfigError("source.server_id", f"must be in 1..2^32-1, got {self.server_id}")
        if self.heartbeat_seconds <= 0 or self.read_timeout <= self.heartbeat_seconds:
            raise ConfigError(
                "source.read_timeout",
                f"must exceed heartbeat_seconds ({self.heartbeat_seconds}), got {self.read_timeout}",
            )


class _PyMySQLLink:
    """The one place that uses PyMySQL's private API.

    PyMySQL has no public way to send a raw command or to read raw packets; ``_execute_command``
    (frames a command packet and resets the sequence id), ``_read_packet`` and ``_sock`` are stable
    across PyMySQL 1.x. After the dump command is sent the socket belongs to ``_PacketReader``.
    """

    def __init__(self, config: StreamConfig) -> None:
        self._conn = mysql.connect(
            config.host,
            config.port,
            config.user,
            config.password,
            tls=config.tls,
            connect_timeout=config.connect_timeout,
            read_timeout=config.read_timeout,
            write_timeout=config.read_timeout,
        )

    @property
    def thread_id(self) -> int:
        return int(self._conn.thread_id())

    def query(self, sql: str, args: Any = None) -> list[tuple[Any, ...]]:
        try:
            with self._conn.cursor() as cur:
                cur.execute(sql, args)
                return list(cur.fetchall())
        except pymysql.err.MySQLError as exc:
            raise mysql.translate(exc, f"running {sql!r}") from exc

    def command(self, command: int, payload: bytes) -> None:
        """Send a command that the server answers with OK (COM_REGISTER_SLAVE)."""
        try:
            self._conn._execute_command(command, payload)
            packet = self._conn._read_packet()
        except pymysql.err.MySQLError as exc:
            raise mysql.translate(exc, f"command 0x{command:02x}") from exc
        if not packet.is_ok_packet():
            raise SourceError(f"command 0x{command:02x}: the server did not answer OK")

    def start_dump(self, command: int, payload: bytes) -> socket.socket:
        """Send the dump command; the server's answer is the event stream on the returned socket."""
        try:
            self._conn._execute_command(command, payload)
        except pymysql.err.MySQLError as exc:
            raise mysql.translate(exc, f"dump command 0x{command:02x}") from exc
        sock: socket.socket = self._conn._sock
        return sock

    def close(self) -> None:
        # Already closed by a lost connection: nothing left to release.
        with contextlib.suppress(pymysql.err.Error):
            self._conn.close()


class _PacketReader:
    """Protocol packets from the dump socket, read into one buffer and sliced out as ``bytes``.

    ``next(timeout)`` waits up to ``timeout`` for the *start* of a packet; once one has begun it
    reads it to the end (bounded by ``read_timeout``). Sequence ids are not checked: TCP keeps order
    and the dump stream has no request/response pairing to verify.
    """

    def __init__(self, sock: socket.socket, read_timeout: float) -> None:
        self._sock = sock
        self._read_timeout = read_timeout
        self._buf = bytearray(_BUFFER_SIZE)
        self._view = memoryview(self._buf)
        self._r = 0
        self._w = 0
        # Seconds spent WAITING for data since the last bytes came. Time the caller spends away (the
        # parser blocked on a full store while Kafka is down) is no silence of the server: its
        # heartbeats wait in the socket buffer, or TCP flow control holds them back.
        self._silent = 0.0

    def next(self, timeout: float | None) -> bytes | None:
        r, w, buf = self._r, self._w, self._buf
        if w - r >= 4:  # fast path: a whole packet is already buffered
            n = buf[r] | buf[r + 1] << 8 | buf[r + 2] << 16
            if n < _MAX_PACKET and w - r >= 4 + n:
                self._r = r + 4 + n
                return self._view[r + 4 : r + 4 + n].tobytes()
        return self._next_slow(timeout)

    def _next_slow(self, timeout: float | None) -> bytes | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._fill(4, deadline):
            return None
        parts = []
        while True:
            n = self._buf[self._r] | self._buf[self._r + 1] << 8 | self._buf[self._r + 2] << 16
            self._fill(4 + n, None)
            start = self._r + 4
            parts.append(self._view[start : start + n].tobytes())
            self._r = start + n
            if n < _MAX_PACKET:
                break
            self._fill(4, None)  # a 16 MB packet continues in the next one
        if self._r == self._w and len(self._buf) > _BUFFER_SIZE:
            self._reset(_BUFFER_SIZE)  # give back the memory of a huge event
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _fill(self, need: int, deadline: float | None) -> bool:
        """Make ``need`` bytes available at ``_r``; False if ``deadline`` passed first."""
        if self._w - self._r >= need:
            return True
        if self._r + need > len(self._buf):
            self._compact(need)
        while self._w - self._r < need:
            now = time.monotonic()
            if self._silent >= self._read_timeout:
                raise SourceConnectionError(
                    f"no data from the server for {self._read_timeout:g} s (heartbeats stopped)"
                )
            wait = self._read_timeout - self._silent
            if deadline is not None:
                if now >= deadline:
                    return False
                wait = min(wait, deadline - now)
            try:
                self._sock.settimeout(wait)
                got = self._sock.recv_into(self._view[self._w :])
            except TimeoutError:
                self._silent += time.monotonic() - now
                continue  # the loop decides: caller's deadline or server silence
            except OSError as exc:
                raise SourceConnectionError(f"connection lost: {exc}") from exc
            if got == 0:
                raise SourceConnectionError("connection closed by the server")
            self._w += got
            self._silent = 0.0
        return True

    def _compact(self, need: int) -> None:
        pending = self._view[self._r : self._w].tobytes()
        if need > len(self._buf):
            self._reset(max(need, 2 * len(self._buf)))
        self._buf[: len(pending)] = pending
        self._r, self._w = 0, len(pending)

    def _reset(self, size: int) -> None:
        self._view.release()
        self._buf = bytearray(size)
        self._view = memoryview(self._buf)
        self._r = self._w = 0


class BinlogStream:
    """One replication connection. ``open_at`` / ``open_at_gtid`` once, then ``read()`` until done."""

    def __init__(self, config: StreamConfig) -> None:
        self.config = config
        self.mariadb = bool(config.mariadb)
        self.server_version = ""
        self._link: _PyMySQLLink | None = None
        self._reader: _PacketReader | None = None
        self._parser: BinlogParser | None = None
        self._checksum = False
        # Inner events of the last TRANSACTION_PAYLOAD not handed out yet (``read`` drains them
        # before it touches the socket, so a payload is never split by a lost connection).
        self._pending: deque[BinlogEvent] = deque()

    @property
    def connection_id(self) -> int:
        """The server's thread id of the replication connection (what ``KILL`` takes)."""
        if self._link is None:
            raise SourceError("the binlog stream is not open")
        return self._link.thread_id

    def open_at(self, file: str, pos: int) -> None:
        """Dump from ``file`` at offset ``pos`` (4 = the start of the file)."""
        if pos < 4 or pos >= 2**32:
            raise SourceError(f"binlog position {pos} out of range for COM_BINLOG_DUMP")
        link = self._prepare()
        flags = BINLOG_SEND_ANNOTATE_ROWS_EVENT if self.mariadb else 0
        payload = struct.pack("<IHI", pos, flags, self.config.server_id) + file.encode()
        self._start(link, COM_BINLOG_DUMP, payload, file)
        log.info("binlog dump from %s:%d on %s:%d", file, pos, self.config.host, self.config.port)

    def open_at_gtid(self, gtid_set: str) -> None:
        """Dump the transactions not in ``gtid_set`` (MySQL GTID set or MariaDB GTID position)."""
        link = self._prepare()
        gtids = GtidSet.parse(gtid_set, mariadb=self.mariadb)
        if self.mariadb:
            # MariaDB takes the position as session variables and ignores the file name / offset.
            link.query("SET @slave_connect_state = %s", (str(gtids),))
            link.query("SET @slave_gtid_strict_mode = 1")
            link.query("SET @slave_gtid_ignore_duplicates = 0")
            payload = struct.pack("<IHI", 4, BINLOG_SEND_ANNOTATE_ROWS_EVENT, self.config.server_id)
            self._start(link, COM_BINLOG_DUMP, payload, "")
        else:
            data = encode_mysql_gtid_set(gtids)
            payload = (
                struct.pack("<HII", BINLOG_THROUGH_GTID, self.config.server_id, 0)
                + struct.pack("<QI", 4, len(data))
                + data
            )
            self._start(link, COM_BINLOG_DUMP_GTID, payload, "")
        log.info("binlog dump after GTID set %s on %s:%d", gtids, self.config.host, self.config.port)

    def read(self, timeout: float | None = None) -> BinlogEvent | None:
        """The next event, or None when ``timeout`` seconds pass without the start of one.

        A TRANSACTION_PAYLOAD is not handed out itself: its inner events are, one per call, in
        order, so callers see the same events as for an uncompressed transaction.
        """
        if self._pending:
            return self._pending.popleft()
        reader, parser = self._reader, self._parser
        if reader is None or parser is None:
            raise SourceError("the binlog stream is not open: call open_at or open_at_gtid first")
        try:
            packet = reader.next(timeout)
        except SourceConnectionError:
            self.close()
            raise
        if packet is None:
            return None
        if packet[0] != 0:
            raise self._stream_error(packet)
        event = parser.parse(packet, 1)
        if isinstance(event, TransactionPayloadEvent):
            self._pending.extend(event.events[1:])
            return event.events[0]  # never empty: the parser refuses a payload without events
        return event

    def close(self) -> None:
        if self._link is not None:
            self._link.close()
        self._link = self._reader = self._parser = None
        self._pending.clear()

    def __enter__(self) -> BinlogStream:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # --- connection setup -------------------------------------------------------------------------

    def _prepare(self) -> _PyMySQLLink:
        if self._link is not None:
            raise SourceError("the binlog stream is already open; close it first")
        link = _PyMySQLLink(self.config)
        self._link = link
        try:
            self._negotiate(link)
        except BaseException:
            self.close()
            raise
        return link

    def _negotiate(self, link: _PyMySQLLink) -> None:
        cfg = self.config
        self.server_version = str(link.query("SELECT VERSION()")[0][0])
        self.mariadb = "mariadb" in self.server_version.lower() if cfg.mariadb is None else cfg.mariadb
        checksum = str(link.query("SELECT @@global.binlog_checksum")[0][0]).upper()
        # A replica that does not announce the checksum it understands gets an error from MySQL
        # (or checksum-less events from old servers); announcing the server's own keeps events as stored.
        link.query("SET @master_binlog_checksum = @@global.binlog_checksum")
        self._checksum = checksum == "CRC32"
        link.query("SET @master_heartbeat_period = %s", (int(cfg.heartbeat_seconds * 1_000_000_000),))
        if self.mariadb:
            link.query("SET @mariadb_slave_capability = %s", (MARIA_SLAVE_CAPABILITY_GTID,))
        else:
            # A stable replica uuid lets MySQL end a previous dump thread of ours (a zombie) on reconnect.
            link.query("SET @slave_uuid = %s", (str(uuid.uuid5(_UUID_NAMESPACE, str(cfg.server_id))),))
        link.command(COM_REGISTER_SLAVE, struct.pack("<IBBBHII", cfg.server_id, 0, 0, 0, 0, 0, 0))

    def _start(self, link: _PyMySQLLink, command: int, payload: bytes, file: str) -> None:
        try:
            sock = link.start_dump(command, payload)
        except BaseException:
            self.close()
            raise
        self._reader = _PacketReader(sock, self.config.read_timeout)
        self._parser = BinlogParser(
            checksum=self._checksum,
            mariadb=self.mariadb,
            log_file=file,
            timestamp_zone=self.config.timestamp_zone,
            table_resolver=self.config.table_resolver,
            decode_rows=self.config.decode_rows,
        )

    def _stream_error(self, packet: bytes) -> SourceError:
        self.close()
        if packet[0] == 0xFF and len(packet) >= 3:
            (code,) = struct.unpack_from("<H", packet, 1)
            text = packet[3:]
            if text[:1] == b"#":  # '#' + 5-character SQL state
                text = text[6:]
            message = f"binlog dump: server error {code}: {text.decode('utf-8', 'replace')}"
            if code == mysql.ER_MASTER_FATAL_ERROR_READING_BINLOG:
                return SourceError(message)
            return SourceConnectionError(message)
        if packet[0] == 0xFE and len(packet) < 9:
            return SourceConnectionError("binlog dump: the server ended the stream (EOF)")
        return SourceConnectionError(f"binlog dump: unexpected packet starting 0x{packet[0]:02x}")
