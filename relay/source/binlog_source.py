"""The binlog source: which server, where to start, whether the server is fit, and staying connected.

Owns one replication stream (``relay.binlog.stream.BinlogStream``) for one canal instance. Runs on the
instance's parser thread (``check`` and ``resolve_start`` run on the thread that starts the instance).
Hands decoded events (``relay.binlog.events``) to the entry builder.

Start position, in precedence order (as canal's ``MysqlEventParser.findStartPosition``): the saved
resume point; a configured GTID set; a configured file + offset; a configured timestamp (the first
transaction at or after it, found by walking the binlog files, as canal's ``findByStartTimeStamp``);
otherwise the server's current end. Before streaming the server is checked and refused, with what to
change, when it cannot give a loss-free ROW stream, or when its TIMESTAMP rendering cannot be followed.

After a lost connection the source reconnects with backoff (one ``RetryPolicy`` budget, renewed once
the new connection delivers) at the start of the transaction it was in, and drops what the new
connection repeats, so the consumer sees the same event sequence as from one uninterrupted connection.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from typing import Any
from zoneinfo import ZoneInfo

import pymysql

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
from relay.binlog.stream import BinlogStream, StreamConfig
from relay.common import mysql
from relay.common.binlog_names import file_order
from relay.common.retry import Backoff
from relay.config.sections import SourceConfig
from relay.errors import SourceConnectionError, SourceError, SourceUnavailableError
from relay.positions.store import ResumePoint, SourceIdentity
from relay.schema.tracker import SchemaTracker

log = logging.getLogger(__name__)

ER_PARSE_ERROR = 1064
_VARIABLES = (
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
    "time_zone",
    "system_time_zone",
)


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
    # The zone TIMESTAMP values are rendered in: an IANA name or "+HH:MM" ("" when not resolved).
    time_zone: str = ""
    # binlog_row_metadata as the server reports it ("" on servers without it, e.g. MySQL 5.7).
    row_metadata: str = "FULL"
    # The server's clock (UNIX_TIMESTAMP(), whole seconds, in ms), read after ``end``: every transaction
    # before ``end`` has a binlog time at or before it (the timestamp failover of a relay that read
    # nothing since it started at the end: ``relay.source.failover.StartBoundary``).
    now_ms: int = 0


@dataclass(frozen=True)
class StartPoint:
    journal: str
    offset: int
    skip: int = 0
    gtid_set: str | None = None
    reason: str = ""


# --- talking to the server -------------------------------------------------------------------------


def _connect(cfg: SourceConfig) -> pymysql.connections.Connection:
    return mysql.connect(
        cfg.host,
        cfg.port,
        cfg.user,
        cfg.password,
        tls=cfg.tls,
        connect_timeout=cfg.connect_timeout,
        read_timeout=cfg.read_timeout,
    )


def _query(conn: Any, sql: str) -> list[tuple[Any, ...]]:
    with conn.cursor() as cur:
        cur.execute(sql)
        return list(cur.fetchall())


def _client_side(exc: pymysql.err.MySQLError) -> bool:
    """CR_* codes (2000-2999) are the client's: the connection failed, not the statement."""
    code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else 0
    return 2000 <= code < 3000


def _translate(cfg: SourceConfig, exc: pymysql.err.MySQLError, doing: str) -> SourceError:
    if _client_side(exc):
        return SourceConnectionError(f"{cfg.address}: lost the connection {doing}: {exc}")
    return SourceError(f"{cfg.address}: {doing} failed: {exc}")


def _variables(conn: Any, names: tuple[str, ...]) -> dict[str, str]:
    like = " OR ".join(f"Variable_name = '{n}'" for n in names)
    return {str(k).lower(): str(v) for k, v in _query(conn, f"SHOW GLOBAL VARIABLES WHERE {like}")}


