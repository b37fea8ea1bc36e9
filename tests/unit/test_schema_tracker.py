"""The schema tracker on TABLE_MAPs as MySQL 5.7, MySQL 8 (MINIMAL) and FULL metadata write them.

No MySQL server runs here: the event bodies are built from the documented TABLE_MAP layout (MySQL
``Table_map_event``; the optional metadata fields of ``rows_event.h``: 1 SIGNEDNESS, 2 DEFAULT_CHARSET,
4 COLUMN_NAME, 8 SIMPLE_PRIMARY_KEY) and the row image from ``Rows_log_event``'s layout. MySQL 5.7
writes no optional metadata at all; MySQL 8's default MINIMAL writes signedness and charsets only.
"""

from __future__ import annotations

import logging
import struct

import pytest

from relay.binlog import events as ev
from relay.binlog import rows
from relay.binlog import types as t
from relay.binlog.parse import BinlogParser
from relay.errors import SchemaError, SourceError
from relay.schema.history import PartAssembler, Record, SchemaHistory, encode_parts
from relay.schema.model import Catalog, Collation, ColumnDef, TableDef
from relay.schema.tracker import SchemaTracker
from relay.source.server import _refuse_unfit
from tests.unit.test_binlog_parse import FILE, event, lenenc, names, tlv

UTF8MB4_0900 = 255
COLLATIONS = {
    "utf8mb4_0900_ai_ci": Collation("utf8mb4_0900_ai_ci", "utf8mb4", UTF8MB4_0900, True),
    "latin1_swedish_ci": Collation("latin1_swedish_ci", "latin1", 8, True),
}
# CREATE TABLE shop.orders (id INT UNSIGNED NOT NULL PRIMARY KEY, name VARCHAR(10), doc JSON)
# on MySQL with utf8mb4_0900_ai_ci as the default collation.
ORDERS = TableDef(
    "shop",
    "orders",
    (
        ColumnDef("id", "int", (), True),
        ColumnDef("name", "varchar", (10,), False, "utf8mb4_0900_ai_ci"),
        ColumnDef("doc", "json"),
    ),
    ("id",),
    "utf8mb4_0900_ai_ci",
)
COLUMNS = [(t.LONG, b""), (t.VARCHAR, struct.pack("<H", 40)), (t.JSON, b"\x04")]
START = (FILE, 4)


def history(*tables: TableDef) -> SchemaHistory:
    h = SchemaHistory()
    catalog = Catalog(mariadb=False, collations=dict(COLLATIONS), databases={"shop": "utf8mb4_0900_ai_ci"})
    h.append(Record("snapshot", START, tuple(((x.schema, x.name), x) for x in tables), catalog.facts_json()))
    return h


def table_map(optional: bytes, columns: list[tuple[int, bytes]] = COLUMNS) -> bytes:
    meta = b"".join(m for _, m in columns)
    return (
        (41).to_bytes(6, "little")
        + b"\x01\x00"
        + b"\x04shop\x00\x06orders\x00"
        + lenenc(len(columns))
        + bytes(code for code, _ in columns)
        + lenenc(len(meta))
        + meta
        + bytes([0b110])  # id NOT NULL
        + optional
    )


def resolve(tracker: SchemaTracker, body: bytes, log_pos: int = 500) -> ev.TableMapEvent:
    parser = BinlogParser(checksum=True, mariadb=False, log_file=FILE, table_resolver=tracker.resolve)
    e = parser.parse(event(ev.TABLE_MAP_EVENT, body, log_pos=log_pos), 1)
    assert isinstance(e, ev.TableMapEvent)
    return e


def insert(table: ev.TableMapEvent) -> tuple[str | None, ...]:
    name = "héllo".encode()
    values = b"\xff\xff\xff\xff" + bytes([len(name)]) + name + struct.pack("<I", 2) + b"\x04\x01"
    data = lenenc(3) + b"\x07" + b"\x00" + values
    (row,) = rows.RowDecoder().decode_rows(ev.INSERT, data, 0, len(data), table)
    assert row.after is not None
    return row.after


