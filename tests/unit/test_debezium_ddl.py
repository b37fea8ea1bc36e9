"""debezium-json's ``tableChanges``: the schema tracker sets a DDL's changed tables on the event, and the
schema-change event renders them in Debezium's shape (MySQL connector documentation, "Schema change
topic"). Pure logic: no server; the wire test of the same is in tests/integration/test_debezium_types.py."""

from __future__ import annotations

import json
from typing import Any

from mapping.load import parse_mapping
from mapping.model import Mapping
from relay.binlog import events as ev
from relay.canal.entry import Entry, EntryPosition, EntryType, EventType, Header, RowChange, TxnContext
from relay.kafka.codec import RecordEncoder
from relay.kafka.debezium_ddl import column_json
from relay.positions.store import SourceIdentity
from relay.schema.history import Record, SchemaHistory
from relay.schema.model import Catalog, Collation, ColumnDef, TableChange, TableDef, table_changes
from relay.schema.tracker import SchemaTracker

FILE = "mysql-bin.000123"
ES = 1763700000000
GTID = "3e11fa47-71ca-11e1-9e33-c80aa9429562:23"
SOURCE = SourceIdentity("db1.local", 3306, 7, "3e11fa47-71ca-11e1-9e33-c80aa9429562")
UTF8 = "utf8mb4_general_ci"
ORDERS = TableDef(
    "shop_07",
    "orders_33",
    (
        ColumnDef("id", "bigint", (), True),
        ColumnDef("status", "varchar", (16,), False, UTF8),
        ColumnDef("amount", "decimal", (10, 2)),
        ColumnDef("kind", "enum", (), False, UTF8, ("a", "b")),
        ColumnDef("at", "datetime", (3,)),
        ColumnDef("raw", "varbinary", (8,), False, "binary"),
    ),
    ("id",),
    UTF8,
)
OTHER = TableDef("elsewhere", "audit", (ColumnDef("n", "int"),), ("n",), UTF8)


def mapping(schemas: bool) -> Mapping:
    return parse_mapping(
        {
            "unmapped": {"action": "drop"},
            "logical_dbs": {
                "shop": {
                    "physical": [r"shop_\d+"],
                    "codec": "debezium-json",
                    "tables": {"orders": {"physical": [r"orders_\d+"], "topic": "shop.orders"}},
                }
            },
            "debezium": {"schemas_enable": schemas},
        }
    )


def ddl_value(changes: tuple[object, ...] | None, schemas: bool = False) -> dict[str, Any]:
    rc = RowChange(
        EventType.ALTER, is_ddl=True, sql="ALTER ...", ddl_schema_name="shop_07", table_changes=changes
    )
    h = Header(FILE, 5000, 99, ES, 100, EventType.ALTER, "shop_07", "orders_33", GTID)
    ctx = TxnContext(start=EntryPosition(FILE, 900, 99, GTID, ES), gtid=GTID)
    encoder = RecordEncoder(
        mapping(schemas), SOURCE, ddl_topic="relay.ddl", partitions=lambda _: 1, source_id="a"
    )
    (record,) = [
        r for r in encoder.encode(Entry(h, EntryType.ROWDATA, rc, ctx, 0, closes_txn=True)) if r.topic == "a"
    ]
    out: dict[str, Any] = json.loads(record.value or b"")
    return out


def test_columns_in_debeziums_shape() -> None:
    change = ddl_value((TableChange("ALTER", ORDERS),))["tableChanges"]
    assert len(change) == 1
    assert change[0]["type"] == "ALTER" and change[0]["id"] == '"shop_07"."orders_33"'
    table = change[0]["table"]
    assert table["defaultCharsetName"] == "utf8mb4" and table["primaryKeyColumnNames"] == ["id"]
    assert table["comment"] is None
    cols = {c["name"]: c for c in table["columns"]}
    assert [c["position"] for c in table["columns"]] == [1, 2, 3, 4, 5, 6]
    assert cols["id"] == {
        "name": "id", "jdbcType": -5, "nativeType": None, "typeName": "BIGINT UNSIGNED",
        "typeExpression": "BIGINT UNSIGNED", "charsetName": None, "length": None, "scale": None,
        "position": 1, "optional": False, "autoIncremented": None, "generated": None, "comment": None,
        "hasDefaultValue": None, "enumValues": None,
    }  # fmt: skip
    assert (cols["status"]["jdbcType"], cols["status"]["length"], cols["status"]["charsetName"]) == (
        12,
        16,
        "utf8mb4",
    )
    assert cols["status"]["optional"] is None  # the history does not keep NULL / NOT NULL
    assert (cols["amount"]["jdbcType"], cols["amount"]["length"], cols["amount"]["scale"]) == (3, 10, 2)
    assert (cols["kind"]["typeName"], cols["kind"]["enumValues"], cols["kind"]["length"]) == (
        "ENUM",
        ["a", "b"],
        None,
    )
    assert (cols["at"]["jdbcType"], cols["at"]["length"]) == (93, 3)
    assert (cols["raw"]["jdbcType"], cols["raw"]["charsetName"]) == (-3, None)


