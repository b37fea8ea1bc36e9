"""Regenerate ``binlog.gz``: the binlog of a fixed set of statements, written by a real MariaDB.

    PYTHONPATH=. .venv/bin/python tests/data/golden/capture.py

Starts a throwaway MariaDB (``relay.dev.services.start_mysql``: ROW format, FULL image and metadata),
runs ``STATEMENTS`` and copies the binlog file as the server wrote it (magic, FORMAT_DESCRIPTION, every
event with its CRC32) into ``binlog.gz`` beside this script. ``tests/golden.py`` replays that file through
the parser, the entry builder, the sink, the ring store and the record encoder; the records it makes are
compared with ``records.jsonl`` by ``tests/unit/test_golden_records.py``.

After regenerating the binlog, regenerate the records with ``tests/golden.py --write`` *from code whose
output is known good*, and review the diff: the golden records are what the relay promises to write.
"""

from __future__ import annotations

import contextlib
import gzip
import sys
import tempfile
from pathlib import Path

from relay.dev.services import StartOptions, start_mysql

HERE = Path(__file__).resolve().parent
BINLOG = HERE / "binlog.gz"

_ALL_BYTES = "X'" + bytes(range(256)).hex() + "'"
_LATIN1 = "'é€\u0081ÿ'"  # € is 0x80 in MySQL's latin1 (cp1252); U+0081 is the undefined 0x81 byte

# (name, type): every column type the row decoder reads, in several charsets.
COLUMNS = (
    ("ti", "tinyint"), ("tiu", "tinyint unsigned"), ("si", "smallint"), ("siu", "smallint unsigned"),
    ("mi", "mediumint"), ("miu", "mediumint unsigned"), ("i", "int"), ("iu", "int unsigned"),
    ("bi", "bigint"), ("biu", "bigint unsigned"),
    ("d1", "decimal(12,2)"), ("d2", "decimal(65,30)"), ("d3", "decimal(10,0)"), ("d4", "decimal(5,5)"),
    ("d5", "decimal(19,9)"), ("f", "float"), ("db", "double"),
    ("dt", "date"), ("tm0", "time"), ("tm1", "time(1)"), ("tm3", "time(3)"), ("tm4", "time(4)"),
    ("tm6", "time(6)"), ("dtm0", "datetime"), ("dtm1", "datetime(1)"), ("dtm3", "datetime(3)"),
    ("dtm6", "datetime(6)"), ("ts0", "timestamp NULL"), ("ts2", "timestamp(2) NULL"),
    ("ts6", "timestamp(6) NULL"), ("yr", "year"),
    ("c4", "char(4) CHARACTER SET utf8mb4"), ("vc16", "varchar(16) CHARACTER SET utf8mb4"),
    ("vc300", "varchar(300) CHARACTER SET utf8mb4"), ("cbig", "char(255) CHARACTER SET utf8mb4"),
    ("cl1", "char(10) CHARACTER SET latin1"), ("vl1", "varchar(20) CHARACTER SET latin1"),
    ("vu3", "varchar(10) CHARACTER SET utf8mb3"), ("vgbk", "varchar(10) CHARACTER SET gbk"),
    ("vsjis", "varchar(10) CHARACTER SET sjis"), ("vu16", "varchar(10) CHARACTER SET utf16"),
    ("cucs2", "char(3) CHARACTER SET ucs2"), ("vcyr", "varchar(10) CHARACTER SET cp1251"),
    ("bin4", "binary(4)"), ("vb8", "varbinary(8)"),
    ("tt", "tinytext CHARACTER SET utf8mb4"), ("tx", "text CHARACTER SET latin1"),
    ("mt", "mediumtext CHARACTER SET utf8mb4"), ("lt", "longtext CHARACTER SET utf8mb4"),
    ("tb", "tinyblob"), ("bl", "blob"), ("mb", "mediumblob"), ("lb", "longblob"),
    ("en", "enum('a','b','it''s')"), ("st", "set('x','y','z')"),
    ("b1", "bit(1)"), ("b5", "bit(5)"), ("b64", "bit(64)"), ("js", "json"), ("g", "geometry NULL"),
)  # fmt: skip