def test_mysql_57_table_map_without_metadata_gets_names_key_signedness_and_json_from_the_history() -> None:
    e = resolve(SchemaTracker(history(ORDERS), START), table_map(b""))
    assert [c.name for c in e.columns] == ["id", "name", "doc"]
    assert [c.is_key for c in e.columns] == [True, False, False]
    assert e.columns[0].unsigned and e.columns[0].mysql_type == "int unsigned"
    assert e.columns[1].charset == UTF8MB4_0900 and e.columns[1].mysql_type == "varchar(10)"
    assert e.columns[2].type_code == t.JSON
    assert insert(e) == ("4294967295", "héllo", "true")  # unsigned, utf8mb4 text, binary JSON


def test_mysql_8_minimal_metadata_is_checked_against_the_history() -> None:
    minimal = tlv(1, bytes([0b10000000])) + tlv(2, lenenc(UTF8MB4_0900))  # id unsigned; default collation
    e = resolve(SchemaTracker(history(ORDERS), START), table_map(minimal))
    assert [c.name for c in e.columns] == ["id", "name", "doc"] and e.names_from_binlog
    # The same event against a history that says the key is signed and the name latin1: stops.
    signed = TableDef("shop", "orders", (ColumnDef("id", "int"), *ORDERS.columns[1:]), ("id",))
    with pytest.raises(SchemaError, match=r"shop\.orders at mysql-bin\.000007:\d+ .*unsigned is True"):
        resolve(SchemaTracker(history(signed), START), table_map(minimal))
    wider = TableDef("shop", "orders", (*ORDERS.columns[:1], ColumnDef("name", "varchar", (12,), False,
                     "utf8mb4_0900_ai_ci"), ORDERS.columns[2]), ("id",))  # fmt: skip
    with pytest.raises(SchemaError, match=r"column 2 \(name varchar\(12\).*binlog type/size"):
        resolve(SchemaTracker(history(wider), START), table_map(minimal))


FULL = (
    tlv(1, bytes([0b10000000]))
    + tlv(2, lenenc(UTF8MB4_0900))
    + tlv(4, names("id", "title", "doc"))
    + tlv(8, lenenc(0))
)


def test_with_full_metadata_auto_learns_what_the_history_lacks_and_always_stops() -> None:
    h = history()  # the table is unknown (e.g. no SELECT on it when the definitions were read)
    with pytest.raises(SchemaError, match="the history has no such table"):
        resolve(SchemaTracker(h, START, "always", full=True), table_map(FULL))
    tracker = SchemaTracker(h, START, "auto", full=True)
    e = resolve(tracker, table_map(FULL))
    assert [c.name for c in e.columns] == ["id", "title", "doc"]  # the event's own names
    learned = [r for r in h.records if r.kind == "learned"]
    assert len(learned) == 1 and learned[0].at[0] == FILE
    table = h.catalog_at((FILE, 10**6)).table("shop", "orders")
    assert table is not None and [c.type_text() for c in table.columns] == [
        "int unsigned",
        "varchar(10) collate utf8mb4_0900_ai_ci",
        "json",
    ]
    assert table.primary_key == ("id",)
    # Read again from an earlier place (a restart): the learned record is found, not appended again.
    again = SchemaTracker(h, START, "auto", full=True)
    resolve(again, table_map(FULL))
    assert len([r for r in h.records if r.kind == "learned"]) == 1
    # A replay of the same place on a server without FULL metadata now decodes with those names.
    e = resolve(SchemaTracker(h, learned[0].at, "auto", full=False), table_map(b""))
    assert [c.name for c in e.columns] == ["id", "title", "doc"] and insert(e)[1] == "héllo"


