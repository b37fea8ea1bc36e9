"""MySQL 8 binary JSON (a JSON column's value in a row image) → the text MySQL prints for it.

Owned here: ``to_text``, called by ``relay.binlog.rows`` on the binlog reader thread for every
non-NULL JSON value of a MySQL server (MariaDB stores JSON as LONGTEXT: its values arrive as text
and never come here). The text goes into canal's column value.

The binary format (MySQL ``json_binary.h``): a type byte, then the value. Objects and arrays come
in a small (16-bit offsets and counts) and a large (32-bit) form: element count, byte size, for an
object the key entries (offset, 16-bit length), then one value entry per element (type byte and an
offset relative to the start of the container, or the value itself when it fits: literals and
16-bit integers, and 32-bit integers in the large form), then the keys and values. Strings and
opaque values carry a variable-length size (7 bits per byte, low bits first). Opaque values hold a
MySQL field type and its binary form: DECIMAL (precision, scale, binary decimal) and DATE / TIME /
DATETIME / TIMESTAMP (an 8-byte packed integer).

The text is MySQL's ``Json_wrapper::to_string``: ``", "`` and ``": "`` separators, keys in the
stored order, strings escaped for ``"`` ``\\`` and the controls below 0x20 only, doubles through
``my_gcvt`` (shortest digits; exponent form below 1e-15, and from 1e15 unless every digit is needed;
".0" appended to an integral double), datetimes with 6 fraction digits, other opaque values as
``"base64:type<N>:<base64>"``.

``to_tree`` / ``render`` give the same text through a small document tree (scalars kept as their
printed text, arrays as lists, objects as ``JsonObject`` in stored key order), for the one place
that must change a document before printing it: partial JSON updates (``relay.binlog.jsondiff``).
"""

from __future__ import annotations

import base64
import math
import struct

from relay.binlog.types import decode_decimal, repr_digits
from relay.errors import DecodeError

SMALL_OBJECT, LARGE_OBJECT, SMALL_ARRAY, LARGE_ARRAY = 0x0, 0x1, 0x2, 0x3
LITERAL, INT16, UINT16, INT32, UINT32, INT64, UINT64, DOUBLE, STRING = range(0x4, 0xD)
OPAQUE = 0xF
LITERAL_NULL, LITERAL_TRUE, LITERAL_FALSE = 0x0, 0x1, 0x2

# MySQL field types that appear inside opaque values.
_F_TIMESTAMP, _F_DATE, _F_TIME, _F_DATETIME = 7, 10, 11, 12
_F_NEWDECIMAL, _F_VAR_STRING = 246, 253

_SCALARS = {
    INT16: struct.Struct("<h"), UINT16: struct.Struct("<H"), INT32: struct.Struct("<i"),
    UINT32: struct.Struct("<I"), INT64: struct.Struct("<q"), UINT64: struct.Struct("<Q"),
}  # fmt: skip
_DOUBLE = struct.Struct("<d")
_LITERALS = {LITERAL_NULL: "null", LITERAL_TRUE: "true", LITERAL_FALSE: "false"}
_ESCAPES = {i: f"\\u{i:04x}" for i in range(0x20)}
_ESCAPES.update({0x08: "\\b", 0x09: "\\t", 0x0A: "\\n", 0x0C: "\\f", 0x0D: "\\r"})
_ESCAPES.update({ord('"'): '\\"', ord("\\"): "\\\\"})


def to_text(raw: bytes) -> str:
    """The binary JSON document ``raw`` as MySQL prints it; "" for an empty value (as canal)."""
    if not raw:
        return ""
    out: list[str] = []
    try:
        _value(raw, raw[0], 1, len(raw), out)
    except (IndexError, struct.error, UnicodeDecodeError) as exc:
        raise DecodeError(f"malformed binary JSON value ({len(raw)} bytes): {exc}") from exc
    return "".join(out)


class JsonObject:
    """A JSON object of a document tree: (key, value) members in MySQL's key order."""

    __slots__ = ("members",)

    def __init__(self, members: list[tuple[str, Node]]) -> None:
        self.members = members


# A document tree node: a scalar's printed text, an array, or an object.
Node = str | list["Node"] | JsonObject


