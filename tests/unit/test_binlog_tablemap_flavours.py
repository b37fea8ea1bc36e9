"""TABLE_MAP details that differ by server: GEOMETRY in the charset count (MySQL vs MariaDB), ENUM/SET
member names in their column's charset, and MySQL 9.0 VECTOR columns (metadata, dimensions, value text).

Event bodies are built here from the documented TABLE_MAP layout (MySQL ``Table_map_event`` docs,
``rows_event.h`` optional metadata table) and the row images from ``Rows_log_event``'s layout.
"""

from __future__ import annotations

import struct

import pytest

from relay.binlog import events as ev
from relay.binlog import rows
from relay.binlog import types as t
from relay.errors import DecodeError
from tests.unit.test_binlog_parse import event, lenenc, names, parser, tlv

LATIN1, UTF8MB4, BINARY = 8, 45, 63


def table_map(columns: list[tuple[int, bytes]], optional: bytes, table_id: int = 40) -> bytes:
    """A TABLE_MAP body: (type code, metadata bytes) per column, every column nullable."""
    type_codes = bytes(code for code, _ in columns)
    meta = b"".join(m for _, m in columns)
    return (
        table_id.to_bytes(6, "little")
        + b"\x01\x00"
        + b"\x02db\x00\x01t\x00"
        + lenenc(len(columns))
        + type_codes
        + lenenc(len(meta))
        + meta
        + b"\xff" * ((len(columns) + 7) // 8)
        + optional
    )


def decode(mariadb: bool, body: bytes) -> ev.TableMapEvent:
    e = parser(mariadb=mariadb).parse(event(ev.TABLE_MAP_EVENT, body), 1)
    assert isinstance(e, ev.TableMapEvent)
    return e


def insert_row(table: ev.TableMapEvent, values: list[bytes]) -> tuple[str | None, ...]:
    n = len(table.columns)
    bitmap = ((1 << n) - 1).to_bytes((n + 7) // 8, "little")
    data = lenenc(n) + bitmap + bytes((n + 7) // 8) + b"".join(values)
    (row,) = rows.RowDecoder().decode_rows(ev.INSERT, data, 0, len(data), table)
    assert row.after is not None
    return row.after


# ---- GEOMETRY before a VARCHAR: which columns the charset lists count ---------------------------------

# id INT, g GEOMETRY, name VARCHAR(20), note TEXT
GEO_COLUMNS = [(t.LONG, b""), (t.GEOMETRY, b"\x04"), (t.VARCHAR, struct.pack("<H", 20)), (t.BLOB, b"\x02")]
GEO_NAMES = tlv(4, names("id", "g", "name", "note"))


@pytest.mark.parametrize(
    ("mariadb", "charset_field"),
    [
        # MySQL lists only CHAR/VARCHAR/TEXT/BLOB (and VECTOR): name, note.
        (False, tlv(3, lenenc(LATIN1) + lenenc(UTF8MB4))),
        (False, tlv(2, lenenc(UTF8MB4) + lenenc(0) + lenenc(LATIN1))),  # default, (index 0 → latin1)
        # MariaDB counts GEOMETRY as a character column too: g, name, note.
        (True, tlv(3, lenenc(BINARY) + lenenc(LATIN1) + lenenc(UTF8MB4))),
        (True, tlv(2, lenenc(UTF8MB4) + lenenc(0) + lenenc(BINARY) + lenenc(1) + lenenc(LATIN1))),
    ],
)
def test_geometry_before_varchar_on_each_flavour(mariadb: bool, charset_field: bytes) -> None:
    tm = decode(mariadb, table_map(GEO_COLUMNS, GEO_NAMES + charset_field))
    cols = {c.name: c for c in tm.columns}
    assert (cols["name"].charset, cols["note"].charset) == (LATIN1, UTF8MB4)
    assert cols["g"].charset == (BINARY if mariadb else None)
    assert (cols["name"].mysql_type, cols["name"].length) == ("varchar(20)", 20)
    assert (cols["note"].mysql_type, cols["g"].mysql_type) == ("text", "geometry")
    after = insert_row(
        tm, [struct.pack("<i", 1), struct.pack("<I", 2) + b"\x01\x02", b"\x04caf\xe9", b"\x02\x00\xc3\xa9"]
    )
    assert after == ("1", "\x01\x02", "café", "é")


def test_counting_geometry_the_other_flavours_way_would_shift_the_charsets() -> None:
    # The MySQL event read as MariaDB's: name would take the first entry (latin1 → g), note latin1.
    body = table_map(GEO_COLUMNS, GEO_NAMES + tlv(3, lenenc(LATIN1) + lenenc(UTF8MB4)))
    wrong = {c.name: c.charset for c in decode(True, body).columns}
    assert (wrong["g"], wrong["name"], wrong["note"]) == (LATIN1, UTF8MB4, None)


# ---- ENUM / SET member names in their column charset --------------------------------------------------

# e ENUM latin1, s SET utf8mb4, e2 ENUM utf8mb4
ENUM_COLUMNS = [(t.STRING, b"\xf7\x01"), (t.STRING, b"\xf8\x01"), (t.STRING, b"\xf7\x01")]


def members(*columns: tuple[bytes, ...]) -> bytes:
    return b"".join(lenenc(len(c)) + b"".join(lenenc(len(m)) + m for m in c) for c in columns)


ENUM_META = (
    tlv(4, names("e", "s", "e2"))
    + tlv(5, members(("müll".encode(), b"x")))
    + tlv(6, members((b"caf\xe9", b"th\xe9"), ("naïve".encode(), "😀".encode())))
)


@pytest.mark.parametrize(
    "charset_field",
    [
        tlv(11, lenenc(LATIN1) + lenenc(UTF8MB4) + lenenc(UTF8MB4)),  # ENUM_AND_SET_COLUMN_CHARSET
        tlv(10, lenenc(UTF8MB4) + lenenc(0) + lenenc(LATIN1)),  # ENUM_AND_SET_DEFAULT_CHARSET
    ],
)
def test_enum_and_set_members_use_their_column_charset(charset_field: bytes) -> None:
    tm = decode(False, table_map(ENUM_COLUMNS, ENUM_META + charset_field))
    e, s, e2 = tm.columns
    assert (e.charset, s.charset, e2.charset) == (LATIN1, UTF8MB4, UTF8MB4)
    assert e.enum_values == ("café", "thé") and e.mysql_type == "enum('café','thé')"
    assert s.set_values == ("müll", "x") and e2.enum_values == ("naïve", "😀")
    assert insert_row(tm, [b"\x01", b"\x03", b"\x02"]) == ("café", "müll,x", "😀")
    # What the relay does with it next (JSON, protobuf) must not fail: no lone surrogates.
    assert all(text.encode("utf-8") for c in tm.columns for text in c.mysql_type)


def test_enum_members_without_charset_metadata_decode_as_utf8_without_failing() -> None:
    tm = decode(False, table_map(ENUM_COLUMNS, ENUM_META))
    assert tm.columns[0].enum_values == ("caf\ufffd", "th\ufffd")  # not valid UTF-8: replaced, no crash
    assert tm.columns[2].enum_values == ("naïve", "😀")


# ---- VECTOR (MySQL 9.0) -----------------------------------------------------------------------------

# id INT, v VECTOR(3), w VECTOR(2), name VARCHAR(8): VECTOR counts as a character column (binary).
VECTOR_COLUMNS = [(t.LONG, b""), (t.VECTOR, b"\x04"), (t.VECTOR, b"\x04"), (t.VARCHAR, b"\x08\x00")]
VECTOR_META = (
    tlv(4, names("id", "v", "w", "name"))
    + tlv(2, lenenc(BINARY) + lenenc(2) + lenenc(UTF8MB4))  # default binary; name (3rd) utf8mb4
    + tlv(13, lenenc(3) + lenenc(2))  # VECTOR_DIMENSIONALITY
)


def floats(*values: float) -> bytes:
    raw = struct.pack(f"<{len(values)}f", *values)
    return struct.pack("<I", len(raw)) + raw


def test_vector_columns_metadata() -> None:
    tm = decode(False, table_map(VECTOR_COLUMNS, VECTOR_META))
    _, v, w, name = tm.columns
    assert (v.type_code, v.meta, v.charset) == (t.VECTOR, 4, BINARY)
    assert (v.mysql_type, v.sql_type, v.length) == ("vector(3)", 12, 3)
    assert (w.mysql_type, w.length) == ("vector(2)", 2)
    assert (name.charset, name.mysql_type) == (UTF8MB4, "varchar(2)")
    plain = decode(False, table_map(VECTOR_COLUMNS, tlv(4, names("id", "v", "w", "name"))))
    assert (plain.columns[1].mysql_type, plain.columns[1].length) == ("vector", 0)


def test_vector_values_as_vector_to_string_prints_them() -> None:
    tm = decode(False, table_map(VECTOR_COLUMNS, VECTOR_META))
    after = insert_row(
        tm,
        [
            struct.pack("<i", 7),
            floats(1.0, -2.5, 0.1),
            floats(1.401298464324817e-45, -3.4028234663852886e38),
            b"\x02ok",
        ],
    )
    # printf("%.5e"): float32 0.1 is 0.100000001490116…; the smallest denormal 1.4012984…e-45.
    assert after == ("7", "[1.00000e+00,-2.50000e+00,1.00000e-01]", "[1.40130e-45,-3.40282e+38]", "ok")
    assert rows.vector_text(struct.pack("<3f", -0.0, 123456.789, 6.02e23)) == (
        "[-0.00000e+00,1.23457e+05,6.02000e+23]"
    )


@pytest.mark.parametrize("raw", [b"", b"\x00\x00\x80"])
def test_malformed_vector_values_are_refused(raw: bytes) -> None:
    with pytest.raises(DecodeError, match="VECTOR"):
        rows.vector_text(raw)


# ---- SIGNEDNESS: which columns each flavour gives a bit ---------------------------------------------

# id INT, y YEAR, t TINYINT, d DECIMAL(5,2), f FLOAT, u SMALLINT — t signed, d unsigned, f unsigned, u signed.
YEAR_COLUMNS = [(t.LONG, b""), (t.YEAR, b""), (t.TINY, b""), (t.NEWDECIMAL, b"\x05\x02"), (t.FLOAT, b"\x04"),
                (t.SHORT, b"")]  # fmt: skip
YEAR_NAMES = tlv(4, names("id", "y", "t", "d", "f", "u"))
# MariaDB gives YEAR a bit (a Field_year is an unsigned Field_tiny): id 0, y 1, t 0, d 1, f 1, u 0.
MARIADB_BITS = tlv(1, bytes([0b01011000]))
# MySQL does not (is_numeric_type of the binlog type YEAR is false): id 0, t 0, d 1, f 1, u 0.
MYSQL_BITS = tlv(1, bytes([0b00110000]))


@pytest.mark.parametrize(("mariadb", "bits"), [(True, MARIADB_BITS), (False, MYSQL_BITS)])
def test_the_signedness_after_a_year_column_on_each_flavour(mariadb: bool, bits: bytes) -> None:
    tm = decode(mariadb, table_map(YEAR_COLUMNS, YEAR_NAMES + bits))
    signs = {c.name: c.unsigned for c in tm.columns}
    assert signs == {"id": False, "y": False, "t": False, "d": True, "f": True, "u": False}
    assert tm.signedness_from_binlog
    types_ = {c.name: c.mysql_type for c in tm.columns}
    assert (types_["y"], types_["t"], types_["d"], types_["f"]) == (
        "year", "tinyint", "decimal(5,2) unsigned", "float unsigned"
    )  # fmt: skip
    # t = -1 is published -1, u = -2 is -2: the bits of the YEAR and the DECIMAL are not theirs.
    values = [struct.pack("<i", 1), b"\x7c", b"\xff", bytes.fromhex("800132"), struct.pack("<f", 1.5)]
    values.append(b"\xfe\xff")
    assert insert_row(tm, values) == ("1", "2024", "-1", "1.50", "1.5", "-2")


def test_without_signedness_metadata_the_event_says_so() -> None:
    tm = decode(True, table_map(YEAR_COLUMNS, YEAR_NAMES))
    assert not tm.signedness_from_binlog
    assert not any(c.unsigned for c in tm.columns)
