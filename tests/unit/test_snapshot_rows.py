"""A snapshot row packet (MySQL's text protocol) into canal text: lengths, NULLs, kinds, instants."""

from __future__ import annotations

import pymysql
import pytest

from relay.binlog.values import Instant
from relay.source.snapshot_rows import (
    K_BINARY,
    K_BIT,
    K_DECIMAL,
    K_DOUBLE,
    K_FLOAT,
    K_INT,
    K_TEXT,
    parse_row,
    value_text,
)


def _lenenc(value: bytes | None) -> bytes:
    if value is None:
        return b"\xfb"
    n = len(value)
    if n < 0xFB:
        return bytes([n]) + value
    if n < 1 << 16:
        return b"\xfc" + n.to_bytes(2, "little") + value
    if n < 1 << 24:
        return b"\xfd" + n.to_bytes(3, "little") + value
    return b"\xfe" + n.to_bytes(8, "little") + value


def _packet(*values: bytes | None) -> bytes:
    return b"".join(_lenenc(v) for v in values)


def test_each_kind_gives_the_text_the_binlog_decoder_gives() -> None:
    assert value_text(K_INT, b"-42") == "-42"
    assert value_text(K_DECIMAL, b"12.50") == "12.50"
    assert value_text(K_BIT, b"5") == "5"  # selected as col+0
    assert value_text(K_TEXT, "Zürich ✓".encode()) == "Zürich ✓"
    assert value_text(K_TEXT, b"\xff") == "\udcff"  # undecodable bytes kept (surrogateescape)
    assert value_text(K_BINARY, b"\x00\xff") == "\x00\xff"  # canal's ISO-8859-1 text of bytes
    assert value_text(K_DOUBLE, b"1e+20") == "1.0E20"  # Java's Double.toString
    assert value_text(K_DOUBLE, b"0.1") == "0.1"
    assert value_text(K_FLOAT, b"0.10000000149011612") == "0.1"  # the float32, as Float.toString


def test_lengths_of_every_width_and_nulls() -> None:
    kinds = (K_INT, K_TEXT, K_BINARY, K_TEXT, K_TEXT)
    medium, large = b"m" * 300, b"L" * 70_000
    row = parse_row(_packet(b"1", None, b"", medium, large), kinds, ())
    assert row == ("1", None, "", medium.decode(), large.decode())


def test_timestamps_become_instants_with_their_epoch_micros() -> None:
    kinds = (K_INT, K_TEXT, K_TEXT)
    row = parse_row(
        _packet(b"1", b"2024-03-01 10:00:00.250000", b"0000-00-00 00:00:00", b"1709287200.250000", b"0"),
        kinds,
        (1, 2),
    )
    assert row == ("1", "2024-03-01 10:00:00.250000", "0000-00-00 00:00:00")
    assert isinstance(row[1], Instant) and row[1].micros == 1_709_287_200_250_000
    assert not isinstance(row[2], Instant)  # the zero TIMESTAMP is no instant
    row = parse_row(_packet(b"2", None, None, None, None), kinds, (1, 2))
    assert row == ("2", None, None)


def test_a_packet_cut_short_is_an_error_not_a_short_row() -> None:
    with pytest.raises(pymysql.err.InternalError, match="value 2 of 2"):
        parse_row(_packet(b"1"), (K_INT, K_INT), ())
    with pytest.raises(pymysql.err.InternalError, match="cut short"):
        parse_row(b"\x05ab", (K_TEXT,), ())
