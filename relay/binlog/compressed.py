"""Compressed binlog content: MariaDB's compressed events and MySQL's transaction payloads.

Owned here: undoing the compression, nothing else — the parser (``relay.binlog.parse``) decodes
what comes out with its ordinary handlers. Pure functions, run on the binlog reader thread.

MariaDB (10.2+, ``log_bin_compress=ON``; sql/log_event.cc ``binlog_buf_compress`` /
``query_event_uncompress`` / ``row_log_event_uncompress``): QUERY_COMPRESSED_EVENT (165) compresses
the statement text after the schema name; WRITE/UPDATE/DELETE_ROWS_COMPRESSED_EVENT_V1 (166-168) and
WRITE/UPDATE/DELETE_ROWS_COMPRESSED_EVENT (169-171, with the v2 extra-data header) compress the row
images after the column count and the column bitmap(s). A compressed block is one header byte
``1 ALG(3 bits) LEN(4 bits)`` — the high bit set, the algorithm (0 = zlib, the only one) in bits 4-6,
in the low 3 bits the number (1-4) of big-endian bytes of the uncompressed length that follow —
then a zlib stream (RFC 1950).

MySQL (8.0.20+, ``binlog_transaction_compression=ON``; libs/mysql/binlog/event/control_events.h
``Transaction_payload_event``, codecs/binary.cpp ``Transaction_payload::decode``): a
TRANSACTION_PAYLOAD_EVENT (40) holds every event of a transaction after its GTID event. Its body
starts with TLV fields, each a length-encoded type, length and value: 1 = payload size,
2 = compression type (0 zstd, 255 none), 3 = uncompressed size, 0 = end of the header (no length).
The payload that follows decompresses to the inner events laid end to end, each with the common
19-byte header and no checksum (the payload event's own checksum covers them; mysqlbinlog decodes
them with checksums off) and ``log_pos`` 0 (they have no place of their own in the file).
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

import zstandard

from relay.errors import DecodeError

_U32 = struct.Struct("<I")

# MariaDB compressed block header.
_COMPRESSED_FLAG = 0x80
_ALGORITHM_ZLIB = 0

# MySQL transaction payload.
PAYLOAD_HEADER_END = 0
PAYLOAD_SIZE = 1
PAYLOAD_COMPRESSION_TYPE = 2
PAYLOAD_UNCOMPRESSED_SIZE = 3
COMPRESSION_ZSTD = 0
COMPRESSION_NONE = 255
_INNER_HEADER = 19
_SIZE_AT = 9  # the event size field in the common header


def mariadb_uncompress(data: bytes, pos: int, end: int) -> bytes:
    """The bytes of the MariaDB compressed block at ``data[pos:end]``."""
    if pos >= end:
        raise DecodeError("compressed block missing")
    first = data[pos]
    algorithm, length_bytes = (first >> 4) & 0x07, first & 0x07
    if not first & _COMPRESSED_FLAG or algorithm != _ALGORITHM_ZLIB or not 1 <= length_bytes <= 4:
        raise DecodeError(f"bad compressed block header 0x{first:02x} (MariaDB supports zlib only)")
    start = pos + 1 + length_bytes
    expected = int.from_bytes(data[pos + 1 : start], "big")
    out = _inflate(zlib.decompressobj(), data[start:end], expected, "zlib")
    return out


def _inflate(engine: zlib._Decompress, raw: bytes, expected: int, name: str) -> bytes:
    try:
        out = engine.decompress(raw, expected + 1)  # never more than announced (+1 to notice)
    except zlib.error as exc:
        raise DecodeError(f"{name} data is corrupt: {exc}") from exc
    if len(out) != expected or not engine.eof or engine.unused_data:
        raise DecodeError(f"{name} data gives {len(out)} bytes, the event announced {expected}")
    return out


@dataclass(frozen=True, slots=True)
class PayloadHeader:
    """The TLV header of a TRANSACTION_PAYLOAD_EVENT, and where its payload starts."""

    compression_type: int
    payload_size: int
    uncompressed_size: int | None
    payload_at: int


def _lenenc(data: bytes, pos: int, end: int) -> tuple[int, int]:
    if pos >= end:
        raise DecodeError("transaction payload header runs past the event")
    first = data[pos]
    if first < 0xFB:
        return first, pos + 1
    size = {0xFC: 2, 0xFD: 3, 0xFE: 8}.get(first)
    if size is None or pos + 1 + size > end:
        raise DecodeError(f"bad length-encoded integer 0x{first:02x} in a transaction payload header")
    return int.from_bytes(data[pos + 1 : pos + 1 + size], "little"), pos + 1 + size


def read_payload_header(data: bytes, pos: int, end: int) -> PayloadHeader:
    """Decode the TLV fields before the payload; unknown fields are skipped by their length."""
    fields: dict[int, int] = {}
    while True:
        kind, pos = _lenenc(data, pos, end)
        if kind == PAYLOAD_HEADER_END:
            break
        length, pos = _lenenc(data, pos, end)
        if kind in (PAYLOAD_SIZE, PAYLOAD_COMPRESSION_TYPE, PAYLOAD_UNCOMPRESSED_SIZE):
            fields[kind], after = _lenenc(data, pos, end)
            if after - pos != length:
                raise DecodeError(
                    f"transaction payload header field {kind}: length {length}, read {after - pos}"
                )
        pos += length
    if PAYLOAD_SIZE not in fields or PAYLOAD_COMPRESSION_TYPE not in fields:
        raise DecodeError("transaction payload header lacks the payload size or the compression type")
    if fields[PAYLOAD_SIZE] != end - pos:
        raise DecodeError(f"transaction payload of {fields[PAYLOAD_SIZE]} bytes, the event holds {end - pos}")
    return PayloadHeader(
        fields[PAYLOAD_COMPRESSION_TYPE], fields[PAYLOAD_SIZE], fields.get(PAYLOAD_UNCOMPRESSED_SIZE), pos
    )


def payload_bytes(header: PayloadHeader, data: bytes, end: int) -> bytes:
    """The uncompressed inner events of a transaction payload."""
    raw = data[header.payload_at : end]
    if header.compression_type == COMPRESSION_NONE:
        return raw
    if header.compression_type != COMPRESSION_ZSTD:
        raise DecodeError(f"unknown transaction payload compression type {header.compression_type}")
    if header.uncompressed_size is None:
        raise DecodeError("zstd transaction payload without its uncompressed size")
    try:
        engine = zstandard.ZstdDecompressor().decompressobj()
        out = engine.decompress(raw)
    except zstandard.ZstdError as exc:
        raise DecodeError(f"zstd transaction payload is corrupt: {exc}") from exc
    if len(out) != header.uncompressed_size or not engine.eof or engine.unused_data:
        raise DecodeError(
            f"zstd transaction payload gives {len(out)} bytes, the event announced {header.uncompressed_size}"
        )
    return out


def split_events(raw: bytes) -> list[tuple[int, int]]:
    """(offset, size) of each event laid end to end in ``raw`` (a decompressed payload)."""
    out: list[tuple[int, int]] = []
    pos = 0
    while pos < len(raw):
        if pos + _INNER_HEADER > len(raw):
            raise DecodeError(f"transaction payload ends inside an event header at byte {pos}")
        (size,) = _U32.unpack_from(raw, pos + _SIZE_AT)
        if size < _INNER_HEADER or pos + size > len(raw):
            raise DecodeError(
                f"transaction payload event at byte {pos} has size {size}, {len(raw) - pos} left"
            )
        out.append((pos, size))
        pos += size
    if not out:
        raise DecodeError("transaction payload holds no event")
    return out