def inspect_server(cfg: SourceConfig, *, schema_history: bool = False) -> ServerInfo:
    """Read what the source needs to know about the server, and refuse a server that would lose data.

    ``schema_history``: column names and keys can come from the schema history (``relay.schema``), so
    a server without binlog_row_metadata=FULL is accepted."""
    conn = _connect(cfg)
    try:
        version = str(_query(conn, "SELECT VERSION()")[0][0])
        mariadb = "mariadb" in version.lower()
        var = _variables(conn, _VARIABLES)
        _refuse_unfit(cfg, var, schema_history)
        binlogs, status = _binlog_state(cfg, conn)
        gtid = var.get("gtid_binlog_pos", "") if mariadb else str(status[4] if len(status) > 4 else "")
        # After the binlog status: its end is before this clock reading.
        clock = _query(
            conn, "SELECT TIME_FORMAT(TIMEDIFF(NOW(), UTC_TIMESTAMP()), '%H:%i'), UNIX_TIMESTAMP()"
        )
        offset, now = str(clock[0][0]), int(clock[0][1])
        return ServerInfo(
            version=version,
            mariadb=mariadb,
            server_id=int(var.get("server_id", "0")),
            server_uuid=var.get("server_uuid", ""),
            time_zone_offset=offset if offset.startswith("-") else "+" + offset,
            binlogs=binlogs,
            end=(str(status[0]), int(status[1])),
            gtid_executed="".join(gtid.split()),
            time_zone=_server_zone(cfg, conn, var) if cfg.timezone == "server" else cfg.timezone,
            row_metadata=var.get("binlog_row_metadata", "").upper(),
            now_ms=now * 1000,
        )
    except pymysql.err.MySQLError as exc:
        raise _translate(cfg, exc, "checking the server") from exc
    finally:
        conn.close()


def _binlog_state(cfg: SourceConfig, conn: Any) -> tuple[tuple[tuple[str, int], ...], tuple[Any, ...]]:
    """The binlog files (oldest first) and the binlog status row (file, position, …, GTID set)."""
    try:
        binlogs = tuple((str(r[0]), int(r[1])) for r in _query(conn, "SHOW BINARY LOGS"))
        try:
            status = _query(conn, "SHOW MASTER STATUS")
        except pymysql.err.ProgrammingError as exc:
            if exc.args[0] != ER_PARSE_ERROR:
                raise
            status = _query(conn, "SHOW BINARY LOG STATUS")  # MySQL >= 8.4 removed the old name
    except pymysql.err.MySQLError as exc:
        if _client_side(exc):
            raise
        raise SourceError(
            f"{cfg.address}: user {cfg.user!r} cannot list binary logs ({exc}); grant it "
            "REPLICATION CLIENT (MySQL) or BINLOG MONITOR (MariaDB), and REPLICATION SLAVE"
        ) from exc
    if not status:
        raise SourceError(f"{cfg.address}: SHOW MASTER STATUS is empty: binary logging is off")
    return binlogs, status[0]


def server_settings(cfg: SourceConfig) -> tuple[str, dict[str, str]]:
    """The server's version and the global variables the relay judges (``settings_report``); read only."""
    conn = _connect(cfg)
    try:
        return str(_query(conn, "SELECT VERSION()")[0][0]), _variables(conn, _VARIABLES)
    except pymysql.err.MySQLError as exc:
        raise _translate(cfg, exc, "reading the server's settings") from exc
    finally:
        conn.close()


def settings_report(var: dict[str, str], schema_history: bool = False) -> list[tuple[str, str, str | None]]:
    """(setting, value, what to fix — None when fit) for every setting the relay refuses to start
    without, in the order it checks them (``relay check`` prints them all, a start stops at the first)."""

    def judged(
        name: str, wanted: str, unset: str, fix: str, fit: bool = False
    ) -> tuple[str, str, str | None]:
        value = var.get(name)
        return name, value or unset, None if fit or (value or "").upper() == wanted else fix

    return [
        judged("log_bin", "ON", "OFF", "start the server with --log-bin"),
        judged("binlog_format", "ROW", "?", "set binlog_format=ROW"),
        judged("binlog_row_image", "FULL", "?", "set binlog_row_image=FULL"),
        judged(
            "binlog_row_metadata",
            "FULL",
            "unsupported by this server",
            "set binlog_row_metadata=FULL (MySQL >= 8.0.1, MariaDB >= 10.5) so column names and keys travel "
            "with each change, or schema.history: auto (the default; it is off) to take them from the schema "
            "history",
            fit=schema_history,
        ),
    ]


