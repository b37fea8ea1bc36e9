"""Column values of row images → canal's text: one decoder per column type, chosen once per table map.

Owned here: ``value_decoder`` (the decoder of one column, by type and metadata), ``TimestampZone`` (the
zone TIMESTAMP values are rendered in, one per connection) and ``Instant`` (a TIMESTAMP's text that also
knows its epoch microseconds). ``relay.binlog.rows`` builds its per-table plans from these, on the binlog
reader thread. A decoder maps (event bytes, offset of the value) to (text, offset after it).

Text forms (canal's, which equal what SELECT returns except where noted):
* integers: decimal, unsigned by the column's SIGNEDNESS metadata; DECIMAL: plain, exactly ``scale``
  fraction digits, no exponent;
* FLOAT / DOUBLE: Java's ``Float.toString`` / ``Double.toString`` (canal's form: ``1.0``, ``1.0E10``,
  ``3.4028235E38``) as JDK 19+ specifies it — the shortest text that reads back as exactly the stored
  value (``relay.binlog.types.java_float``). canal on an older JDK sometimes prints one digit more for
  the same value (e.g. ``3.7298942E10`` for our ``3.729894E10``): numerically identical. SELECT prints a
  FLOAT with 6 significant digits (``3.40282e38``), which loses the value, so we do not copy it;
* BIT(n): the unsigned decimal integer (canal's ``String.valueOf(long)``; equals ``SELECT col+0``);
* DATE, DATETIME(fsp), TIME(fsp): as SELECT shows them, exactly fsp fraction digits, negative and
  fractional TIME included (``-00:00:00.500000``), zero dates as ``0000-00-00[ 00:00:00[.000]]``;
* TIMESTAMP(fsp): stored as seconds since the epoch (UTC); rendered in the decoder's zone
  (``RowDecoder(zone)``, default UTC; the binlog source passes the server's ``time_zone`` so the
  text equals SELECT on the server; canal renders it in the JVM's zone); 0 is ``0000-00-00 00:00:00``.
  The text is an ``Instant``: a ``str`` that also holds the epoch microseconds, because the zone's text
  is ambiguous in the hour a DST change repeats; the canal-json codec adds them beside ``data``;
* YEAR: ``0000`` for 0, else 1901…2155;
* CHAR/VARCHAR/TEXT: decoded with the column's charset (``relay.binlog.charsets``); UTF-8 when unknown;
* BINARY/VARBINARY/BLOB/GEOMETRY: one ISO-8859-1 character per byte (canal's form); BINARY(n) padded
  back to n bytes with 0x00 (the binlog strips them; SELECT shows them);
* ENUM: the member name ('' for index 0); SET: the member names joined by ',' ('' for the empty set);
  without member names (binlog_row_metadata=MINIMAL) the index / bitmask as canal sends it;
* JSON: MySQL binary JSON as MySQL prints it (``relay.binlog.jsonb``); on MariaDB JSON is LONGTEXT.
* JSON in a PARTIAL_UPDATE_ROWS_EVENT (binlog_row_value_options=PARTIAL_JSON): the after image may
  hold a diff instead of the document; it is applied to the before image's document
  (``relay.binlog.jsondiff``) so the text is what the full after image would have given. Each after
  image starts with ``value_options`` (packed integer; 1 = PARTIAL_JSON) and, when set, one bit per
  JSON column of the table (LSB first) telling which columns hold a diff (rpl_record.cc ``pack_row``).
  A diff needs the full before image (binlog_row_image=FULL); without it, or when the diff does not
  fit the document, decoding fails naming the table, column and row;
* VECTOR (MySQL 9.0): little-endian float32s behind a 4-byte length, as ``VECTOR_TO_STRING`` prints
  them (sql/vector_conversion.h ``from_vector_to_string``): ``[`` each float as C's ``%.5e``
  (``1.00000e+00``), ``,`` between them, ``]``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta, timezone, tzinfo
from zoneinfo import ZoneInfo

from mypy_extensions import mypyc_attr

from relay.binlog import charsets, jsonb
from relay.binlog import types as t
from relay.binlog.events import ColumnMeta
from relay.errors import DecodeError

# A value decoder: (event bytes, offset of the value) → (text, offset after it).
ValueDecoder = Callable[[bytes, int], tuple[str, int]]

_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
_DATE_CACHE: dict[int, str] = {}  # days since the epoch → "YYYY-MM-DD" (few distinct days per stream)


@mypyc_attr(native_class=False)  # compiled (scripts/build-compiled): mypyc cannot subclass str natively
class Instant(str):
    """A TIMESTAMP's text in the decoder's zone (exactly the str canal gives) that also knows its instant:
    ``micros`` since the epoch (UTC). Compares, hashes and encodes as the text."""

    micros: int


def _instant(text: str, seconds: int, frac: str) -> str:
    if seconds == 0 and not frac.strip(".0"):  # the zero TIMESTAMP is no instant
        return text
    value = Instant(text)
    value.micros = seconds * 1_000_000 + (int(frac[1:].ljust(6, "0")) if frac else 0)
    return value


class TimestampZone:
    """The zone TIMESTAMP values are rendered in, with a fast path for fixed offsets (UTC, ``+08:00``).

    One per decoder (``RowDecoder``): each replication connection renders in its own server's zone, so a
    failover to a standby in another zone, or two instances in one process, never share it. ``zone`` is
    a tzinfo, an IANA name (``Asia/Shanghai``) or a MySQL offset (``+08:00``); the binlog source passes
    the server's ``@@time_zone`` (``SYSTEM`` resolved to ``@@system_time_zone``) or ``source.timezone``.
    """

    __slots__ = ("offset", "zone")

    def __init__(self, zone: tzinfo | str = UTC) -> None:
        self.zone: tzinfo = _parse_zone(zone) if isinstance(zone, str) else zone
        fixed = self.zone.utcoffset(None) if isinstance(self.zone, timezone) else None
        # The zone's fixed UTC offset in seconds when it has one; None: follow its rules (DST).
        self.offset: int | None = int(fixed.total_seconds()) if fixed is not None else None

    def text(self, seconds: int, zero: bool = True) -> str:
        """``YYYY-MM-DD hh:mm:ss`` of a TIMESTAMP's seconds since the epoch, in this zone; 0 is the zero
        TIMESTAMP unless ``zero`` is False (0 seconds with a fraction: the epoch's first second)."""
        if seconds == 0 and zero:
            return "0000-00-00 00:00:00"
        if self.offset is None:  # a zone with daylight saving: the slow, general path
            d = datetime.fromtimestamp(seconds, self.zone)
            return _DATETIME % (d.year, d.month, d.day, d.hour, d.minute, d.second)
        days, rest = divmod(seconds + self.offset, 86400)
        day = _DATE_CACHE.get(days)
        if day is None:
            if len(_DATE_CACHE) >= 4096:
                _DATE_CACHE.clear()
            day = date.fromordinal(_EPOCH_ORDINAL + days).isoformat()
            _DATE_CACHE[days] = day
        hours, rest = divmod(rest, 3600)
        return _TIME % (day, hours, rest // 60, rest % 60)


def _parse_zone(text: str) -> tzinfo:
    if text and text[0] in "+-" and ":" in text:
        hours, minutes = text[1:].split(":")
        offset = timedelta(hours=int(hours), minutes=int(minutes))
        return timezone(-offset if text[0] == "-" else offset)
    if text.upper() in ("UTC", "+00:00"):
        return UTC
    try:
        return ZoneInfo(text)
    except (KeyError, ValueError) as exc:
        raise DecodeError(f"unknown time zone {text!r}") from exc


# ---- integers, decimals, floating point, bits -------------------------------------------------


# Fixed-width decoders that a compiled row reader may inline: decoder → (struct code, size, render).
INLINE_DECODERS: dict[ValueDecoder, tuple[str, int, Callable[[float], str]]] = {}


def _fixed(fmt: str, render: Callable[[float], str] = str) -> ValueDecoder:
    unpack = struct.Struct(fmt).unpack_from
    size = struct.calcsize(fmt)

    def decode(data: bytes, pos: int) -> tuple[str, int]:
        return render(unpack(data, pos)[0]), pos + size

    INLINE_DECODERS[decode] = (fmt[1:], size, render)
    return decode


def _int24(signed: bool) -> ValueDecoder:
    def decode(data: bytes, pos: int) -> tuple[str, int]:
        return str(int.from_bytes(data[pos : pos + 3], "little", signed=signed)), pos + 3

    return decode


def _newdecimal(meta: int) -> ValueDecoder:
    return t.decimal_decoder(meta >> 8, meta & 0xFF)


def _bit(meta: int) -> ValueDecoder:
    size = ((meta >> 8) * 8 + (meta & 0xFF) + 7) // 8

    def decode(data: bytes, pos: int) -> tuple[str, int]:
        return str(int.from_bytes(data[pos : pos + size], "big")), pos + size

    return decode


# ---- temporal types -----------------------------------------------------------------------------


def _frac_reader(fsp: int) -> tuple[int, Callable[[bytes, int], str]]:
    """(bytes, reader) for the fraction part of DATETIME2/TIMESTAMP2: fsp digits, big-endian."""
    size = (fsp + 1) // 2
    if size == 0:
        return 0, lambda data, pos: ""
    # 1 byte holds 2 digits, 2 bytes 4, 3 bytes 6; an odd fsp stores one digit more (a 0).
    divisor = 10 ** (size * 2 - fsp)

    def read(data: bytes, pos: int) -> str:
        value = int.from_bytes(data[pos : pos + size], "big") // divisor
        return "." + str(value).zfill(fsp)

    return size, read


_DATE = "%04d-%02d-%02d"
_DATETIME = "%04d-%02d-%02d %02d:%02d:%02d"
_USEC = "%06d"
_TIME = "%s %02d:%02d:%02d"
_HMS = "%s%02d:%02d:%02d"


def _date(data: bytes, pos: int) -> tuple[str, int]:
    value = data[pos] | data[pos + 1] << 8 | data[pos + 2] << 16
    return _DATE % (value >> 9, (value >> 5) & 0x0F, value & 0x1F), pos + 3


def _year(data: bytes, pos: int) -> tuple[str, int]:
    value = data[pos]
    return ("0000" if value == 0 else str(1900 + value)), pos + 1


def _datetime2(fsp: int) -> ValueDecoder:
    size, frac = _frac_reader(fsp)

    def decode(data: bytes, pos: int) -> tuple[str, int]:
        packed = int.from_bytes(data[pos : pos + 5], "big") - 0x8000000000
        ymd, hms = packed >> 17, packed & 0x1FFFF
        day = _YMD_CACHE.get(ymd)
        if day is None:
            day = _ymd_text(ymd)
        text = _TIME % (day, hms >> 12, (hms >> 6) & 0x3F, hms & 0x3F)
        return (text + frac(data, pos + 5) if size else text), pos + 5 + size

    return decode


_YMD_CACHE: dict[int, str] = {}  # DATETIME2's packed year*13+month, day → "YYYY-MM-DD"


def _ymd_text(ymd: int) -> str:
    if len(_YMD_CACHE) >= 4096:
        _YMD_CACHE.clear()
    ym = ymd >> 5
    text = _DATE % (ym // 13, ym % 13, ymd & 0x1F)
    _YMD_CACHE[ymd] = text
    return text


def _timestamp2(fsp: int, zone: TimestampZone) -> ValueDecoder:
    size, frac = _frac_reader(fsp)
    _timestamp_text = zone.text

    def decode(data: bytes, pos: int) -> tuple[str, int]:
        seconds = int.from_bytes(data[pos : pos + 4], "big")
        fraction = frac(data, pos + 4) if size else ""
        # 0 seconds is the zero TIMESTAMP only without a fraction ('1970-01-01 00:00:00.9999' UTC is stored)
        text = _timestamp_text(seconds, not fraction.strip(".0"))
        return _instant(text + fraction, seconds, fraction), pos + 4 + size

    return decode


def _time2(fsp: int) -> ValueDecoder:
    """TIME2: 1 sign bit, 1 unused, 10 bits hour, 6 minute, 6 second, then the fraction.

    Read as MySQL's packed value (int part << 24 | microseconds, negated for negative times). A
    negative time with a fraction stores its int part rounded away from zero and the fraction
    counted back from it (``0x100 - frac`` for fsp 1-2, ``0x10000 - frac`` for fsp 3-4): undone here.
    """
    fsize = (fsp + 1) // 2
    unit = {0: 0, 1: 10000, 2: 100, 3: 1}[fsize]
    span = 1 << (8 * fsize)

    def decode(data: bytes, pos: int) -> tuple[str, int]:
        if fsize == 3:
            packed = int.from_bytes(data[pos : pos + 6], "big") - 0x800000000000
        else:
            intpart = int.from_bytes(data[pos : pos + 3], "big") - 0x800000
            frac = int.from_bytes(data[pos + 3 : pos + 3 + fsize], "big") if fsize else 0
            if intpart < 0 and frac:
                intpart += 1
                frac -= span
            packed = (intpart << 24) + frac * unit
        sign = "-" if packed < 0 else ""
        packed = abs(packed)
        hms, usec = packed >> 24, packed & 0xFFFFFF
        text = _HMS % (sign, (hms >> 12) & 0x3FF, (hms >> 6) & 0x3F, hms & 0x3F)
        if fsp:
            text += "." + (_USEC % usec)[:fsp]
        return text, pos + 3 + fsize

    return decode


def _time_old(data: bytes, pos: int) -> tuple[str, int]:
    """Pre-5.6 TIME: a signed 3-byte little-endian HHMMSS decimal number."""
    value = int.from_bytes(data[pos : pos + 3], "little", signed=True)
    sign, value = ("-", -value) if value < 0 else ("", value)
    return f"{sign}{value // 10000:02d}:{value // 100 % 100:02d}:{value % 100:02d}", pos + 3


def _datetime_old(data: bytes, pos: int) -> tuple[str, int]:
    """Pre-5.6 DATETIME: an 8-byte little-endian YYYYMMDDhhmmss decimal number."""
    value = int.from_bytes(data[pos : pos + 8], "little")
    d, tm = divmod(value, 1000000)
    date = f"{d // 10000:04d}-{d // 100 % 100:02d}-{d % 100:02d}"
    text = f"{date} {tm // 10000:02d}:{tm // 100 % 100:02d}:{tm % 100:02d}"
    return text, pos + 8


def _timestamp_old(zone: TimestampZone) -> ValueDecoder:
    def decode(data: bytes, pos: int) -> tuple[str, int]:
        seconds = int.from_bytes(data[pos : pos + 4], "little")
        return _instant(zone.text(seconds), seconds, ""), pos + 4

    return decode


# ---- strings, binaries, enum, set, json -----------------------------------------------------------


def _prefixed(prefix: int, render: Callable[[bytes], str]) -> ValueDecoder:
    """A value preceded by its length in ``prefix`` little-endian bytes."""
    if prefix == 1:

        def decode1(data: bytes, pos: int) -> tuple[str, int]:
            end = pos + 1 + data[pos]
            return render(data[pos + 1 : end]), end

        return decode1

    def decode(data: bytes, pos: int) -> tuple[str, int]:
        start = pos + prefix
        end = start + int.from_bytes(data[pos:start], "little")
        return render(data[start:end]), end

    return decode


_iso8859_1 = charsets.iso8859_1


def _text_render(column: ColumnMeta) -> Callable[[bytes], str]:
    if charsets.is_binary(column.charset):
        return _iso8859_1
    charset = charsets.charset_of(column.charset)
    return charset.decode if charset is not None else charsets.UTF8MB4.decode


def _string(column: ColumnMeta) -> ValueDecoder:
    _, max_bytes = t.string_type(column.meta)
    prefix = 1 if max_bytes < 256 else 2
    if charsets.is_binary(column.charset):
        # BINARY(n): the binlog drops trailing 0x00 bytes; SELECT (and the column) has all n.
        def padded(raw: bytes) -> str:
            return raw.ljust(max_bytes, b"\x00").decode("latin-1")

        return _prefixed(prefix, padded)
    return _prefixed(prefix, _text_render(column))


def _blob(column: ColumnMeta) -> ValueDecoder:
    if column.charset is None:  # no charset in the event: canal's byte form
        return _prefixed(column.meta, _iso8859_1)
    return _prefixed(column.meta, _text_render(column))


def _enum(column: ColumnMeta) -> ValueDecoder:
    size = column.meta & 0xFF
    names = ("", *column.enum_values) if column.enum_values is not None else None

    def decode(data: bytes, pos: int) -> tuple[str, int]:
        index = int.from_bytes(data[pos : pos + size], "little")
        if names is None:
            return str(index), pos + size
        if index >= len(names):
            raise DecodeError(f"ENUM column {column.name}: index {index} beyond its {len(names) - 1} members")
        return names[index], pos + size

    return decode


def _set(column: ColumnMeta) -> ValueDecoder:
    size = column.meta & 0xFF
    names = column.set_values

    def decode(data: bytes, pos: int) -> tuple[str, int]:
        mask = int.from_bytes(data[pos : pos + size], "little")
        if names is None:
            return str(mask), pos + size
        return ",".join(name for bit, name in enumerate(names) if mask >> bit & 1), pos + size

    return decode


def _json(column: ColumnMeta) -> ValueDecoder:
    return _prefixed(column.meta, jsonb.to_text)


def vector_text(raw: bytes) -> str:
    """A VECTOR value's float32s as ``VECTOR_TO_STRING`` prints them."""
    if not raw or len(raw) % 4:
        raise DecodeError(f"VECTOR value of {len(raw)} bytes is not a non-empty array of float32")
    # Python's "e" format is correctly rounded, like glibc's printf("%.5e") that MySQL uses.
    return "[" + ",".join(f"{value:.5e}" for (value,) in struct.iter_unpack("<f", raw)) + "]"


def _vector(column: ColumnMeta) -> ValueDecoder:
    return _prefixed(column.meta, vector_text)


_SIMPLE: dict[int, ValueDecoder] = {
    t.FLOAT: _fixed("<f", t.java_float),
    t.DOUBLE: _fixed("<d", t.java_double),
    t.DATE: _date,
    t.NEWDATE: _date,
    t.YEAR: _year,
    t.TIME: _time_old,
    t.DATETIME: _datetime_old,
}
_INTS = {t.TINY: "b", t.SHORT: "h", t.LONG: "i", t.LONGLONG: "q"}
# One shared decoder per integer format: compiled row readers recognise them (``_INLINE``).
_INT_DECODERS = {f"<{c}": _fixed(f"<{c}") for code in _INTS.values() for c in (code, code.upper())}


def value_decoder(column: ColumnMeta, zone: TimestampZone | None = None) -> ValueDecoder:
    """The decoder for one column's values, chosen once per table map (TIMESTAMP in ``zone``, UTC if None)."""
    zone = zone or UTC_ZONE
    code, meta = column.type_code, column.meta
    if code in _INTS:
        fmt = _INTS[code]
        return _INT_DECODERS["<" + (fmt.upper() if column.unsigned else fmt)]
    if code == t.INT24:
        return _int24(not column.unsigned)
    if code in _SIMPLE:
        return _SIMPLE[code]
    builders: dict[int, Callable[[], ValueDecoder]] = {
        t.NEWDECIMAL: lambda: _newdecimal(meta),
        t.BIT: lambda: _bit(meta),
        t.DATETIME2: lambda: _datetime2(meta),
        t.TIMESTAMP2: lambda: _timestamp2(meta, zone),
        t.TIMESTAMP: lambda: _timestamp_old(zone),
        t.TIME2: lambda: _time2(meta),
        t.STRING: lambda: _string(column),
        t.VARCHAR: lambda: _prefixed(1 if meta < 256 else 2, _text_render(column)),
        t.VAR_STRING: lambda: _prefixed(1 if meta < 256 else 2, _text_render(column)),
        t.BLOB: lambda: _blob(column),
        t.GEOMETRY: lambda: _prefixed(meta, _iso8859_1),
        t.JSON: lambda: _json(column),
        t.VECTOR: lambda: _vector(column),
        t.ENUM: lambda: _enum(column),
        t.SET: lambda: _set(column),
    }
    if code in (t.TINY_BLOB, t.MEDIUM_BLOB, t.LONG_BLOB):
        code = t.BLOB
    if code not in builders:
        raise DecodeError(f"column {column.name}: no decoder for type {code} (metadata 0x{meta:04x})")
    return builders[code]()


UTC_ZONE = TimestampZone(UTC)


# ---- the C row reader's steps ----------------------------------------------------------------------

# What relay/binlog/_rowimage.c does in C instead of calling a column's decoder (see that file): its ops.
OP_CALL, OP_INT, OP_FLOAT, OP_DECIMAL, OP_DATE, OP_DATETIME2, OP_TEXT, OP_ENUM = range(8)
NativeStep = tuple[int, int, int, object]  # (op, a, b, obj)
_INT_SIZES = {t.TINY: 1, t.SHORT: 2, t.INT24: 3, t.LONG: 4, t.LONGLONG: 8}
_BLOBS = (t.BLOB, t.TINY_BLOB, t.MEDIUM_BLOB, t.LONG_BLOB)


def native_step(column: ColumnMeta) -> NativeStep:
    """How the C row reader reads this column: the same text as ``value_decoder(column)`` gives (the
    reader calls that decoder for ``OP_CALL`` and for any value it does not take as ordinary)."""
    code, meta = column.type_code, column.meta
    if code in _INT_SIZES:
        return OP_INT, _INT_SIZES[code], 0 if column.unsigned else 1, None
    if code == t.FLOAT:
        return OP_FLOAT, 4, 0, t.java_float
    if code == t.DOUBLE:
        return OP_FLOAT, 8, 0, t.java_double
    if code == t.NEWDECIMAL:
        return OP_DECIMAL, meta >> 8, meta & 0xFF, None
    if code in (t.DATE, t.NEWDATE):
        return OP_DATE, 0, 0, None
    if code == t.DATETIME2 and 0 <= meta <= 6:
        return OP_DATETIME2, meta, 0, None
    if code in (t.VARCHAR, t.VAR_STRING):
        return _text_step(1 if meta < 256 else 2, _text_render(column))
    if code == t.STRING and not charsets.is_binary(column.charset):
        _, max_bytes = t.string_type(meta)
        return _text_step(1 if max_bytes < 256 else 2, _text_render(column))
    if code in _BLOBS:
        return _text_step(meta, _iso8859_1 if column.charset is None else _text_render(column))
    if code == t.ENUM and 1 <= meta & 0xFF <= 8:
        names = ("", *column.enum_values) if column.enum_values is not None else None
        return OP_ENUM, meta & 0xFF, 0, names
    return OP_CALL, 0, 0, None


def _text_step(prefix: int, render: Callable[[bytes], str]) -> NativeStep:
    if not 1 <= prefix <= 4:
        return OP_CALL, 0, 0, None
    if render is charsets.utf8:
        return OP_TEXT, prefix, 0, None
    if render is _iso8859_1:
        return OP_TEXT, prefix, 1, None
    return OP_TEXT, prefix, 2, render
