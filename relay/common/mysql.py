"""The one way this project opens an SQL connection to the source server (PyMySQL), TLS included.

Every connection the relay opens to MySQL — the binlog dump, server checks, the timestamp search, the
retention probe, ``relay mapping resolve --all`` — goes through ``connect``: ``source.tls`` is honoured
and verified (``relay.common.tls``), and PyMySQL's errors become the source's own. Runs on the caller's
thread; the connection belongs to it.
"""

from __future__ import annotations

import ssl
import threading
from typing import Any

import pymysql

from relay.common.tls import TlsConfig, connect_arguments, ensure_encrypted
from relay.errors import SourceConnectionError, SourceError

ER_ACCESS_DENIED_ERROR = 1045
ER_PARSE_ERROR = 1064
ER_MASTER_FATAL_ERROR_READING_BINLOG = 1236
# Errors that reconnecting cannot repair: a person has to change the account or the position.
PERMANENT_ERRORS = frozenset({ER_ACCESS_DENIED_ERROR, ER_MASTER_FATAL_ERROR_READING_BINLOG})


class _Connection(pymysql.connections.Connection):  # type: ignore[misc]
    """PyMySQL's connection, but its PREFERRED-mode context (no ``source.tls``: encrypt when the server
    offers it, no certificate checks) built once a process: PyMySQL builds one per connection, loading
    the system's CA store each time (~30 ms) for a context that verifies nothing."""

    _shared: ssl.SSLContext | None = None
    _lock = threading.Lock()

    def _create_ssl_ctx(self, sslp: Any) -> ssl.SSLContext:
        if sslp != {}:
            return super()._create_ssl_ctx(sslp)  # type: ignore[no-any-return]
        with _Connection._lock:
            if _Connection._shared is None:
                _Connection._shared = super()._create_ssl_ctx(sslp)
            return _Connection._shared


def connect(
    host: str,
    port: int,
    user: str,
    password: str,
    *,
    tls: TlsConfig | None,
    connect_timeout: float = 10.0,
    read_timeout: float | None = None,
    write_timeout: float | None = None,
    origin: str = "source",
) -> pymysql.connections.Connection:
    """An autocommit utf8mb4 connection, encrypted as ``tls`` demands; ``SourceError`` when refused,
    naming the settings to change: ``origin`` is the config section (``source``, ``source.standby``) or
    the flag (``--mysql``) the address and account came from."""
    where = f"{host}:{port}"
    try:
        conn = _Connection(
            host=host,
            port=port,
            user=user,
            # As UTF-8 bytes: PyMySQL sends a str password as latin-1, so a password set by a UTF-8
            # client (any character past ASCII) would not log in, and one past latin-1 raised.
            password=password.encode("utf-8"),
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            write_timeout=write_timeout,
            autocommit=True,
            charset="utf8mb4",
            **connect_arguments(tls),
        )
    except pymysql.err.MySQLError as exc:
        if error_code(exc) == ER_ACCESS_DENIED_ERROR:
            doing = f"MySQL at {where} refused the login of {user!r} ({named(origin, 'user', 'password')})"
        else:
            doing = f"cannot connect to MySQL at {where} ({named(origin, 'host', 'port')})"
        raise translate(exc, doing) from exc
    ensure_encrypted(conn, tls, where)
    return conn


def named(origin: str, *keys: str) -> str:
    """The settings an operator changes: ``source.host, source.port``, or the flag itself."""
    if origin.startswith("-"):
        return origin
    return ", ".join(f"{origin}.{k}" for k in keys)


def translate(exc: pymysql.err.MySQLError, doing: str) -> SourceError:
    """PyMySQL's error as the source's: retriable (``SourceConnectionError``) unless reconnecting
    cannot help (access denied, the server refusing the binlog position)."""
    code = error_code(exc)
    message = f"{doing}: {exc.args[1] if len(exc.args) > 1 else exc}"
    if code in PERMANENT_ERRORS:
        return SourceError(message)
    return SourceConnectionError(message)


def error_code(exc: BaseException) -> int:
    args: Any = getattr(exc, "args", ())
    return args[0] if args and isinstance(args[0], int) else 0


def binlog_status(cur: Any) -> tuple[Any, ...] | None:
    """The server's binlog status row (file, position, …, GTID set), or None when binary logging is off.

    ``SHOW MASTER STATUS`` on MariaDB and MySQL before 8.4 (8.4 removed the name: a parse error there), else
    ``SHOW BINARY LOG STATUS`` (MySQL 8.2 and later). PyMySQL's errors other than that one go to the caller.
    """
    try:
        cur.execute("SHOW MASTER STATUS")
    except pymysql.err.ProgrammingError as exc:
        if error_code(exc) != ER_PARSE_ERROR:
            raise
        cur.execute("SHOW BINARY LOG STATUS")
    row = cur.fetchone()
    return tuple(row) if row else None