def _refuse_unfit(cfg: SourceConfig, var: dict[str, str], schema_history: bool = False) -> None:
    for setting, value, fix in settings_report(var, schema_history):
        if fix is not None:
            raise SourceError(
                f"{cfg.address}: {setting} is {value}; {fix} — the relay refuses to start, it would lose data"
            )


# --- the server's time zone ------------------------------------------------------------------------


def _zone(name: str) -> tzinfo | None:
    """``name`` as a tzinfo: "+HH:MM", "UTC" or an IANA name; None when Python does not know it."""
    if name[:1] in ("+", "-"):
        hours, _, minutes = name[1:].partition(":")
        if not (hours.isdigit() and minutes.isdigit()):
            return None
        offset = timedelta(hours=int(hours), minutes=int(minutes))
        return timezone(-offset if name[0] == "-" else offset)
    if name.upper() == "UTC":
        return UTC
    try:
        return ZoneInfo(name)
    except (KeyError, ValueError):  # ZoneInfoNotFoundError is a KeyError; ValueError: not a zone key
        return None


def _probe_instants() -> list[int]:
    """Noon UTC on the 1st and 15th of each month of this year and the next: both sides of DST changes."""
    year = datetime.now(UTC).year
    return [
        int(datetime(y, m, d, 12, tzinfo=UTC).timestamp())
        for y in (year, year + 1)
        for m in range(1, 13)
        for d in (1, 15)
    ]


def _server_zone(cfg: SourceConfig, conn: Any, var: dict[str, str]) -> str:
    """The zone the server renders TIMESTAMP values in, checked against the server itself.

    ``@@time_zone`` is an offset, a named zone (from the server's tz tables) or SYSTEM, which means
    the server process's zone, known to us only as ``@@system_time_zone`` — an abbreviation such as
    CET or EST. A zone name is only trusted when it renders the same wall-clock times as the server
    on both sides of this year's and next year's DST changes; a fixed offset taken at start would
    shift half of the year's values by the DST hour, so it is refused rather than guessed.
    """
    name = var.get("time_zone", "SYSTEM")
    described = f"time_zone={name}"
    if name.upper() == "SYSTEM":
        name = var.get("system_time_zone", "")
        described = f"time_zone=SYSTEM (system_time_zone={name})"
    zone = _zone(name) if name else None
    instants = _probe_instants()
    if zone is not None:
        columns = ", ".join(f"FROM_UNIXTIME({t})" for t in instants)
        server = _query(conn, f"SELECT {columns}")[0]
        ours = tuple(datetime.fromtimestamp(t, zone).replace(tzinfo=None) for t in instants)
        if tuple(server) == ours:
            return name
    raise SourceError(
        f"{cfg.address}: the server renders TIMESTAMP values in {described}, which the relay cannot "
        "follow across daylight-saving changes; set source.timezone to the server's IANA zone "
        "(e.g. Europe/Berlin), or set the server's time_zone to a named zone or a fixed offset"
    )


# --- where to start --------------------------------------------------------------------------------


def resolve_start(cfg: SourceConfig, info: ServerInfo, saved: ResumePoint | None) -> StartPoint:
    """Choose where to start; the precedence is the module docstring's."""
    files = [name for name, _ in info.binlogs]
    if saved is not None:
        _check_saved_available(cfg, info, saved)
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


def _check_saved_available(cfg: SourceConfig, info: ServerInfo, saved: ResumePoint) -> None:
    sizes = dict(info.binlogs)
    sizes[info.end[0]] = info.end[1]
    oldest = min(sizes, key=file_order) if sizes else "none"
    if saved.journal not in sizes:
        if sizes and file_order(saved.journal) > file_order(max(sizes, key=file_order)):
            what = "which is newer than every binlog on the server (was the binlog reset?)"
        else:
            what = "which the server has purged"
        raise SourceError(
            f"{cfg.address}: the saved position {saved} is in {saved.journal}, {what}; the oldest binlog "
            f"still available is {oldest}. Changes in between are lost to the relay: re-snapshot the "
            "tables, then set a new start position (source.start) and remove the saved position"
        )
    if saved.offset > sizes[saved.journal]:
        raise SourceError(
            f"{cfg.address}: the saved position {saved} is past the end of {saved.journal} "
            f"({sizes[saved.journal]} bytes): the binlog was reset or this is another server. "
            "Set a start position for this server explicitly and remove the saved position"
        )


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