# Row id → column → SQL expression; columns not named are NULL.
ROWS: dict[int, dict[str, str]] = {
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
        "vgbk": "''", "vsjis": "''", "vu16": "''", "cucs2": "''", "vcyr": "''",
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
        "vgbk": "'中文简体'", "vsjis": "'日本語ｶﾅ'", "vu16": "'😀𝄞z'", "cucs2": "'中é'",
        "vcyr": "'Привет'",
        "bin4": "X'00010000'", "vb8": "X'FF000000000000FF'", "tt": "'😀'", "tx": _LATIN1,
        "mt": "REPEAT('ab😀', 100)", "lt": "REPEAT('z', 700)", "tb": "X'FF'", "bl": _ALL_BYTES,
        "mb": "REPEAT(X'00FF', 400)", "lb": _ALL_BYTES, "en": "'it''s'", "st": "'x,y,z'",
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
        "c4": "'ab'", "vc16": "'hello, world'", "vc300": "'x\ny\tz\\\\\"'", "cl1": "'Ørsted'",
        "vl1": "'naïve'", "vu3": "'ok'", "vgbk": "'abc'", "vsjis": "'ｱ'", "vu16": "'é'",
        "cucs2": "'a'", "vcyr": "'ё'", "bin4": "X'0A'", "vb8": "X'0A00'", "tt": "'t'", "tx": "'x'",
        "mt": "'m'", "lt": "'l'", "tb": "X'00'", "bl": "X'0000'", "mb": "X'01'", "lb": "X'02'",
        "en": "'b'", "st": "'x,z'", "b1": "b'0'", "b5": "b'10000'", "b64": "b'1" + "0" * 63 + "'",
        "js": """'{"k": "v", "n": -1.25e-20, "big": 18446744073709551615, "arr": [[], {}]}'""",
        "g": "ST_GeomFromText('POLYGON((0 0, 1 0, 1 1, 0 0))')",
    },
}  # fmt: skip

_UPDATE = (
    "`d1` = 19.90, `st` = '', `en` = 'b', `tm3` = '-00:00:00.001', `ts6` = '2001-02-03 04:05:06.5', "
    "`vc16` = 'changed', `b5` = b'101', `js` = '{\"u\": [true, false]}', `vgbk` = '改'"
)


def _values(row_id: int) -> str:
    row = ROWS[row_id]
    return "(" + ", ".join([str(row_id)] + [row.get(name, "NULL") for name, _ in COLUMNS]) + ")"


def statements() -> list[str]:
    """What the binlog holds: DDL, INSERT, UPDATE (a key change too), DELETE, a multi-table transaction."""
    cols = ", ".join(f"`{name}` {kind}" for name, kind in COLUMNS)
    return [
        "SET SESSION sql_mode = ''",
        "SET SESSION time_zone = '+05:30'",
        "CREATE DATABASE shop_01",
        "USE shop_01",
        f"CREATE TABLE types_1 (id int PRIMARY KEY, {cols}) DEFAULT CHARSET=utf8mb4",
        "CREATE TABLE orders_1 (id bigint NOT NULL, line int NOT NULL, status varchar(16), "
        "amount decimal(12,2), note text CHARACTER SET latin1, PRIMARY KEY (id, line))",
        "CREATE TABLE audit_1 (at bigint, what varchar(16))",  # no primary key
        f"INSERT INTO types_1 VALUES {', '.join(_values(i) for i in sorted(ROWS))}",
        f"UPDATE types_1 SET {_UPDATE}",
        "UPDATE types_1 SET id = id + 100 WHERE id IN (2, 5)",  # key changes
        "BEGIN",
        "INSERT INTO orders_1 VALUES (1, 1, 'NEW', 19.90, 'Ørsted'), (1, 2, 'NEW', 0.01, NULL), "
        "(2, 1, 'NEW', -5.00, '')",
        "INSERT INTO audit_1 VALUES (1, 'created'), (2, NULL)",
        "UPDATE orders_1 SET status = 'PAID' WHERE id = 1",
        "COMMIT",
        "UPDATE orders_1 SET line = 9, status = 'MOVED' WHERE id = 2",  # a key column changes
        "UPDATE audit_1 SET what = 'seen'",
        "ALTER TABLE orders_1 ADD COLUMN shipped datetime(3) NULL AFTER status",
        "INSERT INTO orders_1 VALUES (3, 1, 'NEW', '2024-02-29 12:34:56.789', 1.5, 'x')",
        "DELETE FROM orders_1 WHERE id = 1",
        "DELETE FROM types_1",
        "DELETE FROM audit_1",
        "TRUNCATE TABLE audit_1",
        "RENAME TABLE audit_1 TO audit_2",
        "DROP TABLE audit_2",
        "CREATE INDEX by_status ON orders_1 (status)",
    ]


def capture(directory: Path) -> bytes:
    with start_mysql(StartOptions(directory)) as running:
        service = running.service
        with contextlib.closing(service.connect()) as conn, conn.cursor() as cur:
            for sql in statements():
                cur.execute(sql)
            cur.execute("FLUSH BINARY LOGS")  # the file we copy is complete and no longer written
            cur.execute("SHOW BINARY LOGS")
            first = str(cur.fetchall()[0][0])
        return (running.directory / "data" / first).read_bytes()


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="golden-") as tmp:
        raw = capture(Path(tmp) / "mysql")
    BINLOG.write_bytes(gzip.compress(raw, mtime=0))
    print(f"wrote {BINLOG} ({len(raw)} bytes of binlog)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
