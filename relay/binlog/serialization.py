"""MySQL's ``mysql::serialization`` binary format, as far as binlog events use it (MySQL 8.3+).

Owned here: variable-length integers and the reader of one serialized message. Pure functions, no
state; called on the binlog reader thread by ``relay.binlog.parse`` for GTID_TAGGED_LOG_EVENT, and
by ``relay.binlog.stream`` for the tag of a GTID set it sends (``write_varlen``).

Facts (mysql-server ``libs/mysql/serialization/readme.md``, ``variable_length_integers.h``,
``serializer_impl.hpp``, ``serializer_default_impl.hpp``):

* an unsigned varlen integer takes 1-9 bytes, little-endian; the number of trailing 1 bits of the
  first byte, plus one, is its byte count; the value follows those bits and a 0 bit (for 9 bytes the
  8 bytes after the first hold the whole value). A signed one is zig-zag encoded first: x >= 0 as
  x << 1, x < 0 as ((-(x + 1)) << 1) | 1;
* a message is: its field id (the top-level message uses the format version, 1), its size in bytes
  counted from the start of that id, the last non-ignorable field id + 1 (0 when none), then the
  fields that are present in id order, each as its field id then its data. A missing optional field
  is simply absent: a reader peeks at the next id. Fields the reader does not know are skipped by the
  message size, unless their id is at or below "last non-ignorable", which makes the message
  unreadable (fail closed, as MySQL does);
* integers without an explicit size are varlen; a fixed-size array holds each element as its own
  varlen integer (a 16-byte UUID is 16 varlen bytes, 1 or 2 bytes each); a string is its varlen
  length then its bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum

from relay.errors import DecodeError

FORMAT_VERSION = 1  # mysql::serialization::serialization_format_version


class Kind(Enum):
    """How one field of a message is encoded."""

    UNSIGNED = "unsigned"  # varlen unsigned integer
    SIGNED = "signed"  # varlen zig-zag signed integer
    BYTES16 = "bytes16"  # fixed array of 16 unsigned bytes, each a varlen integer (a UUID)
    STRING = "string"  # varlen length, then the bytes


Value = int | bytes


def read_varlen(data: bytes, pos: int, end: int) -> tuple[int, int]:
    """An unsigned varlen integer at ``pos`` → (value, position after it)."""
    if pos >= end:
        raise DecodeError("serialized integer runs past the end")
    first = data[pos]
    size = 1
    while size < 9 and first >> (size - 1) & 1:
        size += 1
    if pos + size > end:
        raise DecodeError(f"serialized integer of {size} bytes runs past the end")
    if size == 1:
        return first >> 1, pos + 1
    rest = int.from_bytes(data[pos + 1 : pos + size], "little")
    if size == 9:
        return rest, pos + 9
    return (first >> size) | (rest << (8 - size)), pos + size


def read_varlen_signed(data: bytes, pos: int, end: int) -> tuple[int, int]:
    raw, pos = read_varlen(data, pos, end)
    return (-(raw >> 1) - 1 if raw & 1 else raw >> 1), pos


def write_varlen(value: int) -> bytes:
    """The unsigned varlen encoding of ``value`` (0 <= value < 2^64)."""
    if not 0 <= value < 1 << 64:
        raise DecodeError(f"{value} does not fit a serialized unsigned integer")
    size = (value.bit_length() * 575 >> 12) + 1  # 1 + ceil((bits - 1) / 7), 9 for 64 bits
    first = ((1 << (size - 1)) - 1) | (value << size) & 0xFF
    if size == 1:
        return bytes([first])
    shift = 8 - size + (1 if size == 9 else 0)
    return bytes([first]) + (value >> shift).to_bytes(size - 1, "little")


def _read_field(kind: Kind, data: bytes, pos: int, end: int) -> tuple[Value, int]:
    if kind is Kind.UNSIGNED:
        return read_varlen(data, pos, end)
    if kind is Kind.SIGNED:
        return read_varlen_signed(data, pos, end)
    if kind is Kind.BYTES16:
        out = bytearray()
        for _ in range(16):
            byte, pos = read_varlen(data, pos, end)
            if byte > 0xFF:
                raise DecodeError(f"serialized byte array element {byte} is not a byte")
            out.append(byte)
        return bytes(out), pos
    size, pos = read_varlen(data, pos, end)
    if pos + size > end:
        raise DecodeError("serialized string runs past the end")
    return data[pos : pos + size], pos + size


def read_message(
    data: bytes, pos: int, end: int, fields: Sequence[Kind], message_id: int = FORMAT_VERSION
) -> list[Value | None]:
    """Decode the message at ``data[pos:end]`` whose fields, by id 0, 1, …, are ``fields``.

    Returns one value per field, None for a field the message does not carry.
    """
    start = pos
    found, pos = read_varlen(data, pos, end)
    if found != message_id:
        raise DecodeError(f"serialized message has id {found}, expected {message_id}")
    size, pos = read_varlen(data, pos, end)
    last_required, pos = read_varlen(data, pos, end)
    if last_required > len(fields):
        raise DecodeError(
            f"serialized message needs field {last_required - 1}, this reader knows 0..{len(fields) - 1}"
        )
    # MySQL's writer computes the size with the length of the *payload's* size field, so a message
    # can run a byte past start + size; its reader only stops when a field would start exactly
    # there (Serializer_default::decode), and reads each field up to the buffer's end. So do we.
    stop = start + size
    values: list[Value | None] = [None] * len(fields)
    for field_id, kind in enumerate(fields):
        if pos == stop or pos >= end:
            break
        peek, after = read_varlen(data, pos, end)
        if peek != field_id:
            continue  # an optional field the writer left out
        values[field_id], pos = _read_field(kind, data, after, end)
    return values
