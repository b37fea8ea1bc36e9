"""Every column type, read back from a real binlog and encoded as debezium-json, equals Debezium's documented
encoding of what the server holds.

The table, rows and update of ``test_type_table`` (every type, limits, zeros, NULLs) are written to the real
server; the binlog is read with our stream, and each image is encoded by the debezium-json codec's fields
(``relay.kafka.debezium_types``). The expected values are computed by the SERVER, with SQL that gives
Debezium's documented values directly (``DATEDIFF`` for epoch days, ``TIMESTAMPDIFF(MICROSECOND, …)`` for
DATETIME, ``UNIX_TIMESTAMP`` for TIMESTAMP instants, ``HEX`` for bytes, ``ST_SRID``/``ST_AsBinary`` for
geometries, ``col+0`` for BIT), never from canal's text that the codec starts from. The rules (Debezium's
"How Debezium MySQL connectors map data types", default settings) are applied to those server values here.
"""

from __future__ import annotations

import base64
import contextlib
import json
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal, localcontext
from typing import Any

import pytest

from relay.binlog.events import DELETE, INSERT, UPDATE, ColumnMeta, RowsEvent
from relay.dev.services import MySQLService
from relay.kafka.debezium_types import field_of
from tests.integration.test_type_table import _COLUMNS, _ROWS, _UPDATE, TABLE, ZONE, Captured, _master_status
from tests.integration.test_type_table import _read_rows_events as read_rows_events

Expect = Callable[[Any, ColumnMeta], Any]  # the server's value → the JSON value Debezium writes


def _int(value: Any, column: ColumnMeta) -> Any:
    number = int(value)
    if column.mysql_type == "bigint unsigned" and number >= 1 << 63:
        return number - (1 << 64)  # bigint.unsigned.handling.mode=long: Java's long
    return number


def _decimal(value: Any, column: ColumnMeta) -> Any:
    """precise: base64 of the unscaled value, big-endian two's complement, BigInteger.toByteArray's length."""
    scale = column.meta & 0xFF
    with localcontext() as exact:
        exact.prec = 100  # DECIMAL(65, 30) and more: no rounding
        unscaled = int(Decimal(str(value)).scaleb(scale))
    size = (unscaled if unscaled >= 0 else ~unscaled).bit_length() // 8 + 1
    return base64.b64encode(unscaled.to_bytes(size, "big", signed=True)).decode()


def _float(value: Any, column: ColumnMeta) -> Any:
    return struct.unpack("<f", struct.pack("<f", float(value)))[0]  # the stored float32, exactly


def _number(value: Any, column: ColumnMeta) -> Any:
    return float(value)


def _days(value: Any, column: ColumnMeta) -> Any:
    return int(value)


def _datetime(value: Any, column: ColumnMeta) -> Any:
    micros = int(value)
    return micros // 1000 if "(" not in column.mysql_type or int(column.mysql_type[-2]) <= 3 else micros