def query(sql: str, log_pos: int) -> ev.QueryEvent:
    header = ev.EventHeader(0, ev.QUERY_EVENT, 1, 100, log_pos, 0, FILE)
    return ev.QueryEvent(header, 1, 0, 0, "shop", sql)


def test_an_unreadable_ddl_stops_without_full_metadata_and_is_learned_past_with_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sql = "ALTER TABLE orders CONVERT TO CHARACTER SET latin1"
    strict = SchemaTracker(history(ORDERS), START, "auto", full=False)
    with pytest.raises(SchemaError) as caught:
        strict.on_query(query(sql, 300))
    message = str(caught.value)
    assert f"the DDL at {FILE}:300 on shop.orders cannot be applied" in message
    assert "relay schema resync -c CONFIG --table shop.orders" in message and "CONVERT TO" in message
    h = history(ORDERS)
    lenient = SchemaTracker(h, START, "auto", full=True)
    with caplog.at_level(logging.WARNING):
        lenient.on_query(query(sql, 300))  # full metadata: the relay goes on
    assert "cannot be applied" in caplog.text
    e = resolve(lenient, table_map(FULL))
    assert e.columns[1].name == "title" and h.records[-1].kind == "learned"


def test_mysql_57_without_binlog_row_metadata_is_accepted_only_with_the_history() -> None:
    from relay.config.sections import SourceConfig

    mysql57 = {"log_bin": "ON", "binlog_format": "ROW", "binlog_row_image": "FULL"}
    _refuse_unfit(SourceConfig(), mysql57, schema_history=True)
    with pytest.raises(SourceError, match="binlog_row_metadata is unsupported by this server"):
        _refuse_unfit(SourceConfig(), mysql57, schema_history=False)
    with pytest.raises(SourceError, match="binlog_row_image is MINIMAL"):
        _refuse_unfit(SourceConfig(), {**mysql57, "binlog_row_image": "MINIMAL"}, schema_history=True)


def test_parts_reassemble_in_order_and_a_torn_record_is_left_out() -> None:
    big = Record("snapshot", START, tuple(((f"s{i}", "t"), ORDERS.renamed(f"s{i}", "t")) for i in range(300)),
                 {"mariadb": False, "collations": []})  # fmt: skip
    small = Record("ddl", (FILE, 900), ((("shop", "orders"), None),), {"databases": {}}, "DROP TABLE orders")
    parts = encode_parts(big, limit=1000)
    assert len(parts) > 2
    assembler = PartAssembler("test")
    for p in [*parts, *encode_parts(small, 1000), *parts, *encode_parts(small, 1000)[:0]]:
        assembler.add(p)
    torn = encode_parts(Record("ddl", (FILE, 950), (), {}, "x"), limit=10)
    for p in torn[:-1]:
        assembler.add(p)
    assert assembler.records == [big, small]  # the repeat of big kept once; the torn record left out


def test_places_of_two_servers_are_kept_apart() -> None:
    """A failover standby's binlog is another numbering: mysql-bin.000007:500 there is not the
    master's; each server's schema comes from its own records."""
    h = SchemaHistory()
    facts = Catalog(mariadb=False, collations=dict(COLLATIONS)).facts_json()
    renamed = TableDef("shop", "orders", (ColumnDef("key", "int", (), True), *ORDERS.columns[1:]), ("key",))
    h.append(Record("snapshot", START, ((("shop", "orders"), ORDERS),), facts, server="id:1"))
    h.append(Record("snapshot", (FILE, 200), ((("shop", "orders"), renamed),), facts, server="id:2"))
    h.append(
        Record("ddl", (FILE, 300), ((("shop", "orders"), None),), {"databases": {}}, "DROP", server="id:1")
    )
    assert h.catalog_at((FILE, 500), "id:1").table("shop", "orders") is None
    assert h.catalog_at((FILE, 500), "id:2").table("shop", "orders") == renamed
    assert not h.covers((FILE, 100), "id:2") and h.covers((FILE, 100), "id:1")
    e = resolve(SchemaTracker(h, (FILE, 250), server="id:2"), table_map(b""))
    assert [c.name for c in e.columns] == ["key", "name", "doc"]
    with pytest.raises(SchemaError, match="no definitions of server id:2 as old as"):
        h.catalog_at((FILE, 100), "id:2")


