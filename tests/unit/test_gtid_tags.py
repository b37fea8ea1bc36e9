"""Tagged GTIDs (MySQL 8.3+): text form, set algebra, GTID_TAGGED_LOG_EVENT, tagged PREVIOUS_GTIDS and
the COM_BINLOG_DUMP_GTID encoding. Event bytes are built here from the documented layouts
(mysql-server ``libs/mysql/serialization/readme.md``, ``rpl_gtid_set.cc`` ``Gtid_set::encode``)."""

from __future__ import annotations

import struct
from typing import Any

import pytest

from relay.binlog import events as ev
from relay.binlog.gtid import GtidSet
from relay.binlog.gtidset import decode_mysql_gtid_set
from relay.binlog.serialization import Kind, read_message, read_varlen, read_varlen_signed, write_varlen
from relay.binlog.stream import encode_mysql_gtid_set
from relay.errors import DecodeError, SourceError
from tests.unit.test_binlog_parse import event, parser

U1 = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
U2 = "4e11fa47-71ca-11e1-9e33-c80aa9429562"


# ---- text form and set algebra ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        (f"{U1.upper()}:mytag:1-5", f"{U1}:mytag:1-5"),
        (f"{U1}:MyTag:1-5", f"{U1}:mytag:1-5"),  # MySQL lower-cases tags
        (f"{U1}:bb:7,{U1}:aa:1-3,{U1}:1-5", f"{U1}:1-5:aa:1-3:bb:7"),  # untagged first, tags sorted
        (f"{U1}:bb:7:aa:1-3:5", f"{U1}:aa:1-3:5:bb:7"),  # a tag applies up to the next one
        (f"{U1}:1-5:aa:1-3,{U1}:aa:4:9", f"{U1}:1-5:aa:1-4:9"),
        (f"{U2}:_x1:2, {U1}:3", f"{U1}:3,{U2}:_x1:2"),
        (f"{U1}:t:1-2:3-4", f"{U1}:t:1-4"),
    ],
)
def test_tagged_sets_print_as_mysql_does(text: str, canonical: str) -> None:
    gs = GtidSet.parse(text, mariadb=False)
    assert str(gs) == canonical
    assert str(GtidSet.parse(canonical, mariadb=False)) == canonical


@pytest.mark.parametrize(
    "bad",
    [
        f"{U1}:tag",  # a tag without intervals
        f"{U1}:a:b:1",  # two tags in a row
        f"{U1}:1tag:1",  # a tag cannot start with a digit
        f"{U1}:{'x' * 33}:1",  # at most 32 characters
        f"{U1}:t-x:1",
        f"{U1}:0",  # GTID numbers start at 1
        f"{U1}:5-3",
        "3e11fa47-71ca-11e1-9e33-c80aa942956z:1",
    ],
)
def test_bad_tagged_sets_are_refused(bad: str) -> None:
    with pytest.raises(SourceError):
        GtidSet.parse(bad, mariadb=False)


def test_tagged_and_untagged_intervals_of_one_uuid_are_separate() -> None:
    gs = GtidSet.parse(f"{U1}:1-5:mytag:1-3", mariadb=False)
    assert gs.contains(f"{U1}:5") and gs.contains(f"{U1}:MYTAG:3")
    assert not gs.contains(f"{U1}:mytag:5") and not gs.contains(f"{U1}:other:1")
    gs.add(f"{U1}:mytag:4")
    gs.add(f"{U1}:6")
    gs.add(f"{U1}:Other:10")
    assert str(gs) == f"{U1}:1-6:mytag:1-4:other:10"
    assert gs.tagged and not GtidSet.parse(f"{U1}:1-5", mariadb=False).tagged


def test_merge_and_includes() -> None:
    a = GtidSet.parse(f"{U1}:1-5:mytag:1-3", mariadb=False)
    b = GtidSet.parse(f"{U1}:6-7:mytag:5,{U2}:t:1", mariadb=False)
    a.merge(b)
    assert str(a) == f"{U1}:1-7:mytag:1-3:5,{U2}:t:1"
    assert a.includes(b) and a.includes(GtidSet.parse(f"{U1}:mytag:2-3", mariadb=False))
    assert not a.includes(GtidSet.parse(f"{U1}:mytag:4", mariadb=False))
    assert not b.includes(a)
    m = GtidSet.parse("0-1-100", mariadb=True)
    m.merge(GtidSet.parse("0-2-90,1-1-5", mariadb=True))
    assert str(m) == "0-1-100,1-1-5"
    with pytest.raises(SourceError):
        m.merge(a)


# ---- mysql::serialization ---------------------------------------------------------------------------


