"""The debezium-json codec: every MySQL type's value and schema against Debezium's documented MySQL type
mappings (default settings), the envelope, key, headers, tombstones, key changes, snapshot reads, DDL and
TRUNCATE, and the mapping's ``debezium`` settings.

The expected values are worked out here from the documentation's rules and its examples ("How Debezium
MySQL connectors map data types": DATETIME ``2018-06-20 06:37:03`` → ``1529476623000``, TIMESTAMP
``2018-06-20 06:37:03`` in a UTC-7 server → ``2018-06-20T13:37:03Z``), not from the codec's code.
"""

from __future__ import annotations

import base64
import json
import struct
from datetime import UTC, date, datetime
from typing import Any

import pytest

from mapping.diff import logical_changes
from mapping.load import dump_mapping, parse_mapping
from mapping.model import InvalidMappingError, Mapping
from relay.binlog import types as t
from relay.binlog.column_types import table_map_meta, table_map_type
from relay.binlog.events import ColumnMeta, RowImage
from relay.binlog.rows import Instant
from relay.canal.entry import Entry, EntryPosition, EntryType, EventType, Header, RowChange, TxnContext
from relay.errors import CodecError
from relay.kafka.codec import RecordEncoder
from relay.kafka.debezium_types import field_of, unscaled_bytes
from relay.kafka.records import Record
from relay.positions.store import SourceIdentity
from relay.source.snapshot_entry import SNAPSHOT_PROP

FILE = "mysql-bin.000123"
ES = 1763700000000
GTID = "3e11fa47-71ca-11e1-9e33-c80aa9429562:23"
SOURCE = SourceIdentity("db1.local", 3306, 7, "3e11fa47-71ca-11e1-9e33-c80aa9429562")
UTF8MB4 = 45


def col(
    kind: str,
    *,
    nullable: bool = True,
    unsigned: bool = False,
    charset: int | None = None,
    name: str = "c",
    key: bool = False,
    index: int = 0,
    values: tuple[str, ...] | None = None,
    **size: int,
) -> ColumnMeta:
    """A column as the binlog's table map describes it (``relay.binlog.column_types``)."""
    real, width = table_map_type(kind, members=len(values or ()), **size)
    code, meta = table_map_meta(real, width)
    return t.column_meta(
        index,
        code,
        meta,
        nullable,
        name=name,
        unsigned=unsigned,
        charset=charset,
        is_key=key,
        enum_values=values if kind == "enum" else None,
        set_values=values if kind == "set" else None,
    )


def encoded(column: ColumnMeta, text: str, decimal: str = "precise") -> Any:
    """The JSON value Debezium's encoding of ``text`` parses to, and the field's schema."""
    return json.loads(field_of(column, decimal).encode(text))


def schema(column: ColumnMeta, decimal: str = "precise") -> dict[str, Any]:
    return field_of(column, decimal).schema


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


# -- basic types: "Descriptions of basic type mappings" ---------------------------------------------


@pytest.mark.parametrize(
    ("kind", "unsigned", "text", "literal", "value"),
    [
        ("tinyint", False, "-128", "int16", -128),
        ("tinyint", True, "255", "int16", 255),
        ("smallint", False, "-32768", "int16", -32768),
        ("smallint", True, "65535", "int32", 65535),
        ("mediumint", False, "-8388608", "int32", -8388608),
        ("mediumint", True, "16777215", "int32", 16777215),
        ("int", False, "-2147483648", "int32", -2147483648),
        ("int", True, "4294967295", "int64", 4294967295),
        ("bigint", False, "-9223372036854775808", "int64", -9223372036854775808),
        ("bigint", True, "9223372036854775807", "int64", 9223372036854775807),
        # bigint.unsigned.handling.mode=long: Java's long, so past 2^63-1 the value wraps
        ("bigint", True, "18446744073709551615", "int64", -1),
    ],
)
def test_integers(kind: str, unsigned: bool, text: str, literal: str, value: int) -> None:
    column = col(kind, unsigned=unsigned)
    assert schema(column) == {"type": literal}
    assert encoded(column, text) == value