# ---- MariaDB: YEAR in SIGNEDNESS, the history's signedness both ways, records of earlier versions ------

# CREATE TABLE shop.yt (id INT PRIMARY KEY, y YEAR, t TINYINT) on MariaDB.
YT = TableDef(
    "shop", "yt", (ColumnDef("id", "int"), ColumnDef("y", "year"), ColumnDef("t", "tinyint")), ("id",)
)
YT_COLUMNS = [(t.LONG, b""), (t.YEAR, b""), (t.TINY, b"")]
YT_MINIMAL = tlv(1, bytes([0b01000000]))  # id signed, y (MariaDB counts it) unsigned, t signed
YT_FULL = YT_MINIMAL + tlv(4, names("id", "y", "t")) + tlv(8, lenenc(0))
AFTER = (FILE, 200)  # a place after the records below


def mariadb_history(*records: Record) -> SchemaHistory:
    h = SchemaHistory()
    facts = Catalog(mariadb=True, collations=dict(COLLATIONS), databases={"shop": "latin1_swedish_ci"})
    h.append(Record("snapshot", START, (), facts.facts_json()))
    for r in records:
        h.append(r)
    return h


def yt_map(optional: bytes) -> bytes:
    meta = b""
    return (
        (42).to_bytes(6, "little") + b"\x01\x00" + b"\x04shop\x00\x02yt\x00" + lenenc(3)
        + bytes(code for code, _ in YT_COLUMNS) + lenenc(len(meta)) + meta + bytes([0b110]) + optional
    )  # fmt: skip


def resolve_mariadb(tracker: SchemaTracker, body: bytes) -> ev.TableMapEvent:
    parser = BinlogParser(checksum=True, mariadb=True, log_file=FILE, table_resolver=tracker.resolve)
    e = parser.parse(event(ev.TABLE_MAP_EVENT, body, log_pos=500), 1)
    assert isinstance(e, ev.TableMapEvent)
    return e


def yt_row(table: ev.TableMapEvent) -> tuple[str | None, ...]:
    data = lenenc(3) + b"\x07" + b"\x00" + struct.pack("<i", 1) + b"\x7c" + b"\xff"
    (row,) = rows.RowDecoder().decode_rows(ev.INSERT, data, 0, len(data), table)
    assert row.after is not None
    return row.after


@pytest.mark.parametrize("optional", [YT_MINIMAL, YT_FULL, b""])
def test_a_tinyint_after_a_year_is_signed_in_every_metadata_mode(optional: bytes) -> None:
    snapshot = Record("resync", (FILE, 100), ((("shop", "yt"), YT),))
    e = resolve_mariadb(SchemaTracker(mariadb_history(snapshot), AFTER, "always"), yt_map(optional))
    assert yt_row(e) == ("1", "2024", "-1")
    assert [c.mysql_type for c in e.columns] == ["int", "year", "tinyint"]


def test_with_signedness_a_history_that_calls_a_signed_column_unsigned_stops() -> None:
    wrong = TableDef("shop", "yt", (*YT.columns[:2], ColumnDef("t", "tinyint", (), True)), ("id",))
    h = mariadb_history(Record("resync", (FILE, 100), ((("shop", "yt"), wrong),)))
    refused = r"column 3 \(t\): unsigned is False in the event, True in the history"
    with pytest.raises(SchemaError, match=refused):
        resolve_mariadb(SchemaTracker(h, AFTER, "always"), yt_map(YT_MINIMAL))


