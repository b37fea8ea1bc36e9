"""Compressed binlog content: MariaDB's QUERY/ROWS_COMPRESSED events and MySQL's TRANSACTION_PAYLOAD.

Bytes are built here from the documented layouts (MariaDB sql/log_event.cc ``binlog_buf_compress``;
MySQL control_events.h ``Transaction_payload_event`` and codecs/binary.cpp), compressed with zlib and
zstd, and checked against what the same events decode to uncompressed. The last tests feed a
payload's events to the entry builder and check that a resume point inside the payload re-reads to
exactly the entries not yet published.
"""

from __future__ import annotations

import socket
import struct
import zlib
from collections.abc import Iterator

import pytest
import zstandard

from relay.binlog import events as ev
from relay.binlog.parse import BinlogParser
from relay.binlog.stream import BinlogStream, StreamConfig, _PacketReader
from relay.canal.entry import Entry, EntryType
from relay.canal.entry_builder import BuilderConfig, EntryBuilder
from relay.errors import DecodeError
from relay.positions.store import resume_after
from tests.unit.test_binlog_parse import FILE, event, lenenc, names, packets, parser, tlv
from tests.unit.test_binlog_tablemap_flavours import table_map

UUID = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
TABLE_ID = 70
# id INT, name VARCHAR(20) utf8mb4
MAP = table_map(
    [(3, b""), (15, struct.pack("<H", 80))],
    tlv(4, names("id", "name")) + tlv(2, lenenc(45)) + tlv(8, lenenc(0)),
    table_id=TABLE_ID,
)


def row(ident: int, name: str | None) -> bytes:
    """One row image of (id, name): null bitmap, then the non-NULL values."""
    if name is None:
        return b"\x02" + struct.pack("<i", ident)
    raw = name.encode()
    return b"\x00" + struct.pack("<i", ident) + bytes([len(raw)]) + raw


def rows_part(kind: str, *images: bytes) -> bytes:
    """Column count and bitmap(s) (both columns present), then the row images."""
    bitmaps = b"\x03\x03" if kind == ev.UPDATE else b"\x03"
    return lenenc(2) + bitmaps + b"".join(images)


def rows_head(v2: bool, flags: int = 1) -> bytes:
    head = TABLE_ID.to_bytes(6, "little") + struct.pack("<H", flags)
    return head + (struct.pack("<H", 2) if v2 else b"")