def test_float_and_double_are_float32_and_float64_numbers() -> None:
    assert schema(col("float")) == {"type": "float"}
    assert field_of(col("float"), "precise").encode("3.4028235E38") == "3.4028235E38"
    assert encoded(col("float"), "1.0E10") == 1.0e10
    assert schema(col("double")) == {"type": "double"}
    assert encoded(col("double"), "-2.5E-300") == -2.5e-300


def test_bit_1_is_boolean_and_bit_n_is_little_endian_bytes() -> None:
    one = col("bit", bits=1)
    assert schema(one) == {"type": "boolean"}
    assert encoded(one, "1") is True and encoded(one, "0") is False
    ten = col("bit", bits=10)
    assert schema(ten) == {
        "type": "bytes",
        "name": "io.debezium.data.Bits",
        "version": 1,
        "parameters": {"length": "10"},
    }
    # b'1000000001' = 513 = 0x0201: little-endian in 10/8 + 1 = 2 bytes
    assert base64.b64decode(encoded(ten, "513")) == b"\x01\x02"
    sixteen = col("bit", bits=16)
    assert base64.b64decode(encoded(sixteen, "1")) == b"\x01\x00"  # sized to n/8 bytes for n % 8 == 0
    assert base64.b64decode(encoded(col("bit", bits=64), str(2**64 - 1))) == b"\xff" * 8


def test_strings_and_binaries() -> None:
    assert schema(col("varchar", length=64, charset=UTF8MB4)) == {"type": "string"}
    assert encoded(col("varchar", length=64, charset=UTF8MB4), "h\u00e9llo \u2603") == "h\u00e9llo \u2603"
    assert encoded(col("char", length=16, charset=UTF8MB4), "ab") == "ab"
    assert encoded(col("mediumtext", charset=UTF8MB4), "text") == "text"
    # binary.handling.mode=bytes: BYTES, which JsonConverter writes as base64; canal's text is latin-1 bytes
    for column in (col("binary", length=4, charset=63), col("varbinary", length=8, charset=63), col("blob")):
        assert schema(column) == {"type": "bytes"}
    assert base64.b64decode(encoded(col("binary", length=4, charset=63), "ab\x00\x00")) == b"ab\x00\x00"
    assert base64.b64decode(encoded(col("longblob"), "\x00\xff\x80")) == b"\x00\xff\x80"


def test_enum_set_and_json() -> None:
    enum = col("enum", charset=UTF8MB4, values=("NEW", "PAID", "a,b"))
    assert schema(enum) == {
        "type": "string",
        "name": "io.debezium.data.Enum",
        "version": 1,
        "parameters": {"allowed": "NEW,PAID,a,b"},
    }
    assert encoded(enum, "PAID") == "PAID"
    members = col("set", charset=UTF8MB4, values=("r", "w", "x"))
    assert schema(members)["name"] == "io.debezium.data.EnumSet"
    assert schema(members)["parameters"] == {"allowed": "r,w,x"}
    assert encoded(members, "r,x") == "r,x" and encoded(members, "") == ""
    doc = col("json")
    assert schema(doc) == {"type": "string", "name": "io.debezium.data.Json", "version": 1}
    assert encoded(doc, '{"a": [1, 2]}') == '{"a": [1, 2]}'  # the document's text, as a string


# -- decimals: "Decimal types" (decimal.handling.mode) -----------------------------------------------


@pytest.mark.parametrize(
    ("text", "unscaled"),
    [("19.90", 1990), ("-19.90", -1990), ("0.00", 0), ("1.28", 128), ("-1.28", -128), ("-1.29", -129)],
)
def test_decimal_precise_is_the_unscaled_twos_complement(text: str, unscaled: int) -> None:
    column = col("decimal", precision=12, scale=2)
    assert schema(column) == {
        "type": "bytes",
        "name": "org.apache.kafka.connect.data.Decimal",
        "version": 1,
        "parameters": {"scale": "2", "connect.decimal.precision": "12"},
    }
    raw = base64.b64decode(encoded(column, text))
    assert int.from_bytes(raw, "big", signed=True) == unscaled
    # as short as Java's BigInteger.toByteArray: one sign bit at least, no redundant leading byte
    assert len(raw) == (unscaled.bit_length() if unscaled >= 0 else (~unscaled).bit_length()) // 8 + 1
    assert unscaled_bytes(text) == raw