# Every other replication connection — the pre-scan of a transaction too large to hold, the short reads
# that locate a time or a GTID set and find DDL for the schema history — uses another replica server id
# than the relay's dump: a second connection with the same id makes the server end the first one (a
# `relay positions set --timestamp` would cut a running relay's dump), and a dump opened right after a
# connection with its id closed waits for the server to end that old dump thread (MariaDB: 100 ms
# before the first event, at every start).
SIDE_SERVER_ID_BIT = 1 << 31


def _stream_config(
    cfg: SourceConfig,
    info: ServerInfo,
    resolver: Callable[[TableMapEvent], TableMapEvent] | None = None,
    *,
    side: bool = False,
) -> StreamConfig:
    return StreamConfig(
        host=cfg.host,
        port=cfg.port,
        user=cfg.user,
        password=cfg.password,
        server_id=cfg.server_id ^ SIDE_SERVER_ID_BIT if side else cfg.server_id,
        heartbeat_seconds=cfg.heartbeat_seconds,
        connect_timeout=cfg.connect_timeout,
        read_timeout=cfg.read_timeout,
        mariadb=info.mariadb,
        tls=cfg.tls,
        timestamp_zone=timestamp_zone(cfg, info),
        table_resolver=resolver,
    )


def timestamp_zone(cfg: SourceConfig, info: ServerInfo) -> str:
    """The zone TIMESTAMP values are rendered in: the server's (``source.timezone: server``) or the one
    configured."""
    tz = cfg.timezone
    return (info.time_zone or info.time_zone_offset) if tz == "server" else tz


def _transactions(
    cfg: SourceConfig, info: ServerInfo, journal: str
) -> Generator[tuple[str, int, int], None, None]:
    """(file, start offset, timestamp s) of each transaction from the start of ``journal`` to the end
    of the binlog as it was when the server was checked (``info.end``), across file switches.

    A transaction starts at its GTID event (MySQL >= 5.7 writes an anonymous one without GTIDs;
    MariaDB always writes one); a server without them starts it with BEGIN or a DDL query.
    Uses the side server id (``SIDE_SERVER_ID_BIT``).
    """
    end = (file_order(info.end[0]), info.end[1])
    with BinlogStream(_stream_config(cfg, info, side=True)) as stream:
        stream.open_at(journal, 4)
        in_txn = False
        while True:
            event = stream.read(timeout=cfg.read_timeout)
            if event is None:
                return
            h = event.header
            if isinstance(event, HeartbeatEvent) or h.artificial:
                continue
            sql = event.sql.strip().upper() if isinstance(event, QueryEvent) else None
            if isinstance(event, GtidEvent) or (sql is not None and not in_txn and sql != "COMMIT"):
                in_txn = sql in (None, "BEGIN")
                yield h.log_file, h.start, h.timestamp
            elif isinstance(event, XidEvent | XaPrepareEvent) or sql == "COMMIT":
                in_txn = False
            if (file_order(h.log_file), h.log_pos) >= end:
                return


@dataclass(frozen=True)
class TimeLocation:
    """Where ``locate_by_timestamp`` found the first transaction at or after ``target_ms``.

    ``covered``: the server's binlog provably holds every transaction at or after the target (some file
    starts with a transaction before it, or the oldest file was begun before it). Otherwise the oldest
    file is ``oldest``, begun at ``oldest_begun`` (its first event's time, s), and its first transaction
    (at ``first_txn``, s; None: none) is at or after the target: what lay between the target and it may
    have been purged.
    """

    journal: str
    offset: int
    covered: bool = True
    oldest: str = ""
    oldest_begun: int | None = None
    first_txn: int | None = None


def begun_before(target_ms: int, first_event_s: int | None) -> bool:
    """Whether a binlog file whose first event (its FORMAT_DESCRIPTION) has ``first_event_s`` was begun
    before ``target_ms``, so that no transaction at or after the target can lie in an older (purged)
    file: such a transaction committed before the file was begun, and its binlog time (whole seconds,
    taken before its commit) is at most the file's first event's second. Strictly before: one in that
    very second may still be in the purged file."""
    return first_event_s is not None and first_event_s * 1000 < target_ms


