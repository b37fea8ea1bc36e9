"""The binlog source: which server, where to start, whether the server is fit, and staying connected.

Owns one replication stream (``relay.binlog.stream.BinlogStream``) for one canal instance. Runs on the
instance's parser thread. Hands decoded events (``relay.binlog.events``) to the entry builder.

Start position, in precedence order (as canal's ``MysqlEventParser.findStartPosition``): the saved
resume point; a configured GTID set; a configured file + offset; a configured timestamp (the first
transaction at or after it, found by walking the binlog files, as canal's ``findByStartTimeStamp``);
otherwise the server's current end. Before streaming the server is checked and refused, with what to
change, when it cannot give a loss-free ROW stream.

After a lost connection the source reconnects with backoff at the start of the transaction it was in
and drops the events it had already delivered, so the consumer sees one gap-free sequence.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import pymysql

from relay.binlog import rows
from relay.binlog.events import (
    BinlogEvent,
    FormatDescriptionEvent,
    GtidEvent,
    HeartbeatEvent,
    QueryEvent,
    RotateEvent,
    XidEvent,
)
from relay.binlog.stream import BinlogStream, StreamConfig
from relay.errors import SourceConnectionError, SourceError
from relay.positions import ResumePoint, SourceIdentity
from relay.retry import RetryPolicy

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StartConfig:
    """Where to start when no position is saved. ``timestamp`` is in ms since the epoch."""

    gtid: str | None = None
    journal: str | None = None
    offset: int | None = None
    timestamp: int | None = None


@dataclass(frozen=True)
class SourceConfig:
    host: str = "127.0.0.1"
    port: int = 3306
    user: str = "relay"
    password: str = field(default="", repr=False)
    server_id: int = 6543  # our id as a replica: must be unique among the server's replicas
    start: StartConfig = StartConfig()
    heartbeat_seconds: float = 5.0
    connect_timeout: float = 10.0
    read_timeout: float = 30.0
    retry: RetryPolicy = field(default_factory=lambda: RetryPolicy(initial=0.5, maximum=30.0))
    timezone: str = "server"  # how TIMESTAMP values are rendered: "server", "UTC", or "+08:00"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class ServerInfo:
    """What the server said about itself when the source checked it."""

    version: str
    mariadb: bool
    server_id: int
    server_uuid: str
    time_zone_offset: str  # "+HH:MM" of the server's session time zone now
    binlogs: tuple[tuple[str, int], ...]  # (file, size), oldest first
    end: tuple[str, int]  # current write position
    gtid_executed: str  # MySQL Executed_Gtid_Set / MariaDB gtid_binlog_pos ("" when none)


@dataclass(frozen=True)
class StartPoint:
    journal: str
    offset: int
    skip: int = 0
    gtid_set: str | None = None
    reason: str = ""


def _connect(cfg: SourceConfig) -> pymysql.connections.Connection:
    try:
        return pymysql.connect(
            host=cfg.host,
            port=cfg.port,
            user=cfg.user,
            password=cfg.password,
            connect_timeout=cfg.connect_timeout,
            read_timeout=cfg.read_timeout,
            autocommit=True,
            charset="utf8mb4",
        )
    except pymysql.err.OperationalError as exc:
        raise SourceConnectionError(f"cannot connect to MySQL at {cfg.address}: {exc}") from exc


def _query(conn: Any, sql: str) -> list[tuple[Any, ...]]:
    with conn.cursor() as cur:
        cur.execute(sql)
        return list(cur.fetchall())


def _variables(conn: Any, names: tuple[str, ...]) -> dict[str, str]:
    like = " OR ".join(f"Variable_name = '{n}'" for n in names)
    return {str(k).lower(): str(v) for k, v in _query(conn, f"SHOW GLOBAL VARIABLES WHERE {like}")}


def inspect_server(cfg: SourceConfig) -> ServerInfo:
    """Read what the source needs to know about the server, and refuse a server that would lose data."""
    conn = _connect(cfg)
    try:
        version = str(_query(conn, "SELECT VERSION()")[0][0])
        mariadb = "mariadb" in version.lower()
        var = _variables(
            conn,
            (
                "log_bin",
                "binlog_format",
                "binlog_row_image",
                "binlog_row_metadata",
                "log_bin_compress",
                "binlog_transaction_compression",
                "binlog_row_value_options",
                "server_id",
                "server_uuid",
                "gtid_binlog_pos",
            ),
        )
        _refuse_unfit(cfg, var)
        try:
            binlogs = tuple((str(r[0]), int(r[1])) for r in _query(conn, "SHOW BINARY LOGS"))
            status = _query(conn, "SHOW MASTER STATUS")
        except pymysql.err.MySQLError as exc:
            raise SourceError(
                f"{cfg.address}: user {cfg.user!r} cannot list binary logs ({exc}); grant it "
                "REPLICATION CLIENT (MySQL) or BINLOG MONITOR (MariaDB), and REPLICATION SLAVE"
            ) from exc
        if not status:
            raise SourceError(f"{cfg.address}: SHOW MASTER STATUS is empty: binary logging is off")
        end = (str(status[0][0]), int(status[0][1]))
        gtid = var.get("gtid_binlog_pos", "") if mariadb else str(status[0][4] if len(status[0]) > 4 else "")
        offset = str(_query(conn, "SELECT TIME_FORMAT(TIMEDIFF(NOW(), UTC_TIMESTAMP()), '%H:%i')")[0][0])
        return ServerInfo(
            version=version,
            mariadb=mariadb,
            server_id=int(var.get("server_id", "0")),
            server_uuid=var.get("server_uuid", ""),
            time_zone_offset=offset if offset.startswith("-") else "+" + offset,
            binlogs=binlogs,
            end=end,
            gtid_executed="".join(gtid.split()),
        )
    finally:
        conn.close()


def _refuse_unfit(cfg: SourceConfig, var: dict[str, str]) -> None:
    where = cfg.address

    def bad(setting: str, value: str, fix: str) -> SourceError:
        return SourceError(
            f"{where}: {setting} is {value}; {fix} — the relay refuses to start, it would lose data"
        )

    if var.get("log_bin", "OFF").upper() != "ON":
        raise bad("log_bin", var.get("log_bin", "OFF"), "start the server with --log-bin")
    if var.get("binlog_format", "").upper() != "ROW":
        raise bad("binlog_format", var.get("binlog_format", "?"), "set binlog_format=ROW")
    if var.get("binlog_row_image", "").upper() != "FULL":
        raise bad("binlog_row_image", var.get("binlog_row_image", "?"), "set binlog_row_image=FULL")
    if var.get("log_bin_compress", "OFF").upper() == "ON":
        raise bad("log_bin_compress", "ON", "set log_bin_compress=OFF (compressed events cannot be decoded)")
    if var.get("binlog_transaction_compression", "OFF").upper() == "ON":
        raise bad("binlog_transaction_compression", "ON", "set binlog_transaction_compression=OFF")
    if "PARTIAL_JSON" in var.get("binlog_row_value_options", "").upper():
        raise bad("binlog_row_value_options", "PARTIAL_JSON", "set binlog_row_value_options=''")
    metadata = var.get("binlog_row_metadata")
    if metadata is None or metadata.upper() != "FULL":
        raise bad(
            "binlog_row_metadata",
            metadata or "unsupported by this server",
            "set binlog_row_metadata=FULL (MySQL >= 8.0.1, MariaDB >= 10.5) so column names and keys travel "
            "with each change",
        )


def resolve_start(cfg: SourceConfig, info: ServerInfo, saved: ResumePoint | None) -> StartPoint:
    """Choose where to start; the precedence is the module docstring's."""
    files = [name for name, _ in info.binlogs]
    if saved is not None:
        if saved.journal not in files:
            raise SourceError(
                f"{cfg.address}: the saved position {saved} is in {saved.journal}, which the server has "
                f"purged; the oldest binlog still available is {files[0] if files else 'none'}. Changes "
                "between them are lost to the relay: re-snapshot the tables, then set a new start position"
            )
        _check_same_server(cfg, info, saved)
        return StartPoint(saved.journal, saved.offset, saved.skip, saved.gtid_set, f"saved position {saved}")
    start = cfg.start
    if start.gtid:
        return StartPoint("", 0, 0, start.gtid, f"configured GTID set {start.gtid}")
    if start.journal:
        if start.journal not in files:
            raise SourceError(
                f"source.start.journal: {start.journal} is not on the server; available: {', '.join(files)}"
            )
        offset = start.offset if start.offset is not None else 4
        return StartPoint(start.journal, offset, 0, None, f"configured position {start.journal}:{offset}")
    if start.timestamp is not None:
        journal, offset = find_by_timestamp(cfg, info, start.timestamp)
        return StartPoint(journal, offset, 0, None, f"first transaction at or after {start.timestamp} ms")
    return StartPoint(info.end[0], info.end[1], 0, info.gtid_executed or None, "current end of the binlog")