def test_decimal_precise_known_bytes() -> None:
    assert unscaled_bytes("1.28") == b"\x00\x80"  # 128 needs a 0 sign byte
    assert unscaled_bytes("-1.28") == b"\x80"
    assert unscaled_bytes("0") == b"\x00"
    big = "12345678901234567890123456789012345.678"  # DECIMAL(38,3)
    assert int.from_bytes(unscaled_bytes(big), "big", signed=True) == 12345678901234567890123456789012345678


def test_decimal_string_and_double_modes() -> None:
    column = col("decimal", precision=12, scale=2)
    assert schema(column, "string") == {"type": "string"}
    assert encoded(column, "-19.90", "string") == "-19.90"
    assert schema(column, "double") == {"type": "double"}
    assert field_of(column, "double").encode("19.90") == "19.9"
    assert field_of(column, "double").encode("100000000.00") == "1.0E8"  # Double.toString, as Jackson writes


# -- temporal types: "Temporal values", time.precision.mode=adaptive_time_microseconds ----------------


def test_date_is_epoch_days() -> None:
    column = col("date")
    assert schema(column) == {"type": "int32", "name": "io.debezium.time.Date", "version": 1}
    assert encoded(column, "2018-06-20") == (date(2018, 6, 20) - date(1970, 1, 1)).days
    assert encoded(column, "1969-12-31") == -1
    assert encoded(column, "9999-12-31") == 2932896


def test_datetime_is_epoch_millis_up_to_fsp_3_and_micros_above() -> None:
    for fsp in (0, 3):
        column = col("datetime", fsp=fsp)
        assert schema(column) == {"type": "int64", "name": "io.debezium.time.Timestamp", "version": 1}
    assert encoded(col("datetime"), "2018-06-20 06:37:03") == 1529476623000  # the documentation's example
    assert encoded(col("datetime", fsp=3), "2018-06-20 06:37:03.250") == 1529476623250
    for fsp in (4, 6):
        column = col("datetime", fsp=fsp)
        assert schema(column) == {"type": "int64", "name": "io.debezium.time.MicroTimestamp", "version": 1}
    assert encoded(col("datetime", fsp=6), "2018-06-20 06:37:03.123456") == 1529476623123456
    assert encoded(col("datetime", fsp=4), "1969-12-31 23:59:59.9999") == -100
    assert encoded(col("datetime", fsp=6), "1000-01-01 00:00:00.000000") == (
        int((datetime(1000, 1, 1, tzinfo=UTC) - datetime(1970, 1, 1, tzinfo=UTC)).total_seconds()) * 1_000_000
    )


def test_time_is_micro_time() -> None:
    column = col("time", fsp=6)
    assert schema(column) == {"type": "int64", "name": "io.debezium.time.MicroTime", "version": 1}
    assert encoded(col("time"), "12:00:00") == 43_200_000_000
    assert encoded(col("time", fsp=1), "12:00:00.5") == 43_200_500_000
    assert encoded(column, "838:59:59.000000") == 3_020_399_000_000
    assert encoded(column, "-838:59:59.000000") == -3_020_399_000_000
    assert encoded(column, "-00:00:00.500000") == -500_000


def instant(text: str, micros: int) -> Instant:
    value = Instant(text)
    value.micros = micros
    return value


def test_timestamp_is_an_iso_8601_utc_string() -> None:
    column = col("timestamp")
    assert schema(column) == {"type": "string", "name": "io.debezium.time.ZonedTimestamp", "version": 1}
    # the documentation's example: 2018-06-20 06:37:03 on a server at UTC-7
    seconds = int(datetime(2018, 6, 20, 13, 37, 3, tzinfo=UTC).timestamp())
    assert encoded(column, instant("2018-06-20 06:37:03", seconds * 1_000_000)) == "2018-06-20T13:37:03Z"
    fractional = instant("2018-06-20 06:37:03.120", seconds * 1_000_000 + 120_000)
    assert encoded(col("timestamp", fsp=3), fractional) == "2018-06-20T13:37:03.120Z"
    assert (
        encoded(col("timestamp", fsp=6), instant("x", seconds * 1_000_000 + 5))
        == "2018-06-20T13:37:03.000005Z"
    )
    with pytest.raises(CodecError, match="no instant"):
        field_of(column, "precise").encode("2018-06-20 06:37:03")


