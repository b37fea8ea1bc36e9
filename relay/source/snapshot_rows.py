"""A snapshot chunk's rows, read off the connection as canal text (compiled with mypyc: the per-row path).

A chunk ``SELECT`` returns its rows in MySQL's text protocol: one packet per row, each value a
length-prefixed string (or 0xFB for NULL). PyMySQL would parse every packet in Python, build a
``MysqlPacket`` and a tuple of values, and the snapshot would then turn those values into canal text;
that was most of a snapshot reader's time. ``query_rows`` sends the query through PyMySQL (which
escapes nothing here: the SQL comes complete) and reads the result's packets from the connection's
buffered reader itself, turning each value straight into the text ``relay.binlog.rows`` decodes from
the binlog for the same column: ``K_*`` says how, per column. Errors are PyMySQL's: an ERR packet
raises the server's error class (``pymysql.err``), a lost connection ``OperationalError`` 2013, as a
cursor would, so the snapshot's retry rules see the same exceptions.

Like ``relay.binlog.stream._PyMySQLLink`` this uses PyMySQL's private API (``_execute_command``,
``_read_packet``, ``_rfile``, ``_force_close``), stable across PyMySQL 1.x; sequence ids are not
checked after the first packet (TCP keeps order).
"""

from __future__ import annotations

import struct
from decimal import Decimal
from typing import Any

import pymysql
from pymysql.constants import CR

from relay.binlog import types as t
from relay.binlog.values import Instant

# Value kinds: how a column's SELECT text becomes canal text (and a key's text a query parameter).
K_TEXT, K_BINARY, K_INT, K_DECIMAL, K_FLOAT, K_DOUBLE, K_BIT = range(7)

COM_QUERY = 3
_MAX_PACKET = 0xFFFFFF
_F32 = struct.Struct("<f")

Row = tuple[str | None, ...]


def value_text(kind: int, raw: bytes) -> str:
    """One value's canal text from its text-protocol bytes."""
    if kind == K_BINARY:
        return raw.decode("latin-1")
    if kind == K_TEXT:
        return raw.decode("utf-8", "surrogateescape")
    text = raw.decode("ascii")
    if kind == K_DOUBLE:
        return t.java_double(float(text))
    if kind == K_FLOAT:
        return t.java_float(_F32.unpack(_F32.pack(float(text)))[0])
    return text  # K_INT, K_DECIMAL, K_BIT (selected as col+0): the digits


def with_instants(values: list[str | None], timestamps: tuple[int, ...], seconds: list[bytes | None]) -> None:
    """TIMESTAMP texts become ``Instant``s that know their epoch microseconds (``UNIX_TIMESTAMP`` of the
    column, selected after the columns); the zero TIMESTAMP is no instant (as from the binlog)."""
    for i, secs in zip(timestamps, seconds, strict=True):
        text = values[i]
        if text is None or secs is None:
            continue
        value = Decimal(secs.decode("ascii"))
        if value == 0:
            continue
        instant = Instant(text)
        instant.micros = int(value * 1_000_000)
        values[i] = instant


def parse_row(data: bytes, kinds: tuple[int, ...], timestamps: tuple[int, ...]) -> Row:
    """One text-protocol row packet: ``len(kinds)`` values, then the instants of ``timestamps``."""
    values: list[str | None] = []
    extra: list[bytes | None] = []
    pos = 0
    n = len(kinds)
    total = n + len(timestamps)
    end = len(data)
    for col in range(total):
        if pos >= end:
            raise pymysql.err.InternalError(f"snapshot row packet ends at value {col + 1} of {total}")
        first = data[pos]
        if first == 0xFB:
            pos += 1
            if col < n:
                values.append(None)
            else:
                extra.append(None)
            continue
        if first < 0xFB:
            size = first
            pos += 1
        elif first == 0xFC:
            size = data[pos + 1] | data[pos + 2] << 8
            pos += 3
        elif first == 0xFD:
            size = data[pos + 1] | data[pos + 2] << 8 | data[pos + 3] << 16
            pos += 4
        else:
            size = int.from_bytes(data[pos + 1 : pos + 9], "little")
            pos += 9
        raw = data[pos : pos + size]
        pos += size
        if len(raw) != size:
            raise pymysql.err.InternalError(f"snapshot row packet cut short in value {col + 1} of {total}")
        if col < n:
            values.append(value_text(kinds[col], raw))
        else:
            extra.append(raw)
    if timestamps:
        with_instants(values, timestamps, extra)
    return tuple(values)


def _lost(conn: Any, why: str) -> pymysql.err.OperationalError:
    conn._force_close()
    return pymysql.err.OperationalError(
        CR.CR_SERVER_LOST, f"Lost connection to MySQL server during query ({why})"
    )


def _read(conn: Any, rfile: Any, size: int) -> bytes:
    try:
        data: bytes = rfile.read(size)
    except OSError as exc:
        raise _lost(conn, str(exc)) from exc
    if len(data) < size:
        raise _lost(conn, "the server closed the connection")
    return data


def _packet(conn: Any, rfile: Any) -> bytes:
    """The next packet's payload (a payload of 16 MB or more spans several packets)."""
    parts: list[bytes] = []
    while True:
        head = _read(conn, rfile, 4)
        size = head[0] | head[1] << 8 | head[2] << 16
        parts.append(_read(conn, rfile, size) if size else b"")
        if size < _MAX_PACKET:
            break
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _length(data: bytes) -> int:
    first = data[0]
    if first < 0xFB:
        return first
    if first == 0xFC:
        return data[1] | data[2] << 8
    if first == 0xFD:
        return data[1] | data[2] << 8 | data[3] << 16
    return int.from_bytes(data[1:9], "little")


def query_rows(conn: Any, sql: str, kinds: tuple[int, ...], timestamps: tuple[int, ...]) -> list[Row]:
    """Run ``sql`` (a SELECT of ``len(kinds) + len(timestamps)`` columns, complete: no placeholders) on
    the PyMySQL connection ``conn`` and return its rows as canal text (``parse_row``)."""
    conn._execute_command(COM_QUERY, sql)
    head = conn._read_packet()  # PyMySQL's read: timeouts set, an ERR packet raised as the server's error
    data: bytes = head.get_all_data()
    if data[0] == 0:  # OK: a statement without a result set
        return []
    columns = _length(data)
    if columns != len(kinds) + len(timestamps):
        raise pymysql.err.InternalError(f"snapshot SELECT returned {columns} columns, expected {len(kinds)}")
    rfile = conn._rfile
    for _ in range(columns):  # the column definitions: the table's description came from information_schema
        _packet(conn, rfile)
    _packet(conn, rfile)  # EOF after the definitions (PyMySQL does not ask for CLIENT_DEPRECATE_EOF)
    rows: list[Row] = []
    while True:
        data = _packet(conn, rfile)
        first = data[0] if data else 0
        if first == 0xFE and len(data) < 9:  # EOF: the end of the rows
            return rows
        if first == 0xFF:  # an error after some rows (the query was killed, a timeout)
            pymysql.err.raise_mysql_exception(data)
        rows.append(parse_row(data, kinds, timestamps))