def _check_same_server(cfg: SourceConfig, info: ServerInfo, saved: ResumePoint) -> None:
    src = saved.source
    if src is None:
        return
    mismatch = (src.server_uuid and info.server_uuid and src.server_uuid != info.server_uuid) or (
        src.server_id and info.server_id and src.server_id != info.server_id
    )
    if mismatch:
        raise SourceError(
            f"{cfg.address}: the saved position {saved} belongs to server id {src.server_id} "
            f"{src.server_uuid} at {src.address}, but this server is id {info.server_id} {info.server_uuid}: "
            "a binlog offset means nothing on another server. Set a start position for this server explicitly"
        )


def _stream_config(cfg: SourceConfig, info: ServerInfo, server_id: int | None = None) -> StreamConfig:
    return StreamConfig(
        host=cfg.host,
        port=cfg.port,
        user=cfg.user,
        password=cfg.password,
        server_id=server_id or cfg.server_id,
        heartbeat_seconds=cfg.heartbeat_seconds,
        connect_timeout=cfg.connect_timeout,
        read_timeout=cfg.read_timeout,
        mariadb=info.mariadb,
    )


def first_transaction_at(
    cfg: SourceConfig, info: ServerInfo, journal: str, size: int, target_ms: int
) -> tuple[int | None, int | None]:
    """Scan one binlog file: (offset of the first transaction at/after ``target_ms``, first event time ms)."""
    stream = BinlogStream(_stream_config(cfg, info, server_id=cfg.server_id + 1))
    first_ms: int | None = None
    try:
        stream.open_at(journal, 4)
        while True:
            event = stream.read(timeout=cfg.read_timeout)
            if event is None:
                return None, first_ms
            h = event.header
            if h.artificial or isinstance(event, FormatDescriptionEvent | HeartbeatEvent):
                continue
            if isinstance(event, RotateEvent) or h.log_file != journal:
                return None, first_ms
            if first_ms is None:
                first_ms = h.timestamp * 1000
            opens = isinstance(event, GtidEvent) or (
                isinstance(event, QueryEvent) and not info.mariadb and event.sql.upper() != "COMMIT"
            )
            if opens and h.timestamp * 1000 >= target_ms:
                return h.start, first_ms
            if h.log_pos >= size:
                return None, first_ms
    finally:
        stream.close()