def test_year() -> None:
    assert schema(col("year")) == {"type": "int32", "name": "io.debezium.time.Year", "version": 1}
    assert encoded(col("year"), "2024") == 2024
    assert encoded(col("year"), "0000") == 0


# -- spatial and vector ---------------------------------------------------------------------------------


def test_geometry_is_wkb_and_srid() -> None:
    column = col("point")
    assert schema(column)["name"] == "io.debezium.data.geometry.Geometry"
    wkb = b"\x01\x01\x00\x00\x00" + struct.pack("<dd", 1.0, 2.0)
    stored = struct.pack("<I", 4326) + wkb  # MySQL: the SRID, then the WKB
    assert encoded(column, stored.decode("latin-1")) == {"wkb": b64(wkb), "srid": 4326}


def test_vector_is_a_float_vector() -> None:
    column = t.column_meta(0, t.VECTOR, 4, True, name="v", unsigned=False, charset=None, is_key=False)
    assert schema(column)["name"] == "io.debezium.data.FloatVector"
    assert encoded(column, "[1.00000e+00,2.50000e+00,-3.00000e-01]") == [1.0, 2.5, -0.3]


# -- the envelope -------------------------------------------------------------------------------------

COLUMNS = (
    col("bigint", name="id", key=True, nullable=False, index=0),
    col("varchar", name="status", length=64, charset=UTF8MB4, index=1),
    col("decimal", name="amount", precision=12, scale=2, index=2),
    col("date", name="day", index=3, nullable=False),
)
NO_KEY = (col("bigint", name="at", index=0), col("varchar", name="what", length=64, charset=UTF8MB4, index=1))


def mapping(debezium: dict[str, Any] | None = None, **topics: Any) -> Mapping:
    doc: dict[str, Any] = {
        "unmapped": {"action": "drop"},
        "topics": topics,
        "logical_dbs": {
            "shop": {
                "physical": [r"shop_\d+"],
                "codec": "debezium-json",
                "tables": {"orders": {"physical": [r"orders_\d+"], "topic": "shop.orders", "tag": "o"}},
            }
        },
    }
    if debezium is not None:
        doc["debezium"] = debezium
    return parse_mapping(doc)


def encoder(m: Mapping | None = None, parts: int = 3) -> RecordEncoder:
    return RecordEncoder(
        m or mapping(), SOURCE, ddl_topic="relay.ddl", partitions=lambda _: parts, source_id="shop-a"
    )


def entry(
    event_type: EventType, *rows: RowImage, columns: tuple[ColumnMeta, ...] = COLUMNS, **props: Any
) -> Entry:
    rc = RowChange(event_type=event_type, table_id=108, columns=columns, rows=rows, **props)
    h = Header(
        logfile_name=FILE,
        logfile_offset=1000,
        server_id=99,
        execute_time=ES,
        event_length=200,
        event_type=event_type,
        schema_name="shop_07",
        table_name="orders_33",
        gtid=GTID,
    )
    return Entry(h, EntryType.ROWDATA, rc, ctx(), 1)


def ctx() -> TxnContext:
    return TxnContext(start=EntryPosition(FILE, 900, 99, GTID, ES), gtid=GTID)


def payload(record: Record) -> dict[str, Any]:
    assert record.value is not None
    out: dict[str, Any] = json.loads(record.value)["payload"]
    return out


def headers(record: Record) -> dict[str, bytes]:
    return dict(record.headers)


NEW = ("42", "NEW", "19.90", "2025-01-02")
PAID = ("42", "PAID", "19.90", "2025-01-02")
DAY = (date(2025, 1, 2) - date(1970, 1, 1)).days


