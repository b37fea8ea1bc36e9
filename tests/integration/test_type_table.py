"""Every column type, read back from a real binlog, must equal what SELECT returns.

One table holds every type with limit and edge values (and NULLs). The rows are inserted, updated
(some columns changed) and deleted; the binlog of those three statements is read with our own
stream (``relay.binlog.stream``), and every decoded value of every image is compared with a SELECT
of the same row taken at the matching moment. Where canal's text form differs from SELECT's, the
comparison goes through an explicit conversion, each explained at ``_COLUMNS``.
"""

from __future__ import annotations

import contextlib
import re
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from relay.binlog.events import DELETE, INSERT, UPDATE, RowsEvent, TableMapEvent
from relay.binlog.stream import BinlogStream, StreamConfig
from relay.common.mysql import binlog_status
from relay.dev.services import MySQLService

ZONE = "+05:30"  # a non-UTC session zone: TIMESTAMP text must follow the zone we set
TABLE = "types_t"


def _same(ours: str, selected: Any) -> bool:
    return bool(ours == selected)


def _float32(text: str) -> float:
    value: float = struct.unpack("<f", struct.pack("<f", float(text)))[0]
    return value


def _same_float(ours: str, selected: Any) -> bool:
    # canal's FLOAT text is Java's Float.toString; SELECT prints 6 significant digits, which loses the
    # value. So SELECT reads CAST(f AS DOUBLE) — the stored float32, exactly — and our text must
    # round to exactly that float32.
    return _float32(ours) == float(selected)


def _same_double(ours: str, selected: Any) -> bool:
    # canal's DOUBLE text is Java's Double.toString ("1.0E10"); SELECT's is MySQL's ("1e10"): equal
    # as doubles, exactly.
    return float(ours) == float(selected)


def _same_bytes(ours: str, selected: Any) -> bool:
    # canal's form of binary data is one ISO-8859-1 character per byte; SELECT HEX(col) gives the bytes.
    return bool(ours.encode("latin-1").hex().upper() == selected)


@dataclass(frozen=True)
class Col:
    name: str
    ddl: str
    select: str = "CAST({c} AS CHAR)"
    same: Callable[[str, Any], bool] = _same


_BYTES = "HEX({c})"
_COLUMNS = (
    Col("ti", "tinyint"),
    Col("tiu", "tinyint unsigned"),
    Col("si", "smallint"),
    Col("siu", "smallint unsigned"),
    Col("mi", "mediumint"),
    Col("miu", "mediumint unsigned"),
    Col("i", "int"),
    Col("iu", "int unsigned"),
    Col("bi", "bigint"),
    Col("biu", "bigint unsigned"),
    Col("d1", "decimal(12,2)"),
    Col("d2", "decimal(65,30)"),
    Col("d3", "decimal(10,0)"),
    Col("d4", "decimal(5,5)"),
    Col("d5", "decimal(19,9)"),
    Col("f", "float", "CAST({c} AS DOUBLE)", _same_float),
    Col("db", "double", "{c}", _same_double),
    Col("dt", "date"),
    Col("tm0", "time"),
    Col("tm1", "time(1)"),
    Col("tm3", "time(3)"),
    Col("tm4", "time(4)"),
    Col("tm6", "time(6)"),
    Col("dtm0", "datetime"),
    Col("dtm1", "datetime(1)"),
    Col("dtm3", "datetime(3)"),
    Col("dtm6", "datetime(6)"),
    Col("ts0", "timestamp NULL"),
    Col("ts2", "timestamp(2) NULL"),
    Col("ts6", "timestamp(6) NULL"),
    Col("yr", "year"),
    Col("c4", "char(4) CHARACTER SET utf8mb4", "{c}"),
    Col("vc16", "varchar(16) CHARACTER SET utf8mb4", "{c}"),
    Col("vc300", "varchar(300) CHARACTER SET utf8mb4", "{c}"),
    Col("cbig", "char(255) CHARACTER SET utf8mb4", "{c}"),
    Col("cl1", "char(10) CHARACTER SET latin1", "{c}"),
    Col("vl1", "varchar(20) CHARACTER SET latin1", "{c}"),
    Col("vu3", "varchar(10) CHARACTER SET utf8mb3", "{c}"),
    Col("bin4", "binary(4)", _BYTES, _same_bytes),
    Col("vb8", "varbinary(8)", _BYTES, _same_bytes),
    Col("tt", "tinytext CHARACTER SET utf8mb4", "{c}"),
    Col("tx", "text CHARACTER SET latin1", "{c}"),
    Col("mt", "mediumtext CHARACTER SET utf8mb4", "{c}"),
    Col("lt", "longtext CHARACTER SET utf8mb4", "{c}"),
    Col("tb", "tinyblob", _BYTES, _same_bytes),
    Col("bl", "blob", _BYTES, _same_bytes),
    Col("mb", "mediumblob", _BYTES, _same_bytes),
    Col("lb", "longblob", _BYTES, _same_bytes),
    Col("en", "enum('a','b','it''s')", "{c}"),
    Col("st", "set('x','y','z')", "{c}"),
    # canal's BIT text is the unsigned number (String.valueOf(long)): SELECT col+0.
    Col("b1", "bit(1)", "CAST({c}+0 AS CHAR)"),
    Col("b5", "bit(5)", "CAST({c}+0 AS CHAR)"),
    Col("b64", "bit(64)", "CAST({c}+0 AS CHAR)"),
    Col("js", "json", "{c}"),
    Col("g", "geometry NULL", _BYTES, _same_bytes),
)

