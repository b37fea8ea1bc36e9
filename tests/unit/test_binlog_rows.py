"""Row images → canal text, from hand-built rows-event bodies (MySQL ``Rows_log_event`` layout and the
documented storage formats of each type)."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from datetime import UTC

import pytest

from relay.binlog import events as ev
from relay.binlog import rows
from relay.binlog import types as t
from relay.binlog.events import ColumnMeta, TableMapEvent
from relay.errors import DecodeError, IncompleteRowImageError, SourceError
from tests.unit.test_binlog_types import encode_decimal

HEADER = ev.EventHeader(1_700_000_000, ev.TABLE_MAP_EVENT, 1, 100, 1000, 0, "mysql-bin.000001")
UTF8MB4, LATIN1, BINARY = 45, 8, 63


UTC_DECODER = rows.RowDecoder(UTC)


def col(
    code: int,
    meta: int = 0,
    *,
    unsigned: bool = False,
    charset: int | None = None,
    enum_values: tuple[str, ...] | None = None,
    set_values: tuple[str, ...] | None = None,
) -> ColumnMeta:
    return t.column_meta(
        0, code, meta, True, name="c", unsigned=unsigned, charset=charset, is_key=False,
        enum_values=enum_values, set_values=set_values,
    )  # fmt: skip


def table(*columns: ColumnMeta) -> TableMapEvent:
    """The columns renumbered 0…n-1, as a TABLE_MAP would give them (ENUM/SET back to STRING + meta)."""
    numbered = []
    for i, c in enumerate(columns):
        code = t.STRING if c.type_code in (t.ENUM, t.SET) else c.type_code
        numbered.append(
            t.column_meta(
                i,
                code,
                c.meta,
                True,
                name=f"c{i}",
                unsigned=c.unsigned,
                charset=c.charset,
                is_key=i == 0,
                enum_values=c.enum_values,
                set_values=c.set_values,
            )
        )
    return TableMapEvent(HEADER, 7, "db", "tbl", tuple(numbered))


def bitmap(bits: list[bool]) -> bytes:
    value = sum(1 << i for i, b in enumerate(bits) if b)
    return value.to_bytes((len(bits) + 7) // 8, "little")


def image(values: Sequence[bytes | None]) -> bytes:
    """Null bitmap over the given (present) columns, then the non-NULL values."""
    return bitmap([v is None for v in values]) + b"".join(v for v in values if v is not None)


def body(ncols: int, *images: Sequence[bytes | None], update: bool = False) -> bytes:
    cols = bitmap([True] * ncols)
    return bytes([ncols]) + cols + (cols if update else b"") + b"".join(image(i) for i in images)


def decode_one(column: ColumnMeta, raw: bytes | None, decoder: rows.RowDecoder = UTC_DECODER) -> str | None:
    """The text of one value of one column, through a full INSERT rows body."""
    data = b"\xee" + body(1, [raw]) + b"\xcc\xcc\xcc\xcc"  # a leading byte and a checksum around it
    (row,) = decoder.decode_rows(ev.INSERT, data, 1, len(data) - 4, table(column))
    assert row.before is None and row.after is not None
    return row.after[0]


# ---- integers, decimals, floating point, bits -----------------------------------------------------


@pytest.mark.parametrize(
    ("code", "fmt", "value", "unsigned"),
    [
        (t.TINY, "<b", -128, False), (t.TINY, "<b", 127, False), (t.TINY, "<B", 255, True),
        (t.SHORT, "<h", -32768, False), (t.SHORT, "<H", 65535, True),
        (t.LONG, "<i", -(2**31), False), (t.LONG, "<I", 2**32 - 1, True),
        (t.LONGLONG, "<q", -(2**63), False), (t.LONGLONG, "<Q", 2**64 - 1, True),
        (t.LONGLONG, "<q", 0, False),
    ],
)  # fmt: skip
def test_integers(code: int, fmt: str, value: int, unsigned: bool) -> None:
    assert decode_one(col(code, unsigned=unsigned), struct.pack(fmt, value)) == str(value)


def test_int24() -> None:
    assert decode_one(col(t.INT24), (-8388608).to_bytes(3, "little", signed=True)) == "-8388608"
    assert decode_one(col(t.INT24), (8388607).to_bytes(3, "little", signed=True)) == "8388607"
    assert decode_one(col(t.INT24, unsigned=True), b"\xff\xff\xff") == "16777215"
    assert decode_one(col(t.INT24), b"\xff\xff\xff") == "-1"


@pytest.mark.parametrize(
    ("text", "precision", "scale"),
    [("19.90", 12, 2), ("-0.000000000000000000000000000001", 65, 30), ("0.00", 12, 2), ("-42", 10, 0)],
)
def test_newdecimal(text: str, precision: int, scale: int) -> None:
    column = col(t.NEWDECIMAL, precision << 8 | scale)
    assert decode_one(column, encode_decimal(text, precision, scale)) == text


def test_float_and_double_use_javas_text() -> None:
    assert decode_one(col(t.FLOAT, 4), struct.pack("<f", 0.1)) == "0.1"
    assert decode_one(col(t.FLOAT, 4), struct.pack("<f", 3.4028234663852886e38)) == "3.4028235E38"
    assert decode_one(col(t.DOUBLE, 8), struct.pack("<d", 1e10)) == "1.0E10"
    assert decode_one(col(t.DOUBLE, 8), struct.pack("<d", -0.5)) == "-0.5"


@pytest.mark.parametrize(
    ("meta", "raw", "text"),
    [
        (1, b"\x01", "1"), (1, b"\x00", "0"), (5, b"\x1f", "31"), (1 << 8, b"\x80", "128"),
        (8 << 8, b"\xff" * 8, "18446744073709551615"), (2 << 8 | 1, b"\x01\x00\x01", "65537"),
    ],
)  # fmt: skip
def test_bit_is_an_unsigned_big_endian_number(meta: int, raw: bytes, text: str) -> None:
    assert decode_one(col(t.BIT, meta), raw) == text


# ---- temporal -------------------------------------------------------------------------------------------


def date(y: int, m: int, d: int) -> bytes:
    return (y << 9 | m << 5 | d).to_bytes(3, "little")


def datetime2(date: tuple[int, int, int], time: tuple[int, int, int], frac: bytes = b"") -> bytes:
    (y, mo, d), (h, mi, s) = date, time
    packed = ((y * 13 + mo) << 22 | d << 17 | h << 12 | mi << 6 | s) + 0x8000000000
    return packed.to_bytes(5, "big") + frac


def test_date_and_year() -> None:
    assert decode_one(col(t.DATE), date(2024, 2, 29)) == "2024-02-29"
    assert decode_one(col(t.DATE), date(0, 0, 0)) == "0000-00-00"
    assert decode_one(col(t.DATE), date(9999, 12, 31)) == "9999-12-31"
    assert decode_one(col(t.YEAR), b"\x00") == "0000"
    assert decode_one(col(t.YEAR), b"\x01") == "1901"
    assert decode_one(col(t.YEAR), b"\xff") == "2155"


@pytest.mark.parametrize(
    ("fsp", "frac", "text"),
    [
        (0, b"", "2024-02-29 12:34:56"), (1, bytes([50]), "2024-02-29 12:34:56.5"),
        (2, bytes([7]), "2024-02-29 12:34:56.07"), (3, (7890).to_bytes(2, "big"), "2024-02-29 12:34:56.789"),
        (4, (7891).to_bytes(2, "big"), "2024-02-29 12:34:56.7891"),
        (5, (789120).to_bytes(3, "big"), "2024-02-29 12:34:56.78912"),
        (6, (789).to_bytes(3, "big"), "2024-02-29 12:34:56.000789"),
    ],
)  # fmt: skip
def test_datetime2(fsp: int, frac: bytes, text: str) -> None:
    assert decode_one(col(t.DATETIME2, fsp), datetime2((2024, 2, 29), (12, 34, 56), frac)) == text


def test_zero_datetime2() -> None:
    assert decode_one(col(t.DATETIME2, 0), datetime2((0, 0, 0), (0, 0, 0))) == "0000-00-00 00:00:00"
    assert (
        decode_one(col(t.DATETIME2, 3), datetime2((0, 0, 0), (0, 0, 0), b"\x00\x00"))
        == "0000-00-00 00:00:00.000"
    )


def test_timestamp2_in_the_chosen_zone() -> None:
    raw = struct.pack(">I", 1_709_210_096) + (123456).to_bytes(3, "big")  # 2024-02-29 12:34:56.123456 UTC
    assert decode_one(col(t.TIMESTAMP2, 6), raw) == "2024-02-29 12:34:56.123456"
    shanghai, india = rows.RowDecoder("+08:00"), rows.RowDecoder("-05:30")
    berlin = rows.RowDecoder("Europe/Berlin")
    assert decode_one(col(t.TIMESTAMP2, 6), raw, shanghai) == "2024-02-29 20:34:56.123456"
    assert decode_one(col(t.TIMESTAMP2, 0), raw[:4], india) == "2024-02-29 07:04:56"
    summer = struct.pack(">I", 1_719_662_400)
    assert decode_one(col(t.TIMESTAMP2, 0), summer, berlin) == "2024-06-29 14:00:00"  # CEST
    assert decode_one(col(t.TIMESTAMP2, 2), b"\x00\x00\x00\x00\x00", berlin) == "0000-00-00 00:00:00.00"
    # Each decoder keeps its own zone: two connections in one process never share it.
    assert decode_one(col(t.TIMESTAMP2, 6), raw) == "2024-02-29 12:34:56.123456"
    assert decode_one(col(t.TIMESTAMP2, 6), raw, shanghai) == "2024-02-29 20:34:56.123456"


def test_bad_zone_name() -> None:
    with pytest.raises(DecodeError):
        rows.RowDecoder("Nowhere/Atlantis")


def time2(negative: bool, hms: tuple[int, int, int], usec: int, fsp: int) -> bytes:
    """MySQL ``my_time_packed_to_binary`` from the packed value ((h<<12|m<<6|s) << 24 | usec, negated)."""
    h, m, s = hms
    packed = ((h << 12 | m << 6 | s) << 24) + usec
    if negative:
        packed = -packed
    fsize = (fsp + 1) // 2
    if fsize == 3:
        return (packed + 0x800000000000).to_bytes(6, "big")
    intpart = packed >> 24 if packed >= 0 else -((-packed) >> 24)
    frac = packed - (intpart << 24) if packed >= 0 else -((-packed) & 0xFFFFFF)
    if fsize == 0:
        return (intpart + 0x800000).to_bytes(3, "big")
    unit = 10000 if fsize == 1 else 100
    stored = frac // unit if frac >= 0 else -((-frac) // unit)
    if stored < 0:  # negative fraction: int part one further from zero, fraction counted back
        intpart -= 1
        stored += 1 << (8 * fsize)
    return (intpart + 0x800000).to_bytes(3, "big") + stored.to_bytes(fsize, "big")


@pytest.mark.parametrize(
    ("negative", "hms", "usec", "fsp", "text"),
    [
        (True, (0, 0, 0), 500000, 6, "-00:00:00.500000"),
        (True, (838, 59, 59), 0, 6, "-838:59:59.000000"),
        (True, (1, 2, 3), 250000, 3, "-01:02:03.250"),
        (True, (0, 0, 0), 500000, 1, "-00:00:00.5"),
        (True, (0, 0, 1), 10000, 2, "-00:00:01.01"),
        (True, (0, 0, 0), 100, 4, "-00:00:00.0001"),
        (True, (0, 0, 1), 0, 4, "-00:00:01.0000"),
        (True, (838, 59, 59), 0, 0, "-838:59:59"),
        (False, (838, 59, 59), 0, 0, "838:59:59"),
        (False, (100, 0, 0), 500000, 4, "100:00:00.5000"),
        (False, (0, 0, 0), 0, 3, "00:00:00.000"),
        (False, (12, 34, 56), 789000, 5, "12:34:56.78900"),
    ],
)
def test_time2(negative: bool, hms: tuple[int, int, int], usec: int, fsp: int, text: str) -> None:
    assert decode_one(col(t.TIME2, fsp), time2(negative, hms, usec, fsp)) == text


@pytest.mark.parametrize(
    ("raw", "text"),
    [  # MySQL's own table (sql/log_event.cc, my_time.cc): disk bytes of TIME(2) and their value
        ("800000.00", "00:00:00.00"), ("7FFFFF.FF", "-00:00:00.01"), ("7FFFFF.9D", "-00:00:00.99"),
        ("7FFFFF.00", "-00:00:01.00"), ("7FFFFE.FF", "-00:00:01.01"), ("7FFFFE.F6", "-00:00:01.10"),
    ],
)  # fmt: skip
def test_time2_documented_negative_fractions(raw: str, text: str) -> None:
    assert decode_one(col(t.TIME2, 2), bytes.fromhex(raw.replace(".", ""))) == text


def test_old_temporal_types() -> None:
    assert decode_one(col(t.TIME), (-8385959).to_bytes(3, "little", signed=True)) == "-838:59:59"
    assert decode_one(col(t.TIME), (123456).to_bytes(3, "little", signed=True)) == "12:34:56"
    assert decode_one(col(t.DATETIME), struct.pack("<Q", 20240229123456)) == "2024-02-29 12:34:56"
    assert decode_one(col(t.DATETIME), struct.pack("<Q", 0)) == "0000-00-00 00:00:00"
    assert decode_one(col(t.TIMESTAMP), struct.pack("<I", 1_709_210_096)) == "2024-02-29 12:34:56"
    assert decode_one(col(t.TIMESTAMP), struct.pack("<I", 0)) == "0000-00-00 00:00:00"


# ---- strings, binaries, enum, set, json, geometry ----------------------------------------------------


def test_varchar_lengths_and_charsets() -> None:
    assert decode_one(col(t.VARCHAR, 64, charset=UTF8MB4), b"\x05" + "😀a".encode()) == "😀a"
    long = "ü" * 300
    assert decode_one(col(t.VARCHAR, 1200, charset=UTF8MB4), struct.pack("<H", 600) + long.encode()) == long
    assert decode_one(col(t.VARCHAR, 20, charset=LATIN1), b"\x04\xe9\x80\x81\xff") == "é€\x81ÿ"
    assert decode_one(col(t.VARCHAR, 20, charset=LATIN1), b"\x00") == ""
    assert decode_one(col(t.VARCHAR, 8, charset=BINARY), b"\x02\xff\x00") == "ÿ\x00"
    assert decode_one(col(t.VAR_STRING, 8, charset=UTF8MB4), b"\x02ok") == "ok"
    assert decode_one(col(t.VARCHAR, 8), b"\x02ok") == "ok"  # unknown charset: UTF-8


def test_char_and_binary() -> None:
    assert decode_one(col(t.STRING, 0xFE10, charset=UTF8MB4), b"\x02ab") == "ab"
    # BINARY(4): trailing zero bytes are stripped in the binlog and restored here.
    assert decode_one(col(t.STRING, 0xFE04, charset=BINARY), b"\x02\x00\x01") == "\x00\x01\x00\x00"
    assert decode_one(col(t.STRING, 0xFE04, charset=BINARY), b"\x00") == "\x00" * 4
    # CHAR(255) utf8mb4: 1020 bytes, so a 2-byte length.
    text = "中" * 255
    assert decode_one(col(t.STRING, 0xCEFC, charset=UTF8MB4), struct.pack("<H", 765) + text.encode()) == text


def test_blobs_and_texts() -> None:
    data = bytes(range(256))
    assert decode_one(col(t.BLOB, 2, charset=BINARY), struct.pack("<H", 256) + data) == data.decode("latin-1")
    assert decode_one(col(t.BLOB, 1, charset=UTF8MB4), b"\x04" + "😀".encode()) == "😀"
    assert decode_one(col(t.BLOB, 3, charset=LATIN1), b"\x01\x00\x00\x80") == "€"
    assert decode_one(col(t.BLOB, 4, charset=UTF8MB4), struct.pack("<I", 2) + b"hi") == "hi"
    assert decode_one(col(t.BLOB, 2), b"\x01\x00\xe9") == "é"  # unknown charset: canal's byte form
    assert (
        decode_one(col(t.GEOMETRY, 4, charset=BINARY), struct.pack("<I", 3) + b"\x00\x01\xff") == "\x00\x01ÿ"
    )


def test_enum_and_set() -> None:
    enum = col(t.STRING, 0xF701, charset=UTF8MB4, enum_values=("a", "b", "it's"))
    assert [decode_one(enum, bytes([i])) for i in range(4)] == ["", "a", "b", "it's"]
    wide = col(t.STRING, 0xF702, charset=UTF8MB4, enum_values=tuple(f"v{i}" for i in range(300)))
    assert decode_one(wide, struct.pack("<H", 300)) == "v299"
    with pytest.raises(DecodeError):
        decode_one(enum, b"\x04")
    members = ("x", "y", "z")
    st = col(t.STRING, 0xF801, charset=UTF8MB4, set_values=members)
    assert decode_one(st, b"\x00") == ""  # the empty set is '', not NULL
    assert decode_one(st, b"\x05") == "x,z"
    assert decode_one(st, b"\x07") == "x,y,z"
    assert decode_one(st, None) is None
    big = col(t.STRING, 0xF808, charset=UTF8MB4, set_values=tuple(f"m{i}" for i in range(64)))
    assert decode_one(big, (1 << 63 | 1).to_bytes(8, "little")) == "m0,m63"
    # Without member names (binlog_row_metadata=MINIMAL): canal's number.
    assert decode_one(col(t.STRING, 0xF701, charset=UTF8MB4), b"\x02") == "2"
    assert decode_one(col(t.STRING, 0xF801, charset=UTF8MB4), b"\x05") == "5"


def test_json_column() -> None:
    assert decode_one(col(t.JSON, 4), struct.pack("<I", 2) + b"\x04\x01") == "true"
    assert decode_one(col(t.JSON, 4), struct.pack("<I", 0)) == ""


# ---- the rows event ------------------------------------------------------------------------------------


def three_columns() -> TableMapEvent:
    return table(col(t.LONG), col(t.VARCHAR, 64, charset=UTF8MB4), col(t.NEWDECIMAL, 12 << 8 | 2))


def test_insert_several_rows_with_nulls() -> None:
    tbl = three_columns()
    r1 = [struct.pack("<i", 1), b"\x03abc", encode_decimal("19.90", 12, 2)]
    r2 = [struct.pack("<i", 2), None, None]
    data = body(3, r1, r2)
    decoded = UTC_DECODER.decode_rows(ev.INSERT, data, 0, len(data), tbl)
    assert [r.after for r in decoded] == [("1", "abc", "19.90"), ("2", None, None)]
    assert all(r.before is None for r in decoded)


def test_update_has_before_and_after_images() -> None:
    tbl = three_columns()
    before = [struct.pack("<i", 1), b"\x03NEW", encode_decimal("1.00", 12, 2)]
    after = [struct.pack("<i", 1), b"\x04PAID", None]
    data = body(3, before, after, update=True)
    (row,) = UTC_DECODER.decode_rows(ev.UPDATE, data, 0, len(data), tbl)
    assert row.before == ("1", "NEW", "1.00")
    assert row.after == ("1", "PAID", None)


def test_delete_has_only_before() -> None:
    tbl = three_columns()
    data = body(3, [struct.pack("<i", 9), b"\x00", encode_decimal("-0.01", 12, 2)])
    (row,) = UTC_DECODER.decode_rows(ev.DELETE, data, 0, len(data), tbl)
    assert row == ev.RowImage(("9", "", "-0.01"), None)


def test_incomplete_images_are_refused_with_the_missing_columns() -> None:
    tbl = three_columns()
    # DELETE with only columns 0 and 2 in its before image (binlog_row_image=MINIMAL/NOBLOB).
    data = bytes([3]) + bitmap([True, False, True]) + bitmap([False, True]) + struct.pack("<i", 5)
    with pytest.raises(IncompleteRowImageError) as err:
        UTC_DECODER.decode_rows(ev.DELETE, data, 0, len(data), tbl)
    assert (err.value.table, err.value.image, err.value.missing) == ("db.tbl", "before", ("c1",))
    assert not err.value.retriable and isinstance(err.value, SourceError)
    assert "binlog_row_image=FULL" in str(err.value) and "relay positions set" in str(err.value)
    # UPDATE: a full before image, an after image with the changed column only.
    data = (
        bytes([3]) + bitmap([True, True, True]) + bitmap([False, True, False])
        + image([struct.pack("<i", 5), b"\x01x", None]) + bitmap([False]) + b"\x01y"
    )  # fmt: skip
    with pytest.raises(IncompleteRowImageError) as err:
        UTC_DECODER.decode_rows(ev.UPDATE, data, 0, len(data), tbl)
    assert (err.value.image, err.value.missing) == ("after", ("c0", "c2"))
    # UPDATE: a PK-only before image.
    data = (
        bytes([3]) + bitmap([True, False, False]) + bitmap([True, True, True])
        + bitmap([False]) + struct.pack("<i", 5)
        + bitmap([False, False, True]) + struct.pack("<i", 5) + b"\x01x"
    )  # fmt: skip
    with pytest.raises(IncompleteRowImageError) as err:
        UTC_DECODER.decode_rows(ev.UPDATE, data, 0, len(data), tbl)
    assert (err.value.image, err.value.missing) == ("before", ("c1", "c2"))
    # INSERT naming fewer columns than its TABLE_MAP: the last column is missing too.
    data = bytes([2]) + bitmap([True, True]) + image([struct.pack("<i", 5), b"\x01x"])
    with pytest.raises(IncompleteRowImageError) as err:
        UTC_DECODER.decode_rows(ev.INSERT, data, 0, len(data), tbl)
    assert (err.value.image, err.value.missing) == ("after", ("c2",))
    located = err.value.at("mysql-bin.000007:1234")
    assert str(located).startswith("mysql-bin.000007:1234: the rows event for db.tbl")


def test_wide_table_with_many_nulls() -> None:
    columns = [col(t.TINY) for _ in range(70)]
    tbl = table(*columns)
    values: list[bytes | None] = [None if i % 3 else bytes([i]) for i in range(70)]
    data = bytes([70]) + bitmap([True] * 70) + image(values)
    (row,) = UTC_DECODER.decode_rows(ev.INSERT, data, 0, len(data), tbl)
    assert row.after == tuple(None if i % 3 else str(i) for i in range(70))


def test_truncated_and_overlong_bodies_are_decode_errors() -> None:
    tbl = three_columns()
    good = body(3, [struct.pack("<i", 1), b"\x03abc", encode_decimal("19.90", 12, 2)])
    with pytest.raises(DecodeError):
        UTC_DECODER.decode_rows(ev.INSERT, good[:-3], 0, len(good) - 3, tbl)
    with pytest.raises(DecodeError):
        UTC_DECODER.decode_rows(ev.INSERT, good + b"\x00", 0, len(good) + 1, tbl)
    with pytest.raises(DecodeError):
        UTC_DECODER.decode_rows(ev.INSERT, b"\x05" + good[1:], 0, len(good), tbl)  # more columns than the map


def test_plans_are_cached_per_columns_tuple() -> None:
    tbl = three_columns()
    again = TableMapEvent(HEADER, 8, "db", "tbl", tbl.columns)
    assert UTC_DECODER.plan(tbl) is UTC_DECODER.plan(again)
    equal = TableMapEvent(HEADER, 9, "db", "tbl", tuple(list(tbl.columns)))
    assert UTC_DECODER.plan(equal) is UTC_DECODER.plan(tbl)


def test_timestamp_in_the_repeated_dst_hour_keeps_its_instant() -> None:
    # Europe/Berlin 2024-10-27: 00:30 UTC is 02:30 CEST, 01:30 UTC is 02:30 CET: the same text.
    berlin = rows.RowDecoder("Europe/Berlin")
    first, second = 1_729_989_000, 1_729_992_600
    texts = [
        decode_one(col(t.TIMESTAMP2, 3), struct.pack(">I", s) + (1230).to_bytes(2, "big"), berlin)
        for s in (first, second)
    ]
    assert texts == ["2024-10-27 02:30:00.123", "2024-10-27 02:30:00.123"]
    assert [v.micros for v in texts] == [first * 10**6 + 123000, second * 10**6 + 123000]  # type: ignore[union-attr]
    assert decode_one(col(t.TIMESTAMP2, 0), b"\x00\x00\x00\x00", berlin) == "0000-00-00 00:00:00"