def _timestamp(value: Any, column: ColumnMeta) -> Any:
    """ISO 8601 in UTC with the column's fsp digits, from UNIX_TIMESTAMP (0 for the zero TIMESTAMP)."""
    seconds = Decimal(str(value))
    if seconds == 0:
        return None
    whole = int(seconds)
    text = datetime.fromtimestamp(whole, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    fsp = column.meta
    if fsp:
        text += "." + str(int((seconds - whole) * 1_000_000)).zfill(6)[:fsp]
    return text + "Z"


def _bytes(value: Any, column: ColumnMeta) -> Any:
    return base64.b64encode(bytes.fromhex(value)).decode()


def _bit(value: Any, column: ColumnMeta) -> Any:
    bits = int(column.mysql_type[4:-1])
    if bits == 1:
        return int(value) == 1
    return base64.b64encode(int(value).to_bytes((bits + 7) // 8, "little")).decode()


def _text(value: Any, column: ColumnMeta) -> Any:
    return value


def _json(value: Any, column: ColumnMeta) -> Any:
    return json.loads(value)  # compared as documents: the text's spacing is no part of the value


def _geometry(value: Any, column: ColumnMeta) -> Any:
    srid, wkb = value.split(":")
    return {"wkb": base64.b64encode(bytes.fromhex(wkb)).decode(), "srid": int(srid)}


_TIME = (
    "(CASE WHEN {c} < TIME'00:00:00' THEN -1 ELSE 1 END) * "
    "((HOUR({c}) * 3600 + MINUTE({c}) * 60 + SECOND({c})) * 1000000 + MICROSECOND({c}))"
)


@dataclass(frozen=True)
class Server:
    select: str  # SQL giving the value Debezium's rule starts from
    expect: Expect


def _server(name: str, ddl: str) -> Server:
    kind = ddl.split("(", maxsplit=1)[0].split(" ", maxsplit=1)[0]
    c = f"`{name}`"
    if kind in ("tinyint", "smallint", "mediumint", "int", "bigint"):
        return Server(f"CAST({c} AS CHAR)", _int)
    rules: dict[str, Server] = {
        "decimal": Server(f"CAST({c} AS CHAR)", _decimal),
        "float": Server(f"CAST({c} AS DOUBLE)", _float),
        "double": Server(c, _number),
        "date": Server(f"DATEDIFF({c}, '1970-01-01')", _days),
        "time": Server(_TIME.format(c=c), _days),
        "datetime": Server(f"TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', {c})", _datetime),
        "timestamp": Server(f"UNIX_TIMESTAMP({c})", _timestamp),
        "year": Server(f"CAST({c} AS UNSIGNED)", _days),
        "binary": Server(f"HEX({c})", _bytes),
        "varbinary": Server(f"HEX({c})", _bytes),
        "bit": Server(f"CAST({c}+0 AS CHAR)", _bit),
        "json": Server(c, _json),
        "geometry": Server(f"CONCAT(ST_SRID({c}), ':', HEX(ST_AsBinary({c})))", _geometry),
    }
    if kind.endswith("blob"):
        return Server(f"HEX({c})", _bytes)
    return rules.get(kind, Server(c, _text))  # CHAR, VARCHAR, TEXT, ENUM, SET: the string


SERVER = {col.name: _server(col.name, col.ddl) for col in _COLUMNS}


def _select(cur: Any) -> dict[int, tuple[Any, ...]]:
    cur.execute(f"SELECT id, {', '.join(SERVER[c.name].select for c in _COLUMNS)} FROM `{TABLE}` ORDER BY id")
    return {row[0]: tuple(row[1:]) for row in cur.fetchall()}


@pytest.fixture(scope="module")
def written(mysql_service: MySQLService) -> Iterator[Captured]:
    schema = f"dbz_types_{int(time.time() * 1000) % 10**9}"
    with contextlib.closing(mysql_service.connect()) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{schema}`")
        try:
            cur.execute(f"USE `{schema}`")
            cur.execute("SET SESSION sql_mode = ''")
            cur.execute(f"SET SESSION time_zone = '{ZONE}'")
            cols = ", ".join(f"`{c.name}` {c.ddl}" for c in _COLUMNS)
            cur.execute(f"CREATE TABLE `{TABLE}` (id int PRIMARY KEY, {cols}) DEFAULT CHARSET=utf8mb4")
            start = _master_status(cur)
            values = [
                "(" + ", ".join([str(i)] + [row.get(c.name, "NULL") for c in _COLUMNS]) + ")"
                for i, row in _ROWS.items()
            ]
            cur.execute(f"INSERT INTO `{TABLE}` VALUES {', '.join(values)}")
            after_insert = _select(cur)
            cur.execute(f"UPDATE `{TABLE}` SET {', '.join(f'`{k}` = {v}' for k, v in _UPDATE.items())}")
            after_update = _select(cur)
            cur.execute(f"DELETE FROM `{TABLE}`")
            yield Captured(start, _master_status(cur), after_insert, after_update, {})
        finally:
            cur.execute(f"DROP DATABASE IF EXISTS `{schema}`")


@pytest.fixture(scope="module")
def events(mysql_service: MySQLService, written: Captured) -> dict[str, list[RowsEvent]]:
    by_kind: dict[str, list[RowsEvent]] = {INSERT: [], UPDATE: [], DELETE: []}
    for event in read_rows_events(mysql_service, written):
        by_kind[event.kind].append(event)
    return by_kind


def _encoded(column: ColumnMeta, text: str | None) -> Any:
    if text is None:
        return None
    out = field_of(column, "precise").encode(text)
    return None if out is None else json.loads(out)  # None: a zero date, null in a nullable column


def _mismatches(events: list[RowsEvent], which: str, server: dict[int, tuple[Any, ...]]) -> list[str]:
    problems: list[str] = []
    seen = set()
    for event in events:
        columns = event.table.columns
        for row in event.rows:
            image = row.after if which == "after" else row.before
            assert image is not None and image[0] is not None
            row_id = int(image[0])
            seen.add(row_id)
            for column, text, value in zip(columns[1:], image[1:], server[row_id], strict=True):
                expected = None if value is None else SERVER[column.name].expect(value, column)
                ours = _encoded(column, text)
                if column.name == "js" and isinstance(ours, str):
                    ours = json.loads(ours)
                if column.mysql_type == "float" and ours is not None:
                    ours = _float(ours, column)  # a FLOAT32 reader reads the JSON number as a float32
                if ours != expected:
                    where = f"row {row_id} {column.name} ({column.mysql_type})"
                    problems.append(f"{where}: ours {ours!r}, expected {expected!r}")
    assert seen == set(server)
    return problems


def test_insert_images(events: dict[str, list[RowsEvent]], written: Captured) -> None:
    assert _mismatches(events[INSERT], "after", written.after_insert) == []


def test_update_images(events: dict[str, list[RowsEvent]], written: Captured) -> None:
    assert _mismatches(events[UPDATE], "before", written.after_insert) == []
    assert _mismatches(events[UPDATE], "after", written.after_update) == []


def test_delete_images(events: dict[str, list[RowsEvent]], written: Captured) -> None:
    assert _mismatches(events[DELETE], "before", written.after_update) == []
