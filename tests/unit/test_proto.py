"""canal's protobuf formats: our model → bytes → model, and the bytes checked field by field with a
descriptor-free wire reader, so a wrong field number or presence rule cannot hide behind our own .proto."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2

from relay.binlog.events import ColumnMeta, RowImage
from relay.canal.entry import (
    Entry,
    EntryPosition,
    EntryType,
    EventType,
    Header,
    RowChange,
    TransactionBegin,
    TransactionEnd,
    TxnContext,
)
from relay.canal.proto import entry_pb2, packet_pb2
from relay.canal.proto.convert import (
    decode_messages_packet,
    entry_from_pb,
    entry_to_bytes,
    entry_to_pb,
    messages_packet,
)
from relay.errors import ProtoDecodeError

ROOT = Path(__file__).resolve().parents[2]

# -- a descriptor-free protobuf wire reader ----------------------------------------------------------


def _varint(data: bytes, i: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, i


def wire(data: bytes) -> dict[int, list[int | bytes]]:
    """field number → values (varints as int, length-delimited as bytes), in order."""
    out: dict[int, list[int | bytes]] = {}
    i = 0
    while i < len(data):
        key, i = _varint(data, i)
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            value, i = _varint(data, i)
            out.setdefault(number, []).append(value)
        elif wire_type == 2:
            size, i = _varint(data, i)
            out.setdefault(number, []).append(data[i : i + size])
            i += size
        else:
            raise AssertionError(f"unexpected wire type {wire_type} for field {number}")
    return out


def one(fields: dict[int, list[int | bytes]], number: int) -> int | bytes:
    values = fields[number]
    assert len(values) == 1, (number, values)
    return values[0]


# -- model values ------------------------------------------------------------------------------------


def col(index: int, name: str, mysql_type: str, sql_type: int, key: bool = False) -> ColumnMeta:
    return ColumnMeta(
        index=index,
        name=name,
        type_code=15,
        meta=64,
        nullable=not key,
        unsigned=False,
        charset=45,
        is_key=key,
        mysql_type=mysql_type,
        sql_type=sql_type,
        length=16,
    )


COLUMNS = (
    col(0, "id", "bigint", -5, key=True),
    col(1, "status", "varchar(16)", 12),
    col(2, "note", "text", 2005),
)
TXN = TxnContext(start=EntryPosition("mysql-bin.000003", 1000, 7, "u:5", 1_763_700_000_000), gtid="u:5")


def header(event_type: EventType, **kw: object) -> Header:
    values: dict[str, object] = {
        "logfile_name": "mysql-bin.000003",
        "logfile_offset": 1234,
        "server_id": 7,
        "execute_time": 1_763_700_000_000,
        "event_length": 88,
        "event_type": event_type,
        "gtid": "u:5",
        "props": [("curtGtid", "u:5")],
    }
    values.update(kw)
    return Header(**values)  # type: ignore[arg-type]


def update_entry() -> Entry:
    rows = (
        RowImage(before=("42", "NEW", None), after=("42", "PAID", None)),
        RowImage(before=("43", "NEW", "x"), after=("43", "NEW", "y")),
    )
    value = RowChange(event_type=EventType.UPDATE, table_id=108, columns=COLUMNS, rows=rows)
    h = header(EventType.UPDATE, schema_name="shop_07", table_name="orders_33")
    h.props.append(("rowsCount", "2"))
    return Entry(h, EntryType.ROWDATA, value, TXN, txn_index=1)


def ddl_entry() -> Entry:
    value = RowChange(
        event_type=EventType.ALTER, is_ddl=True, sql="ALTER TABLE t ADD c INT", ddl_schema_name="shop_07"
    )
    h = header(EventType.ALTER, schema_name="shop_07", table_name="t")
    return Entry(h, EntryType.ROWDATA, value, TXN, closes_txn=True)


# -- tests -------------------------------------------------------------------------------------------


def test_entry_field_numbers_on_the_wire() -> None:
    entry = update_entry()
    top = wire(entry_to_bytes(entry))
    assert set(top) == {1, 2, 3}
    assert one(top, 2) == 2  # ROWDATA

    h = wire(one(top, 1))  # type: ignore[arg-type]
    assert one(h, 1) == 1  # version, canal writes 1
    assert one(h, 2) == b"mysql-bin.000003"
    assert one(h, 3) == 1234  # logfileOffset
    assert one(h, 4) == 7  # serverId
    assert one(h, 5) == b"UTF-8"  # serverenCode
    assert one(h, 6) == 1_763_700_000_000  # executeTime
    assert one(h, 7) == 2  # sourceType MYSQL
    assert one(h, 8) == b"shop_07"
    assert one(h, 9) == b"orders_33"
    assert one(h, 10) == 88  # eventLength
    assert one(h, 11) == 2  # eventType UPDATE
    assert [wire(p) for p in h[12]] == [  # type: ignore[arg-type]
        {1: [b"curtGtid"], 2: [b"u:5"]},
        {1: [b"rowsCount"], 2: [b"2"]},
    ]
    assert one(h, 13) == b"u:5"

    rc = wire(one(top, 3))  # type: ignore[arg-type]
    assert one(rc, 1) == 108  # tableId
    assert one(rc, 2) == 2  # eventType
    assert one(rc, 10) == 0  # isDdl present and false on row changes, as canal sets it
    assert 11 not in rc and 14 not in rc  # no sql, no ddlSchemaName
    assert len(rc[12]) == 2  # rowDatas
    row = wire(rc[12][0])  # type: ignore[arg-type]
    before = [wire(c) for c in row[1]]  # type: ignore[arg-type]
    after = [wire(c) for c in row[2]]  # type: ignore[arg-type]
    assert [c[3] for c in after] == [[b"id"], [b"status"], [b"note"]]  # name
    status = after[1]
    assert one(status, 1) == 1  # index
    assert one(status, 2) == 12  # sqlType VARCHAR
    assert one(status, 5) == 1  # updated: NEW → PAID
    assert one(status, 6) == 0  # isNull present even when false
    assert one(status, 8) == b"PAID"  # value
    assert one(status, 9) == 16  # length
    assert one(status, 10) == b"varchar(16)"  # mysqlType
    assert one(after[0], 4) == 1  # isKey
    assert 5 not in after[0]  # id not updated (false is not written)
    assert one(after[2], 6) == 1 and 8 not in after[2]  # NULL: isNull, no value
    assert one(before[1], 8) == b"NEW"


def test_ddl_and_query_presence_of_is_ddl() -> None:
    rc = wire(one(wire(entry_to_bytes(ddl_entry())), 3))  # type: ignore[arg-type]
    assert one(rc, 10) == 1
    assert one(rc, 11) == b"ALTER TABLE t ADD c INT"
    assert one(rc, 14) == b"shop_07"
    assert 12 not in rc

    query = RowChange(event_type=EventType.QUERY, sql="GRANT ALL ON *.* TO x", ddl_schema_name="shop_07")
    entry = Entry(header(EventType.QUERY), EntryType.ROWDATA, query, TXN)
    rc = wire(one(wire(entry_to_bytes(entry)), 3))  # type: ignore[arg-type]
    assert 10 not in rc  # canal leaves isDdl unset on plain statements
    assert one(rc, 2) == 7


def test_begin_and_end_values_and_unset_event_type() -> None:
    begin = Entry(
        header(EventType.EVENTTYPECOMPATIBLEPROTO2),
        EntryType.TRANSACTIONBEGIN,
        TransactionBegin(execute_time=1_763_700_000_000, thread_id=77),
        TXN,
    )
    top = wire(entry_to_bytes(begin))
    assert one(top, 2) == 1
    assert 11 not in wire(one(top, 1))  # type: ignore[arg-type]  # no eventType on BEGIN, as canal
    b = wire(one(top, 3))  # type: ignore[arg-type]
    assert one(b, 1) == 1_763_700_000_000 and one(b, 4) == 77 and 2 not in b

    end = Entry(
        header(EventType.EVENTTYPECOMPATIBLEPROTO2),
        EntryType.TRANSACTIONEND,
        TransactionEnd(transaction_id="991", props=[("XA_TYPE", "XA END")]),
        TXN,
        closes_txn=True,
    )
    e = wire(one(wire(entry_to_bytes(end)), 3))  # type: ignore[arg-type]
    assert one(e, 2) == b"991"
    assert wire(one(e, 3)) == {1: [b"XA_TYPE"], 2: [b"XA END"]}  # type: ignore[arg-type]


def test_round_trip_through_bytes() -> None:
    for entry in (update_entry(), ddl_entry()):
        back = entry_from_pb(entry_to_bytes(entry))
        assert back.header == entry.header
        assert back.entry_type == entry.entry_type
        value, original = back.store_value, entry.store_value
        assert isinstance(value, RowChange) and isinstance(original, RowChange)
        assert value.row_datas() == original.row_datas()
        assert (value.event_type, value.table_id, value.is_ddl, value.sql, value.ddl_schema_name) == (
            original.event_type,
            original.table_id,
            original.is_ddl,
            original.sql,
            original.ddl_schema_name,
        )
        assert value.rows == original.rows
        assert [c.name for c in value.columns] == [c.name for c in original.columns]
        # and the bytes of the decoded value are the bytes we started from
        assert entry_to_pb(back) == entry_to_pb(entry)


def test_decoded_row_flags_survive_as_sent() -> None:
    """canal marks every INSERT column updated; a decoded entry keeps the flags it was sent with."""
    msg = entry_to_pb(update_entry())
    rc = entry_pb2.RowChange.FromString(msg.storeValue)
    for column in rc.rowDatas[0].afterColumns:
        column.updated = True
    msg.storeValue = rc.SerializeToString()
    back = entry_from_pb(msg.SerializeToString())
    assert isinstance(back.store_value, RowChange)
    assert all(c.updated for c in back.store_value.row_datas()[0].after_columns)


def test_messages_packet_bytes() -> None:
    entries = [update_entry(), ddl_entry()]
    data = messages_packet(17, entries)
    packet = wire(data)
    assert one(packet, 2) == 1  # version
    assert one(packet, 3) == 7  # type MESSAGES
    assert one(packet, 4) == 1  # compression NONE
    assert 1 not in packet  # no magic number
    body = wire(one(packet, 5))  # type: ignore[arg-type]
    assert one(body, 1) == 17
    assert body[2] == [entry_to_bytes(e) for e in entries]
    # the envelope's first bytes, by hand: field 2 varint 1, field 3 varint 7, field 4 varint 1
    assert data[:6] == bytes([0x10, 0x01, 0x18, 0x07, 0x20, 0x01])

    batch_id, back = decode_messages_packet(data)
    assert batch_id == 17
    assert [e.header for e in back] == [e.header for e in entries]


def test_decode_rejects_what_is_not_a_messages_packet() -> None:
    ack = packet_pb2.Packet(version=1, type=packet_pb2.ACK, body=b"").SerializeToString()
    with pytest.raises(ProtoDecodeError, match="not MESSAGES"):
        decode_messages_packet(ack)
    zipped = packet_pb2.Packet(type=packet_pb2.MESSAGES, compression=packet_pb2.GZIP).SerializeToString()
    with pytest.raises(ProtoDecodeError, match="compressed"):
        decode_messages_packet(zipped)
    with pytest.raises(ProtoDecodeError):
        decode_messages_packet(b"\xff\xff\xff")
    with pytest.raises(ProtoDecodeError):
        entry_from_pb(b"\x0a\x05ab")  # header field cut short


def test_enum_numbers_match_canal() -> None:
    assert [entry_pb2.EntryType.Value(t.name) for t in EntryType] == [t.value for t in EntryType]
    assert [entry_pb2.EventType.Value(t.name) for t in EventType] == [t.value for t in EventType]
    assert packet_pb2.MESSAGES == 7 and packet_pb2.HEARTBEAT == 11 and packet_pb2.CLIENTROLLBACK == 12
    assert packet_pb2.NONE == 1 and packet_pb2.LZF == 4
    assert entry_pb2.DESCRIPTOR.package == "com.alibaba.otter.canal.protocol"
    assert entry_pb2.DESCRIPTOR.GetOptions().java_outer_classname == "CanalEntry"
    assert packet_pb2.DESCRIPTOR.GetOptions().java_outer_classname == "CanalPacket"
    oneofs = {o.name for o in entry_pb2.Header.DESCRIPTOR.oneofs}
    assert oneofs == {"version_present", "sourceType_present", "eventType_present"}
    assert {o.name for o in entry_pb2.RowChange.DESCRIPTOR.oneofs} == {"eventType_present", "isDdl_present"}


def test_generated_modules_match_the_proto_files(tmp_path: Path) -> None:
    """The committed *_pb2.py describe exactly what the .proto files say (regenerate: scripts/gen-proto)."""
    pytest.importorskip("grpc_tools")
    out = tmp_path / "set.pb"
    protos = ["relay/canal/proto/entry.proto", "relay/canal/proto/packet.proto"]
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", "-I.", f"--descriptor_set_out={out}", *protos],
        cwd=ROOT,
        check=True,
    )
    fresh = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    for expected_file in fresh.file:
        for message in expected_file.message_type:
            for fld in message.field:
                fld.ClearField("json_name")  # a descriptor set carries json names; gencode does not
    for module, expected in zip((entry_pb2, packet_pb2), fresh.file, strict=True):
        committed = descriptor_pb2.FileDescriptorProto.FromString(module.DESCRIPTOR.serialized_pb)
        assert committed == expected, f"{module.__name__} is stale: run scripts/gen-proto"


def test_gen_proto_script_is_executable() -> None:
    script = ROOT / "scripts" / "gen-proto"
    assert script.exists() and shutil.which(str(script)) is not None