def test_insert_envelope_source_and_headers() -> None:
    (record,) = encoder().encode(entry(EventType.INSERT, RowImage(None, NEW)))
    assert record.topic == "shop.orders" and record.partition is None
    value = payload(record)
    assert value["before"] is None
    assert value["after"] == {"id": 42, "status": "NEW", "amount": b64(b"\x07\xc6"), "day": DAY}
    assert value["op"] == "c" and value["ts_ms"] == ES and value["transaction"] is None
    assert value["source"] == {
        "version": "0.1.0",
        "connector": "mysql",
        "name": "shop-a",
        "ts_ms": ES,
        "snapshot": "false",
        "db": "shop",
        "sequence": None,
        "table": "orders",
        "server_id": 7,
        "gtid": GTID,
        "file": FILE,
        "pos": 1000,
        "row": 0,
        "thread": None,
        "query": None,
        "physical_db": "shop_07",
        "physical_table": "orders_33",
    }
    assert json.loads(record.key or b"") == {
        "schema": {
            "type": "struct",
            "fields": [{"type": "int64", "optional": False, "field": "id"}],
            "optional": False,
            "name": "shop.orders.Key",
        },
        "payload": {"id": 42},
    }
    seq = (123 << 32) | 1000
    assert headers(record) == {
        "relay.db": b"shop",
        "relay.table": b"orders",
        "relay.physical.db": b"shop_07",
        "relay.physical.table": b"orders_33",
        "relay.type": b"INSERT",
        "relay.tag": b"o",
        "relay.source.id": b"shop-a",
        "relay.sequence": str(seq).encode(),
    }


def test_value_schema_is_debeziums_envelope() -> None:
    (record,) = encoder().encode(entry(EventType.INSERT, RowImage(None, NEW)))
    assert record.value is not None
    shape = json.loads(record.value)["schema"]
    assert shape["name"] == "shop.orders.Envelope" and shape["type"] == "struct"
    fields = {f["field"]: f for f in shape["fields"]}
    assert list(fields) == ["before", "after", "source", "op", "ts_ms", "transaction"]
    assert fields["before"]["name"] == fields["after"]["name"] == "shop.orders.Value"
    columns = {f["field"]: f for f in fields["after"]["fields"]}
    assert columns["id"] == {"type": "int64", "optional": False, "field": "id"}
    assert columns["status"] == {"type": "string", "optional": True, "field": "status"}
    assert columns["amount"]["name"] == "org.apache.kafka.connect.data.Decimal"
    assert columns["amount"]["parameters"] == {"scale": "2", "connect.decimal.precision": "12"}
    assert columns["day"] == {
        "type": "int32",
        "optional": False,
        "name": "io.debezium.time.Date",
        "version": 1,
        "field": "day",
    }
    assert fields["source"]["name"] == "io.debezium.connector.mysql.Source"
    assert [f["field"] for f in fields["source"]["fields"]] == list(payload(record)["source"])
    assert fields["transaction"]["name"] == "event.block" and fields["transaction"]["optional"]


def test_update_and_delete_with_tombstone() -> None:
    enc = encoder()
    (update,) = enc.encode(entry(EventType.UPDATE, RowImage(NEW, PAID)))
    assert payload(update)["op"] == "u"
    assert payload(update)["before"]["status"] == "NEW" and payload(update)["after"]["status"] == "PAID"
    delete, tomb = enc.encode(entry(EventType.DELETE, RowImage(PAID, None)))
    assert payload(delete)["op"] == "d" and payload(delete)["after"] is None
    assert payload(delete)["before"]["status"] == "PAID"
    assert tomb.value is None and tomb.key == delete.key == update.key and tomb.headers == delete.headers


def test_without_tombstones_or_schemas() -> None:
    enc = encoder(mapping({"tombstones_on_delete": False, "schemas_enable": False}))
    (delete,) = enc.encode(entry(EventType.DELETE, RowImage(PAID, None)))
    assert delete.value is not None and delete.key == b'{"id":42}'
    value = json.loads(delete.value)
    assert "schema" not in value and value["op"] == "d" and value["before"]["id"] == 42
    # a compacted topic needs its tombstones whatever the setting
    compacted = mapping({"tombstones_on_delete": False}, config={"cleanup.policy": "compact"})
    assert [
        r.value is None for r in encoder(compacted).encode(entry(EventType.DELETE, RowImage(PAID, None)))
    ] == [False, True]


def test_rows_of_one_event_in_order_with_their_row_index() -> None:
    rows = [RowImage(None, (str(i), "NEW", "1.00", "2025-01-02")) for i in range(3)]
    records = encoder().encode(entry(EventType.INSERT, *rows))
    assert [payload(r)["source"]["row"] for r in records] == [0, 1, 2]
    assert [payload(r)["after"]["id"] for r in records] == [0, 1, 2]
    base = (123 << 32) | 1000
    assert [headers(r)["relay.sequence"] for r in records] == [str(base + i).encode() for i in range(3)]