def block(raw: bytes, length_bytes: int | None = None) -> bytes:
    """A MariaDB compressed block: 0x80 | (zlib=0) << 4 | n, the length in n big-endian bytes, zlib."""
    n = length_bytes or max(1, (len(raw).bit_length() + 7) // 8)
    return bytes([0x80 | n]) + len(raw).to_bytes(n, "big") + zlib.compress(raw)


# ---- MariaDB compressed events --------------------------------------------------------------------


def query_body(sql_part: bytes, schema: bytes = b"shop") -> bytes:
    status = b"\x00\x00\x00\x00\x00"  # Q_FLAGS2
    return struct.pack("<IIBHH", 11, 0, len(schema), 0, len(status)) + status + schema + b"\0" + sql_part


@pytest.mark.parametrize("length_bytes", [None, 3, 4])
def test_query_compressed_event(length_bytes: int | None) -> None:
    sql = "INSERT INTO t VALUES ('" + "é" * 200 + "')"
    raw = event(ev.MARIADB_QUERY_COMPRESSED_EVENT, query_body(block(sql.encode(), length_bytes)))
    e = parser(mariadb=True).parse(raw, 1)
    assert isinstance(e, ev.QueryEvent) and (e.schema, e.sql, e.thread_id) == ("shop", sql, 11)
    assert e.header.type_code == ev.MARIADB_QUERY_COMPRESSED_EVENT and e.header.event_size == len(raw) - 1


@pytest.mark.parametrize(
    ("code", "plain", "kind", "v2"),
    [
        (ev.MARIADB_WRITE_ROWS_COMPRESSED_EVENT_V1, ev.WRITE_ROWS_EVENT_V1, ev.INSERT, False),
        (ev.MARIADB_UPDATE_ROWS_COMPRESSED_EVENT_V1, ev.UPDATE_ROWS_EVENT_V1, ev.UPDATE, False),
        (ev.MARIADB_DELETE_ROWS_COMPRESSED_EVENT_V1, ev.DELETE_ROWS_EVENT_V1, ev.DELETE, False),
        (ev.MARIADB_WRITE_ROWS_COMPRESSED_EVENT, ev.WRITE_ROWS_EVENT, ev.INSERT, True),
        (ev.MARIADB_UPDATE_ROWS_COMPRESSED_EVENT, ev.UPDATE_ROWS_EVENT, ev.UPDATE, True),
        (ev.MARIADB_DELETE_ROWS_COMPRESSED_EVENT, ev.DELETE_ROWS_EVENT, ev.DELETE, True),
    ],
)
def test_rows_compressed_events_decode_like_their_plain_twins(
    code: int, plain: int, kind: str, v2: bool
) -> None:
    images = [row(1, "a" * 30), row(2, None), row(3, "ü" * 40), row(4, "")]
    part = rows_part(kind, *images)
    count_and_bitmaps = len(rows_part(kind))
    zipped = part[:count_and_bitmaps] + block(part[count_and_bitmaps:])

    def decode(type_code: int, body: bytes) -> ev.RowsEvent:
        p = parser(mariadb=True)
        p.parse(event(ev.TABLE_MAP_EVENT, MAP), 1)
        e = p.parse(event(type_code, rows_head(v2) + body), 1)
        assert isinstance(e, ev.RowsEvent)
        return e

    got, want = decode(code, zipped), decode(plain, part)
    assert (
        got.kind == want.kind == kind
        and got.rows == want.rows
        and len(got.rows) == (2 if kind == ev.UPDATE else 4)
    )
    assert got.header.type_code == code and got.table.table == "t"


@pytest.mark.parametrize(
    ("mangle", "message"),
    [
        (lambda b: bytes([0x91]) + b[1:], "zlib only"),  # algorithm 1
        (lambda b: bytes([0x85]) + b[1:], "bad compressed block header"),  # 5 length bytes
        (lambda b: b[:1] + bytes([b[1] + 1]) + b[2:], "announced"),  # length off by one
        (lambda b: b[:-3], "corrupt|announced"),  # truncated zlib stream
        (lambda b: b + b"x", "announced"),  # bytes after the zlib stream
    ],
)
def test_malformed_compressed_blocks_are_refused(mangle: object, message: str) -> None:
    raw = block(b"SELECT 1 FROM dual WHERE 1 = 1")
    assert callable(mangle)
    with pytest.raises(DecodeError, match=message):
        parser(mariadb=True).parse(event(ev.MARIADB_QUERY_COMPRESSED_EVENT, query_body(mangle(raw))), 1)


# ---- MySQL TRANSACTION_PAYLOAD ---------------------------------------------------------------------


def inner(code: int, body: bytes, flags: int = 0) -> bytes:
    """An event as it sits in a payload: common header with log_pos 0, no checksum."""
    return struct.pack("<IBIIIH", 1_700_000_001, code, 5, 19 + len(body), 0, flags) + body


def transaction_events() -> list[bytes]:
    """BEGIN, TABLE_MAP, a two-row INSERT, TABLE_MAP, UPDATE, DELETE, XID: one multi-event transaction."""
    return [
        inner(ev.QUERY_EVENT, query_body(b"BEGIN")),
        inner(ev.TABLE_MAP_EVENT, MAP),
        inner(ev.WRITE_ROWS_EVENT, rows_head(True) + rows_part(ev.INSERT, row(1, "a"), row(2, "b"))),
        inner(ev.TABLE_MAP_EVENT, MAP),
        inner(ev.UPDATE_ROWS_EVENT, rows_head(True, 0) + rows_part(ev.UPDATE, row(1, "a"), row(1, "A"))),
        inner(ev.DELETE_ROWS_EVENT, rows_head(True) + rows_part(ev.DELETE, row(2, "b"))),
        inner(ev.XID_EVENT, struct.pack("<Q", 4682)),
    ]


def tlv_field(kind: int, value: int) -> bytes:
    raw = lenenc(value)
    return lenenc(kind) + lenenc(len(raw)) + raw


def payload_body(raw: bytes, compression: int = 0, announced: int | None = None) -> bytes:
    data = zstandard.ZstdCompressor(level=3).compress(raw) if compression == 0 else raw
    header = tlv_field(2, compression)
    if compression == 0:
        header += tlv_field(3, len(raw) if announced is None else announced)
    return header + tlv_field(1, len(data)) + lenenc(0) + data


def gtid_event(log_pos: int) -> bytes:
    body = b"\x00" + bytes.fromhex(UUID.replace("-", "")) + struct.pack("<Q", 42) + b"\x02" + bytes(16)
    return event(ev.GTID_LOG_EVENT, body, log_pos=log_pos)


@pytest.mark.parametrize("compression", [0, 255])
def test_transaction_payload_with_a_multi_event_transaction(compression: int) -> None:
    raw = b"".join(transaction_events())
    packet = event(ev.TRANSACTION_PAYLOAD_EVENT, payload_body(raw, compression), log_pos=5000)
    e = parser().parse(packet, 1)
    assert isinstance(e, ev.TransactionPayloadEvent)
    assert (e.compression_type, e.uncompressed_size) == (compression, len(raw))
    size = len(packet) - 1
    kinds = [type(x).__name__ for x in e.events]
    assert kinds == [
        "QueryEvent",
        "TableMapEvent",
        "RowsEvent",
        "TableMapEvent",
        "RowsEvent",
        "RowsEvent",
        "XidEvent",
    ]
    for index, (x, raw_event) in enumerate(zip(e.events, transaction_events(), strict=True)):
        h = x.header
        assert (h.start, h.event_size, h.log_pos, h.log_file) == (5000 - size, size, 5000, FILE)
        assert (h.payload_index, h.inner_size, h.server_id) == (index, len(raw_event), 5)
    begin, _, insert, _, update, delete, xid = e.events
    assert isinstance(begin, ev.QueryEvent) and begin.sql == "BEGIN"
    assert isinstance(insert, ev.RowsEvent) and [r.after for r in insert.rows] == [("1", "a"), ("2", "b")]
    assert isinstance(update, ev.RowsEvent) and update.rows == (ev.RowImage(("1", "a"), ("1", "A")),)
    assert isinstance(delete, ev.RowsEvent) and delete.rows == (ev.RowImage(("2", "b"), None),)
    assert isinstance(xid, ev.XidEvent) and xid.xid == 4682


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (lambda raw: payload_body(raw, announced=len(raw) + 1), "announced"),
        (lambda raw: payload_body(raw, compression=7), "compression type 7"),
        (lambda raw: payload_body(raw)[:-1], "payload of"),  # payload size says more than the event has
        (lambda raw: payload_body(raw[:-1]), "has size"),  # the last inner event cut short
        (lambda raw: payload_body(raw + inner(ev.ROTATE_EVENT, b"x")), "event type 4"),
        (lambda raw: tlv_field(1, 3) + lenenc(0) + b"abc", "compression type"),
    ],
)
def test_malformed_payloads_are_refused(body: object, message: str) -> None:
    assert callable(body)
    with pytest.raises(DecodeError, match=message):
        parser().parse(event(ev.TRANSACTION_PAYLOAD_EVENT, body(b"".join(transaction_events()))), 1)


