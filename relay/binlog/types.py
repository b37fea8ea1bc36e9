"""MySQL column types: binlog type codes, TABLE_MAP metadata, canal's sqlType / mysqlType / length.

Owned here: how one column is described — the type metadata bytes of a TABLE_MAP event
(``read_column_metadata``), the real type behind a STRING column (ENUM / SET / CHAR / BINARY), and
the three things canal's ``Column`` says about a type (``column_meta``). Also the storage format of
DECIMAL (shared by the row decoder and the JSON decoder) and the text of FLOAT / DOUBLE values in
Java's ``Float.toString`` / ``Double.toString`` form (JDK 19+: shortest exact digits). Called on
the binlog reader thread by ``relay.binlog.tablemap`` when a TABLE_MAP is decoded (once per distinct
table map, cached there); the ``ColumnMeta`` values go to ``relay.binlog.rows`` and on to the entry
builder.

sqlType — the ``java.sql.Types`` code canal's ``LogEventConvert`` reports (facts from canal 1.1.x
``RowsLogBuffer.mysqlToJavaType``/``fetchValue`` and ``LogEventConvert.parseOneRow``):
  TINYINT -6, SMALLINT 5, MEDIUMINT/INT 4, BIGINT -5, DECIMAL 3, FLOAT 7 (REAL), DOUBLE 8, BIT -7,
  DATE 91, TIME 92, DATETIME/TIMESTAMP 93, YEAR 12 (VARCHAR), CHAR 1, VARCHAR 12, JSON 12,
  TEXT family 2005 (CLOB), BLOB family / BINARY / VARBINARY / GEOMETRY 2004 (BLOB).
  VECTOR (MySQL 9.0): canal has no mapping for it; we send MySQL's ``VECTOR_TO_STRING`` text, so
  we report VARCHAR (12), as for JSON — the code describes the text value, not the stored floats.
  Two deliberate differences, both so that the code describes the value we actually send:
  * unsigned integers: canal widens the type one step (TINYINT→SMALLINT, SMALLINT→INTEGER,
    INT→BIGINT, BIGINT→DECIMAL) only for a value above the signed maximum, so its sqlType changes
    from row to row; we always report the widened type, which holds every value of the column;
  * ENUM / SET: canal sends the index (INTEGER 4) / the bitmask (BIT -7); we send the member names
    (what SELECT shows), so we report CHAR (1).
  canal reports VARBINARY/LONGVARBINARY for a NULL BLOB (its conversion is skipped for NULL); we
  report the column's type whatever the value.

mysqlType — MySQL 8's ``COLUMN_TYPE`` text without display widths and ZEROFILL: ``int unsigned``,
``decimal(12,2)``, ``decimal(5,2) unsigned``, ``float unsigned``,
``varchar(16)`` (characters = max bytes / the charset's max bytes per char), ``char(4)``, ``binary(4)``,
``varbinary(8)``, ``text``/``mediumtext``…, ``blob``/…, ``datetime(6)``, ``time(3)``, ``timestamp``,
``year``, ``bit(5)``, ``enum('a','b')``, ``set('x','y')``, ``json``, ``float``, ``double``, ``geometry``,
``vector(3)`` (dimensions from the TABLE_MAP's VECTOR_DIMENSIONALITY metadata; ``vector`` without it).
On MariaDB a JSON column is LONGTEXT in the binlog and is reported as ``longtext`` (as canal does,
whose text comes from ``DESC``). Without a charset (binlog_row_metadata=MINIMAL) lengths are bytes.

length — canal's ``Column.length`` is not filled by canal's converter (always 0). We report the
declared length where the type has one: characters for CHAR/VARCHAR, bytes for BINARY/VARBINARY,
precision for DECIMAL, bits for BIT, dimensions for VECTOR; 0 for every other type.
"""

from __future__ import annotations

import functools
import math
import struct
from collections.abc import Callable
from fractions import Fraction

from relay.binlog import charsets
from relay.binlog.events import ColumnMeta
from relay.errors import DecodeError

# Binlog type codes (MySQL ``enum_field_types``).
DECIMAL = 0
TINY = 1
SHORT = 2
LONG = 3
FLOAT = 4
DOUBLE = 5
NULL = 6
TIMESTAMP = 7
LONGLONG = 8
INT24 = 9
DATE = 10
TIME = 11
DATETIME = 12
YEAR = 13
NEWDATE = 14
VARCHAR = 15
BIT = 16
TIMESTAMP2 = 17
DATETIME2 = 18
TIME2 = 19
VECTOR = 242  # MySQL 9.0: float32 array, stored like a LONGBLOB (4-byte length)
JSON = 245
NEWDECIMAL = 246
ENUM = 247
SET = 248
TINY_BLOB = 249
MEDIUM_BLOB = 250
LONG_BLOB = 251
BLOB = 252
VAR_STRING = 253
STRING = 254
GEOMETRY = 255

