"""Column type metadata, canal's type descriptions, charsets, DECIMAL storage, FLOAT/DOUBLE text, binary JSON.

Byte layouts are built here from the documented formats (MySQL ``decimal2bin``, ``json_binary.h``),
independently of the decoders under test.
"""

from __future__ import annotations

import struct
from decimal import Decimal

import pytest

from relay.binlog import charsets, jsonb
from relay.binlog import types as t
from relay.errors import DecodeError

# ---- helpers: encoders written from the documented formats --------------------------------------


def encode_decimal(text: str, precision: int, scale: int) -> bytes:
    """MySQL ``decimal2bin``: 9-digit groups, partial ones outermost, sign bit flipped, negative inverted."""
    value = Decimal(text)
    negative = value < 0
    digits = f"{value.copy_abs():.{scale}f}"  # copy_abs: no 28-digit context rounding
    whole, _, frac = digits.partition(".")
    intg = precision - scale
    whole = whole.zfill(intg)[-intg:] if intg else ""
    out = b""
    lead = intg % 9
    if lead:
        out += int(whole[:lead]).to_bytes(t.DIG2BYTES[lead], "big")
    for i in range(lead, intg, 9):
        out += int(whole[i : i + 9]).to_bytes(4, "big")
    for i in range(0, scale - scale % 9, 9):
        out += int(frac[i : i + 9]).to_bytes(4, "big")
    if scale % 9:
        out += int(frac[scale - scale % 9 :]).to_bytes(t.DIG2BYTES[scale % 9], "big")
    raw = bytearray(out)
    raw[0] ^= 0x80
    if negative:
        raw = bytearray(b ^ 0xFF for b in raw)
    return bytes(raw)


# ---- TABLE_MAP metadata ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "raw", "meta", "size"),
    [
        (t.TINY, b"", 0, 0),
        (t.LONGLONG, b"", 0, 0),
        (t.DATE, b"", 0, 0),
        (t.YEAR, b"", 0, 0),
        (t.DATETIME, b"", 0, 0),
        (t.FLOAT, b"\x04", 4, 1),
        (t.DOUBLE, b"\x08", 8, 1),
        (t.BLOB, b"\x02", 2, 1),
        (t.GEOMETRY, b"\x04", 4, 1),
        (t.JSON, b"\x04", 4, 1),
        (t.TIME2, b"\x03", 3, 1),
        (t.DATETIME2, b"\x06", 6, 1),
        (t.TIMESTAMP2, b"\x00", 0, 1),
        (t.VARCHAR, b"\x2c\x01", 300, 2),  # little-endian max bytes
        (t.VAR_STRING, b"\x40\x00", 64, 2),
        (t.BIT, b"\x05\x00", 5, 2),  # bits % 8, then whole bytes
        (t.BIT, b"\x00\x08", 8 << 8, 2),  # BIT(64)
        (t.STRING, b"\xfe\x10", 0xFE10, 2),  # real type, then length
        (t.STRING, b"\xf7\x01", 0xF701, 2),  # ENUM, 1-byte index
        (t.NEWDECIMAL, b"\x0c\x02", 12 << 8 | 2, 2),  # precision, scale
    ],
)
def test_read_column_metadata(code: int, raw: bytes, meta: int, size: int) -> None:
    data = b"\xaa" + raw + b"\xbb"
    assert t.read_column_metadata(code, data, 1) == (meta, 1 + size)


def test_long_char_folds_length_bits_into_the_type_byte() -> None:
    # CHAR(255) utf8mb4 = 1020 bytes = 0x3FC: bits 8-9 (0b11) are stored inverted in bits 4-5 of 0xFE.
    meta = (0xFE ^ (0x3 << 4)) << 8 | 0xFC
    assert t.string_type(meta) == (t.STRING, 1020)
    assert t.real_type(t.STRING, meta) == t.STRING
    assert t.string_type(0xFE04) == (t.STRING, 4)
    assert t.real_type(t.STRING, 0xF802) == t.SET
    assert t.real_type(t.STRING, 0xF701) == t.ENUM


# ---- canal's column description -----------------------------------------------------------------