def test_key_change_is_delete_tombstone_create_with_debeziums_headers() -> None:
    moved = ("43", "PAID", "19.90", "2025-01-02")
    delete, tomb, create = encoder().encode(entry(EventType.UPDATE, RowImage(NEW, moved)))
    assert payload(delete)["op"] == "d" and payload(create)["op"] == "c"
    assert json.loads(delete.key or b"")["payload"] == {"id": 42}
    assert json.loads(create.key or b"")["payload"] == {"id": 43}
    assert tomb.value is None and tomb.key == delete.key
    assert headers(delete)["relay.part"] == b"0" and headers(create)["relay.part"] == b"1"
    assert headers(delete)["relay.sequence"] == headers(create)["relay.sequence"]
    assert headers(delete)["__debezium.newkey"] == create.key
    assert headers(create)["__debezium.oldkey"] == delete.key


def test_zero_dates_are_null_or_the_epoch() -> None:
    columns = (
        col("bigint", name="id", key=True, nullable=False, index=0),
        col("date", name="d_null", index=1),
        col("date", name="d", nullable=False, index=2),
        col("datetime", name="dt", nullable=False, index=3, fsp=6),
        col("timestamp", name="ts", nullable=False, index=4),
        col("timestamp", name="ts_null", index=5),
    )
    zero = (
        "1",
        "0000-00-00",
        "0000-00-00",
        "0000-00-00 00:00:00.000000",
        "0000-00-00 00:00:00",
        "0000-00-00 00:00:00",
    )
    (record,) = encoder(mapping({"schemas_enable": False})).encode(
        entry(EventType.INSERT, RowImage(None, zero), columns=columns)
    )
    assert json.loads(record.value or b"")["after"] == {
        "id": 1,
        "d_null": None,
        "d": 0,
        "dt": 0,
        "ts": "1970-01-01T00:00:00Z",
        "ts_null": None,
    }


def test_table_without_key_is_keyed_by_its_physical_name() -> None:
    (record,) = encoder(mapping({"schemas_enable": False})).encode(
        entry(EventType.INSERT, RowImage(None, ("1", "x")), columns=NO_KEY)
    )
    assert record.key == b'{"_table":"shop_07.orders_33"}'


def test_snapshot_rows_are_reads() -> None:
    rows = (RowImage(None, NEW), RowImage(None, ("43", "NEW", "1.00", "2025-01-02")))
    records = encoder().encode(entry(EventType.INSERT, *rows, props=[(SNAPSHOT_PROP, "true")]))
    assert [payload(r)["op"] for r in records] == ["r", "r"]
    assert {payload(r)["source"]["snapshot"] for r in records} == {"true"}
    assert [headers(r)["relay.part"] for r in records] == [b"0", b"2"]
    assert all(headers(r)["relay.snapshot"] == b"true" for r in records)


def test_ddl_goes_to_the_schema_change_topic_and_audit_topic_only() -> None:
    rc = RowChange(
        event_type=EventType.ALTER,
        is_ddl=True,
        sql="ALTER TABLE orders_33 ADD note TEXT",
        ddl_schema_name="shop_07",
    )
    h = Header(FILE, 5000, 99, ES, 100, EventType.ALTER, "shop_07", "orders_33", GTID)
    records = encoder().encode(Entry(h, EntryType.ROWDATA, rc, ctx(), 0, closes_txn=True))
    assert sorted(r.topic for r in records) == ["relay.ddl", "shop-a"]
    change = next(r for r in records if r.topic == "shop-a")
    assert json.loads(change.key or b"")["payload"] == {"databaseName": "shop"}
    body = json.loads(change.value or b"")
    assert body["schema"]["name"] == "io.debezium.connector.mysql.SchemaChangeValue"
    value = body["payload"]
    assert value["ddl"] == "ALTER TABLE orders_33 ADD note TEXT" and value["databaseName"] == "shop"
    assert value["tableChanges"] == [] and value["schemaName"] is None and value["ts_ms"] == ES
    assert value["source"]["table"] == "orders" and value["source"]["physical_table"] == "orders_33"
    assert headers(change)["relay.sequence"] == str((123 << 32) | 5000).encode()
    # no schema change topic: the audit topic only
    quiet = encoder(mapping({"schema_change_topic": ""})).encode(Entry(h, EntryType.ROWDATA, rc, ctx(), 0))
    assert [r.topic for r in quiet] == ["relay.ddl"]
    named = encoder(mapping({"schema_change_topic": "{source_id}.schema-changes"})).encode(
        Entry(h, EntryType.ROWDATA, rc, ctx(), 0)
    )
    assert sorted(r.topic for r in named) == ["relay.ddl", "shop-a.schema-changes"]