# java.sql.Types codes.
T_BIT, T_TINYINT, T_SMALLINT, T_INTEGER, T_BIGINT = -7, -6, 5, 4, -5
T_REAL, T_DOUBLE, T_DECIMAL = 7, 8, 3
T_CHAR, T_VARCHAR, T_DATE, T_TIME, T_TIMESTAMP = 1, 12, 91, 92, 93
T_BLOB, T_CLOB, T_OTHER = 2004, 2005, 1111

# Metadata size in the TABLE_MAP block, per type (0 when absent from this table).
_ONE_BYTE = frozenset({FLOAT, DOUBLE, BLOB, TINY_BLOB, MEDIUM_BLOB, LONG_BLOB, GEOMETRY, JSON, VECTOR})
_ONE_BYTE |= {TIMESTAMP2, DATETIME2, TIME2}
_TWO_BYTES_LE = frozenset({VARCHAR, VAR_STRING, BIT})
_TWO_BYTES_BE = frozenset({STRING, ENUM, SET, NEWDECIMAL})

_INTEGERS = {TINY: "tinyint", SHORT: "smallint", INT24: "mediumint", LONG: "int", LONGLONG: "bigint"}
_INT_SQL = {TINY: T_TINYINT, SHORT: T_SMALLINT, INT24: T_INTEGER, LONG: T_INTEGER, LONGLONG: T_BIGINT}
_UINT_SQL = {TINY: T_SMALLINT, SHORT: T_INTEGER, INT24: T_INTEGER, LONG: T_BIGINT, LONGLONG: T_DECIMAL}
_BLOB_NAMES = {1: "tiny", 2: "", 3: "medium", 4: "long"}
_TEMPORAL = {
    DATE: ("date", T_DATE), NEWDATE: ("date", T_DATE), YEAR: ("year", T_VARCHAR),
    TIME: ("time", T_TIME), DATETIME: ("datetime", T_TIMESTAMP), TIMESTAMP: ("timestamp", T_TIMESTAMP),
}  # fmt: skip
_FRACTIONAL = {TIME2: "time", DATETIME2: "datetime", TIMESTAMP2: "timestamp"}

# DECIMAL storage: 9 decimal digits per 4-byte word, and the bytes for a partial word of n digits.
DIG_PER_WORD = 9
DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)


def read_column_metadata(type_code: int, data: bytes, pos: int) -> tuple[int, int]:
    """Read one column's type metadata from a TABLE_MAP metadata block at ``pos``.

    Returns (meta, new_pos). ``meta`` packs the bytes as the server does (e.g. for STRING: real type
    in the high byte, length in the low byte; for NEWDECIMAL: precision << 8 | scale).
    Layouts: FLOAT/DOUBLE/BLOB/GEOMETRY/JSON/VECTOR one byte (the pack length; MySQL rpl_utility.cc
    ``read_field_metadata``); TIME2/DATETIME2/TIMESTAMP2
    one byte (fsp); VARCHAR/VAR_STRING two bytes little-endian (max bytes); BIT two bytes, bits % 8
    then whole bytes (meta = bytes << 8 | bits % 8); STRING/ENUM/SET two bytes, real type then length
    (meta = first << 8 | second); NEWDECIMAL precision then scale; every other type none.
    """
    if type_code in _ONE_BYTE:
        return data[pos], pos + 1
    if type_code in _TWO_BYTES_LE:
        return data[pos] | data[pos + 1] << 8, pos + 2
    if type_code in _TWO_BYTES_BE:
        return data[pos] << 8 | data[pos + 1], pos + 2
    return 0, pos


def string_type(meta: int) -> tuple[int, int]:
    """A STRING column's (real type, max length in bytes) from its metadata.

    A CHAR longer than 255 bytes stores bits 8-9 of its length, inverted, in bits 4-5 of the type
    byte (MySQL bug #37426); the real type then is the type byte with those bits set (STRING).
    """
    high, low = meta >> 8, meta & 0xFF
    if high == 0:  # metadata from an old server: the length alone
        return STRING, low
    if (high & 0x30) != 0x30:
        return high | 0x30, low | (((high & 0x30) ^ 0x30) << 4)
    return high, low