UTF8MB4, UTF8MB3, LATIN1, BINARY = 45, 33, 8, 63


def describe(
    code: int,
    meta: int = 0,
    *,
    unsigned: bool = False,
    charset: int | None = None,
    enum_values: tuple[str, ...] | None = None,
    set_values: tuple[str, ...] | None = None,
) -> tuple[str, int, int]:
    c = t.column_meta(
        0, code, meta, True, name="c", unsigned=unsigned, charset=charset, is_key=False,
        enum_values=enum_values, set_values=set_values,
    )  # fmt: skip
    return c.mysql_type, c.sql_type, c.length


@pytest.mark.parametrize(
    ("args", "kw", "expected"),
    [
        ((t.TINY,), {}, ("tinyint", -6, 0)),
        ((t.TINY,), {"unsigned": True}, ("tinyint unsigned", 5, 0)),
        ((t.SHORT,), {}, ("smallint", 5, 0)),
        ((t.SHORT,), {"unsigned": True}, ("smallint unsigned", 4, 0)),
        ((t.INT24,), {"unsigned": True}, ("mediumint unsigned", 4, 0)),
        ((t.LONG,), {}, ("int", 4, 0)),
        ((t.LONG,), {"unsigned": True}, ("int unsigned", -5, 0)),
        ((t.LONGLONG,), {}, ("bigint", -5, 0)),
        ((t.LONGLONG,), {"unsigned": True}, ("bigint unsigned", 3, 0)),
        ((t.NEWDECIMAL, 12 << 8 | 2), {}, ("decimal(12,2)", 3, 12)),
        ((t.FLOAT, 4), {}, ("float", 7, 0)),
        ((t.DOUBLE, 8), {}, ("double", 8, 0)),
        ((t.BIT, 5), {}, ("bit(5)", -7, 5)),
        ((t.BIT, 1 << 8), {}, ("bit(8)", -7, 8)),
        ((t.DATE,), {}, ("date", 91, 0)),
        ((t.YEAR,), {}, ("year", 12, 0)),
        ((t.TIME2, 0), {}, ("time", 92, 0)),
        ((t.TIME2, 3), {}, ("time(3)", 92, 0)),
        ((t.DATETIME2, 6), {}, ("datetime(6)", 93, 0)),
        ((t.TIMESTAMP2, 0), {}, ("timestamp", 93, 0)),
        ((t.TIME,), {}, ("time", 92, 0)),
        ((t.DATETIME,), {}, ("datetime", 93, 0)),
        ((t.TIMESTAMP,), {}, ("timestamp", 93, 0)),
        ((t.VARCHAR, 64), {"charset": UTF8MB4}, ("varchar(16)", 12, 16)),
        ((t.VARCHAR, 30), {"charset": UTF8MB3}, ("varchar(10)", 12, 10)),
        ((t.VARCHAR, 20), {"charset": LATIN1}, ("varchar(20)", 12, 20)),
        ((t.VARCHAR, 20), {"charset": 255}, ("varchar(5)", 12, 5)),  # MySQL 8 utf8mb4_0900_ai_ci
        ((t.VARCHAR, 20), {"charset": 2304}, ("varchar(5)", 12, 5)),  # MariaDB utf8mb4_uca1400_ai_ci
        ((t.VARCHAR, 8), {"charset": BINARY}, ("varbinary(8)", 2004, 8)),
        ((t.VARCHAR, 8), {}, ("varchar(8)", 12, 8)),  # no charset known: bytes
        ((t.STRING, 0xFE10), {"charset": UTF8MB4}, ("char(4)", 1, 4)),
        ((t.STRING, 0xFE04), {"charset": BINARY}, ("binary(4)", 2004, 4)),
        ((t.STRING, 0xCEFC), {"charset": UTF8MB4}, ("char(255)", 1, 255)),
        ((t.BLOB, 1), {"charset": UTF8MB4}, ("tinytext", 2005, 0)),
        ((t.BLOB, 2), {"charset": LATIN1}, ("text", 2005, 0)),
        ((t.BLOB, 3), {"charset": UTF8MB4}, ("mediumtext", 2005, 0)),
        ((t.BLOB, 4), {"charset": 46}, ("longtext", 2005, 0)),
        ((t.BLOB, 1), {"charset": BINARY}, ("tinyblob", 2004, 0)),
        ((t.BLOB, 2), {"charset": BINARY}, ("blob", 2004, 0)),
        ((t.BLOB, 4), {}, ("longblob", 2004, 0)),
        ((t.JSON, 4), {}, ("json", 12, 0)),
        ((t.GEOMETRY, 4), {"charset": BINARY}, ("geometry", 2004, 0)),
        ((t.STRING, 0xF701), {"enum_values": ("a", "it's")}, ("enum('a','it''s')", 1, 0)),
        ((t.STRING, 0xF801), {"set_values": ("x", "y")}, ("set('x','y')", 1, 0)),
        ((t.STRING, 0xF701), {}, ("enum", 1, 0)),
    ],
)
def test_describe(args: tuple[int, ...], kw: dict[str, object], expected: tuple[str, int, int]) -> None:
    assert describe(*args, **kw) == expected  # type: ignore[arg-type]


