"""Record codecs: entries built by hand → records, checked byte for byte (canal-json) and through the
protobuf decoder (canal-protobuf); the sequence, keys, headers, DDL fan-out and mapping failures."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from mapping.load import parse_mapping
from mapping.model import InvalidMappingError, Mapping
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
from relay.canal.proto.convert import decode_messages_packet
from relay.errors import CodecError, MappingError, RelayError, SequenceError
from relay.kafka.codec import MAX_FILE_NUMBER, MAX_GENERATION, MAX_OFFSET, RecordEncoder, sequence
from relay.kafka.records import Record
from relay.positions.store import SourceIdentity

FILE = "mysql-bin.000123"
ES = 1763700000000
GTID = "3e11fa47-71ca-11e1-9e33-c80aa9429562:23"
SOURCE_ID = "shop-a"
SOURCE = SourceIdentity("db1.local", 3306, 7, "3e11fa47-71ca-11e1-9e33-c80aa9429562")

COLUMNS = (
    ColumnMeta(0, "id", 8, 0, False, False, None, True, "bigint", -5, 20),
    ColumnMeta(1, "status", 15, 64, True, False, 45, False, "varchar(16)", 12, 16),
    ColumnMeta(2, "amount", 246, 0, True, False, None, False, "decimal(12,2)", 3, 12),
    ColumnMeta(3, "payload", 15, 8, True, False, 63, False, "varbinary(8)", -3, 8),
)
NO_PK = (
    ColumnMeta(0, "at", 8, 0, False, False, None, False, "bigint", -5, 20),
    ColumnMeta(1, "what", 15, 64, True, False, 45, False, "varchar(16)", 12, 16),
)
ITEMS = (
    ColumnMeta(0, "item_id", 8, 0, False, False, None, True, "bigint", -5, 20),
    ColumnMeta(1, "Order_ID", 8, 0, False, False, None, False, "bigint", -5, 20),
    ColumnMeta(2, "line", 3, 0, False, False, None, False, "int", 4, 10),
)


def mapping(**orders: Any) -> Mapping:
    return parse_mapping(
        {
            "unmapped": {"action": "drop"},
            "logical_dbs": {
                "shop": {
                    "physical": [r"shop_\d+"],
                    "topic": "shop",
                    "tables": {
                        "orders": {"physical": [r"orders_\d+"], "topic": "shop.orders", "tag": "o", **orders},
                        "events": {"physical": ["events"]},
                        "items": {
                            "physical": [r"items_\d+"],
                            "topic": "shop.items",  # its own topic: one codec per topic
                            "key": ["order_id", "line"],
                            "codec": "canal-protobuf",
                        },
                        "skipped": {"physical": ["tmp_.*"], "topic": "shop.skipped"},
                    },
                    "unclaimed_tables": "drop",
                }
            },
        }
    )


def encoder(
    m: Mapping | None = None, *, ddl_topic: str | None = "relay.ddl", parts: int = 3
) -> RecordEncoder:
    return RecordEncoder(
        m or mapping(), SOURCE, ddl_topic=ddl_topic, partitions=lambda topic: parts, source_id=SOURCE_ID
    )


def header(db: str, table: str, event_type: EventType, *, journal: str = FILE, offset: int = 1000) -> Header:
    return Header(
        logfile_name=journal,
        logfile_offset=offset,
        server_id=99,
        execute_time=ES,
        event_length=200,
        event_type=event_type,
        schema_name=db,
        table_name=table,
        gtid=GTID,
        props=[("curtGtid", GTID), ("rowsCount", "9")],
    )


def txn() -> TxnContext:
    return TxnContext(start=EntryPosition(FILE, 900, 99, GTID, ES), gtid=GTID)


def rows_entry(
    event_type: EventType,
    *rows: RowImage,
    db: str = "shop_07",
    table: str = "orders_33",
    columns: tuple[ColumnMeta, ...] = COLUMNS,
    journal: str = FILE,
    offset: int = 1000,
) -> Entry:
    rc = RowChange(event_type=event_type, table_id=108, columns=columns, rows=rows)
    return Entry(
        header(db, table, event_type, journal=journal, offset=offset), EntryType.ROWDATA, rc, txn(), 1
    )


def statement_entry(sql: str, event_type: EventType, db: str, table: str, *, is_ddl: bool = True) -> Entry:
    rc = RowChange(event_type=event_type, is_ddl=is_ddl, sql=sql, ddl_schema_name="shop_07")
    h = header(db, table, event_type, offset=5000)
    h.props = [("curtGtid", GTID)]
    return Entry(h, EntryType.ROWDATA, rc, txn(), 0, closes_txn=True)


NEW = ("42", "NEW", "19.90", "\x00\xff")
PAID = ("42", "PAID", "19.90", "\x00\xff")


def loads(record: Record) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(record.value.decode("utf-8"))
    return out


def source_block(offset: int = 1000, row_index: int = 0, table: str = "orders_33") -> dict[str, Any]:
    return {
        "id": SOURCE_ID,
        "server": "db1.local:3306",
        "serverId": 7,
        "serverUuid": SOURCE.server_uuid,
        "database": "shop_07",
        "table": table,
        "file": FILE,
        "offset": offset,
        "gtid": GTID,
        "rowIndex": row_index,
    }


# -- sequence -------------------------------------------------------------------------------------------


def test_sequence_layout() -> None:
    assert sequence("mysql-bin.000123", 1000, 2) == (123 << 32) | 1002
    assert sequence("binlog.000001", 4, 0) == (1 << 32) + 4


def test_sequence_is_monotonic_across_rows_events_and_files_and_stable() -> None:
    # binlog order: rows of one event, the next event (start = previous start + its length), next file
    positions = [(FILE, 1000, 0), (FILE, 1000, 1), (FILE, 1000, 2), (FILE, 1200, 0), (FILE, 1200, 1)]
    positions += [("mysql-bin.000124", 4, 0), ("mysql-bin.000124", 250, 0), ("mysql-bin.001000", 4, 0)]
    positions += [("mysql-bin.001000", MAX_OFFSET - 2, 1)]
    seqs = [sequence(*p) for p in positions]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    assert seqs == [sequence(*p) for p in positions]  # the same position gives the same number
    assert max(seqs) < 1 << 63  # a positive signed 64-bit value for Java / Spark readers


@pytest.mark.parametrize(
    ("journal", "offset", "row", "problem"),
    [
        ("mysql-bin", 4, 0, "no numeric suffix"),
        ("mysql-bin.log", 4, 0, "no numeric suffix"),
        (FILE, MAX_OFFSET, 0, "32-bit"),
        (FILE, MAX_OFFSET - 1, 1, "32-bit"),
        (FILE, -1, 0, "32-bit"),
        ("mysql-bin.4294967296", 4, 0, "above"),
    ],
)
def test_sequence_refuses_positions_it_cannot_order(
    journal: str, offset: int, row: int, problem: str
) -> None:
    with pytest.raises(SequenceError, match=problem) as info:
        sequence(journal, offset, row)
    assert isinstance(info.value, RelayError) and not info.value.retriable


def test_rows_of_an_entry_get_consecutive_sequences_and_row_indexes() -> None:
    rows = [RowImage(None, (str(i), "NEW", "1.00", None)) for i in range(3)]
    records = encoder().encode(rows_entry(EventType.INSERT, *rows))
    base = (123 << 32) | 1000
    assert [loads(r)["id"] for r in records] == [base, base + 1, base + 2]
    assert [loads(r)["sequence"] for r in records] == [base, base + 1, base + 2]
    assert [loads(r)["source"]["rowIndex"] for r in records] == [0, 1, 2]
    assert [dict(r.headers)["relay.sequence"] for r in records] == [str(base + i).encode() for i in range(3)]
    assert [r.key for r in records] == [b'{"id":"0"}', b'{"id":"1"}', b'{"id":"2"}']


def test_an_entry_past_32_bit_offsets_is_refused() -> None:
    rows = [RowImage(None, NEW), RowImage(None, PAID)]
    with pytest.raises(SequenceError):
        encoder().encode(rows_entry(EventType.INSERT, *rows, offset=MAX_OFFSET - 1))


# -- canal-json -----------------------------------------------------------------------------------------


def test_canal_json_insert_exact_bytes() -> None:
    entry = rows_entry(EventType.INSERT, RowImage(None, ("42", "café", "19.90", None)))
    (record,) = encoder().encode(entry)
    seq = (123 << 32) | 1000
    expected = (
        f'{{"id":{seq},"database":"shop","table":"orders","pkNames":["id"],"isDdl":false,"type":"INSERT",'
        f'"es":{ES},"ts":{ES},"sql":"","sqlType":{{"id":-5,"status":12,"amount":3,"payload":-3}},'
        '"mysqlType":{"id":"bigint","status":"varchar(16)","amount":"decimal(12,2)","payload":"varbinary(8)"},'
        '"data":[{"id":"42","status":"café","amount":"19.90","payload":null}],"old":null,'
        f'"gtid":"{GTID}","source":{{"id":"{SOURCE_ID}","server":"db1.local:3306","serverId":7,'
        f'"serverUuid":"{SOURCE.server_uuid}","database":"shop_07","table":"orders_33",'
        f'"file":"{FILE}","offset":1000,"gtid":"{GTID}","rowIndex":0}},"sequence":{seq}}}'
    )
    assert record.value == expected.encode("utf-8")
    assert record.topic == "shop.orders" and record.partition is None and record.key == b'{"id":"42"}'
    assert record.headers == (
        ("relay.db", b"shop"),
        ("relay.table", b"orders"),
        ("relay.physical.db", b"shop_07"),
        ("relay.physical.table", b"orders_33"),
        ("relay.type", b"INSERT"),
        ("relay.tag", b"o"),
        ("relay.source.id", SOURCE_ID.encode()),
        ("relay.sequence", str(seq).encode()),
    )


def test_canal_json_update_old_holds_only_changed_columns() -> None:
    before = ("42", "NEW", None, "\x00\xff")
    after = ("42", "PAID", "5.00", "\x00\xff")
    (record,) = encoder().encode(rows_entry(EventType.UPDATE, RowImage(before, after)))
    msg = loads(record)
    assert msg["type"] == "UPDATE"
    assert msg["data"] == [{"id": "42", "status": "PAID", "amount": "5.00", "payload": "\x00\xff"}]
    assert msg["old"] == [{"status": "NEW", "amount": None}]  # NULL → value is a change; old NULL kept
    assert list(msg) == [
        *("id", "database", "table", "pkNames", "isDdl", "type", "es", "ts", "sql", "sqlType"),
        *("mysqlType", "data", "old", "gtid", "source", "sequence"),
    ]
    assert dict(record.headers)["relay.type"] == b"UPDATE"


def test_canal_json_update_changing_nothing_has_old_null_as_canal() -> None:
    (record,) = encoder().encode(rows_entry(EventType.UPDATE, RowImage(NEW, NEW)))
    assert loads(record)["old"] is None


def test_canal_json_delete_uses_the_before_image() -> None:
    (record,) = encoder().encode(rows_entry(EventType.DELETE, RowImage(PAID, None)))
    msg = loads(record)
    assert msg["type"] == "DELETE" and msg["old"] is None
    assert msg["data"] == [dict(zip(("id", "status", "amount", "payload"), PAID, strict=True))]
    assert record.key == b'{"id":"42"}'
    assert msg["source"] == source_block()


def test_binary_values_round_trip_through_latin1() -> None:
    raw = bytes(range(256))
    row = ("1", "x", "0.00", raw.decode("latin-1"))
    (record,) = encoder().encode(rows_entry(EventType.INSERT, RowImage(None, row)))
    assert loads(record)["data"][0]["payload"].encode("latin-1") == raw


def test_encoding_is_byte_identical_on_republication() -> None:
    entry = rows_entry(EventType.UPDATE, RowImage(NEW, PAID), RowImage(PAID, NEW))
    first = encoder().encode(entry)
    enc = encoder()
    assert enc.encode(entry) == first
    assert enc.encode(entry) == first  # from the cached plan too
    ddl = statement_entry("ALTER TABLE orders_33 ADD c INT", EventType.ALTER, "shop_07", "orders_33")
    assert encoder().encode(ddl) == enc.encode(ddl)


def test_a_table_map_decoded_again_gives_the_same_records() -> None:
    enc = encoder()
    first = enc.encode(rows_entry(EventType.INSERT, RowImage(None, NEW)))
    copy = tuple(ColumnMeta(*(getattr(c, f.name) for f in dataclasses.fields(c))) for c in COLUMNS)  # equal
    assert enc.encode(rows_entry(EventType.INSERT, RowImage(None, NEW), columns=copy)) == first


# -- keys -----------------------------------------------------------------------------------------------


def test_configured_key_columns_in_key_order_with_the_mapping_spelling() -> None:
    # items: key [order_id, line]; the table spells it Order_ID. Protobuf codec, same key rules.
    entry = rows_entry(EventType.INSERT, RowImage(None, ("1", "77", "3")), table="items_01", columns=ITEMS)
    (record,) = encoder().encode(entry)
    assert record.key == b'{"order_id":"77","line":"3"}'
    assert record.topic == "shop.items"


def test_table_without_primary_key_is_keyed_by_its_physical_name() -> None:
    rows = [RowImage(None, ("1", "a")), RowImage(None, ("2", None))]
    records = encoder().encode(rows_entry(EventType.INSERT, *rows, table="events", columns=NO_PK))
    assert [r.key for r in records] == [b"shop_07.events", b"shop_07.events"]
    assert loads(records[0])["pkNames"] is None  # canal leaves pkNames unset without a primary key
    assert loads(records[1])["data"] == [{"at": "2", "what": None}]


def test_a_null_key_value_is_json_null() -> None:
    m = mapping(key=["status"])
    (record,) = encoder(m).encode(rows_entry(EventType.INSERT, RowImage(None, ("1", None, "0.00", None))))
    assert record.key == b'{"status":null}'
    assert loads(record)["pkNames"] == ["id"]  # still the table's primary key, canal's meaning


def test_missing_key_column_raises_mapping_error_naming_the_key_path() -> None:
    enc = encoder(mapping(key=["id", "order_no"]))
    with pytest.raises(MappingError) as info:
        enc.encode(rows_entry(EventType.INSERT, RowImage(None, NEW)))
    assert isinstance(info.value, InvalidMappingError)
    assert [e.key for e in info.value.errors] == ["logical_dbs.shop.tables.orders.key[1]"]
    assert "order_no" in str(info.value)


# -- routing --------------------------------------------------------------------------------------------


def test_unmapped_and_dropped_tables_and_transaction_entries_give_nothing() -> None:
    enc = encoder()
    assert enc.encode(rows_entry(EventType.INSERT, RowImage(None, NEW), db="crm")) == []
    assert enc.encode(rows_entry(EventType.INSERT, RowImage(None, NEW), table="unclaimed")) == []
    begin = Entry(header("", "", EventType.QUERY), EntryType.TRANSACTIONBEGIN, TransactionBegin(), txn())
    end = Entry(header("", "", EventType.QUERY), EntryType.TRANSACTIONEND, TransactionEnd(), txn(), 2)
    assert enc.encode(begin) == [] and enc.encode(end) == []
    assert enc.topics() == set()


def test_swapped_mapping_takes_effect_at_once() -> None:
    enc = encoder()
    entry = rows_entry(EventType.INSERT, RowImage(None, NEW))
    assert enc.encode(entry)[0].topic == "shop.orders"
    enc.mapping = mapping(topic="orders.v2", tag="new")
    (record,) = enc.encode(entry)
    assert record.topic == "orders.v2" and dict(record.headers)["relay.tag"] == b"new"
    assert enc.topics() == {"shop.orders", "orders.v2"}


# -- canal-protobuf -------------------------------------------------------------------------------------


def test_protobuf_value_is_one_narrowed_entry_with_logical_names() -> None:
    rows = [RowImage(None, ("1", "77", "3")), RowImage(None, ("2", "77", "4"))]
    records = encoder().encode(rows_entry(EventType.INSERT, *rows, table="items_01", columns=ITEMS))
    assert len(records) == 2
    seq = ((123 << 32) | 1000) + 1
    batch_id, entries = decode_messages_packet(records[1].value)
    assert batch_id == seq
    (entry,) = entries
    h = entry.header
    assert (h.schema_name, h.table_name) == ("shop", "items")
    assert (h.logfile_name, h.logfile_offset, h.gtid) == (FILE, 1000, GTID)
    assert h.props == [
        ("curtGtid", GTID),
        ("rowsCount", "1"),
        ("relay.physical.db", "shop_07"),
        ("relay.physical.table", "items_01"),
        ("relay.sequence", str(seq)),
        ("relay.server", "db1.local:3306"),
        ("relay.source.id", SOURCE_ID),
    ]
    assert isinstance(entry.store_value, RowChange)
    (row,) = entry.store_value.row_datas()
    assert [(c.name, c.value, c.is_key) for c in row.after_columns] == [
        ("item_id", "2", True),
        ("Order_ID", "77", False),
        ("line", "4", False),
    ]
    assert dict(records[1].headers)["relay.sequence"] == str(seq).encode()


# -- statements -----------------------------------------------------------------------------------------


def test_ddl_goes_to_every_partition_and_to_the_audit_topic() -> None:
    sql = "ALTER TABLE orders_33 ADD note varchar(9)"
    records = encoder(parts=4).encode(statement_entry(sql, EventType.ALTER, "shop_07", "orders_33"))
    seq = (123 << 32) | 5000
    barrier, audit = records[:4], records[4]
    assert [(r.topic, r.partition, r.key) for r in barrier] == [("shop.orders", p, None) for p in range(4)]
    assert len({r.value for r in barrier}) == 1
    msg = loads(barrier[0])
    assert msg == {
        "id": seq,
        "database": "shop",
        "table": "orders",
        "pkNames": None,
        "isDdl": True,
        "type": "ALTER",
        "es": ES,
        "ts": ES,
        "sql": sql,
        "sqlType": None,
        "mysqlType": None,
        "data": None,
        "old": None,
        "gtid": GTID,
        "source": source_block(offset=5000),
        "sequence": seq,
    }
    assert barrier[0].headers[-4:] == (
        ("relay.type", b"ALTER"),
        ("relay.tag", b"o"),
        ("relay.source.id", SOURCE_ID.encode()),
        ("relay.sequence", str(seq).encode()),
    )
    assert (audit.topic, audit.partition, audit.key) == ("relay.ddl", None, b"shop_07.orders_33")
    assert loads(audit) == msg


def test_ddl_of_a_protobuf_table_is_a_protobuf_barrier() -> None:
    sql = "TRUNCATE TABLE items_01"
    records = encoder(parts=2).encode(statement_entry(sql, EventType.TRUNCATE, "shop_07", "items_01"))
    assert [(r.topic, r.partition) for r in records] == [
        ("shop.items", 0),
        ("shop.items", 1),
        ("relay.ddl", None),
    ]
    batch_id, (entry,) = decode_messages_packet(records[0].value)
    assert batch_id == (123 << 32) | 5000
    assert (entry.header.schema_name, entry.header.table_name) == ("shop", "items")
    assert isinstance(entry.store_value, RowChange)
    assert entry.store_value.is_ddl and entry.store_value.sql == sql
    assert entry.store_value.event_type == EventType.TRUNCATE
    assert loads(records[2])["isDdl"] is True  # the audit record is always canal-json


def test_ddl_without_a_mapped_table_goes_to_the_audit_topic_only() -> None:
    enc = encoder()
    create_db = enc.encode(statement_entry("CREATE DATABASE shop_99", EventType.QUERY, "shop_99", ""))
    dropped = enc.encode(statement_entry("DROP TABLE unclaimed", EventType.ERASE, "shop_07", "unclaimed"))
    other_db = enc.encode(statement_entry("CREATE TABLE crm.t (a int)", EventType.CREATE, "crm", "t"))
    assert [(r.topic, r.key) for r in create_db + dropped + other_db] == [
        ("relay.ddl", b"shop_99"),
        ("relay.ddl", b"shop_07.unclaimed"),
        ("relay.ddl", b"crm.t"),
    ]
    msg = loads(other_db[0])
    assert (msg["database"], msg["table"], msg["type"]) == ("crm", "t", "CREATE")
    assert dict(other_db[0].headers)["relay.physical.db"] == b"crm"
    assert enc.topics() == {"relay.ddl"}


def test_without_an_audit_topic_ddl_is_only_the_barrier() -> None:
    enc = encoder(ddl_topic=None, parts=2)
    ddl = enc.encode(statement_entry("DROP TABLE orders_33", EventType.ERASE, "shop_07", "orders_33"))
    assert [r.partition for r in ddl] == [0, 1]
    assert enc.encode(statement_entry("CREATE DATABASE x", EventType.QUERY, "x", "")) == []


def test_other_statements_go_to_the_audit_topic_only() -> None:
    entry = statement_entry("GRANT SELECT ON *.* TO r", EventType.QUERY, "shop_07", "", is_ddl=False)
    (record,) = encoder().encode(entry)
    assert (record.topic, record.key) == ("relay.ddl", b"shop_07")
    msg = loads(record)
    assert msg["isDdl"] is False and msg["type"] == "QUERY" and msg["sql"] == "GRANT SELECT ON *.* TO r"


def test_undecodable_sql_bytes_still_make_valid_values() -> None:
    sql = "ALTER TABLE orders_33 COMMENT 'caf\udce9'"  # a latin1 byte the parser kept as a surrogate
    records = encoder(parts=1).encode(statement_entry(sql, EventType.ALTER, "shop_07", "orders_33"))
    assert loads(records[0])["sql"] == sql  # escaped as \udce9: the byte is recoverable
    m = mapping(codec="canal-protobuf")
    (barrier, _audit) = encoder(m, parts=1).encode(
        statement_entry(sql, EventType.ALTER, "shop_07", "orders_33")
    )
    _, (entry,) = decode_messages_packet(barrier.value)
    assert isinstance(entry.store_value, RowChange)
    assert entry.store_value.sql == "ALTER TABLE orders_33 COMMENT 'caf\ufffd'"


def test_a_topic_without_partitions_is_an_error() -> None:
    with pytest.raises(CodecError, match="0 partitions"):
        encoder(parts=0).encode(
            statement_entry("DROP TABLE orders_33", EventType.ERASE, "shop_07", "orders_33")
        )


# -- generations and source ids: the change identity -----------------------------------------------------


def test_sequence_layout_with_generations() -> None:
    assert sequence("mysql-bin.000123", 1000, 2, 0) == sequence("mysql-bin.000123", 1000, 2)
    assert sequence("mysql-bin.000123", 1000, 2, 3) == (3 << 52) | (123 << 32) | 1002
    top = sequence(f"mysql-bin.{MAX_FILE_NUMBER}", MAX_OFFSET - 1, 0, MAX_GENERATION)
    assert top == (1 << 63) - 1  # every bit used, still a non-negative Java long


def test_a_later_generation_sorts_after_any_position_of_an_earlier_one() -> None:
    # The master was at .000123, the standby the relay fails over to is at .000005.
    master_last = sequence("mysql-bin.000123", 987_654, 7, 0)
    standby_first = sequence("mysql-bin.000005", 4, 0, 1)
    assert standby_first > master_last
    # ... and the same file/offset on the two servers gives two identities.
    assert sequence("mysql-bin.000005", 400, 0, 0) != sequence("mysql-bin.000005", 400, 0, 1)


@pytest.mark.parametrize(
    ("journal", "generation", "problem"),
    [
        (f"mysql-bin.{MAX_FILE_NUMBER + 1}", 0, "above"),
        ("mysql-bin.000001", MAX_GENERATION + 1, "generation"),
    ],
)
def test_sequence_refuses_file_numbers_and_generations_past_the_layout(
    journal: str, generation: int, problem: str
) -> None:
    with pytest.raises(SequenceError, match=problem):
        sequence(journal, 4, 0, generation)


def test_records_carry_the_entry_generation_and_the_source_id() -> None:
    entry = rows_entry(EventType.INSERT, RowImage(None, NEW))
    entry.generation = 2
    (record,) = encoder().encode(entry)
    seq = (2 << 52) | (123 << 32) | 1000
    msg = loads(record)
    assert msg["id"] == msg["sequence"] == seq
    assert msg["source"]["id"] == SOURCE_ID
    headers = dict(record.headers)
    assert headers["relay.sequence"] == str(seq).encode() and headers["relay.source.id"] == b"shop-a"
    # re-encoding the same entry (a re-publication) gives the same bytes: nothing depends on the clock
    assert encoder().encode(entry)[0] == record


def test_canal_protobuf_records_carry_the_source_id_prop() -> None:
    m = parse_mapping(
        "version: 1\ndefaults: {codec: canal-protobuf}\nlogical_dbs:\n"
        "  shop:\n    physical: ['shop_\\\\d+']\n"
        "    tables:\n      orders: {physical: ['orders_\\\\d+']}\n"
    )
    (record,) = encoder(m).encode(rows_entry(EventType.INSERT, RowImage(None, NEW)))
    _, (entry,) = decode_messages_packet(record.value)
    assert ("relay.source.id", SOURCE_ID) in entry.header.props
    assert dict(record.headers)["relay.source.id"] == SOURCE_ID.encode()


# -- shard identity in keys, key changes, tombstones -----------------------------------------------------


def encoder_of(tree: dict[str, Any]) -> RecordEncoder:
    return encoder(parse_mapping(tree))


def compacted_mapping(**orders: Any) -> Mapping:
    tree = mapping(**orders).to_dict()
    tree["topics"]["config"] = {"cleanup.policy": "compact,delete"}
    return parse_mapping(tree)


def test_key_shard_physical_puts_the_physical_name_first_in_the_key() -> None:
    enc = encoder(mapping(key_shard="physical"))
    (record,) = enc.encode(rows_entry(EventType.INSERT, RowImage(None, NEW)))
    assert record.key == b'{"_shard":"shop_07.orders_33","id":"42"}'
    (other,) = enc.encode(rows_entry(EventType.INSERT, RowImage(None, NEW), db="shop_08"))
    assert other.key == b'{"_shard":"shop_08.orders_33","id":"42"}'  # same id, another shard: another key
    odd = encoder(mapping(physical=["orders.*"], key_shard="physical"))  # % in a name is not a format
    (record,) = odd.encode(rows_entry(EventType.INSERT, RowImage(None, NEW), table='orders_%s"'))
    assert json.loads(record.key or b"") == {"_shard": 'shop_07.orders_%s"', "id": "42"}
    tree = mapping().to_dict()
    tree["defaults"]["key_shard"] = "physical"
    items = encoder_of(tree)
    entry = rows_entry(EventType.INSERT, RowImage(None, ("1", "77", "3")), table="items_01", columns=ITEMS)
    (record,) = items.encode(entry)
    assert record.key == b'{"_shard":"shop_07.items_01","order_id":"77","line":"3"}'


def test_key_shard_column_takes_the_columns_value_and_a_missing_column_names_the_key_path() -> None:
    (record,) = encoder(mapping(key_shard="column:Status")).encode(
        rows_entry(EventType.INSERT, RowImage(None, NEW))
    )
    assert record.key == b'{"_shard":"NEW","id":"42"}'
    with pytest.raises(InvalidMappingError) as info:
        encoder(mapping(key_shard="column:region")).encode(rows_entry(EventType.INSERT, RowImage(None, NEW)))
    assert [e.key for e in info.value.errors] == ["logical_dbs.shop.tables.orders.key_shard"]
    # a table without key keeps its physical-name key whatever key_shard says
    records = encoder(mapping(key_shard="physical")).encode(
        rows_entry(EventType.INSERT, RowImage(None, ("1", "a")), table="events", columns=NO_PK)
    )
    assert [r.key for r in records] == [b"shop_07.events"]


def test_key_changing_update_is_a_delete_under_the_old_key_then_an_insert_under_the_new_one() -> None:
    before, after = ("2", "NEW", "1.00", None), ("20", "PAID", "1.00", None)
    still = ("5", "NEW", "1.00", None), ("5", "PAID", "1.00", None)
    entry = rows_entry(EventType.UPDATE, RowImage(*still), RowImage(before, after), RowImage(*still))
    records = encoder().encode(entry)
    assert encoder().encode(entry) == records  # deterministic: same bytes on re-publication
    assert [r.key for r in records] == [b'{"id":"5"}', b'{"id":"2"}', b'{"id":"20"}', b'{"id":"5"}']
    first = (123 << 32) | 1000
    unchanged, delete, insert, last = records
    assert "part" not in loads(unchanged) and "relay.part" not in dict(unchanged.headers)
    d, i = loads(delete), loads(insert)
    assert (d["type"], d["data"], d["old"]) == (
        "DELETE",
        [dict(zip(("id", "status", "amount", "payload"), before, strict=True))],
        None,
    )
    assert (i["type"], i["data"], i["old"]) == (
        "INSERT",
        [dict(zip(("id", "status", "amount", "payload"), after, strict=True))],
        None,
    )
    assert d["sequence"] == i["sequence"] == d["id"] == first + 1 and loads(last)["sequence"] == first + 2
    assert (d["part"], i["part"]) == (0, 1) and list(d)[-2:] == ["sequence", "part"]
    assert d["source"] == i["source"] == source_block(row_index=1)
    assert dict(delete.headers)["relay.type"] == b"DELETE" and dict(insert.headers)["relay.type"] == b"INSERT"
    assert dict(delete.headers)["relay.part"] == b"0" and dict(insert.headers)["relay.part"] == b"1"
    assert (
        dict(delete.headers)["relay.sequence"]
        == dict(insert.headers)["relay.sequence"]
        == str(first + 1).encode()
    )
    assert not any(r.value is None for r in records)  # not a compacted topic: no tombstone


def test_a_shard_column_change_is_a_key_change_and_the_primary_key_change_without_shard_too() -> None:
    enc = encoder(mapping(key_shard="column:status"))
    records = enc.encode(rows_entry(EventType.UPDATE, RowImage(NEW, PAID)))
    assert [(r.key, loads(r)["type"]) for r in records] == [
        (b'{"_shard":"NEW","id":"42"}', "DELETE"),
        (b'{"_shard":"PAID","id":"42"}', "INSERT"),
    ]
    # a change of a column outside the key is an ordinary UPDATE
    (record,) = encoder(mapping(key_shard="physical")).encode(
        rows_entry(EventType.UPDATE, RowImage(NEW, PAID))
    )
    assert loads(record)["type"] == "UPDATE" and record.key == b'{"_shard":"shop_07.orders_33","id":"42"}'


def test_on_a_compacted_topic_a_tombstone_follows_every_delete_under_its_key() -> None:
    enc = encoder(compacted_mapping())
    before, after = ("2", "NEW", "1.00", None), ("20", "NEW", "1.00", None)
    delete, tombstone, insert = enc.encode(rows_entry(EventType.UPDATE, RowImage(before, after)))
    assert (delete.key, tombstone.key, insert.key) == (b'{"id":"2"}', b'{"id":"2"}', b'{"id":"20"}')
    assert tombstone.value is None and tombstone.headers == delete.headers and tombstone.topic == delete.topic
    assert loads(delete)["type"] == "DELETE" and loads(insert)["type"] == "INSERT"
    deleted, gone = enc.encode(rows_entry(EventType.DELETE, RowImage(PAID, None)))
    assert loads(deleted)["type"] == "DELETE" and (gone.key, gone.value) == (deleted.key, None)
    (inserted,) = enc.encode(rows_entry(EventType.INSERT, RowImage(None, NEW)))
    assert inserted.value is not None
    items = enc.encode(
        rows_entry(EventType.DELETE, RowImage(("1", "77", "3"), None), table="items_01", columns=ITEMS)
    )
    assert [r.value is None for r in items] == [False, True] and items[0].key == items[1].key


def test_protobuf_key_change_is_a_delete_packet_then_an_insert_packet_with_part_props() -> None:
    enc = encoder(compacted_mapping())
    before, after = ("1", "77", "3"), ("1", "77", "4")  # items: key [order_id, line]
    entry = rows_entry(EventType.UPDATE, RowImage(before, after), table="items_01", columns=ITEMS)
    delete, tombstone, insert = enc.encode(entry)
    assert enc.encode(entry) == [delete, tombstone, insert]
    assert (delete.key, insert.key) == (b'{"order_id":"77","line":"3"}', b'{"order_id":"77","line":"4"}')
    assert tombstone.value is None and tombstone.key == delete.key
    seq = (123 << 32) | 1000
    for record, kind, part in ((delete, EventType.DELETE, "0"), (insert, EventType.INSERT, "1")):
        assert record.value is not None
        batch_id, (e,) = decode_messages_packet(record.value)
        assert batch_id == seq and e.header.event_type == kind
        assert e.header.props[-1] == ("relay.part", part) and ("relay.sequence", str(seq)) in e.header.props
        assert isinstance(e.store_value, RowChange) and e.store_value.event_type == kind
        (row,) = e.store_value.row_datas()
        if kind == EventType.DELETE:
            assert [c.value for c in row.before_columns] == list(before) and not row.after_columns
        else:
            assert [c.value for c in row.after_columns] == list(after) and not row.before_columns
        assert dict(record.headers)["relay.part"] == part.encode()


# -- transaction payloads (MySQL binlog_transaction_compression) -----------------------------------------


def payload_entry(event_type: EventType, *rows: RowImage, index: int, inner_size: int = 60) -> Entry:
    """A rows entry read from event ``index`` of a transaction payload at mysql-bin.000123:1000 (every
    event of a payload carries the payload's place; 900 bytes compressed)."""
    entry = rows_entry(event_type, *rows, offset=1000)
    entry.header.event_length = 900
    entry.payload_index, entry.inner_size = index, inner_size
    return entry


def identity_of(record: Record) -> tuple[int, int]:
    msg = loads(record)
    return int(msg["sequence"]), int(msg.get("part", 0))


@pytest.mark.parametrize("codec", ["canal-json", "canal-protobuf"])
def test_rows_of_a_transaction_payload_get_distinct_ordered_identities(codec: str) -> None:
    m = (
        mapping()
        if codec == "canal-json"
        else parse_mapping({**mapping().to_dict(), "defaults": {"codec": codec}})
    )
    enc = encoder(m)
    other = ("43", "NEW", "1.00", None)
    first = enc.encode(payload_entry(EventType.INSERT, RowImage(None, NEW), RowImage(None, other), index=2))
    second = enc.encode(payload_entry(EventType.UPDATE, RowImage(NEW, PAID), index=3))
    records = [*first, *second]
    seqs = {int(dict(r.headers)["relay.sequence"]) for r in records}
    assert seqs == {(123 << 32) | 1000}, "every row of the payload has the payload's sequence"
    parts = [int(dict(r.headers)["relay.part"]) for r in records]
    assert parts == sorted(parts) and len(set(parts)) == 3, parts  # in binlog order, distinct
    if codec == "canal-json":
        assert [identity_of(r)[1] for r in records] == parts
    # an event after the payload (at its end offset or later) sorts after every row inside it
    after = enc.encode(rows_entry(EventType.DELETE, RowImage(PAID, None), offset=1900))
    assert int(dict(after[0].headers)["relay.sequence"]) > max(seqs)
    # re-encoding is byte-identical
    assert enc.encode(payload_entry(EventType.UPDATE, RowImage(NEW, PAID), index=3)) == second


def test_a_key_change_inside_a_payload_keeps_its_halves_apart() -> None:
    enc = encoder(mapping())
    moved = ("20", "PAID", "19.90", None)
    records = enc.encode(payload_entry(EventType.UPDATE, RowImage(NEW, moved), index=1))
    delete, insert = records
    base = ((1 << 21) | 0) << 1
    assert (loads(delete)["type"], identity_of(delete)) == ("DELETE", ((123 << 32) | 1000, base))
    assert (loads(insert)["type"], identity_of(insert)) == ("INSERT", ((123 << 32) | 1000, base + 1))


def test_an_entry_inside_a_payload_weighs_its_own_size_in_the_store() -> None:
    entry = payload_entry(EventType.INSERT, RowImage(None, NEW), index=0, inner_size=60)
    assert entry.size == 60
    outside = rows_entry(EventType.INSERT, RowImage(None, NEW))
    outside.header.event_length = 77
    assert outside.size == 77


def test_timestamp_instants_go_beside_data_which_stays_canal_text() -> None:
    from relay.binlog.rows import Instant

    columns = (*COLUMNS[:3], ColumnMeta(3, "at", 17, 3, True, False, None, False, "timestamp(3)", 93, 3))
    at = Instant("2024-10-27 02:30:00.123")
    at.micros = 1_729_992_600_123_000
    entry = rows_entry(EventType.INSERT, RowImage(None, ("42", "a", "1.00", at)), columns=columns)
    (record,) = encoder().encode(entry)
    message = loads(record)
    assert message["data"] == [{"id": "42", "status": "a", "amount": "1.00", "at": "2024-10-27 02:30:00.123"}]
    assert message["utcMicros"] == [{"at": 1_729_992_600_123_000}]
    assert record.value.endswith(b',"utcMicros":[{"at":1729992600123000}]}')
    plain = rows_entry(
        EventType.INSERT, RowImage(None, ("42", "a", "1.00", "2024-10-27 02:30:00.123")), columns=columns
    )
    (snapshot,) = encoder().encode(plain)  # a value without its instant (a snapshot SELECT): no field
    assert "utcMicros" not in loads(snapshot)
    assert record.value.replace(b',"utcMicros":[{"at":1729992600123000}]', b"") == snapshot.value


def test_protobuf_timestamp_columns_carry_their_instant_as_a_column_prop() -> None:
    from relay.binlog.rows import Instant

    columns = (*COLUMNS[:3], ColumnMeta(3, "at", 17, 3, True, False, None, False, "timestamp(3)", 93, 3))
    at = Instant("2024-10-27 02:30:00.123")
    at.micros = 1_729_992_600_123_000
    entry = rows_entry(EventType.INSERT, RowImage(None, ("42", "a", "1.00", at)), columns=columns)
    (record,) = encoder(mapping(codec="canal-protobuf")).encode(entry)
    _, (decoded,) = decode_messages_packet(record.value)
    (row,) = decoded.store_value.row_datas()
    by_name = {c.name: c for c in row.after_columns}
    assert by_name["at"].value == "2024-10-27 02:30:00.123"
    assert by_name["at"].props == [("utcMicros", "1729992600123000")] and by_name["id"].props == []


def test_ddl_barriers_on_a_compacted_topic_carry_a_key_of_their_own() -> None:
    ddl = statement_entry("ALTER TABLE orders_33 ADD c INT", EventType.ALTER, "shop_07", "orders_33")
    plain = [r for r in encoder(mapping()).encode(ddl) if r.topic != "relay.ddl"]
    assert plain and all(r.key is None for r in plain)  # canal's unkeyed barrier where compaction is off
    compacted_records = [r for r in encoder(compacted_mapping()).encode(ddl) if r.topic != "relay.ddl"]
    assert sorted(r.partition for r in compacted_records) == [0, 1, 2]
    assert {r.key for r in compacted_records} == {b'{"_ddl":"shop_07.orders_33"}'}