def real_type(type_code: int, meta: int) -> int:
    """The column's real type: STRING resolves to ENUM, SET or STRING."""
    return string_type(meta)[0] if type_code == STRING else type_code


def decimal_size(precision: int, scale: int) -> int:
    """Bytes a DECIMAL(precision, scale) value takes in a row image."""
    intg = precision - scale
    return (
        (intg // DIG_PER_WORD) * 4
        + DIG2BYTES[intg % DIG_PER_WORD]
        + (scale // DIG_PER_WORD) * 4
        + DIG2BYTES[scale % DIG_PER_WORD]
    )


def decode_decimal(data: bytes, pos: int, precision: int, scale: int) -> tuple[str, int]:
    """A binary DECIMAL at ``pos`` → (plain text with exactly ``scale`` fraction digits, new pos)."""
    return decimal_decoder(precision, scale)(data, pos)


@functools.lru_cache(maxsize=512)
def decimal_decoder(precision: int, scale: int) -> Callable[[bytes, int], tuple[str, int]]:
    """The decoder of DECIMAL(precision, scale) values, its digit groups laid out once.

    Format (MySQL ``decimal2bin``): the integer digits then the fraction digits, each side cut in
    9-digit groups stored as 4-byte big-endian words, the group furthest from the point partial
    (``DIG2BYTES`` bytes); the first bit is flipped, and a negative value has every byte inverted.
    The whole value is read as one integer and the groups are cut out of it by shifts.
    """
    intg = precision - scale
    widths = [intg % DIG_PER_WORD] + [DIG_PER_WORD] * (intg // DIG_PER_WORD)
    widths += [DIG_PER_WORD] * (scale // DIG_PER_WORD) + [scale % DIG_PER_WORD]
    groups = [(DIG2BYTES[w], w) for w in widths if w]
    size = sum(nbytes for nbytes, _ in groups)
    if size == 0:
        raise DecodeError(f"DECIMAL({precision},{scale}) has no digits")
    # (shift, mask, multiplier) per group: its bytes' place in the integer, its digits' place in the value.
    layout: list[tuple[int, int, int]] = []
    bytes_after, digits_after = size, precision
    for nbytes, digits in groups:
        bytes_after -= nbytes
        digits_after -= digits
        layout.append((8 * bytes_after, (1 << (8 * nbytes)) - 1, 10**digits_after))
    sign_bit, ones = 1 << (8 * size - 1), (1 << (8 * size)) - 1

    def decode(data: bytes, pos: int) -> tuple[str, int]:
        end = pos + size
        if end > len(data):
            raise DecodeError(f"DECIMAL({precision},{scale}) value truncated")
        stored = int.from_bytes(data[pos:end], "big")
        negative = not stored & sign_bit
        stored = (~stored & ones if negative else stored) ^ sign_bit
        value = 0
        for shift, mask, multiplier in layout:
            value += (stored >> shift & mask) * multiplier
        digits = str(value)
        if scale:
            if len(digits) <= scale:
                digits = digits.rjust(scale + 1, "0")
            digits = digits[:-scale] + "." + digits[-scale:]
        return ("-" + digits if negative and value else digits), end

    return decode


def _quote_members(kind: str, values: tuple[str, ...] | None) -> str:
    if values is None:
        return kind
    return kind + "(" + ",".join("'" + v.replace("'", "''") + "'" for v in values) + ")"


def _describe_string(
    real: int, max_bytes: int, charset: int | None, values: tuple[str, ...] | None
) -> tuple[str, int, int]:
    """(mysqlType, sqlType, length) for CHAR / BINARY / ENUM / SET columns."""
    if real == ENUM:
        return _quote_members("enum", values), T_CHAR, 0
    if real == SET:
        return _quote_members("set", values), T_CHAR, 0
    if charsets.is_binary(charset):
        return f"binary({max_bytes})", T_BLOB, max_bytes
    chars = _chars(max_bytes, charset)
    return f"char({chars})", T_CHAR, chars


def _chars(max_bytes: int, charset: int | None) -> int:
    cs = charsets.charset_of(charset)
    return max_bytes // cs.maxlen if cs is not None else max_bytes


def describe(
    type_code: int,
    meta: int,
    unsigned: bool,
    charset: int | None,
    values: tuple[str, ...] | None = None,
    dimensions: int | None = None,
) -> tuple[str, int, int]:
    """(mysqlType, sqlType, length) of one column, as the module docstring describes."""
    if type_code == VECTOR:
        if dimensions is None:
            return "vector", T_VARCHAR, 0
        return f"vector({dimensions})", T_VARCHAR, dimensions
    if type_code in _INTEGERS:
        if unsigned:
            return _INTEGERS[type_code] + " unsigned", _UINT_SQL[type_code], 0
        return _INTEGERS[type_code], _INT_SQL[type_code], 0
    if type_code in (STRING, ENUM, SET):
        real, max_bytes = string_type(meta) if type_code == STRING else (type_code, meta & 0xFF)
        return _describe_string(real, max_bytes, charset, values)
    if type_code in (VARCHAR, VAR_STRING):
        if charsets.is_binary(charset):
            return f"varbinary({meta})", T_BLOB, meta
        chars = _chars(meta, charset)
        return f"varchar({chars})", T_VARCHAR, chars
    if type_code in (BLOB, TINY_BLOB, MEDIUM_BLOB, LONG_BLOB):
        prefix = _BLOB_NAMES.get(meta, "")
        if charset is None or charsets.is_binary(charset):
            return prefix + "blob", T_BLOB, 0
        return prefix + "text", T_CLOB, 0
    if type_code == NEWDECIMAL:
        precision, scale = meta >> 8, meta & 0xFF
        return f"decimal({precision},{scale})" + (" unsigned" if unsigned else ""), T_DECIMAL, precision
    if type_code in _FRACTIONAL:
        name = _FRACTIONAL[type_code]
        sql = T_TIME if type_code == TIME2 else T_TIMESTAMP
        return (f"{name}({meta})" if meta else name), sql, 0
    if type_code in _TEMPORAL:
        name, sql = _TEMPORAL[type_code]
        return name, sql, 0
    if type_code == BIT:
        bits = (meta >> 8) * 8 + (meta & 0xFF)
        return f"bit({bits})", T_BIT, bits
    simple = {FLOAT: ("float", T_REAL), DOUBLE: ("double", T_DOUBLE), JSON: ("json", T_VARCHAR),
              GEOMETRY: ("geometry", T_BLOB)}  # fmt: skip
    if type_code in simple:
        name, sql = simple[type_code]
        return name + (" unsigned" if unsigned and type_code in (FLOAT, DOUBLE) else ""), sql, 0
    raise DecodeError(f"unsupported column type {type_code} (metadata 0x{meta:04x})")


def column_meta(
    index: int,
    type_code: int,
    meta: int,
    nullable: bool,
    *,
    name: str | None,
    unsigned: bool,
    charset: int | None,
    is_key: bool,
    enum_values: tuple[str, ...] | None = None,
    set_values: tuple[str, ...] | None = None,
    dimensions: int | None = None,
) -> ColumnMeta:
    """Build a ``ColumnMeta`` from what a TABLE_MAP event says about one column.

    ``type_code``/``meta`` are as read from the event (the real type of a STRING column is resolved
    here). ``name`` None means the event had no names (binlog_row_metadata=MINIMAL): "@<index+1>".
    ``dimensions``: a VECTOR column's dimensions when the event said (VECTOR_DIMENSIONALITY).
    """
    real = real_type(type_code, meta)
    values = enum_values if real == ENUM else set_values if real == SET else None
    mysql_type, sql_type, length = describe(type_code, meta, unsigned, charset, values, dimensions)
    return ColumnMeta(
        index=index,
        name=name if name is not None else f"@{index + 1}",
        type_code=real,
        meta=meta,
        nullable=nullable,
        unsigned=unsigned,
        charset=charset,
        is_key=is_key,
        mysql_type=mysql_type,
        sql_type=sql_type,
        length=length,
        enum_values=enum_values,
        set_values=set_values,
    )


# ---- FLOAT / DOUBLE text: Java's Float.toString / Double.toString (what canal sends) ----------
#
# Java (JDK 19+ specification, which older JDKs approximate): the shortest decimal that rounds to
# the value, but never fewer than 2 significant digits, and among the candidates of that length
# the one closest to the value; written as plain decimal with at least one fraction digit when
# 1e-3 <= |v| < 1e7 ("100.0", "0.001"), else as d.dddE±n ("1.0E7", "4.9E-324").

_F32 = struct.Struct("<f")
_U32 = struct.Struct("<I")


def repr_digits(text: str) -> tuple[str, int]:
    """Digits and decimal-point position of a positive number's text: value = 0.DIGITS × 10**decpt."""
    mantissa, _, exp = text.partition("e")
    whole, _, fraction = mantissa.partition(".")
    all_digits = whole + fraction
    digits = all_digits.lstrip("0")
    decpt = len(whole) - (len(all_digits) - len(digits)) + (int(exp) if exp else 0)
    return digits.rstrip("0") or "0", decpt


def _rounding_interval(x: float, single: bool) -> tuple[Fraction, Fraction, bool]:
    """The exact interval of reals that round to ``x`` (a float32 when ``single``), and whether its
    ends belong to it (round-half-even: they do when x's significand is even)."""
    if single:
        bits = _U32.unpack(_F32.pack(x))[0]
        below = _F32.unpack(_U32.pack(bits - 1))[0] if bits & 0x7FFFFFFF else -x
        above = _F32.unpack(_U32.pack(bits + 1))[0]
        even = bits & 1 == 0
    else:
        below, above = math.nextafter(x, -math.inf), math.nextafter(x, math.inf)
        even = (struct.unpack("<Q", struct.pack("<d", x))[0] & 1) == 0
    exact = Fraction(x)
    low = (exact + Fraction(below)) / 2
    # Above the largest finite value the interval continues with the same spacing.
    high = (exact + Fraction(above)) / 2 if math.isfinite(above) else exact + (exact - low)
    return low, high, even


def closest_digits(x: float, length: int, single: bool) -> tuple[str, int] | None:
    """The ``length``-digit decimal closest to positive ``x`` that rounds back to it, as
    (digits, decpt); None when no decimal of that length does."""
    lo, hi, inclusive = _rounding_interval(x, single)
    exact = Fraction(x)
    rounded = f"{x:.{length - 1}e}"
    mantissa, _, exp = rounded.partition("e")
    n0, q = int(mantissa.replace(".", "")), int(exp) - (length - 1)
    best: tuple[Fraction, int] | None = None
    for n in (n0 - 1, n0, n0 + 1):
        value = Fraction(n) * Fraction(10) ** q
        inside = lo < value < hi or (inclusive and value in (lo, hi))
        if n > 0 and inside:
            distance = abs(value - exact)
            if best is None or distance < best[0] or (distance == best[0] and n % 2 == 0):
                best = (distance, n)
    if best is None:
        return None
    digits = str(best[1])
    return digits.rstrip("0") or "0", len(digits) + q


def java_text(digits: str, decpt: int, negative: bool) -> str:
    """Java's Double.toString layout of 0.DIGITS × 10**decpt."""
    sign = "-" if negative else ""
    exponent = decpt - 1
    if -3 <= exponent < 7:
        if decpt <= 0:
            return sign + "0." + "0" * -decpt + digits
        if decpt >= len(digits):
            return sign + digits + "0" * (decpt - len(digits)) + ".0"
        return sign + digits[:decpt] + "." + digits[decpt:]
    return sign + digits[0] + "." + (digits[1:] or "0") + "E" + str(exponent)


def java_double(x: float) -> str:
    """``Double.toString(x)``."""
    if x == 0.0:
        return "-0.0" if math.copysign(1.0, x) < 0 else "0.0"
    if not math.isfinite(x):
        return "NaN" if math.isnan(x) else ("Infinity" if x > 0 else "-Infinity")
    if 1e-3 <= abs(x) < 1e7:
        # Python's repr is the same shortest text, laid out the same way, in this range (and the
        # doubles here are too dense for Java's two-digit minimum to pick another decimal).
        return repr(x)
    digits, decpt = repr_digits(repr(abs(x)))
    if len(digits) == 1:  # Java's minimum of two digits: the closest 2-digit decimal instead
        found = closest_digits(abs(x), 2, single=False)
        if found is not None:
            digits, decpt = found
    return java_text(digits, decpt, x < 0)


def _java_float(x: float) -> str:
    """``Float.toString(x)`` for a value that is exactly a float32."""
    if x == 0.0:
        return "-0.0" if math.copysign(1.0, x) < 0 else "0.0"
    if not math.isfinite(x):
        return "NaN" if math.isnan(x) else ("Infinity" if x > 0 else "-Infinity")
    for length in range(2, 10):
        found = closest_digits(abs(x), length, single=True)
        if found is not None:
            return java_text(found[0], found[1], x < 0)
    raise DecodeError(f"no decimal rounds to float {x!r}")  # unreachable: 9 digits always do


# Wrapped by hand, with its type spelled out: mypyc cannot infer the type of a decorated function
# another compiled module reads at import time ("Cannot determine type").
java_float: Callable[[float], str] = functools.lru_cache(maxsize=4096)(_java_float)