def test_payload_header_skips_unknown_fields() -> None:
    raw = b"".join(transaction_events())
    data = zstandard.ZstdCompressor().compress(raw)
    header = (
        lenenc(9) + lenenc(3) + b"xyz" + tlv_field(2, 0) + tlv_field(3, len(raw)) + tlv_field(1, len(data))
    )
    e = parser().parse(event(ev.TRANSACTION_PAYLOAD_EVENT, header + lenenc(0) + data), 1)
    assert isinstance(e, ev.TransactionPayloadEvent) and len(e.events) == 7


# ---- the stream hands the inner events on; positions for an exact resume ----------------------------


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


def binlog_packets() -> tuple[list[bytes], int, int]:
    """GTID at 1000, the payload after it, another GTID after that: (packets, payload start, end)."""
    first = gtid_event(log_pos=1000 + 19 + 42 + 4)
    gtid_end = 1000 + len(first) - 1
    payload = payload_body(b"".join(transaction_events()))
    size = 19 + len(payload) + 4
    second = event(ev.TRANSACTION_PAYLOAD_EVENT, payload, log_pos=gtid_end + size)
    after = gtid_event(log_pos=gtid_end + size + len(first) - 1)
    return [first, second, after], gtid_end, gtid_end + size


def test_stream_hands_out_inner_events_one_by_one(pair: tuple[socket.socket, socket.socket]) -> None:
    ours, server = pair
    raw, start, end = binlog_packets()
    server.sendall(b"".join(packets(p) for p in raw))
    stream = BinlogStream(StreamConfig(host="unused"))
    stream._reader, stream._parser = (
        _PacketReader(ours, 10),
        BinlogParser(checksum=True, mariadb=False, log_file=FILE),
    )
    got = [stream.read(1.0) for _ in range(9)]
    assert [type(e).__name__ for e in got] == [
        "GtidEvent", "QueryEvent", "TableMapEvent", "RowsEvent", "TableMapEvent", "RowsEvent",
        "RowsEvent", "XidEvent", "GtidEvent",
    ]  # fmt: skip
    inside = got[1:8]
    assert all(e is not None and (e.header.start, e.header.log_pos) == (start, end) for e in inside)
    assert [e.header.payload_index for e in got if e is not None] == [-1, 0, 1, 2, 3, 4, 5, 6, -1]
    stream.close()


