"""``changes``/``typed``/``apply_changes`` on canal-json values of the relay's exact shape: Spark types
from mysqlType (binary from the ISO-8859-1 text, decimal, datetime, unsigned), a column added by a DDL
appearing in the next batch, a DELETE leaving a tombstone that a replayed INSERT cannot undo."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

from relay.spark.apply import apply_changes
from relay.spark.decode import changes, typed
from relay.spark.tables import read_table

TYPES = {"id": "bigint unsigned", "blob": "varbinary(4)", "price": "decimal(6,2)", "at": "datetime(3)"}


def value(seq: int, kind: str, row: dict[str, Any], types: dict[str, str] = TYPES, old: Any = None) -> bytes:
    return json.dumps(
        {
            "id": seq,
            "database": "d",
            "table": "t",
            "pkNames": ["id"],
            "isDdl": False,
            "type": kind,
            "es": 1,
            "ts": 1,
            "sql": "",
            "sqlType": {},
            "mysqlType": types,
            "data": [row],
            "old": old,
            "gtid": "",
            "source": {"database": "d_00", "table": "t_00"},
            "sequence": seq,
        },
        ensure_ascii=False,
    ).encode()


def frame(spark: Any, values: list[tuple[str, bytes]]) -> Any:
    rows = [(k.encode(), v, "d", 0, i) for i, (k, v) in enumerate(values)]
    df = spark.createDataFrame(rows, "key binary, value binary, topic string, partition int, offset long")
    return df.selectExpr("*", "current_timestamp() as timestamp", "0 as timestampType")


def test_typed_values_and_schema_change(spark: Any, tmp_path: Path) -> None:
    row = {
        "id": "18446744073709551615",
        "blob": "\x00\xff\x80a",
        "price": "12.30",
        "at": "2024-05-01 10:00:00.123",
    }
    batch1 = frame(spark, [('{"id":"18446744073709551615"}', value(10, "INSERT", row))])
    got = typed(changes(batch1), "d.t").first()
    assert got["blob"] == bytearray(b"\x00\xff\x80a")
    assert got["price"] == Decimal("12.30") and got["id"] == Decimal("18446744073709551615")
    assert got["at"] == dt.datetime(2024, 5, 1, 10, 0, 0, 123000)
    out = tmp_path / "out"
    apply_changes(changes(batch1), out)
    # A DDL added a column: the next batch brings it; older rows read null there.
    wider = {**TYPES, "extra": "int"}
    batch2 = frame(
        spark,
        [
            ('{"id":"7"}', value(20, "INSERT", {**row, "id": "7", "extra": "5"}, wider)),
            ('{"id":"7"}', value(20, "INSERT", {**row, "id": "7", "extra": "5"}, wider)),
        ],
    )
    apply_changes(changes(batch2), out)
    table = {str(r["id"]): r for r in read_table(out, "d.t").to_pylist()}
    assert table["7"]["extra"] == 5 and table["18446744073709551615"]["extra"] is None
    # Delete, then replay an older insert of the same key: the tombstone keeps it deleted.
    batch3 = frame(
        spark,
        [
            ('{"id":"7"}', value(30, "DELETE", {**row, "id": "7", "extra": "5"}, wider)),
            ('{"id":"7"}', value(20, "INSERT", {**row, "id": "7", "extra": "5"}, wider)),
        ],
    )
    apply_changes(changes(batch3), out)
    apply_changes(changes(batch2), out)
    ids = {str(r["id"]) for r in read_table(out, "d.t").to_pylist()}
    assert ids == {"18446744073709551615"}


def with_source(raw: bytes, source_id: str) -> bytes:
    msg = json.loads(raw)
    msg["source"]["id"] = source_id
    return json.dumps(msg, ensure_ascii=False).encode()


def test_source_id_and_generations_in_the_change_identity(spark: Any, tmp_path: Path) -> None:
    row = {"id": "1", "blob": "a", "price": "1.00", "at": "2024-05-01 10:00:00.000"}
    master_last = (123 << 32) | 5000  # generation 0, mysql-bin.000123
    standby_first = (1 << 52) | (5 << 32) | 400  # generation 1 after a failover, mysql-bin.000005
    batch = frame(
        spark,
        [
            ('{"id":"1"}', with_source(value(master_last, "INSERT", row), "shop-a")),
            ('{"id":"1"}', with_source(value(standby_first, "UPDATE", {**row, "price": "2.00"}), "shop-a")),
            # a repeat of the master's record (same identity): changes nothing
            ('{"id":"1"}', with_source(value(master_last, "INSERT", row), "shop-a")),
            # old records without a source id read as ""
            ('{"id":"9"}', value(7, "INSERT", {**row, "id": "9"})),
        ],
    )
    decoded = changes(batch)
    assert sorted(r["source_id"] for r in decoded.collect()) == ["", "shop-a", "shop-a", "shop-a"]
    out = tmp_path / "out"
    apply_changes(decoded, out)
    table = {str(r["id"]): r for r in read_table(out, "d.t").to_pylist()}
    assert table["1"]["price"] == Decimal("2.00")  # the standby's later change wins, lower file number
    assert table["1"]["_sequence"] == standby_first and table["1"]["_source_id"] == "shop-a"
    assert table["9"]["_source_id"] == ""


def test_shard_keys_keep_equal_ids_of_two_shards_and_a_key_change_leaves_no_old_row(
    spark: Any, tmp_path: Path
) -> None:
    """Records exactly as the relay's encoder makes them (key_shard: physical, compacted topic): id 1
    in two shards stays two rows; UPDATE id 2 → 20 (DELETE + tombstone + INSERT) leaves only 20."""
    from mapping.load import parse_mapping
    from relay.binlog.events import RowImage
    from relay.canal.entry import EventType
    from tests.unit.test_codec import encoder, rows_entry

    m = parse_mapping(
        {
            "topics": {"config": {"cleanup.policy": "compact"}},
            "logical_dbs": {
                "shop": {
                    "physical": [r"shop_\d+"],
                    "tables": {"orders": {"physical": [r"orders_\d+"], "key_shard": "physical"}},
                }
            },
        }
    )
    enc = encoder(m)
    records = [
        *enc.encode(
            rows_entry(EventType.INSERT, RowImage(None, ("1", "A", "1.00", None)), db="shop_00", offset=100)
        ),
        *enc.encode(
            rows_entry(EventType.INSERT, RowImage(None, ("1", "B", "2.00", None)), db="shop_01", offset=200)
        ),
        *enc.encode(
            rows_entry(EventType.INSERT, RowImage(None, ("2", "C", "3.00", None)), db="shop_00", offset=300)
        ),
        *enc.encode(
            rows_entry(
                EventType.UPDATE,
                RowImage(("2", "C", "3.00", None), ("20", "C", "3.00", None)),
                db="shop_00",
                offset=400,
            )
        ),
    ]
    assert [r.value is None for r in records] == [False, False, False, False, True, False]
    rows = [(r.key, r.value, "shop", 0, i) for i, r in enumerate(records)]
    df = spark.createDataFrame(rows, "key binary, value binary, topic string, partition int, offset long")
    df = df.selectExpr("*", "current_timestamp() as timestamp", "0 as timestampType")
    out = tmp_path / "out"
    apply_changes(changes(df), out)
    table = read_table(out, "shop.orders").to_pylist()
    got = sorted((r["id"], r["status"], r["_key"]) for r in table)
    assert got == [
        (1, "A", '["shop_00.orders_33","1"]'),
        (1, "B", '["shop_01.orders_33","1"]'),
        (20, "C", '["shop_00.orders_33","20"]'),
    ]
    apply_changes(changes(df), out)  # re-applied: the same table
    assert len(read_table(out, "shop.orders").to_pylist()) == 3


def snapshot_read(seq: int, row: dict[str, Any]) -> bytes:
    msg = json.loads(value(seq, "INSERT", row))
    msg["snapshot"] = True
    return json.dumps(msg, ensure_ascii=False).encode()


def test_snapshot_reads_are_marked_and_applied_as_upserts_by_sequence(spark: Any, tmp_path: Path) -> None:
    row = {"id": "1", "blob": "a", "price": "1.00", "at": "2024-05-01 10:00:00.000"}
    chunk = (7 << 32) | 999  # one chunk: every row has its sequence
    batch = frame(
        spark,
        [
            ('{"id":"1"}', value(chunk - 500, "INSERT", row)),  # a live change before the chunk
            ('{"id":"1"}', snapshot_read(chunk, {**row, "price": "2.00"})),
            ('{"id":"2"}', snapshot_read(chunk, {**row, "id": "2"})),
            ('{"id":"2"}', snapshot_read(chunk, {**row, "id": "2"})),  # a repeat
            ('{"id":"3"}', snapshot_read(chunk, {**row, "id": "3"})),
            ('{"id":"3"}', value(chunk + 1, "DELETE", {**row, "id": "3"})),  # a live change after it
        ],
    )
    decoded = changes(batch)
    marks = [r["snapshot"] for r in decoded.orderBy("offset").collect()]
    assert marks == [False, True, True, True, True, False]
    assert typed(decoded, "d.t").where("_snapshot").count() == 4
    out = tmp_path / "out"
    apply_changes(decoded, out)
    table = {str(r["id"]): r for r in read_table(out, "d.t").to_pylist()}
    assert sorted(table) == ["1", "2"]  # 3 deleted after its snapshot read
    assert table["1"]["price"] == Decimal("2.00") and table["2"]["_sequence"] == chunk


def test_transaction_ids_and_orders_come_from_the_headers(spark: Any, tmp_path: Path) -> None:
    """``kafka.transaction_topic``: the ``relay.txn.*`` headers (Spark's ``includeHeaders``) become
    ``txn_id``/``txn_order``/``txn_table_order`` and ``_txn_*`` in ``typed``; a job groups a transaction's
    rows by id and holds them until their count reaches the END's ``event_count``."""
    row = {"id": "1", "blob": "a", "price": "1.00", "at": "2024-05-01 10:00:00.000"}

    def txn(name: str, order: int, table_order: int) -> list[tuple[str, bytes]]:
        return [
            ("relay.txn.id", name.encode()),
            ("relay.txn.order", str(order).encode()),
            ("relay.txn.table_order", str(table_order).encode()),
        ]

    records = [
        ('{"id":"1"}', value(10, "INSERT", row), txn("0-1-7", 1, 1)),
        ('{"id":"2"}', value(11, "INSERT", {**row, "id": "2"}), txn("0-1-7", 2, 2)),
        ('{"id":"1"}', value(12, "DELETE", row), txn("0-1-8", 1, 1)),
        ('{"id":"3"}', value(13, "INSERT", {**row, "id": "3"}), []),  # without the setting: no headers
    ]
    rows = [(k.encode(), v, "d", 0, i, h) for i, (k, v, h) in enumerate(records)]
    df = spark.createDataFrame(
        rows,
        "key binary, value binary, topic string, partition int, offset long, "
        "headers array<struct<key:string,value:binary>>",
    ).selectExpr("*", "current_timestamp() as timestamp", "0 as timestampType")
    decoded = changes(df, headers=True).orderBy("offset").collect()
    assert [(r["txn_id"], r["txn_order"], r["txn_table_order"]) for r in decoded] == [
        ("0-1-7", 1, 1),
        ("0-1-7", 2, 2),
        ("0-1-8", 1, 1),
        (None, None, None),
    ]
    got = typed(changes(df, headers=True), "d.t").orderBy("_sequence").collect()
    assert [(r["_txn_id"], r["_txn_order"], r["_txn_table_order"]) for r in got][:2] == [
        ("0-1-7", 1, 1),
        ("0-1-7", 2, 2),
    ]
    counts = {
        r["_txn_id"]: r["count"]
        for r in typed(changes(df, headers=True), "d.t").groupBy("_txn_id").count().collect()
    }
    assert counts == {"0-1-7": 2, "0-1-8": 1, None: 1}
    # without headers=True (or without a headers column: includeHeaders false) the columns are there, null
    assert {r["txn_id"] for r in changes(df).collect()} == {None}
    assert {
        r["txn_id"] for r in changes(frame(spark, [('{"id":"1"}', value(10, "INSERT", row))])).collect()
    } == {None}
    # the _txn_* columns are metadata: applying the changes keeps them out of the table's columns
    out = tmp_path / "out"
    apply_changes(changes(df, headers=True), out)
    assert not {"_txn_id", "txn_id"} & set(read_table(out, "d.t").column_names)


# The record key → the row identity, on the forms a key can take (the names are read without building a
# map, the shard value only from keys that name it):
# (key, after image, before image, _names, _kshard, _key, _old_key)
KEY_FORMS = [
    ('{"id":"1"}', {"id": "1", "b": "x"}, None, ["id"], None, '["1"]', None),
    ('{"ID":"1"}', {"id": "1"}, None, ["id"], None, '["1"]', None),  # the image's spelling wins
    ('{"_shard":"shop_07.orders_3","id":"2"}', {"id": "2"}, None, ["_shard", "id"], "shop_07.orders_3",
     '["shop_07.orders_3","2"]', None),
    ('{"_shard":7,"id":"2"}', {"id": "2"}, None, ["_shard", "id"], "7", '["7","2"]', None),
    ('{"_shard":"a\\"b","id":"2"}', {"id": "2"}, None, ["_shard", "id"], 'a"b', '["a\\"b","2"]', None),
    (None, {"id": "3", "a": "q"}, None, ["a", "id"], None, '["q","3"]', None),  # no key: the whole image
    ("{x", {"id": "3"}, None, ["id"], None, '["3"]', None),  # not JSON: the whole image
    ("[1]", {"id": "3"}, None, ["id"], None, '["3"]', None),  # not an object: the whole image
    ('{"a":"1","b":"2","c":"3","d":"4","e":"5"}', {"a": "1", "b": "2", "c": "3", "d": "4", "e": "5"}, None,
     ["a", "b", "c", "d", "e"], None, '["1","2","3","4","5"]', None),  # wider than _KEY_WIDTH
    ('{"z":"1","a":"2"}', None, {"z": "1", "a": "2"}, ["a", "z"], None, None, '["2","1"]'),  # a DELETE
    ('{"id":1}', {"id": "1"}, None, ["id"], None, '["1"]', None),  # a number in the key
]  # fmt: skip


def test_the_row_identity_of_every_key_form(spark: Any) -> None:
    from relay.spark.decode import _key_names, _key_of

    df = spark.createDataFrame(
        [f[:3] for f in KEY_FORMS], "key string, after map<string,string>, before map<string,string>"
    )
    got = (
        _key_names(df)
        .select("key", "_names", "_kshard", _key_of("after").alias("k"), _key_of("before").alias("ok"))
        .collect()
    )
    assert [(r["key"], r["_names"], r["_kshard"], r["k"], r["ok"]) for r in got] == [
        (f[0], *f[3:]) for f in KEY_FORMS
    ]