def varlen(value: int) -> bytes:
    """Our own encoder, written from the readme: size = 1 + ceil((bits-1)/7) (9 for 64 bits)."""
    bits = value.bit_length()
    size = 1 if bits <= 7 else 9 if bits > 56 else (bits + 6) // 7
    if size == 9:
        return b"\xff" + value.to_bytes(8, "little")
    packed = (value << size) | ((1 << (size - 1)) - 1)
    return packed.to_bytes(size, "little")


def zigzag(value: int) -> bytes:
    return varlen(value << 1 if value >= 0 else ((-(value + 1)) << 1) | 1)


@pytest.mark.parametrize("value", [0, 1, 127, 128, 255, 65535, 2**56 - 1, 2**56, 2**63, 2**64 - 1])
def test_varlen_integers(value: int) -> None:
    raw = varlen(value)
    assert write_varlen(value) == raw
    assert read_varlen(raw + b"\x00", 0, len(raw)) == (value, len(raw))


def test_varlen_documented_examples() -> None:
    # readme.md: 65535 unsigned is "00000111 11111111 11111011" (big-endian display).
    assert write_varlen(65535) == bytes([0b11111011, 0b11111111, 0b00000111])
    # signed 65535 is "00001111 11111111 11110011", -65535 "00001111 11111111 11101011".
    assert read_varlen_signed(bytes([0b11110011, 0b11111111, 0b00001111]), 0, 3) == (65535, 3)
    assert read_varlen_signed(bytes([0b11101011, 0b11111111, 0b00001111]), 0, 3) == (-65535, 3)
    assert read_varlen_signed(zigzag(-1), 0, 1) == (-1, 1)


def message(fields: dict[int, bytes], last_required: int) -> bytes:
    """A top-level message: id (format version 1), size, last required id + 1, then the fields.

    The size is computed as MySQL's ``get_size_serializable`` does: the id, the *payload size's*
    varlen length, the last-required id and the payload — not the length of the size field itself.
    """
    payload = b"".join(varlen(i) + data for i, data in sorted(fields.items()))
    size = len(varlen(1)) + len(varlen(len(payload))) + len(varlen(last_required)) + len(payload)
    return varlen(1) + varlen(size) + varlen(last_required) + payload


def tagged_gtid_body(uuid: str, tag: str, gno: int, *, full: bool = False) -> bytes:
    fields = {
        0: varlen(1),
        1: b"".join(varlen(b) for b in bytes.fromhex(uuid.replace("-", ""))),
        2: zigzag(gno),
        3: varlen(len(tag)) + tag.encode(),
        4: zigzag(7),  # last_committed
        5: zigzag(8),  # sequence_number
        6: varlen(1_700_000_000_123_456),  # immediate commit timestamp
        8: varlen(431),  # transaction length (original timestamp 7 left out: equal to 6)
        9: varlen(80400),
    }
    if full:  # the optional fields of a transaction that came through a replica, with a ticket
        fields.update({4: zigzag(2**40), 5: zigzag(2**40 + 1), 7: varlen(1_699_999_999_000_000)})
        fields.update({10: varlen(80036), 11: varlen(2**63 + 1)})
    return message(fields, last_required=10)


def test_gtid_tagged_log_event() -> None:
    e = parser().parse(event(ev.GTID_TAGGED_LOG_EVENT, tagged_gtid_body(U1, "mytag", 23)), 1)
    assert isinstance(e, ev.GtidEvent) and e.gtid == f"{U1}:mytag:23" and not e.mariadb
    big = parser().parse(event(ev.GTID_TAGGED_LOG_EVENT, tagged_gtid_body(U2, "t_1", 2**40 + 5)), 1)
    assert isinstance(big, ev.GtidEvent) and big.gtid == f"{U2}:t_1:{2**40 + 5}"
    gs = GtidSet.parse(f"{U1}:mytag:1-22", mariadb=False)
    gs.add(e.gtid)
    assert str(gs) == f"{U1}:mytag:1-23"


def test_gtid_tagged_log_event_whose_size_field_outgrows_its_estimate() -> None:
    # A payload of 125..127 bytes: MySQL writes a size above 127 (two varlen bytes) while its size
    # counted one; the message then ends a byte after start + size. The tag must still decode.
    uuid = "f" * 8 + "-ffff-ffff-ffff-" + "f" * 12  # every UUID byte takes two varlen bytes
    overgrown = 0
    for tag_len in range(1, 33):
        tag = "t" * tag_len
        body = tagged_gtid_body(uuid, tag, 2**62, full=True)
        overgrown += read_varlen(body, 1, len(body))[0] < len(body)
        e = parser().parse(event(ev.GTID_TAGGED_LOG_EVENT, body), 1)
        assert isinstance(e, ev.GtidEvent) and e.gtid == f"{uuid}:{tag}:{2**62}"
    assert overgrown  # the case this test is about did occur