def test_truncate_is_a_t_event_on_every_partition() -> None:
    rc = RowChange(
        event_type=EventType.TRUNCATE, is_ddl=True, sql="TRUNCATE TABLE orders_33", ddl_schema_name="shop_07"
    )
    h = Header(FILE, 5000, 99, ES, 100, EventType.TRUNCATE, "shop_07", "orders_33", GTID)
    records = encoder(parts=3).encode(Entry(h, EntryType.ROWDATA, rc, ctx(), 0, closes_txn=True))
    data = [r for r in records if r.topic == "shop.orders"]
    assert [r.partition for r in data] == [0, 1, 2]
    for record in data:
        value = payload(record)
        assert value["op"] == "t" and value["before"] is None and value["after"] is None
        assert value["source"]["table"] == "orders" and record.key is None
    assert [r.topic for r in records if r.topic != "shop.orders"] == ["relay.ddl"]


def test_a_type_without_an_encoding_stops_the_relay() -> None:
    odd = ColumnMeta(0, "x", 0xF0, 0, True, False, None, False, "mystery", 0, 0)
    with pytest.raises(CodecError, match="no Debezium encoding"):
        field_of(odd, "precise")


# -- the mapping's debezium section ---------------------------------------------------------------------


def test_settings_round_trip_and_are_checked() -> None:
    m = mapping({"decimal_handling_mode": "string", "schemas_enable": False})
    assert m.debezium.decimal_handling_mode == "string" and not m.debezium.schemas_enable
    assert parse_mapping(dump_mapping(m)) == m
    assert "\ndebezium:" not in dump_mapping(mapping())  # default settings: no section written
    with pytest.raises(InvalidMappingError) as info:
        mapping({"decimal_handling_mode": "exact", "schema_change_topic": "{db}.x", "schemas": True})
    paths = {e.key for e in info.value.errors}
    assert {"debezium.decimal_handling_mode", "debezium.schema_change_topic", "debezium.schemas"} <= paths


def test_a_settings_change_is_a_logical_change() -> None:
    lines = logical_changes(mapping(), mapping({"decimal_handling_mode": "double"}))
    assert len(lines) == 1 and lines[0].startswith("~ debezium:") and "double" in lines[0]


@pytest.mark.parametrize(
    ("key_shard", "key"),
    [
        ("physical", b'{"_shard":"shop_07.orders_33","id":42}'),
        ("column:status", b'{"_shard":"NEW","id":42}'),
    ],
)
def test_the_shard_comes_first_in_the_key(key_shard: str, key: bytes) -> None:
    m = parse_mapping(
        {
            "unmapped": {"action": "drop"},
            "debezium": {"schemas_enable": False},
            "logical_dbs": {
                "shop": {"physical": [r"shop_\d+"], "codec": "debezium-json", "key_shard": key_shard},
            },
        }
    )
    (record,) = encoder(m).encode(entry(EventType.INSERT, RowImage(None, NEW)))
    assert record.key == key


def test_a_key_snapshots_delete_row_is_a_snapshot_delete_with_its_tombstone() -> None:
    gone = RowImage(("42", None, None, None), None)  # relay.source.snapshot_keys: the key columns only
    delete, tomb = encoder().encode(entry(EventType.INSERT, gone, props=[(SNAPSHOT_PROP, "true")]))
    value = payload(delete)
    assert value["op"] == "d" and value["source"]["snapshot"] == "true" and value["after"] is None
    assert value["before"] == {"id": 42, "status": None, "amount": None, "day": None}
    assert headers(delete)["relay.type"] == b"DELETE" and tomb.value is None and tomb.key == delete.key