def test_column_meta_resolves_the_real_type_and_names() -> None:
    c = t.column_meta(2, t.STRING, 0xF801, False, name=None, unsigned=False, charset=UTF8MB4, is_key=True,
                      set_values=("x",))  # fmt: skip
    assert (c.index, c.name, c.type_code, c.meta, c.nullable, c.is_key) == (
        2,
        "@3",
        t.SET,
        0xF801,
        False,
        True,
    )
    assert c.set_values == ("x",) and c.enum_values is None


def test_unknown_type_is_a_decode_error() -> None:
    with pytest.raises(DecodeError):
        describe(t.DECIMAL)


# ---- charsets ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("collation", "name", "maxlen"),
    [
        (8, "latin1", 1), (45, "utf8mb4", 4), (46, "utf8mb4", 4), (33, "utf8mb3", 3), (83, "utf8mb3", 3),
        (63, "binary", 1), (11, "ascii", 1), (28, "gbk", 2), (35, "ucs2", 2), (54, "utf16", 4),
        (224, "utf8mb4", 4), (255, "utf8mb4", 4), (309, "utf8mb4", 4), (248, "gb18030", 4),
        (1057, "utf8mb3", 3), (2304, "utf8mb4", 4), (2048, "utf8mb3", 3), (76, "utf8mb3", 3),
    ],
)  # fmt: skip
def test_charset_of(collation: int, name: str, maxlen: int) -> None:
    cs = charsets.charset_of(collation)
    assert cs is not None and (cs.name, cs.maxlen) == (name, maxlen)


def test_unknown_collation() -> None:
    assert charsets.charset_of(None) is None
    assert charsets.charset_of(100_000) is None


def test_mysql_latin1_decodes_every_byte() -> None:
    latin1 = charsets.charset_of(8)
    assert latin1 is not None
    text = latin1.decode(bytes(range(256)))
    assert len(text) == 256
    assert text[0x80] == "€" and text[0x9F] == "Ÿ" and text[0xE9] == "é"
    assert [text[b] for b in (0x81, 0x8D, 0x8F, 0x90, 0x9D)] == ["\x81", "\x8d", "\x8f", "\x90", "\x9d"]


def test_decoders_never_fail() -> None:
    for collation in (45, 33, 11, 28, 35, 63, 3):
        cs = charsets.charset_of(collation)
        assert cs is not None
        assert isinstance(cs.decode(b"\xff\xfe\x80abc\xc3"), str)
    utf16 = charsets.charset_of(54)
    assert utf16 is not None and utf16.decode("é😀".encode("utf-16-be")) == "é😀"


# ---- DECIMAL ----------------------------------------------------------------------------------------


def test_decimal_documented_example() -> None:
    # MySQL's decimal2bin comment: 1234567890.1234 as DECIMAL(14,4) is 81 0D FB 38 D2 04 D2.
    raw = bytes.fromhex("810DFB38D204D2")
    assert t.decode_decimal(raw, 0, 14, 4) == ("1234567890.1234", 7)
    assert t.decode_decimal(bytes.fromhex("7EF204C72DFB2D"), 0, 14, 4) == ("-1234567890.1234", 7)
    assert encode_decimal("1234567890.1234", 14, 4) == raw