def to_tree(raw: bytes) -> Node:
    """The binary JSON document ``raw`` as a tree whose ``render`` is ``to_text(raw)``."""
    if not raw:
        raise DecodeError("empty binary JSON value")
    try:
        return _node(raw, raw[0], 1, len(raw))
    except (IndexError, struct.error, UnicodeDecodeError) as exc:
        raise DecodeError(f"malformed binary JSON value ({len(raw)} bytes): {exc}") from exc


def render(node: Node) -> str:
    """A tree's text, exactly as ``to_text`` prints the binary document it stands for."""
    out: list[str] = []
    _render(node, out)
    return "".join(out)


def _render(node: Node, out: list[str]) -> None:
    if isinstance(node, str):
        out.append(node)
    elif isinstance(node, list):
        out.append("[")
        for i, item in enumerate(node):
            if i:
                out.append(", ")
            _render(item, out)
        out.append("]")
    else:
        out.append("{")
        for i, (key, value) in enumerate(node.members):
            out.append(", " + quote(key) + ": " if i else quote(key) + ": ")
            _render(value, out)
        out.append("}")


def _node(data: bytes, kind: int, pos: int, end: int) -> Node:
    if kind > LARGE_ARRAY:
        out: list[str] = []
        _value(data, kind, pos, end, out)
        return "".join(out)
    large = kind in (LARGE_OBJECT, LARGE_ARRAY)
    word = 4 if large else 2
    unpack = (struct.Struct("<I") if large else struct.Struct("<H")).unpack_from
    count = unpack(data, pos)[0]
    is_object = kind in (SMALL_OBJECT, LARGE_OBJECT)
    entries = pos + 2 * word + (count * (word + 2) if is_object else 0)
    values: list[Node] = []
    for i in range(count):
        entry = entries + i * (1 + word)
        inner = data[entry]
        at = entry + 1 if _inlined(inner, large) else pos + unpack(data, entry + 1)[0]
        values.append(_node(data, inner, at, end))
    if not is_object:
        return values
    keys = []
    for i in range(count):
        key_entry = pos + 2 * word + i * (word + 2)
        key_at = pos + unpack(data, key_entry)[0]
        key_len = data[key_entry + word] | data[key_entry + word + 1] << 8
        keys.append(data[key_at : key_at + key_len].decode("utf-8"))
    return JsonObject(list(zip(keys, values, strict=True)))


def quote(text: str) -> str:
    """A JSON string literal as MySQL's ``double_quote`` writes it."""
    return '"' + text.translate(_ESCAPES) + '"'


def _value(data: bytes, kind: int, pos: int, end: int, out: list[str]) -> None:
    """Append the text of the value of type ``kind`` whose bytes start at ``pos``."""
    if kind <= LARGE_ARRAY:
        _container(data, kind, pos, end, out)
    elif kind == LITERAL:
        out.append(_literal(data[pos]))
    elif kind in _SCALARS:
        out.append(str(_SCALARS[kind].unpack_from(data, pos)[0]))
    elif kind == DOUBLE:
        out.append(mysql_double(_DOUBLE.unpack_from(data, pos)[0]))
    elif kind == STRING:
        size, pos = _varlen(data, pos)
        out.append(quote(data[pos : pos + size].decode("utf-8")))
    elif kind == OPAQUE:
        out.append(_opaque(data, pos))
    else:
        raise DecodeError(f"unknown binary JSON type 0x{kind:02x}")


def _literal(byte: int) -> str:
    try:
        return _LITERALS[byte]
    except KeyError:
        raise DecodeError(f"unknown binary JSON literal 0x{byte:02x}") from None