def test_an_earlier_versions_learned_signedness_is_corrected_from_the_binlog(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # What an earlier version learned from FULL metadata: t took the YEAR's bit (unsigned).
    wrong = TableDef("shop", "yt", (*YT.columns[:2], ColumnDef("t", "tinyint", (), True)), ("id",))
    h = mariadb_history(Record("learned", (FILE, 100), ((("shop", "yt"), wrong),), version=1))
    with caplog.at_level(logging.WARNING):
        e = resolve_mariadb(SchemaTracker(h, AFTER, "always"), yt_map(YT_MINIMAL))
    assert yt_row(e) == ("1", "2024", "-1")
    assert "corrected from the binlog's SIGNEDNESS" in caplog.text and "t signed" in caplog.text
    fixed = h.records[-1]
    assert fixed.kind == "learned" and fixed.version == 2
    table = h.catalog_at((FILE, 10**6)).table("shop", "yt")
    assert table is not None and not table.columns[2].unsigned and table.doubt == ()
    # Read again from the same start (a restart, a replay): the correction is found, not appended twice.
    resolve_mariadb(SchemaTracker(h, AFTER, "always"), yt_map(YT_MINIMAL))
    assert len([r for r in h.records if r.kind == "learned"]) == 2
    # Without SIGNEDNESS (NO_LOG) nothing can settle it: the relay stops naming the step.
    h2 = mariadb_history(Record("learned", (FILE, 100), ((("shop", "yt"), wrong),), version=1))
    with pytest.raises(SchemaError, match=r"relay schema resync -c CONFIG --table shop\.yt --yes"):
        resolve_mariadb(SchemaTracker(h2, AFTER, "always"), yt_map(b""))


def test_tables_the_relay_does_not_capture_never_stop_it(caplog: pytest.LogCaptureFixture) -> None:
    broken = TableDef("shop", "yt", (), (), None, "read from the server: type vector(3) is not supported")
    h = mariadb_history(Record("resync", (FILE, 100), ((("shop", "yt"), broken),)))
    strict = SchemaTracker(h, AFTER, "always")
    with pytest.raises(SchemaError, match="its definition is unknown"):
        resolve_mariadb(strict, yt_map(b""))
    lenient = SchemaTracker(h, AFTER, "always")
    lenient.captures = lambda db, table: table != "yt"
    with caplog.at_level(logging.INFO):
        e = resolve_mariadb(lenient, yt_map(b""))
    assert [c.name for c in e.columns] == ["@1", "@2", "@3"] and "not captured" in caplog.text
    # A DDL it cannot apply on such a table is recorded broken, and the relay goes on.
    lenient.on_query(query("ALTER TABLE yt CONVERT TO CHARACTER SET latin1", 600))


def test_inet6_in_a_captured_table_is_refused_in_one_line() -> None:
    inet = TableDef("shop", "yt", (*YT.columns[:2], ColumnDef("t", "inet6", (), False, "binary")), ("id",))
    h = mariadb_history(Record("resync", (FILE, 100), ((("shop", "yt"), inet),)))
    columns = [(t.LONG, b""), (t.YEAR, b""), (t.STRING, b"\xfe\x10")]
    body = (
        (42).to_bytes(6, "little") + b"\x01\x00" + b"\x04shop\x00\x02yt\x00" + lenenc(3)
        + bytes(code for code, _ in columns) + lenenc(2) + b"\xfe\x10" + bytes([0b110]) + YT_MINIMAL
    )  # fmt: skip
    refused = r"column 't' is INET6 \(MariaDB\), which the relay does not capture"
    with pytest.raises(SchemaError, match=refused):
        resolve_mariadb(SchemaTracker(h, AFTER, "always"), body)
    other = SchemaTracker(h, AFTER, "always")
    other.captures = lambda db, table: False
    assert resolve_mariadb(other, body).columns[2].name == "@3"  # the event as it is: not captured