def _first_event_time(cfg: SourceConfig, info: ServerInfo, journal: str) -> int | None:
    """The time (s) of the first event written to ``journal`` (its FORMAT_DESCRIPTION, written when the
    file was begun)."""
    with BinlogStream(_stream_config(cfg, info, side=True)) as stream:
        stream.open_at(journal, 4)
        while True:
            event = stream.read(timeout=cfg.read_timeout)
            if event is None:
                return None
            h = event.header
            if isinstance(event, HeartbeatEvent) or h.artificial:
                continue
            return h.timestamp


def locate_by_timestamp(cfg: SourceConfig, info: ServerInfo, target_ms: int) -> TimeLocation:
    """The first transaction at/after ``target_ms``; the current end when there is none.

    Walks the binlog files newest first, reading only each file's first transaction, back to the
    newest file whose first transaction is before the target (the earlier files hold only older
    transactions), then scans forward from there on one connection, into later files if needed.
    When no file starts with a transaction before the target, the scan starts at the oldest file, and
    the result is ``covered`` only when that file was begun before the target (``begun_before``).
    """
    sizes = dict(info.binlogs)
    sizes[info.end[0]] = info.end[1]
    files = sorted(sizes, key=file_order)
    begin: int | None = None
    first_txn: int | None = None
    for i in range(len(files) - 1, -1, -1):
        with contextlib.closing(_transactions(cfg, info, files[i])) as txns:
            first = next(txns, None)
        if i == 0:
            first_txn = first[2] if first is not None else None
        # Strictly before: a transaction in the same second may end the previous file.
        if first is not None and first[0] == files[i] and first[2] * 1000 < target_ms:
            begin = i
            break
    covered, begun = True, None
    if begin is None:
        begin = 0
        begun = _first_event_time(cfg, info, files[0])
        covered = begun_before(target_ms, begun)
    where = TimeLocation(*info.end, covered, files[0], begun, first_txn)
    with contextlib.closing(_transactions(cfg, info, files[begin])) as txns:
        for name, start, ts in txns:
            if ts * 1000 >= target_ms:
                log.info("first transaction at or after %d ms: %s:%d", target_ms, name, start)
                where = replace(where, journal=name, offset=start)
                break
    return where


def uncovered_error(cfg: SourceConfig, where: TimeLocation, target_ms: int, remedy: str) -> SourceError:
    """The error for a binlog that may have lost (purged) transactions at or after ``target_ms``."""
    begun = "unknown" if where.oldest_begun is None else f"{where.oldest_begun * 1000} ms"
    first = "none" if where.first_txn is None else f"at {where.first_txn * 1000} ms"
    return SourceError(
        f"{cfg.address}: the first transaction at or after {target_ms} ms cannot be told: the oldest "
        f"binlog on the server, {where.oldest}, was begun at {begun} (its first event) and its first "
        f"transaction is {first}, both not before the target, so transactions at or after the target may "
        f"have been in binlog files purged since (or never in this server's binlog). Not starting past "
        f"a possible gap: {remedy}"
    )


def find_by_timestamp(
    cfg: SourceConfig,
    info: ServerInfo,
    target_ms: int,
    remedy: str = "give a later time, a binlog file and offset, or a GTID set, or take a snapshot",
) -> tuple[str, int]:
    """The first transaction at/after ``target_ms`` (``locate_by_timestamp``); ``SourceError`` when the
    server's binlog does not provably reach back to the target (``remedy`` says what to do)."""
    where = locate_by_timestamp(cfg, info, target_ms)
    if not where.covered:
        raise uncovered_error(cfg, where, target_ms, remedy)
    return where.journal, where.offset


# --- streaming -------------------------------------------------------------------------------------


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
        stream = BinlogStream(_stream_config(self.config, self.info, self._resolver()))
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
        stream = BinlogStream(_stream_config(self.config, self.info, resolver, side=True))
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
        stream = BinlogStream(_stream_config(self.config, self.info, self._resolver()))
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