def find_by_timestamp(cfg: SourceConfig, info: ServerInfo, target_ms: int) -> tuple[str, int]:
    """Walk the binlog files newest first to the one holding ``target_ms``; the first transaction at/after it.

    A file whose first event is later than the target cannot hold it, so the walk goes back until a file
    starts at or before the target, then scans forward from there (into later files if needed).
    """
    files = list(info.binlogs)
    sizes = dict(files)
    begin = 0
    for i in range(len(files) - 1, -1, -1):
        _, first_ms = first_transaction_at(cfg, info, files[i][0], 4 + 1, 0)
        if first_ms is not None and first_ms <= target_ms:
            begin = i
            break
    for name, _ in files[begin:]:
        size = sizes[name] if name != info.end[0] else info.end[1]
        offset, _ = first_transaction_at(cfg, info, name, size, target_ms)
        if offset is not None:
            return name, offset
    return info.end


class BinlogSource:
    """One server's binlog as an endless, gap-free sequence of decoded events (``read``)."""

    def __init__(self, config: SourceConfig) -> None:
        self.config = config
        self.info: ServerInfo | None = None
        self._stream: BinlogStream | None = None
        # Where to reconnect: the start of the current transaction, and the end of the last event handed out.
        self._boundary: tuple[str, int] | None = None
        self._delivered: tuple[str, int] | None = None
        self._in_txn = False
        self.reconnects = 0

    @property
    def identity(self) -> SourceIdentity:
        info = self.info
        return SourceIdentity(
            self.config.host,
            self.config.port,
            info.server_id if info else 0,
            info.server_uuid if info else "",
        )

    def check(self) -> ServerInfo:
        self.info = inspect_server(self.config)
        self._apply_timezone(self.info)
        return self.info

    def _apply_timezone(self, info: ServerInfo) -> None:
        tz = self.config.timezone
        rows.set_timestamp_zone(info.time_zone_offset if tz == "server" else tz)

    def open(self, start: StartPoint) -> None:
        """Start streaming at ``start`` (a GTID set when ``journal`` is empty)."""
        if self.info is None:
            self.check()
        assert self.info is not None
        stream = BinlogStream(_stream_config(self.config, self.info))
        if start.journal:
            stream.open_at(start.journal, start.offset)
            self._boundary = (start.journal, start.offset)
        else:
            stream.open_at_gtid(start.gtid_set or "")
        self._stream = stream
        log.info("binlog source %s streaming from %s", self.config.address, start.reason or start)

    def read(self, timeout: float) -> BinlogEvent | None:
        """The next event, reconnecting after a lost connection. None when nothing came within ``timeout``."""
        while True:
            try:
                event = self._read_once(timeout)
            except SourceConnectionError as exc:
                self._reconnect(exc)
                continue
            if event is None or not self._already_delivered(event):
                return event

    def _read_once(self, timeout: float) -> BinlogEvent | None:
        if self._stream is None:
            raise SourceConnectionError("the binlog stream is not open")
        event = self._stream.read(timeout)
        if event is None:
            return None
        return event

    def _already_delivered(self, event: BinlogEvent) -> bool:
        """After a reconnect, events up to the last one delivered come again: drop them, track the rest."""
        h = event.header
        if h.artificial or not h.log_pos:
            return False
        if (
            self._delivered is not None
            and self._delivered[0] == h.log_file
            and h.log_pos <= self._delivered[1]
        ):
            return True
        self._delivered = (h.log_file, h.log_pos)
        self._track_transaction(event)
        return False

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
        elif isinstance(event, XidEvent):
            self._in_txn = False
            self._boundary = (h.log_file, h.log_pos)
        elif isinstance(event, RotateEvent) and not self._in_txn:
            self._boundary = (event.next_file, event.position)

    def _reconnect(self, cause: SourceConnectionError) -> None:
        backoff = self.config.retry.start()
        self.close()
        while True:
            log.warning(
                "binlog source %s: %s; reconnecting (try %d)", self.config.address, cause, backoff.tries + 1
            )
            if not backoff.wait():
                raise SourceError(
                    f"{self.config.address}: gave up reconnecting after {backoff.tries} tries"
                ) from cause
            try:
                self._reopen()
                self.reconnects += 1
                return
            except SourceConnectionError as exc:
                cause = exc

    def _reopen(self) -> None:
        assert self.info is not None
        if self._boundary is None:
            raise SourceError("lost the connection before any position was known; restart the relay")
        journal, offset = self._boundary
        stream = BinlogStream(_stream_config(self.config, self.info))
        try:
            stream.open_at(journal, offset)
        except BaseException:
            stream.close()
            raise
        self._stream = stream
        log.info("binlog source %s reconnected at %s:%d", self.config.address, journal, offset)

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None
