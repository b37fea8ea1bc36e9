"""Column values as Debezium's MySQL connector encodes them by default: the JSON text of one value, and its
Kafka Connect field schema.

Owned here: ``field_of(column, decimal_mode)`` → ``DebeziumField`` (the field's schema as a dict, for the
``schema`` part, and the function turning a value's canal text — what the binlog decoder and the snapshot
reader hand on, see ``relay.binlog.values`` — into the JSON text of Debezium's value). Made once per table
map by ``relay.kafka.debezium_json``; the functions then run per value on the publisher thread.

The facts are Debezium's documentation of the MySQL connector, "How Debezium MySQL connectors map data
types" (debezium.io/documentation/reference/stable/connectors/mysql.html#mysql-data-types; the same
tables in Red Hat's Debezium user guide, "Descriptions of basic type mappings", "Temporal values",
"Decimal types", "Spatial types"), with the connector's default settings: ``time.precision.mode``
``adaptive_time_microseconds``, ``decimal.handling.mode`` ``precise`` (``string`` / ``double``
selectable in the mapping), ``binary.handling.mode`` ``bytes`` and ``bigint.unsigned.handling.mode``
``long``. Kafka Connect's JsonConverter writes BYTES as base64 text, so bytes reach the JSON as base64.
Each rule below names the row of that documentation it follows.

What the relay cannot know as Debezium does: Debezium reads the column's DDL type name, we read the binlog
table map, which does not tell ``BOOLEAN`` from ``TINYINT(1)`` (both INT16 here, as Debezium maps
``TINYINT``) nor ``REAL`` (a DOUBLE unless REAL_AS_FLOAT) from ``DOUBLE``.
"""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

from relay.binlog import charsets
from relay.binlog import types as t
from relay.binlog.events import ColumnMeta
from relay.binlog.rows import Instant
from relay.errors import CodecError

# A value's canal text → the JSON text of Debezium's value (never called for SQL NULL); None for a zero
# temporal value, which the table writes as null or the epoch's value (``zero_value``).
Encode = Callable[[str], str | None]

_quote = json.encoder.encode_basestring
_EPOCH = date(1970, 1, 1).toordinal()
_INT64 = 1 << 64
_BLOBS = (t.BLOB, t.TINY_BLOB, t.MEDIUM_BLOB, t.LONG_BLOB)
_F32 = struct.Struct("<f")


@dataclass(frozen=True, slots=True)
class DebeziumField:
    """One column as a Debezium field: its Kafka Connect schema (without ``field``/``optional``, which
    the table adds) and its value encoder."""

    name: str
    schema: dict[str, Any]
    encode: Encode
    nullable: bool


def _plain(text: str) -> str:
    """A number whose canal text already is its JSON text (integers; Java's Float/Double.toString)."""
    return text


def _string(text: str) -> str:
    return _quote(text)


def _bytes(text: str) -> str:
    """BINARY/VARBINARY/BLOB ("BYTES", binary.handling.mode=bytes): canal's text is one ISO-8859-1
    character per byte; JsonConverter writes the bytes as base64."""
    return '"' + base64.b64encode(text.encode("latin-1")).decode() + '"'


def _unsigned_long(text: str) -> str:
    """BIGINT UNSIGNED (INT64, bigint.unsigned.handling.mode=long): Java's long, so values past 2^63-1
    wrap to negative exactly as Debezium's default does (``precise`` is not offered here)."""
    value = int(text)
    return str(value - _INT64 if value >= 1 << 63 else value)


def _integer(column: ColumnMeta) -> tuple[dict[str, Any], Encode]:
    """TINYINT INT16, SMALLINT INT16 (UNSIGNED INT32), MEDIUMINT INT32, INT INT32 (UNSIGNED INT64),
    BIGINT INT64 (the basic type mappings table; unsigned widths as its "UNSIGNED" rows)."""
    code, unsigned = column.type_code, column.unsigned
    if code == t.TINY:
        return {"type": "int16"}, _plain
    if code == t.SHORT:
        return {"type": "int32" if unsigned else "int16"}, _plain
    if code == t.INT24:
        return {"type": "int32"}, _plain
    if code == t.LONG:
        return {"type": "int64" if unsigned else "int32"}, _plain
    return {"type": "int64"}, _unsigned_long if unsigned else _plain