@pytest.mark.parametrize(
    ("text", "precision", "scale"),
    [
        ("19.90", 12, 2), ("0.00", 12, 2), ("-0.01", 12, 2), ("9999999999.99", 12, 2),
        ("0", 10, 0), ("-9999999999", 10, 0), ("1", 1, 0), ("-0.99999", 5, 5), ("0.00001", 5, 5),
        ("99999999999999999999999999999999999.999999999999999999999999999999", 65, 30),
        ("-99999999999999999999999999999999999.999999999999999999999999999999", 65, 30),
        ("-0.000000000000000000000000000001", 65, 30), ("0.000000000000000000000000000000", 65, 30),
        ("123456789.123456789", 18, 9), ("-123456789012345678.1", 19, 1), ("1.5", 2, 1),
    ],
)  # fmt: skip
def test_decimal_round_trip(text: str, precision: int, scale: int) -> None:
    raw = encode_decimal(text, precision, scale)
    assert len(raw) == t.decimal_size(precision, scale)
    assert t.decode_decimal(b"\x00" + raw + b"\xff", 1, precision, scale) == (text, 1 + len(raw))


def test_negative_zero_decimal_prints_without_sign() -> None:
    raw = bytes(b ^ 0xFF for b in encode_decimal("0.00", 12, 2))  # the sign bit says negative
    assert t.decode_decimal(raw, 0, 12, 2)[0] == "0.00"


def test_truncated_decimal() -> None:
    with pytest.raises(DecodeError):
        t.decode_decimal(b"\x80", 0, 12, 2)


# ---- FLOAT / DOUBLE: Java's toString ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.0, "0.0"), (-0.0, "-0.0"), (1.0, "1.0"), (-2.5, "-2.5"), (100.0, "100.0"), (0.001, "0.001"),
        (1e-4, "1.0E-4"), (9999999.0, "9999999.0"), (1e7, "1.0E7"), (123456789.0, "1.23456789E8"),
        (0.1, "0.1"), (1 / 3, "0.3333333333333333"), (1e23, "1.0E23"), (2e-3, "0.002"),
        (5e-324, "4.9E-324"), (1.7976931348623157e308, "1.7976931348623157E308"), (-1.25e-20, "-1.25E-20"),
    ],
)  # fmt: skip
def test_java_double(value: float, text: str) -> None:
    assert t.java_double(value) == text
    assert float(text) == value


def f32(x: float) -> float:
    value: float = struct.unpack("<f", struct.pack("<f", x))[0]
    return value


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.1, "0.1"), (1.0, "1.0"), (0.3, "0.3"), (16777216.0, "1.6777216E7"), (1234567.0, "1234567.0"),
        (3.4028234663852886e38, "3.4028235E38"), (1.401298464324817e-45, "1.4E-45"), (-1.5, "-1.5"),
        (1e-10, "1.0E-10"), (3.14159, "3.14159"), (-3.40282e38, "-3.40282E38"),
        # Float.MIN_NORMAL: JDK 19+ prints the shortest text; JDK 8 printed 1.17549435E-38.
        (1.17549435e-38, "1.1754944E-38"),
    ],
)  # fmt: skip
def test_java_float(value: float, text: str) -> None:
    assert t.java_float(f32(value)) == text
    assert f32(float(text)) == f32(value)


def test_java_float_is_exact_for_many_values() -> None:
    # Every text must read back as the same float32, and be no longer than 9 significant digits.
    for bits in range(0x00000001, 0x7F800000, 0x0012_3457):
        value = struct.unpack("<f", struct.pack("<I", bits))[0]
        text = t.java_float(value)
        assert f32(float(text)) == value, (hex(bits), text)
        mantissa = text.split("E")[0].replace("-", "").replace(".", "").strip("0")
        assert len(mantissa) <= 9


# ---- binary JSON --------------------------------------------------------------------------------------


def jstr(text: str) -> bytes:
    raw = text.encode()
    assert len(raw) < 128
    return bytes([len(raw)]) + raw