_ALL_BYTES = "X'" + bytes(range(256)).hex() + "'"
_LATIN1 = "'é€\u0081ÿ'"  # € is 0x80 in MySQL's latin1 (cp1252); U+0081 is the undefined 0x81 byte
# Column name → SQL expression, per row id; columns not named are NULL.
_ROWS: dict[int, dict[str, str]] = {
    1: {  # lower limits
        "ti": "-128", "tiu": "0", "si": "-32768", "siu": "0", "mi": "-8388608", "miu": "0",
        "i": "-2147483648", "iu": "0", "bi": "-9223372036854775808", "biu": "0",
        "d1": "-9999999999.99", "d2": "-" + "9" * 35 + "." + "9" * 30, "d3": "-9999999999",
        "d4": "-0.99999", "d5": "-9999999999.999999999",
        "f": "-3.40282e38", "db": "-1.7976931348623157e308",
        "dt": "'1000-01-01'", "tm0": "'-838:59:59'", "tm1": "'-00:00:00.5'", "tm3": "'-01:02:03.250'",
        "tm4": "'-00:00:01.0001'", "tm6": "'-838:59:59.000000'", "dtm0": "'1000-01-01 00:00:00'",
        "dtm1": "'1000-01-01 00:00:00.1'", "dtm3": "'1000-01-01 00:00:00.001'",
        "dtm6": "'1000-01-01 00:00:00.000001'", "ts0": "'1970-01-01 05:30:01'",
        "ts2": "'1970-01-01 05:30:01.01'", "ts6": "'1970-01-01 05:30:01.000001'", "yr": "1901",
        "c4": "''", "vc16": "''", "vc300": "''", "cbig": "''", "cl1": "''", "vl1": "''", "vu3": "''",
        "bin4": "X'00000000'", "vb8": "X''", "tt": "''", "tx": "''", "mt": "''", "lt": "''",
        "tb": "X''", "bl": "X''", "mb": "X''", "lb": "X''", "en": "'a'", "st": "''",
        "b1": "b'0'", "b5": "b'0'", "b64": "b'0'", "js": "'{}'", "g": "ST_GeomFromText('POINT(0 0)')",
    },
    2: {  # upper limits
        "ti": "127", "tiu": "255", "si": "32767", "siu": "65535", "mi": "8388607", "miu": "16777215",
        "i": "2147483647", "iu": "4294967295", "bi": "9223372036854775807", "biu": "18446744073709551615",
        "d1": "9999999999.99", "d2": "9" * 35 + "." + "9" * 30, "d3": "9999999999", "d4": "0.99999",
        "d5": "9999999999.999999999", "f": "3.40282e38", "db": "1.7976931348623157e308",
        "dt": "'9999-12-31'", "tm0": "'838:59:59'", "tm1": "'838:59:59.0'", "tm3": "'838:59:59.000'",
        "tm4": "'-00:00:00.0001'", "tm6": "'838:59:59.000000'", "dtm0": "'9999-12-31 23:59:59'",
        "dtm1": "'9999-12-31 23:59:59.9'", "dtm3": "'9999-12-31 23:59:59.999'",
        "dtm6": "'9999-12-31 23:59:59.999999'", "ts0": "'2038-01-19 08:44:07'",
        "ts2": "'2038-01-19 08:44:07.99'", "ts6": "'2038-01-19 08:44:07.999999'", "yr": "2155",
        "c4": "'😀é中a'", "vc16": "'" + "😀" * 15 + "z'", "vc300": "'" + "ü" * 300 + "'",
        "cbig": "'" + "中" * 255 + "'", "cl1": _LATIN1, "vl1": _LATIN1 + " '  '", "vu3": "'€ü中'",
        "bin4": "X'00010000'", "vb8": "X'FF000000000000FF'", "tt": "'😀'", "tx": _LATIN1,
        "mt": "REPEAT('ab😀', 30000)", "lt": "REPEAT('z', 70000)", "tb": "X'FF'", "bl": _ALL_BYTES,
        "mb": "REPEAT(X'00FF', 40000)", "lb": _ALL_BYTES, "en": "'it''s'", "st": "'x,y,z'",
        "b1": "b'1'", "b5": "b'11111'", "b64": "18446744073709551615",
        "js": """'{"a": [1, 2.5, "x\\\\"y"], "b": null, "c": true}'""",
        "g": "ST_GeomFromText('LINESTRING(0 0, 1.5 2.25, -3 1e10)')",
    },
    3: {  # zeros, empties, smallest fractions
        "ti": "0", "tiu": "1", "si": "0", "siu": "1", "mi": "0", "miu": "1", "i": "0", "iu": "1",
        "bi": "0", "biu": "1", "d1": "0", "d2": "0.000000000000000000000000000001", "d3": "0",
        "d4": "-0.00001", "d5": "-0.000000001", "f": "0.1", "db": "0.1", "dt": "'0000-00-00'",
        "tm0": "'00:00:00'", "tm1": "'-00:00:00.1'", "tm3": "'-00:00:00.999'", "tm4": "'00:00:00'",
        "tm6": "'-00:00:00.000001'", "dtm0": "'0000-00-00 00:00:00'", "dtm1": "'0000-00-00 00:00:00'",
        "dtm3": "'0000-00-00 00:00:00.000'", "dtm6": "'0000-00-00 00:00:00.000000'",
        "ts0": "'0000-00-00 00:00:00'", "ts2": "'0000-00-00 00:00:00'", "ts6": "'0000-00-00 00:00:00'",
        "yr": "0", "c4": "'a  '", "vc16": "'  trailing  '", "cbig": "'x'", "bin4": "X'00'",
        "vb8": "X'00'", "en": "'no-such-member'", "st": "'y'", "b1": "b'1'", "b5": "b'00101'",
        "b64": "b'1'", "js": "'[]'", "g": "ST_GeomFromText('POINT(1 2)')",
    },
    4: {},  # all NULL
    5: {  # ordinary values
        "ti": "-1", "tiu": "128", "si": "-1", "siu": "32768", "mi": "-1", "miu": "8388608", "i": "-1",
        "iu": "2147483648", "bi": "-1", "biu": "9223372036854775808", "d1": "19.9", "d2": "-1.5",
        "d3": "-1", "d4": "0.5", "d5": "-123456789.123456789", "f": "16777217", "db": "1e15",
        "dt": "'2024-02-29'", "tm0": "'-00:00:01'", "tm1": "'12:34:56.7'", "tm3": "'-12:34:56.001'",
        "tm4": "'100:00:00.5'", "tm6": "'-00:00:00.5'", "dtm0": "'2024-02-29 12:34:56'",
        "dtm1": "'2024-02-29 12:34:56.5'", "dtm3": "'2024-02-29 12:34:56.789'",
        "dtm6": "'2024-02-29 12:34:56.000789'", "ts0": "'2024-02-29 12:34:56'",
        "ts2": "'2024-02-29 12:34:56.07'", "ts6": "'2024-02-29 12:34:56.123456'", "yr": "2024",
        "c4": "'ab'", "vc16": "'hello, world'", "vc300": "'x\ny\tz\\\\'", "cl1": "'Ørsted'",
        "vl1": "'naïve'", "vu3": "'ok'", "bin4": "X'0A'", "vb8": "X'0A00'", "tt": "'t'", "tx": "'x'",
        "mt": "'m'", "lt": "'l'", "tb": "X'00'", "bl": "X'0000'", "mb": "X'01'", "lb": "X'02'",
        "en": "'b'", "st": "'x,z'", "b1": "b'0'", "b5": "b'10000'", "b64": "b'1" + "0" * 63 + "'",
        "js": """'{"k": "v", "n": -1.25e-20, "big": 18446744073709551615, "arr": [[], {}]}'""",
        "g": "ST_GeomFromText('POLYGON((0 0, 1 0, 1 1, 0 0))')",
    },
}  # fmt: skip