def unscaled_bytes(text: str) -> bytes:
    """A DECIMAL's canal text (plain, exactly ``scale`` fraction digits) as Kafka Connect's Decimal
    stores it: the unscaled value's big-endian two's-complement bytes, as short as Java's
    ``BigInteger.toByteArray`` makes them."""
    unscaled = int(text.replace(".", ""))
    bits = (unscaled if unscaled >= 0 else ~unscaled).bit_length()
    return unscaled.to_bytes(bits // 8 + 1, "big", signed=True)


def _decimal(column: ColumnMeta, mode: str) -> tuple[dict[str, Any], Encode]:
    """DECIMAL/NUMERIC ("Decimal types" table): ``precise`` BYTES ``org.apache.kafka.connect.data.Decimal``
    with the ``scale`` (and ``connect.decimal.precision``) parameter; ``double`` FLOAT64; ``string``
    STRING."""
    if mode == "string":
        return {"type": "string"}, _string
    if mode == "double":
        return {"type": "double"}, lambda text: t.java_double(float(text))
    precision, scale = column.meta >> 8, column.meta & 0xFF
    schema = {
        "type": "bytes",
        "name": "org.apache.kafka.connect.data.Decimal",
        "version": 1,
        "parameters": {"scale": str(scale), "connect.decimal.precision": str(precision)},
    }
    return schema, lambda text: '"' + base64.b64encode(unscaled_bytes(text)).decode() + '"'


def _bit(column: ColumnMeta) -> tuple[dict[str, Any], Encode]:
    """BIT(1) BOOLEAN; BIT(>1) BYTES ``io.debezium.data.Bits`` with ``length`` = the number of bits, the
    bits little-endian in n/8 (+1 when n%8) bytes (basic type mappings table). canal's text is the
    unsigned decimal value."""
    bits = (column.meta >> 8) * 8 + (column.meta & 0xFF)
    if bits <= 1:
        return {"type": "boolean"}, lambda text: "true" if text != "0" else "false"
    size = (bits + 7) // 8
    schema = {
        "type": "bytes",
        "name": "io.debezium.data.Bits",
        "version": 1,
        "parameters": {"length": str(bits)},
    }
    return schema, lambda text: '"' + base64.b64encode(int(text).to_bytes(size, "little")).decode() + '"'


def _members(kind: str, values: tuple[str, ...] | None) -> tuple[dict[str, Any], Encode]:
    """ENUM STRING ``io.debezium.data.Enum``, SET STRING ``io.debezium.data.EnumSet``, the ``allowed``
    parameter the comma-separated members (basic type mappings table). Without member names in the
    table map (binlog_row_metadata=MINIMAL) the value is canal's index / bitmask text and no
    ``allowed`` can be given."""
    schema: dict[str, Any] = {"type": "string", "name": f"io.debezium.data.{kind}", "version": 1}
    if values is not None:
        schema["parameters"] = {"allowed": ",".join(values)}
    return schema, _string


# ---- temporal values ("Temporal values" / "Time values" tables, time.precision.mode default) --------
#
# MySQL's zero values ('0000-00-00', a zero month or day) are "represented as null when the column
# allows nulls, or as the epoch day when it does not" ("Temporal values"): their encoders answer None,
# and the table writes null or the epoch's value by the column's nullability.


def _days(text: str) -> int | None:
    """Days since the epoch of ``YYYY-MM-DD…``; None for a zero date (or a zero month or day)."""
    year, month, day = int(text[0:4]), int(text[5:7]), int(text[8:10])
    if month == 0 or day == 0:
        return None
    return date(year, month, day).toordinal() - _EPOCH


def epoch_days(text: str) -> str | None:
    """DATE → INT32 ``io.debezium.time.Date``: days since the epoch."""
    days = _days(text)
    return None if days is None else str(days)


def _micros(text: str) -> int | None:
    """``YYYY-MM-DD hh:mm:ss[.ffffff]`` (no zone: DATETIME is local, taken as UTC) → epoch microseconds."""
    days = _days(text)
    if days is None:
        return None
    clock, _, fraction = text[11:].partition(".")
    hours, minutes, seconds = int(clock[0:2]), int(clock[3:5]), int(clock[6:8])
    micros = int(fraction.ljust(6, "0")) if fraction else 0
    return ((days * 86400 + hours * 3600 + minutes * 60 + seconds) * 1_000_000) + micros


def epoch_millis(text: str) -> str | None:
    """DATETIME(0-3) → INT64 ``io.debezium.time.Timestamp``: epoch milliseconds."""
    micros = _micros(text)
    return None if micros is None else str(micros // 1000)


def epoch_micros(text: str) -> str | None:
    """DATETIME(4-6) → INT64 ``io.debezium.time.MicroTimestamp``: epoch microseconds."""
    micros = _micros(text)
    return None if micros is None else str(micros)


def time_micros(text: str) -> str:
    """TIME(0-6) → INT64 ``io.debezium.time.MicroTime``: microseconds (negative and past 24h as MySQL
    allows: -838:59:59 … 838:59:59)."""
    negative = text.startswith("-")
    clock, _, fraction = text.lstrip("-").partition(".")
    hours, minutes, seconds = (int(part) for part in clock.split(":"))
    value = (hours * 3600 + minutes * 60 + seconds) * 1_000_000 + (
        int(fraction.ljust(6, "0")) if fraction else 0
    )
    return str(-value if negative else value)


def zoned_timestamp(fsp: int) -> Encode:
    """TIMESTAMP(fsp) → STRING ``io.debezium.time.ZonedTimestamp``: ISO 8601 in UTC ("2018-06-20T13:37:03Z"),
    the fraction with the column's fsp digits. The instant is the one the binlog (or the snapshot's
    UNIX_TIMESTAMP) holds (``relay.binlog.values.Instant``), not the server-zone text."""

    def encode(text: str) -> str | None:
        if not isinstance(text, Instant):
            if text.startswith("0000-00-00"):
                return None
            raise CodecError(f"TIMESTAMP value {text!r} carries no instant; cannot write it in UTC")
        seconds, micros = divmod(text.micros, 1_000_000)
        moment = datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S")
        fraction = "." + f"{micros:06d}"[:fsp] if fsp else ""
        return f'"{moment}{fraction}Z"'

    return encode


def year(text: str) -> str:
    """YEAR → INT32 ``io.debezium.time.Year`` (0 for the zero year)."""
    return str(int(text))


def _temporal(column: ColumnMeta) -> tuple[dict[str, Any], Encode] | None:
    code, meta = column.type_code, column.meta
    if code in (t.DATE, t.NEWDATE):
        return {"type": "int32", "name": "io.debezium.time.Date", "version": 1}, epoch_days
    if code in (t.DATETIME, t.DATETIME2):
        fsp = meta if code == t.DATETIME2 else 0
        if fsp <= 3:
            return {"type": "int64", "name": "io.debezium.time.Timestamp", "version": 1}, epoch_millis
        return {"type": "int64", "name": "io.debezium.time.MicroTimestamp", "version": 1}, epoch_micros
    if code in (t.TIME, t.TIME2):
        return {"type": "int64", "name": "io.debezium.time.MicroTime", "version": 1}, time_micros
    if code in (t.TIMESTAMP, t.TIMESTAMP2):
        fsp = meta if code == t.TIMESTAMP2 else 0
        return {"type": "string", "name": "io.debezium.time.ZonedTimestamp", "version": 1}, zoned_timestamp(
            fsp
        )
    if code == t.YEAR:
        return {"type": "int32", "name": "io.debezium.time.Year", "version": 1}, year
    return None


def zero_value(schema: dict[str, Any]) -> str:
    """The epoch's value of a temporal schema: what a zero date becomes in a NOT NULL column."""
    return '"1970-01-01T00:00:00Z"' if schema["type"] == "string" else "0"


# ---- spatial values and vectors ---------------------------------------------------------------------

GEOMETRY_SCHEMA: dict[str, Any] = {
    "type": "struct",
    "fields": [
        {"type": "bytes", "optional": False, "field": "wkb"},
        {"type": "int32", "optional": True, "field": "srid"},
    ],
    "name": "io.debezium.data.geometry.Geometry",
    "version": 1,
    "doc": "Geometry",
}


def geometry(text: str) -> str:
    """GEOMETRY (and its subtypes) → STRUCT ``io.debezium.data.geometry.Geometry`` {``wkb``, ``srid``}
    ("Spatial types" table). MySQL stores a 4-byte little-endian SRID, then the WKB."""
    raw = text.encode("latin-1")
    if len(raw) < 5:
        raise CodecError(f"GEOMETRY value of {len(raw)} bytes holds no SRID and WKB")
    wkb = base64.b64encode(raw[4:]).decode()
    return f'{{"wkb":"{wkb}","srid":{int.from_bytes(raw[:4], "little")}}}'


def float_vector(text: str) -> str:
    """VECTOR → ARRAY of FLOAT32 ``io.debezium.data.FloatVector``; the floats as canal's text of the
    column gives them (``VECTOR_TO_STRING``'s six significant digits)."""
    inner = text.strip()[1:-1]
    return (
        "[" + ",".join(t.java_float(_F32.unpack(_F32.pack(float(v)))[0]) for v in inner.split(",") if v) + "]"
    )


def _other(column: ColumnMeta) -> tuple[dict[str, Any], Encode] | None:
    code = column.type_code
    if code == t.JSON:
        return {"type": "string", "name": "io.debezium.data.Json", "version": 1}, _string
    if code == t.GEOMETRY:
        return dict(GEOMETRY_SCHEMA), geometry
    if code == t.VECTOR:
        items = {"type": "float", "optional": False}
        return {
            "type": "array",
            "items": items,
            "name": "io.debezium.data.FloatVector",
            "version": 1,
        }, float_vector
    if code == t.ENUM:
        return _members("Enum", column.enum_values)
    if code == t.SET:
        return _members("EnumSet", column.set_values)
    return None


def _text(column: ColumnMeta) -> tuple[dict[str, Any], Encode] | None:
    """CHAR/VARCHAR/TEXT STRING; BINARY/VARBINARY/BLOB BYTES (basic type mappings table)."""
    code = column.type_code
    if code in (t.STRING, t.VARCHAR, t.VAR_STRING) or code in _BLOBS:
        binary = charsets.is_binary(column.charset) or (code in _BLOBS and column.charset is None)
        return ({"type": "bytes"}, _bytes) if binary else ({"type": "string"}, _string)
    return None


def field_of(column: ColumnMeta, decimal_mode: str) -> DebeziumField:
    """The Debezium field of ``column``; ``CodecError`` for a type the documentation maps no way."""
    code = column.type_code
    found: tuple[dict[str, Any], Encode] | None
    if code in (t.TINY, t.SHORT, t.INT24, t.LONG, t.LONGLONG):
        found = _integer(column)
    elif code == t.FLOAT:
        found = {"type": "float"}, _plain  # FLOAT FLOAT32 (canal's text is Java's Float.toString)
    elif code == t.DOUBLE:
        found = {"type": "double"}, _plain  # DOUBLE FLOAT64 (Double.toString)
    elif code == t.NEWDECIMAL:
        found = _decimal(column, decimal_mode)
    elif code == t.BIT:
        found = _bit(column)
    else:
        found = _temporal(column) or _text(column) or _other(column)
    if found is None:
        raise CodecError(f"column {column.name}: no Debezium encoding for MySQL type {column.mysql_type}")
    schema, encode = found
    return DebeziumField(column.name, schema, encode, column.nullable)