def _container(data: bytes, kind: int, base: int, end: int, out: list[str]) -> None:
    """An object or array whose header starts at ``base`` (offsets inside are relative to it)."""
    large = kind in (LARGE_OBJECT, LARGE_ARRAY)
    is_object = kind in (SMALL_OBJECT, LARGE_OBJECT)
    word = 4 if large else 2
    unpack = (struct.Struct("<I") if large else struct.Struct("<H")).unpack_from
    count = unpack(data, base)[0]
    if base + unpack(data, base + word)[0] > end:
        raise DecodeError("binary JSON container runs past the value's end")
    entries = base + 2 * word + (count * (word + 2) if is_object else 0)
    out.append("{" if is_object else "[")
    for i in range(count):
        if i:
            out.append(", ")
        if is_object:
            key_entry = base + 2 * word + i * (word + 2)
            key_at = base + unpack(data, key_entry)[0]
            key_len = data[key_entry + word] | data[key_entry + word + 1] << 8
            out.append(quote(data[key_at : key_at + key_len].decode("utf-8")))
            out.append(": ")
        entry = entries + i * (1 + word)
        kind = data[entry]
        if _inlined(kind, large):
            _value(data, kind, entry + 1, end, out)
        else:
            _value(data, kind, base + unpack(data, entry + 1)[0], end, out)
    out.append("}" if is_object else "]")


def _inlined(kind: int, large: bool) -> bool:
    """Values stored inside the value entry itself instead of at an offset."""
    return kind in (LITERAL, INT16, UINT16) or (large and kind in (INT32, UINT32))


def _varlen(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    for _ in range(5):
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
    raise DecodeError("binary JSON length longer than 5 bytes")


def _opaque(data: bytes, pos: int) -> str:
    field_type = data[pos]
    size, pos = _varlen(data, pos + 1)
    raw = data[pos : pos + size]
    if len(raw) != size:
        raise DecodeError("binary JSON opaque value truncated")
    if field_type == _F_NEWDECIMAL and size >= 2:
        return decode_decimal(raw, 2, raw[0], raw[1])[0]
    if field_type in (_F_DATE, _F_DATETIME, _F_TIMESTAMP, _F_TIME) and size >= 8:
        packed = int.from_bytes(raw[:8], "little", signed=True)
        return '"' + _packed_temporal(field_type, packed) + '"'
    if field_type == _F_VAR_STRING:
        return quote(raw.decode("utf-8"))
    encoded = base64.encodebytes(raw).decode("ascii").rstrip("\n")
    return quote(f"base64:type{field_type}:{encoded}")


def _packed_temporal(field_type: int, packed: int) -> str:
    """MySQL's packed longlong temporal forms, printed as ``my_TIME_to_str(t, 6)`` does."""
    sign = "-" if packed < 0 else ""
    packed = abs(packed)
    usec, whole = packed & 0xFFFFFF, packed >> 24
    if field_type == _F_TIME:
        hms = whole
        return f"{sign}{(hms >> 12) & 0x3FF:02d}:{(hms >> 6) & 0x3F:02d}:{hms & 0x3F:02d}.{usec:06d}"
    ymd, hms = whole >> 17, whole & 0x1FFFF
    ym = ymd >> 5
    date = f"{ym // 13:04d}-{ym % 13:02d}-{ymd & 0x1F:02d}"
    if field_type == _F_DATE:
        return date
    return f"{date} {hms >> 12:02d}:{(hms >> 6) & 0x3F:02d}:{hms & 0x3F:02d}.{usec:06d}"


def mysql_double(x: float) -> str:
    """A double inside JSON, as MySQL prints it: ``my_gcvt`` (width 34), then ".0" if integral.

    With that width the shortest round-trip digits always fit, so the only choice is the layout:
    fixed when -14 <= decpt <= 15 (decpt: the decimal point's place after the first digit's left),
    or when all the digits are needed anyway (more digits than decpt); exponent form otherwise,
    written ``1.5e-20`` / ``1e100`` (no "+", no leading zeros).
    """
    if not math.isfinite(x):
        raise DecodeError(f"binary JSON holds a non-finite double {x!r}")
    sign = "-" if x < 0 or (x == 0.0 and str(x).startswith("-")) else ""
    digits, decpt = repr_digits(repr(abs(x)))
    if digits == "0":
        return sign + "0.0"
    n = len(digits)
    if -14 <= decpt <= 15 or n > decpt > 15:
        if decpt <= 0:
            text = "0." + "0" * -decpt + digits
        elif decpt < n:
            text = digits[:decpt] + "." + digits[decpt:]
        else:
            text = digits + "0" * (decpt - n) + ".0"
    else:
        text = digits[0] + ("." + digits[1:] if n > 1 else "") + "e" + str(decpt - 1)
    return sign + text