# UPDATE: (column, new value) applied to every row; the other columns stay.
_UPDATE = {
    "d1": "19.90",
    "st": "''",
    "en": "'b'",
    "tm3": "'-00:00:00.001'",
    "ts6": "'2001-02-03 04:05:06.5'",
    "vc16": "'changed'",
    "b5": "b'101'",
    "js": """'{"u": [true, false]}'""",
}


def _select_sql() -> str:
    return ", ".join(c.select.format(c=f"`{c.name}`") for c in _COLUMNS)


def _snapshot(cur: Any) -> dict[int, tuple[Any, ...]]:
    cur.execute(f"SELECT id, {_select_sql()} FROM `{TABLE}` ORDER BY id")
    return {row[0]: tuple(row[1:]) for row in cur.fetchall()}


def _master_status(cur: Any) -> tuple[str, int]:
    row = binlog_status(cur)
    assert row is not None
    return str(row[0]), int(row[1])


@dataclass
class Captured:
    start: tuple[str, int]
    end: tuple[str, int]
    after_insert: dict[int, tuple[Any, ...]]
    after_update: dict[int, tuple[Any, ...]]
    column_types: dict[str, str]


@pytest.fixture(scope="module")
def captured(mysql_service: MySQLService) -> Iterator[Captured]:
    schema = f"types_{int(time.time() * 1000) % 10**9}"
    with contextlib.closing(mysql_service.connect()) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{schema}`")
        try:
            cur.execute(f"USE `{schema}`")
            cur.execute("SET SESSION sql_mode = ''")
            cur.execute(f"SET SESSION time_zone = '{ZONE}'")
            cols = ", ".join(f"`{c.name}` {c.ddl}" for c in _COLUMNS)
            cur.execute(f"CREATE TABLE `{TABLE}` (id int PRIMARY KEY, {cols}) DEFAULT CHARSET=utf8mb4")
            start = _master_status(cur)
            values = []
            for row_id, row in _ROWS.items():
                values.append(
                    "(" + ", ".join([str(row_id)] + [row.get(c.name, "NULL") for c in _COLUMNS]) + ")"
                )
            cur.execute(f"INSERT INTO `{TABLE}` VALUES {', '.join(values)}")
            after_insert = _snapshot(cur)
            assignments = ", ".join(f"`{k}` = {v}" for k, v in _UPDATE.items())
            cur.execute(f"UPDATE `{TABLE}` SET {assignments}")
            after_update = _snapshot(cur)
            cur.execute(f"DELETE FROM `{TABLE}`")
            end = _master_status(cur)
            cur.execute(
                "SELECT COLUMN_NAME, COLUMN_TYPE FROM information_schema.COLUMNS "
                "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
                (schema, TABLE),
            )
            column_types = {str(name): str(kind) for name, kind in cur.fetchall()}
            yield Captured(start, end, after_insert, after_update, column_types)
        finally:
            cur.execute(f"DROP DATABASE IF EXISTS `{schema}`")


def _read_rows_events(service: MySQLService, captured: Captured) -> list[RowsEvent]:
    config = StreamConfig(
        host=service.host,
        port=service.port,
        user=service.replication_user,
        password=service.replication_password,
        server_id=4242,
        timestamp_zone=ZONE,
    )
    events: list[RowsEvent] = []
    deadline = time.monotonic() + 60
    with BinlogStream(config) as stream:
        stream.open_at(*captured.start)
        while time.monotonic() < deadline:
            event = stream.read(timeout=5)
            if event is None:
                continue
            if isinstance(event, RowsEvent) and event.table.table == TABLE:
                events.append(event)
            header = event.header
            if not header.artificial and (header.log_file, header.log_pos) >= captured.end:
                return events
    raise AssertionError(f"binlog end {captured.end} not reached within 60 s")


@pytest.fixture(scope="module")
def decoded(mysql_service: MySQLService, captured: Captured) -> Iterator[dict[str, list[RowsEvent]]]:
    events = _read_rows_events(mysql_service, captured)
    by_kind: dict[str, list[RowsEvent]] = {INSERT: [], UPDATE: [], DELETE: []}
    for event in events:
        by_kind[event.kind].append(event)
    yield by_kind


def _images(events: list[RowsEvent], which: str) -> dict[int, tuple[str | None, ...]]:
    out: dict[int, tuple[str | None, ...]] = {}
    for event in events:
        for row in event.rows:
            image = row.after if which == "after" else row.before
            assert image is not None
            assert image[0] is not None
            out[int(image[0])] = image
    return out


def _mismatches(images: dict[int, tuple[str | None, ...]], selected: dict[int, tuple[Any, ...]]) -> list[str]:
    assert sorted(images) == sorted(selected)
    problems = []
    for row_id, image in images.items():
        for col, ours, theirs in zip(_COLUMNS, image[1:], selected[row_id], strict=True):
            both_null = ours is None and theirs is None
            if not both_null and (ours is None or theirs is None or not col.same(ours, theirs)):
                problems.append(f"row {row_id} {col.name} ({col.ddl}): decoded {ours!r}, SELECT {theirs!r}")
    return problems


def test_insert_images_equal_select(decoded: dict[str, list[RowsEvent]], captured: Captured) -> None:
    assert decoded[INSERT], "no WRITE_ROWS event for the table"
    assert _mismatches(_images(decoded[INSERT], "after"), captured.after_insert) == []


def test_update_images_equal_select(decoded: dict[str, list[RowsEvent]], captured: Captured) -> None:
    assert decoded[UPDATE], "no UPDATE_ROWS event for the table"
    assert _mismatches(_images(decoded[UPDATE], "before"), captured.after_insert) == []
    assert _mismatches(_images(decoded[UPDATE], "after"), captured.after_update) == []


def test_delete_images_equal_select(decoded: dict[str, list[RowsEvent]], captured: Captured) -> None:
    assert decoded[DELETE], "no DELETE_ROWS event for the table"
    assert _mismatches(_images(decoded[DELETE], "before"), captured.after_update) == []


def _mysql8_column_type(text: str) -> str:
    """information_schema's COLUMN_TYPE in MySQL 8's form: no integer display widths, YEAR bare."""
    text = re.sub(r"^(tinyint|smallint|mediumint|int|bigint)\(\d+\)", r"\1", text)
    return "year" if text.startswith("year") else text


def test_column_meta_matches_the_schema(decoded: dict[str, list[RowsEvent]], captured: Captured) -> None:
    table: TableMapEvent = decoded[INSERT][0].table
    assert table.names_from_binlog
    by_name = {c.name: c for c in table.columns}
    assert by_name["id"].is_key
    flavor_json = "longtext" if captured.column_types["js"] == "longtext" else "json"
    for col in _COLUMNS:
        meta = by_name[col.name]
        expected = _mysql8_column_type(captured.column_types[col.name])
        assert meta.mysql_type == expected, col.name
    assert by_name["js"].mysql_type == flavor_json
    lengths = {"vc16": 16, "c4": 4, "cbig": 255, "bin4": 4, "vb8": 8, "d1": 12, "b5": 5, "vu3": 10, "cl1": 10}
    assert {k: by_name[k].length for k in lengths} == lengths
    sql_types = {"ti": -6, "tiu": 5, "i": 4, "iu": -5, "biu": 3, "d1": 3, "f": 7, "db": 8, "b5": -7,
                 "yr": 12, "dt": 91, "tm3": 92, "dtm6": 93, "ts0": 93, "c4": 1, "vc16": 12, "bin4": 2004,
                 "vb8": 2004, "tx": 2005, "bl": 2004, "en": 1, "st": 1, "g": 2004}  # fmt: skip
    assert {k: by_name[k].sql_type for k in sql_types} == sql_types