def small_array(values: list[tuple[int, bytes]], inline: dict[int, int] | None = None) -> bytes:
    """A small array (2-byte offsets): ``values`` are (type, bytes); inlined ones use ``inline[i]``."""
    inline = inline or {}
    header = 4 + 3 * len(values)
    entries, body = b"", b""
    for i, (kind, raw) in enumerate(values):
        if i in inline:
            entries += bytes([kind]) + struct.pack("<H", inline[i])
        else:
            entries += bytes([kind]) + struct.pack("<H", header + len(body))
            body += raw
    size = header + len(body)
    return struct.pack("<HH", len(values), size) + entries + body


def small_object(items: list[tuple[str, int, bytes]]) -> bytes:
    header = 4 + 4 * len(items) + 3 * len(items)
    keys = b"".join(k.encode() for k, _, _ in items)
    key_entries, value_entries, body = b"", b"", b""
    offset = header
    for k, _, _ in items:
        key_entries += struct.pack("<HH", offset, len(k.encode()))
        offset += len(k.encode())
    for _, kind, raw in items:
        value_entries += bytes([kind]) + struct.pack("<H", offset + len(body))
        body += raw
    return (
        struct.pack("<HH", len(items), header + len(keys) + len(body))
        + key_entries
        + value_entries
        + keys
        + body
    )


def test_json_scalars() -> None:
    assert jsonb.to_text(b"") == ""
    assert jsonb.to_text(b"\x04\x00") == "null"
    assert jsonb.to_text(b"\x04\x01") == "true"
    assert jsonb.to_text(b"\x04\x02") == "false"
    assert jsonb.to_text(b"\x05" + struct.pack("<h", -32768)) == "-32768"
    assert jsonb.to_text(b"\x06" + struct.pack("<H", 65535)) == "65535"
    assert jsonb.to_text(b"\x07" + struct.pack("<i", -(2**31))) == "-2147483648"
    assert jsonb.to_text(b"\x08" + struct.pack("<I", 2**32 - 1)) == "4294967295"
    assert jsonb.to_text(b"\x09" + struct.pack("<q", -(2**63))) == "-9223372036854775808"
    assert jsonb.to_text(b"\x0a" + struct.pack("<Q", 2**64 - 1)) == "18446744073709551615"
    assert jsonb.to_text(b"\x0c" + jstr('a"b\\c\n\x01é')) == '"a\\"b\\\\c\\n\\u0001é"'


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1.0, "1.0"), (-1.0, "-1.0"), (0.0, "0.0"), (-0.0, "-0.0"), (2.5, "2.5"), (0.1, "0.1"),
        (1e15, "1e15"), (1e14, "100000000000000.0"), (123456789012345680.0, "1.2345678901234568e17"),
        (1234567890123456.8, "1234567890123456.8"), (1e-14, "0.00000000000001"),
        (1e-15, "0.000000000000001"), (1e-16, "1e-16"),
        (-1.25e-20, "-1.25e-20"), (1.7976931348623157e308, "1.7976931348623157e308"), (5e-324, "5e-324"),
        (0.0001, "0.0001"), (123.456, "123.456"),
    ],
)  # fmt: skip
def test_json_double_as_mysql_prints_it(value: float, text: str) -> None:
    assert jsonb.to_text(b"\x0b" + struct.pack("<d", value)) == text


def test_json_containers() -> None:
    # [1, 2.5, "x", null, [true]] with inlined int16 / literals
    inner = small_array([(jsonb.LITERAL, b"")], inline={0: 1})
    doc = small_array(
        [(jsonb.INT16, b""), (jsonb.DOUBLE, struct.pack("<d", 2.5)), (jsonb.STRING, jstr("x")),
         (jsonb.LITERAL, b""), (jsonb.SMALL_ARRAY, inner)],
        inline={0: 1, 3: 0},
    )  # fmt: skip
    assert jsonb.to_text(b"\x02" + doc) == '[1, 2.5, "x", null, [true]]'
    obj = small_object([("a", jsonb.INT32, struct.pack("<i", 7)), ("bb", jsonb.SMALL_ARRAY, small_array([]))])
    assert jsonb.to_text(b"\x00" + obj) == '{"a": 7, "bb": []}'
    assert jsonb.to_text(b"\x00" + small_object([])) == "{}"