def test_gtid_tagged_log_event_with_trailing_unknown_ignorable_field() -> None:
    body = tagged_gtid_body(U1, "a", 1)
    # A newer server may append fields; ignorable ones (above "last required") are skipped by size.
    fields = {0: varlen(0), 1: b"".join(varlen(b) for b in bytes(16)), 2: zigzag(1), 3: varlen(1) + b"a"}
    fields[20] = varlen(99)
    e = parser().parse(event(ev.GTID_TAGGED_LOG_EVENT, message(fields, last_required=4)), 1)
    assert isinstance(e, ev.GtidEvent) and e.gtid == "00000000-0000-0000-0000-000000000000:a:1"
    assert parser().parse(event(ev.GTID_TAGGED_LOG_EVENT, body), 1).header.type_code == 42


def test_gtid_tagged_log_event_needing_unknown_fields_is_refused() -> None:
    fields = {0: varlen(0), 1: b"".join(varlen(b) for b in bytes(16)), 2: zigzag(1), 3: varlen(1) + b"a"}
    fields[20] = varlen(99)
    with pytest.raises(DecodeError, match="needs field 20"):
        parser().parse(event(ev.GTID_TAGGED_LOG_EVENT, message(fields, last_required=21)), 1)
    bad_tag = {**fields, 3: varlen(3) + b"a-b"}
    del bad_tag[20]
    with pytest.raises(DecodeError, match="invalid GTID tag"):
        parser().parse(event(ev.GTID_TAGGED_LOG_EVENT, message(bad_tag, last_required=4)), 1)


def test_read_message_reports_missing_optional_fields() -> None:
    raw = message({0: varlen(5), 2: varlen(7)}, last_required=1)
    assert read_message(raw, 0, len(raw), [Kind.UNSIGNED] * 4) == [5, None, 7, None]
    with pytest.raises(DecodeError, match="id 1, expected 2"):
        read_message(raw, 0, len(raw), [Kind.UNSIGNED], message_id=2)


# ---- encoded GTID sets: PREVIOUS_GTIDS and COM_BINLOG_DUMP_GTID -----------------------------------


def encoded_set(tsids: list[tuple[str, str | None, list[tuple[int, int]]]]) -> bytes:
    """Our own encoding: tag None = untagged format (no tag bytes at all)."""
    tagged = any(tag is not None for _, tag, _ in tsids)
    n = len(tsids)
    out = struct.pack("<Q", (1 << 56) | (n << 8) | 1 if tagged else n)
    for uuid, tag, ivs in tsids:
        out += bytes.fromhex(uuid.replace("-", ""))
        if tagged:
            out += varlen(len(tag or "")) + (tag or "").encode()
        out += struct.pack("<Q", len(ivs)) + b"".join(struct.pack("<QQ", a, b + 1) for a, b in ivs)
    return out


def test_tagged_previous_gtids_event() -> None:
    raw = encoded_set([(U1, "", [(1, 5), (7, 7)]), (U1, "mytag", [(1, 3)]), (U2, "zz", [(4, 4)])])
    e = parser().parse(event(ev.PREVIOUS_GTIDS_LOG_EVENT, raw), 1)
    assert isinstance(e, ev.GtidSetEvent) and e.gtid_set == f"{U1}:1-5:7:mytag:1-3,{U2}:zz:4"


def test_untagged_previous_gtids_event_is_unchanged() -> None:
    raw = encoded_set([(U1, None, [(1, 5)]), (U2, None, [(3, 3)])])
    e = parser().parse(event(ev.PREVIOUS_GTIDS_LOG_EVENT, raw), 1)
    assert isinstance(e, ev.GtidSetEvent) and e.gtid_set == f"{U1}:1-5,{U2}:3"


@pytest.mark.parametrize(
    ("text", "layout"),
    [
        (f"{U1}:1-5", [(U1, None, [(1, 5)])]),
        (f"{U2}:3,{U1}:1-5:9", [(U1, None, [(1, 5), (9, 9)]), (U2, None, [(3, 3)])]),
        (
            f"{U1}:1-5:mytag:1-3:9,{U2}:a:1",
            [(U1, "", [(1, 5)]), (U1, "mytag", [(1, 3), (9, 9)]), (U2, "a", [(1, 1)])],
        ),
    ],
)
def test_dump_gtid_encoding(text: str, layout: Any) -> None:
    gs = GtidSet.parse(text, mariadb=False)
    raw = encode_mysql_gtid_set(gs)
    assert raw == encoded_set(layout)
    assert str(decode_mysql_gtid_set(raw, 0, len(raw))) == str(gs)


def test_unknown_gtid_set_format_is_refused() -> None:
    raw = struct.pack("<Q", (2 << 56) | 1)
    with pytest.raises(DecodeError, match="format 2"):
        decode_mysql_gtid_set(raw, 0, len(raw))
