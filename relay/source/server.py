"""The source server: what it says about itself, whether it can give a loss-free ROW stream, the zone it
renders TIMESTAMP values in, and the settings of a replication connection to it.

``inspect_server`` reads the server once before streaming (``ServerInfo``) and refuses, with what to
change, a server that would lose data (``settings_report``: the settings ``relay check`` prints) or whose
TIMESTAMP rendering cannot be followed across daylight-saving changes (``_server_zone``).
``stream_config`` gives the settings of the relay's dump connection and of the side connections (another
replica server id: ``SIDE_SERVER_ID_BIT``). Runs on the thread that starts the instance (and the CLI's).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from typing import Any
from zoneinfo import ZoneInfo

import pymysql

from relay.binlog.events import TableMapEvent
from relay.binlog.stream import StreamConfig
from relay.common import mysql
from relay.config.sections import SourceConfig
from relay.errors import SourceConnectionError, SourceError

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


# --- talking to the server -------------------------------------------------------------------------


def connect(cfg: SourceConfig) -> pymysql.connections.Connection:
    """A plain connection to the source (not a replication one), with its timeouts and TLS."""
    return mysql.connect(
        cfg.host,
        cfg.port,
        cfg.user,
        cfg.password,
        tls=cfg.tls,
        connect_timeout=cfg.connect_timeout,
        read_timeout=cfg.read_timeout,
        origin=cfg.origin,
    )


def query(conn: Any, sql: str) -> list[tuple[Any, ...]]:
    """Every row ``sql`` returns."""
    with conn.cursor() as cur:
        cur.execute(sql)
        return list(cur.fetchall())


def _client_side(exc: pymysql.err.MySQLError) -> bool:
    """CR_* codes (2000-2999) are the client's: the connection failed, not the statement."""
    code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else 0
    return 2000 <= code < 3000


def translate(cfg: SourceConfig, exc: pymysql.err.MySQLError, doing: str) -> SourceError:
    """The relay's error for ``exc``, raised while ``doing``: a lost connection or a failed statement."""
    if _client_side(exc):
        return SourceConnectionError(f"{cfg.address}: lost the connection {doing}: {exc}")
    return SourceError(f"{cfg.address}: {doing} failed: {exc}")


def _variables(conn: Any, names: tuple[str, ...]) -> dict[str, str]:
    like = " OR ".join(f"Variable_name = '{n}'" for n in names)
    return {str(k).lower(): str(v) for k, v in query(conn, f"SHOW GLOBAL VARIABLES WHERE {like}")}


def inspect_server(cfg: SourceConfig, *, schema_history: bool = False) -> ServerInfo:
    """Read what the source needs to know about the server, and refuse a server that would lose data.

    ``schema_history``: column names and keys can come from the schema history (``relay.schema``), so
    a server without binlog_row_metadata=FULL is accepted."""
    conn = connect(cfg)
    try:
        version = str(query(conn, "SELECT VERSION()")[0][0])
        mariadb = "mariadb" in version.lower()
        var = _variables(conn, _VARIABLES)
        _refuse_unfit(cfg, var, schema_history)
        binlogs, status = binlog_state(cfg, conn)
        gtid = var.get("gtid_binlog_pos", "") if mariadb else str(status[4] if len(status) > 4 else "")
        # After the binlog status: its end is before this clock reading.
        clock = query(conn, "SELECT TIME_FORMAT(TIMEDIFF(NOW(), UTC_TIMESTAMP()), '%H:%i'), UNIX_TIMESTAMP()")
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
        raise translate(cfg, exc, "checking the server") from exc
    finally:
        conn.close()


def binlog_state(cfg: SourceConfig, conn: Any) -> tuple[tuple[tuple[str, int], ...], tuple[Any, ...]]:
    """The binlog files (oldest first) and the binlog status row (file, position, …, GTID set)."""
    try:
        binlogs = tuple((str(r[0]), int(r[1])) for r in query(conn, "SHOW BINARY LOGS"))
        with conn.cursor() as cur:
            row = mysql.binlog_status(cur)
        status = [row] if row else []
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
    conn = connect(cfg)
    try:
        return str(query(conn, "SELECT VERSION()")[0][0]), _variables(conn, _VARIABLES)
    except pymysql.err.MySQLError as exc:
        raise translate(cfg, exc, "reading the server's settings") from exc
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
        server = query(conn, f"SELECT {columns}")[0]
        ours = tuple(datetime.fromtimestamp(t, zone).replace(tzinfo=None) for t in instants)
        if tuple(server) == ours:
            return name
    raise SourceError(
        f"{cfg.address}: the server renders TIMESTAMP values in {described}, which the relay cannot "
        "follow across daylight-saving changes; set source.timezone to the server's IANA zone "
        "(e.g. Europe/Berlin), or set the server's time_zone to a named zone or a fixed offset"
    )


# --- replication connections ---------------------------------------------------------------------


# Every other replication connection — the pre-scan of a transaction too large to hold, the short reads
# that locate a time or a GTID set and find DDL for the schema history — uses another replica server id
# than the relay's dump: a second connection with the same id makes the server end the first one (a
# `relay positions set --timestamp` would cut a running relay's dump), and a dump opened right after a
# connection with its id closed waits for the server to end that old dump thread (MariaDB: 100 ms
# before the first event, at every start).
SIDE_SERVER_ID_BIT = 1 << 31


def stream_config(
    cfg: SourceConfig,
    info: ServerInfo,
    resolver: Callable[[TableMapEvent], TableMapEvent] | None = None,
    *,
    side: bool = False,
) -> StreamConfig:
    """The settings of a replication connection to the server: the relay's dump, or (``side``) a side
    connection under ``SIDE_SERVER_ID_BIT``; ``resolver`` fills or checks each TABLE_MAP (the schema
    history)."""
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