def test_json_large_containers_inline_32_bit_integers() -> None:
    # Large array of [int32 -5 (inlined), uint32 7 (inlined), "s" (offset)]
    header = 8 + 5 * 3
    body = jstr("s")
    doc = struct.pack("<II", 3, header + len(body))
    doc += bytes([jsonb.INT32]) + struct.pack("<i", -5)
    doc += bytes([jsonb.UINT32]) + struct.pack("<I", 7)
    doc += bytes([jsonb.STRING]) + struct.pack("<I", header)
    assert jsonb.to_text(b"\x03" + doc + body) == '[-5, 7, "s"]'
    # Large object {"k": true}
    header = 8 + 6 + 5
    obj = (
        struct.pack("<II", 1, header + 1)
        + struct.pack("<IH", header, 1)
        + bytes([jsonb.LITERAL])
        + struct.pack("<I", 1)
        + b"k"
    )
    assert jsonb.to_text(b"\x01" + obj) == '{"k": true}'


def test_json_long_string_uses_multibyte_length() -> None:
    text = "é" * 100  # 200 bytes: length 0xC8 = 0b1_1001000 → 0xC8 0x01
    assert jsonb.to_text(b"\x0c\xc8\x01" + text.encode()) == '"' + text + '"'


def opaque(field_type: int, raw: bytes) -> bytes:
    return b"\x0f" + bytes([field_type, len(raw)]) + raw


def packed_datetime(date: tuple[int, int, int], time: tuple[int, int, int], us: int) -> bytes:
    (y, mo, d), (h, mi, s) = date, time
    ymd = ((y * 13 + mo) << 5) | d
    hms = (h << 12) | (mi << 6) | s
    return struct.pack("<q", ((ymd << 17 | hms) << 24) + us)


def test_json_opaque_values() -> None:
    assert jsonb.to_text(opaque(246, bytes([5, 2]) + encode_decimal("-12.50", 5, 2))) == "-12.50"
    assert (
        jsonb.to_text(opaque(12, packed_datetime((2024, 2, 29), (12, 34, 56), 789)))
        == '"2024-02-29 12:34:56.000789"'
    )
    assert (
        jsonb.to_text(opaque(7, packed_datetime((1970, 1, 2), (0, 0, 0), 0)))
        == '"1970-01-02 00:00:00.000000"'
    )
    assert jsonb.to_text(opaque(10, packed_datetime((2024, 2, 29), (0, 0, 0), 0))) == '"2024-02-29"'
    hms = (838 << 12) | (59 << 6) | 59
    assert jsonb.to_text(opaque(11, struct.pack("<q", -((hms << 24) + 500000)))) == '"-838:59:59.500000"'
    assert jsonb.to_text(opaque(253, b"plain")) == '"plain"'
    assert jsonb.to_text(opaque(252, b"\x00\xff")) == '"base64:type252:AP8="'


def test_json_malformed() -> None:
    with pytest.raises(DecodeError):
        jsonb.to_text(b"\x0d")
    with pytest.raises(DecodeError):
        jsonb.to_text(b"\x04\x07")
    with pytest.raises(DecodeError):
        jsonb.to_text(b"\x02\x05\x00\x40\x00")  # 5 elements, 64 bytes, but nothing there


def test_a_timestamp_of_zero_seconds_with_a_fraction_is_the_epoch_not_the_zero_timestamp() -> None:
    """'1970-01-01 00:00:00.9999' UTC is stored (0 seconds, a fraction): only 0 with no fraction is the zero
    TIMESTAMP (the generative test's seed 4101 NO_LOG published '0000-00-00 00:00:00.9999')."""
    from relay.binlog.values import TimestampZone, _timestamp2

    decode = _timestamp2(4, TimestampZone())
    text, end = decode(bytes(4) + (9999).to_bytes(2, "big"), 0)
    assert (str(text), end) == ("1970-01-01 00:00:00.9999", 6)
    assert getattr(text, "micros", None) == 999_900
    zero, _ = decode(bytes(6), 0)
    assert str(zero) == "0000-00-00 00:00:00.0000" and not hasattr(zero, "micros")