def test_only_captured_tables_and_empty_when_unknown() -> None:
    both = (TableChange("DROP", OTHER), TableChange("CREATE", ORDERS))
    assert [c["id"] for c in ddl_value(both)["tableChanges"]] == ['"shop_07"."orders_33"']
    assert ddl_value(None)["tableChanges"] == []  # no schema history, or the DDL was not understood
    assert ddl_value(())["tableChanges"] == []


def test_schema_describes_the_payload() -> None:
    body = ddl_value((TableChange("CREATE", ORDERS),), schemas=True)
    fields = {f["field"]: f for f in body["schema"]["fields"]}
    change_schema = fields["tableChanges"]["items"]
    assert change_schema["name"] == "io.debezium.connector.schema.Change"
    (change,) = body["payload"]["tableChanges"]
    assert [f["field"] for f in change_schema["fields"]] == list(change)
    table_schema = change_schema["fields"][2]
    assert [f["field"] for f in table_schema["fields"]] == list(change["table"])
    column_schema = table_schema["fields"][2]["items"]
    for column in change["table"]["columns"]:
        assert [f["field"] for f in column_schema["fields"]] == list(column)
        for f in column_schema["fields"]:
            assert f["optional"] or column[f["field"]] is not None


def test_kinds_from_the_catalog_before() -> None:
    before = Catalog(tables={("shop_07", "orders_33"): ORDERS, ("elsewhere", "audit"): OTHER})
    broken = TableDef("shop_07", "x", broken="DDL not applied")
    renamed = ORDERS.renamed("shop_07", "orders_34")
    changes = [
        (("shop_07", "orders_33"), None),
        (("shop_07", "orders_34"), renamed),
        (("elsewhere", "audit"), OTHER),
        (("shop_07", "x"), broken),
    ]
    got = table_changes(before, changes)
    assert got == (TableChange("DROP", ORDERS), TableChange("CREATE", renamed), TableChange("ALTER", OTHER))


def test_column_without_numbers() -> None:
    assert column_json(ColumnDef("d", "json"), 3, False)["jdbcType"] == 1111
    assert column_json(ColumnDef("y", "year"), 1, False)["length"] is None


def query(sql: str, log_pos: int) -> ev.QueryEvent:
    return ev.QueryEvent(ev.EventHeader(0, ev.QUERY_EVENT, 1, 100, log_pos, 0, FILE), 1, 0, 0, "shop_07", sql)


def test_tracker_sets_the_changed_tables_on_the_event_and_again_on_a_replay() -> None:
    history = SchemaHistory()
    facts = Catalog(collations={UTF8: Collation(UTF8, "utf8mb4", 45, True)}, databases={"shop_07": UTF8})
    history.append(Record("snapshot", (FILE, 4), (), facts.facts_json()))
    tracker = SchemaTracker(history, (FILE, 4))
    create = query("CREATE TABLE orders_33 (id BIGINT NOT NULL PRIMARY KEY, note VARCHAR(8))", 300)
    tracker.on_query(create)
    assert create.table_changes is not None
    (made,) = create.table_changes
    assert isinstance(made, TableChange) and made.kind == "CREATE"
    assert [c.name for c in made.table.columns] == ["id", "note"] and made.table.primary_key == ("id",)
    alter = query("ALTER TABLE orders_33 ADD amount DECIMAL(10,2)", 400)
    tracker.on_query(alter)
    assert alter.table_changes is not None
    assert [(c.kind, len(c.table.columns)) for c in alter.table_changes if isinstance(c, TableChange)] == [
        ("ALTER", 3)
    ]
    nothing = query("CREATE DATABASE IF NOT EXISTS other", 450)
    tracker.on_query(nothing)
    assert nothing.table_changes == ()
    # a replay (a restart before the DDL) finds the records and gives the same changes
    again = SchemaTracker(history, (FILE, 4))
    replay = query("CREATE TABLE orders_33 (id BIGINT NOT NULL PRIMARY KEY, note VARCHAR(8))", 300)
    again.on_query(replay)
    assert replay.table_changes == create.table_changes