def build(events: list[ev.BinlogEvent]) -> list[Entry]:
    builder = EntryBuilder(BuilderConfig(mariadb=False, gtid_set=f"{UUID}:1-41"))
    return [entry for e in events for entry in builder.build(e)]


def decoded_binlog() -> tuple[list[ev.BinlogEvent], int, int]:
    raw, start, end = binlog_packets()
    p = parser()
    out: list[ev.BinlogEvent] = []
    for packet in raw[:2]:
        e = p.parse(packet, 1)
        out.extend(e.events if isinstance(e, ev.TransactionPayloadEvent) else [e])
    return out, start, end


def test_entry_builder_numbers_payload_entries_and_resume_points_land_inside_exactly() -> None:
    events, start, end = decoded_binlog()
    gtid_start = events[0].header.start
    entries = build(events)
    types = [e.entry_type for e in entries]
    assert types == [EntryType.TRANSACTIONBEGIN, *[EntryType.ROWDATA] * 3, EntryType.TRANSACTIONEND]
    assert [e.txn_index for e in entries] == [0, 1, 2, 3, 4]
    assert all(e.txn.start.offset == gtid_start and e.header.logfile_offset == start for e in entries[1:])
    # After the commit: the next event of the file, with the transaction's GTID in the set.
    done = resume_after(entries[-1])
    assert (done.journal, done.offset, done.skip) == (FILE, end, 0)
    assert done.gtid_set == f"{UUID}:1-42"
    # Inside the payload: re-read from the GTID event and drop what was published.
    for published in range(1, len(entries)):
        point = resume_after(entries[published - 1])
        assert (point.journal, point.offset, point.skip) == (FILE, gtid_start, published)
        again = [e for e in build(events) if e.txn_index >= point.skip]
        assert [(e.entry_type, e.txn_index, e.header.logfile_offset) for e in again] == [
            (e.entry_type, e.txn_index, e.header.logfile_offset) for e in entries[published:]
        ]


def test_payload_entries_carry_their_ordinal_and_own_size_into_distinct_record_identities() -> None:
    from mapping.load import parse_mapping
    from relay.kafka.codec import RecordEncoder
    from relay.positions.store import SourceIdentity

    events, start, end = decoded_binlog()
    entries = build(events)
    inner = [e for e in entries if e.payload_index >= 0]
    assert [e.payload_index for e in inner] == sorted({e.payload_index for e in inner}) and inner
    assert all(e.size == e.inner_size and e.header.event_length == end - start for e in inner)
    encoder = RecordEncoder(
        parse_mapping({"unmapped": {"action": "topic", "topic": "{db}"}}),
        SourceIdentity("h", 3306, 1),
        ddl_topic=None,
        partitions=lambda topic: 1,
    )
    records = [r for e in entries for r in encoder.encode(e)]
    assert len(records) >= 3, records  # the payload's rows, each a record
    idents = [(dict(r.headers)["relay.sequence"], int(dict(r.headers)["relay.part"])) for r in records]
    assert len(set(idents)) == len(idents) and idents == sorted(idents, key=lambda i: i[1])
