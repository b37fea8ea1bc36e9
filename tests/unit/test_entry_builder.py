"""The entry builder on hand-made decoded events: MySQL and MariaDB transactions, DDL, COMMIT queries,
XA, transaction contexts and indexes, and the resume points computed from what it builds."""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from relay.binlog.events import (
    DELETE,
    INSERT,
    UPDATE,
    BinlogEvent,
    ColumnMeta,
    EventHeader,
    FormatDescriptionEvent,
    GtidEvent,
    GtidSetEvent,
    HeartbeatEvent,
    OtherEvent,
    QueryEvent,
    RotateEvent,
    RowImage,
    RowsEvent,
    TableMapEvent,
    XaPrepareEvent,
    XidEvent,
)
from relay.canal.entry import Entry, EntryType, EventType, RowChange, TransactionBegin, TransactionEnd
from relay.canal.entry_builder import BuilderConfig, EntryBuilder
from relay.positions.store import resume_after

UUID = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
TS = 1_763_700_000
FILE = "mysql-bin.000007"


class Log:
    """Lays events out one after another in a binlog file, as the server does."""

    def __init__(self, file: str = FILE, offset: int = 4) -> None:
        self.file = file
        self.offset = offset

    def header(self, size: int, ts: int = TS) -> EventHeader:
        start = self.offset
        self.offset += size
        return EventHeader(ts, 0, 11, size, start + size, 0, self.file)


COLUMNS = (
    ColumnMeta(0, "id", 8, 0, False, False, None, True, "bigint", -5, 20),
    ColumnMeta(1, "status", 15, 64, True, False, 45, False, "varchar(16)", 12, 16),
)


def table(log: Log) -> TableMapEvent:
    return TableMapEvent(log.header(40), 108, "shop_07", "orders_33", COLUMNS)


def mysql_txn(log: Log, gno: int, rows: int = 2) -> list[BinlogEvent]:
    """GTID, BEGIN, TABLE_MAP, rows…, XID — MySQL's layout of one transaction."""
    events: list[BinlogEvent] = [
        GtidEvent(log.header(65), f"{UUID}:{gno}", mariadb=False),
        QueryEvent(log.header(70), 77, 0, 0, "shop_07", "BEGIN"),
    ]
    tm = table(log)
    events.append(tm)
    kinds = [INSERT, UPDATE, DELETE]
    for i in range(rows):
        kind = kinds[i % 3]
        image = {
            INSERT: RowImage(None, (str(i), "NEW")),
            UPDATE: RowImage((str(i), "NEW"), (str(i), "PAID")),
            DELETE: RowImage((str(i), "PAID"), None),
        }[kind]
        events.append(RowsEvent(log.header(50), kind, tm, (image,)))
    events.append(XidEvent(log.header(31), 900 + gno))
    return events


def mariadb_txn(log: Log, seq: int) -> list[BinlogEvent]:
    events: list[BinlogEvent] = [GtidEvent(log.header(42), f"0-11-{seq}", mariadb=True)]
    tm = table(log)
    events += [
        tm,
        RowsEvent(log.header(50), INSERT, tm, (RowImage(None, ("1", "a")), RowImage(None, ("2", "b")))),
    ]
    events.append(XidEvent(log.header(31), 500 + seq))
    return events


def build(builder: EntryBuilder, events: Iterable[BinlogEvent]) -> list[Entry]:
    return [entry for event in events for entry in builder.build(event)]


def kinds(entries: list[Entry]) -> list[EntryType]:
    return [e.entry_type for e in entries]


B, R, E = EntryType.TRANSACTIONBEGIN, EntryType.ROWDATA, EntryType.TRANSACTIONEND


def test_mysql_transaction() -> None:
    log = Log()
    events = mysql_txn(log, 5, rows=3)
    builder = EntryBuilder(BuilderConfig(gtid_set=f"{UUID}:1-4"))
    entries = build(builder, events)

    assert kinds(entries) == [B, R, R, R, E]
    assert [e.txn_index for e in entries] == [0, 1, 2, 3, 4]
    assert [e.closes_txn for e in entries] == [False] * 4 + [True]
    txn = entries[0].txn
    assert all(e.txn is txn for e in entries)  # one shared context object
    assert (txn.start.journal, txn.start.offset) == (FILE, 4)  # the GTID event, not BEGIN
    assert txn.gtid == f"{UUID}:5"
    assert txn.gtid_set_before == f"{UUID}:1-4"
    assert builder.gtid_set == f"{UUID}:1-5"

    begin, first, *_, end = entries
    assert begin.header.logfile_offset == 4 + 65 and begin.header.event_length == 70
    assert isinstance(begin.store_value, TransactionBegin)
    assert (begin.store_value.thread_id, begin.store_value.execute_time) == (77, TS * 1000)
    assert begin.header.event_type == EventType.EVENTTYPECOMPATIBLEPROTO2
    assert begin.header.props == [("curtGtid", f"{UUID}:5")]

    h = first.header
    assert (h.logfile_name, h.execute_time, h.event_length, h.server_id) == (FILE, TS * 1000, 50, 11)
    assert (h.schema_name, h.table_name, h.event_type, h.gtid) == (
        "shop_07",
        "orders_33",
        EventType.INSERT,
        txn.gtid,
    )
    assert h.props == [("curtGtid", txn.gtid), ("rowsCount", "1")]
    assert h.logfile_offset == events[3].header.start
    value = first.store_value
    assert isinstance(value, RowChange)
    assert (value.event_type, value.table_id, value.is_ddl) == (EventType.INSERT, 108, False)
    assert value.columns == COLUMNS and value.rows == events[3].rows  # type: ignore[attr-defined]
    assert [r.store_value.event_type for r in entries[1:4]] == [  # type: ignore[union-attr]
        EventType.INSERT,
        EventType.UPDATE,
        EventType.DELETE,
    ]

    assert isinstance(end.store_value, TransactionEnd)
    assert end.store_value.transaction_id == "905"
    assert end.header.logfile_offset + end.header.event_length == log.offset


def test_each_transaction_gets_its_own_context_and_the_set_grows() -> None:
    log = Log()
    builder = EntryBuilder(BuilderConfig(gtid_set=f"{UUID}:1-4"))
    first = build(builder, mysql_txn(log, 5))
    second = build(builder, mysql_txn(log, 6))
    assert first[0].txn is not second[0].txn
    assert second[0].txn.gtid_set_before == f"{UUID}:1-5"
    assert [e.txn_index for e in second] == [0, 1, 2, 3]
    assert builder.gtid_set == f"{UUID}:1-6"


def test_unknown_gtid_set_stays_unknown() -> None:
    entries = build(EntryBuilder(BuilderConfig()), mysql_txn(Log(), 5))
    assert entries[0].txn.gtid_set_before is None
    assert resume_after(entries[-1]).gtid_set is None


def test_mariadb_transaction_begins_at_its_gtid_event() -> None:
    log = Log()
    builder = EntryBuilder(BuilderConfig(mariadb=True, gtid_set="0-11-9"))
    entries = build(builder, mariadb_txn(log, 10))
    assert kinds(entries) == [B, R, E]
    begin = entries[0]
    assert (begin.header.logfile_offset, begin.header.event_length) == (4, 42)
    assert isinstance(begin.store_value, TransactionBegin) and begin.store_value.thread_id == 0
    txn = begin.txn
    assert (txn.start.offset, txn.gtid, txn.gtid_set_before, txn.mariadb) == (4, "0-11-10", "0-11-9", True)
    assert entries[1].header.props == [("curtGtid", "0-11-10"), ("rowsCount", "2")]
    assert builder.gtid_set == "0-11-10"
    assert resume_after(entries[-1]).gtid_set == "0-11-10"


def test_mariadb_begin_query_after_its_gtid_is_not_a_second_begin() -> None:
    log = Log()
    builder = EntryBuilder(BuilderConfig(mariadb=True))
    events = [
        GtidEvent(log.header(42), "0-11-3", mariadb=True),
        QueryEvent(log.header(70), 5, 0, 0, "s", "BEGIN"),
        QueryEvent(log.header(70), 5, 0, 0, "s", "COMMIT"),
    ]
    assert kinds(build(builder, events)) == [B, E]


def test_mariadb_standalone_ddl_is_its_own_transaction() -> None:
    log = Log()
    builder = EntryBuilder(BuilderConfig(mariadb=True, gtid_set="0-11-3"))
    gtid = GtidEvent(log.header(42), "0-11-4", mariadb=True, standalone=True, is_ddl=True)
    ddl = QueryEvent(log.header(120), 9, 0, 0, "shop_07", "CREATE TABLE `orders_34` (id bigint)")
    assert builder.build(gtid) == []
    [entry] = builder.build(ddl)
    assert (entry.entry_type, entry.txn_index, entry.closes_txn, entry.is_ddl) == (R, 0, True, True)
    assert (entry.txn.start.offset, entry.txn.gtid) == (4, "0-11-4")
    assert (entry.header.schema_name, entry.header.table_name) == ("shop_07", "orders_34")
    assert entry.header.event_type == EventType.CREATE
    value = entry.store_value
    assert isinstance(value, RowChange)
    assert (value.sql, value.ddl_schema_name, value.event_type) == (ddl.sql, "shop_07", EventType.CREATE)
    assert builder.gtid_set == "0-11-4"
    point = resume_after(entry)
    assert (point.offset, point.skip, point.gtid_set) == (ddl.header.log_pos, 0, "0-11-4")


def test_mysql_ddl_starts_at_its_gtid_event() -> None:
    log = Log()
    builder = EntryBuilder(BuilderConfig(gtid_set=f"{UUID}:1-7"))
    build(builder, [GtidEvent(log.header(65), f"{UUID}:8", mariadb=False)])
    [entry] = builder.build(QueryEvent(log.header(90), 9, 0, 0, "shop", "DROP TABLE IF EXISTS a.b, c"))
    assert (entry.txn.start.offset, entry.txn.gtid, entry.closes_txn) == (4, f"{UUID}:8", True)
    assert (entry.header.schema_name, entry.header.table_name, entry.header.event_type) == (
        "a",
        "b",
        EventType.ERASE,
    )
    assert entry.header.props == [("curtGtid", f"{UUID}:8")]
    assert builder.gtid_set == f"{UUID}:1-8"


def test_ddl_without_gtid_starts_at_itself() -> None:
    log = Log(offset=1000)
    query = QueryEvent(log.header(90), 9, 0, 0, "shop", "ALTER TABLE t ADD c INT")
    [entry] = EntryBuilder(BuilderConfig()).build(query)
    assert (entry.txn.start.offset, entry.txn.gtid, entry.header.gtid) == (1000, "", "")
    assert entry.header.props == []


def test_query_statement_is_not_ddl_and_lands_on_the_default_schema() -> None:
    log = Log()
    [entry] = EntryBuilder(BuilderConfig()).build(
        QueryEvent(log.header(60), 9, 0, 0, "shop", "GRANT ALL ON x.* TO y")
    )
    value = entry.store_value
    assert isinstance(value, RowChange)
    assert (value.is_ddl, value.event_type, value.ddl_schema_name) == (False, EventType.QUERY, "shop")
    assert (entry.header.schema_name, entry.header.table_name) == ("shop", "")
    assert entry.closes_txn


def test_statement_inside_a_transaction_belongs_to_it() -> None:
    log = Log()
    builder = EntryBuilder(BuilderConfig())
    events = mysql_txn(log, 3, rows=1)
    events.insert(3, QueryEvent(log.header(40), 77, 0, 0, "shop_07", "SAVEPOINT `s1`"))
    entries = build(builder, events)
    assert kinds(entries) == [B, R, R, E]
    savepoint = entries[1]
    assert (savepoint.txn_index, savepoint.closes_txn, savepoint.is_ddl) == (1, False, False)
    assert savepoint.txn is entries[0].txn


def test_commit_query_ends_a_non_transactional_transaction() -> None:
    log = Log()
    tm = table(log)
    events: list[BinlogEvent] = [
        QueryEvent(log.header(70), 5, 0, 0, "shop_07", "BEGIN"),
        RowsEvent(log.header(50), INSERT, tm, (RowImage(None, ("1", "a")),)),
        QueryEvent(log.header(71), 5, 0, 0, "shop_07", "COMMIT"),
    ]
    entries = build(EntryBuilder(BuilderConfig()), events)
    assert kinds(entries) == [B, R, E]
    end = entries[-1]
    assert isinstance(end.store_value, TransactionEnd) and end.store_value.transaction_id == "0"
    assert end.closes_txn and entries[0].txn.start.offset == events[0].header.start  # BEGIN: no GTID


def test_rollback_query_ends_the_transaction() -> None:
    log = Log()
    events = mysql_txn(log, 4, rows=1)
    events[-1] = QueryEvent(log.header(72), 5, 0, 0, "shop_07", "ROLLBACK")
    entries = build(EntryBuilder(BuilderConfig()), events)
    assert kinds(entries) == [B, R, E] and entries[-1].closes_txn


def test_events_without_entries() -> None:
    log = Log()
    builder = EntryBuilder(BuilderConfig())
    quiet = [
        RotateEvent(EventHeader(0, 4, 11, 44, 0, 0x20, FILE), FILE, 4),
        FormatDescriptionEvent(log.header(120), 4, "8.4.0", True),
        HeartbeatEvent(EventHeader(0, 27, 11, 39, 0, 0, FILE), FILE),
        table(log),
        OtherEvent(log.header(30)),
        GtidSetEvent(log.header(71), f"{UUID}:1-3", mariadb=False),
    ]
    assert build(builder, quiet) == []


def test_previous_gtids_teach_the_set_but_an_artificial_one_does_not() -> None:
    log = Log()
    builder = EntryBuilder(BuilderConfig())
    builder.build(GtidSetEvent(EventHeader(TS, 35, 11, 71, 0, 0x20, FILE), f"{UUID}:1-99", mariadb=False))
    assert builder.gtid_set is None
    builder.build(GtidSetEvent(log.header(71), f"{UUID}:1-3", mariadb=False))
    entries = build(builder, mysql_txn(log, 4))
    assert entries[0].txn.gtid_set_before == f"{UUID}:1-3"
    assert builder.gtid_set == f"{UUID}:1-4"


def test_mariadb_gtid_list_keeps_the_highest_sequence_per_domain() -> None:
    log = Log()
    builder = EntryBuilder(BuilderConfig(mariadb=True))
    builder.build(GtidSetEvent(log.header(60), "0-11-30,0-12-41,1-11-5", mariadb=True))
    assert builder.gtid_set == "0-12-41,1-11-5"


def test_xa_transaction() -> None:
    log = Log()
    builder = EntryBuilder(BuilderConfig(gtid_set=f"{UUID}:1-2"))
    tm = table(log)
    prepared: list[BinlogEvent] = [
        GtidEvent(log.header(65), f"{UUID}:3", mariadb=False),
        QueryEvent(log.header(80), 5, 0, 0, "shop_07", "XA START X'7831',X'',1"),
        tm,
        RowsEvent(log.header(50), INSERT, tm, (RowImage(None, ("1", "a")),)),
        QueryEvent(log.header(78), 5, 0, 0, "shop_07", "XA END X'7831',X'',1"),
        XaPrepareEvent(log.header(60), one_phase=False, xid="X'7831',X'',1"),
    ]
    entries = build(builder, prepared)
    assert kinds(entries) == [B, R, E]
    begin, _, end = entries
    assert isinstance(begin.store_value, TransactionBegin)
    assert begin.store_value.props == [("XA_TYPE", "XA START"), ("XA_XID", "X'7831',X'',1")]
    assert isinstance(end.store_value, TransactionEnd) and end.closes_txn
    assert end.store_value.props == [("XA_TYPE", "XA END"), ("XA_XID", "X'7831',X'',1")]
    assert builder.gtid_set == f"{UUID}:1-3"

    commit = [
        GtidEvent(log.header(65), f"{UUID}:4", mariadb=False),
        QueryEvent(log.header(80), 5, 0, 0, "shop_07", "XA COMMIT X'7831',X'',1"),
    ]
    [entry] = build(builder, commit)
    value = entry.store_value
    assert isinstance(value, RowChange)
    assert (value.event_type, value.is_ddl, entry.closes_txn) == (EventType.XACOMMIT, False, True)
    assert value.props == [("XA_TYPE", "XA COMMIT"), ("XA_XID", "X'7831',X'',1")]
    assert entry.header.event_type == EventType.XACOMMIT
    assert builder.gtid_set == f"{UUID}:1-4"


def test_xa_prepare_closes_a_transaction_still_open() -> None:
    log = Log()
    builder = EntryBuilder(BuilderConfig())
    build(builder, [QueryEvent(log.header(80), 5, 0, 0, "s", "XA START 'x'")])
    [end] = builder.build(XaPrepareEvent(log.header(60), one_phase=True, xid="'x'"))
    assert end.entry_type == E and end.closes_txn and not builder.in_transaction


def test_entries_follow_the_file_of_each_event() -> None:
    builder = EntryBuilder(BuilderConfig())
    a = build(builder, mysql_txn(Log("mysql-bin.000001", 500), 1))
    b = build(builder, mysql_txn(Log("mysql-bin.000002", 4), 2))
    assert {e.header.logfile_name for e in a} == {"mysql-bin.000001"}
    assert {e.header.logfile_name for e in b} == {"mysql-bin.000002"}
    assert b[0].txn.start.journal == "mysql-bin.000002"


@pytest.mark.parametrize("mariadb", [False, True])
def test_resume_mid_transaction_rebuilds_the_same_indexes(mariadb: bool) -> None:
    """resume_after an entry inside a transaction points at the transaction's start with skip =
    index + 1; reading again from there with a fresh builder and skipping gives exactly the rest."""
    log = Log()
    first_gtid = "0-11-1" if mariadb else f"{UUID}:1"
    events = (mariadb_txn(log, 1) if mariadb else mysql_txn(log, 1, rows=4)) + (
        mariadb_txn(log, 2) if mariadb else mysql_txn(log, 2, rows=4)
    )
    initial = "0-11-0" if mariadb else None
    entries = build(EntryBuilder(BuilderConfig(mariadb=mariadb, gtid_set=initial)), events)
    for acked in range(len(entries)):
        point = resume_after(entries[acked])
        again_from = [
            e for e in events if (e.header.log_file, e.header.start) >= (point.journal, point.offset)
        ]
        builder = EntryBuilder(BuilderConfig(mariadb=mariadb, gtid_set=point.gtid_set))
        rebuilt = build(builder, again_from)[point.skip :]
        expect = entries[acked + 1 :]
        assert [(e.header.logfile_offset, e.entry_type, e.txn_index) for e in rebuilt] == [
            (e.header.logfile_offset, e.entry_type, e.txn_index) for e in expect
        ], acked
        if expect:
            assert rebuilt[0].txn.gtid_set_before == expect[0].txn.gtid_set_before or initial is None
    mid = resume_after(entries[1])
    assert (mid.journal, mid.offset, mid.skip, mid.gtid) == (FILE, 4, 2, first_gtid)
    assert mid.gtid_set == initial
    end = resume_after(entries[entries.index(next(e for e in entries if e.closes_txn))])
    assert end.skip == 0 and end.gtid_set == (first_gtid if mariadb else None)


def test_mysql_resume_points_carry_the_gtid_set() -> None:
    log = Log()
    entries = build(EntryBuilder(BuilderConfig(gtid_set=f"{UUID}:1-4")), mysql_txn(log, 5, rows=2))
    mid, end = resume_after(entries[2]), resume_after(entries[-1])
    assert (mid.offset, mid.skip, mid.gtid_set) == (4, 3, f"{UUID}:1-4")
    assert (end.offset, end.skip, end.gtid_set) == (log.offset, 0, f"{UUID}:1-5")


def test_rows_without_begin_open_an_implicit_transaction() -> None:
    log = Log(offset=800)
    tm = table(log)
    builder = EntryBuilder(BuilderConfig())
    entries = build(
        builder,
        [RowsEvent(log.header(50), INSERT, tm, (RowImage(None, ("1", "a")),)), XidEvent(log.header(31), 3)],
    )
    assert kinds(entries) == [R, E]
    assert entries[0].txn is entries[1].txn and entries[0].txn.start.offset == 840


def test_anonymous_gtid_starts_the_transaction_without_a_gtid() -> None:
    """gtid_mode=OFF: MySQL still writes an ANONYMOUS_GTID event first; the transaction starts there."""
    log = Log()
    events = mysql_txn(log, 1, rows=1)
    events[0] = GtidEvent(events[0].header, "", mariadb=False)
    entries = build(EntryBuilder(BuilderConfig()), events)
    assert kinds(entries) == [B, R, E]
    assert (entries[0].txn.start.offset, entries[0].txn.gtid, entries[1].header.props) == (
        4,
        "",
        [("rowsCount", "1")],
    )


def test_mariadb_xa_start_after_its_gtid_is_not_a_second_begin() -> None:
    log = Log()
    builder = EntryBuilder(BuilderConfig(mariadb=True))
    tm = table(log)
    events: list[BinlogEvent] = [
        GtidEvent(log.header(42), "0-11-7", mariadb=True),
        QueryEvent(log.header(80), 5, 0, 0, "s", "XA START 'x'"),
        RowsEvent(log.header(50), INSERT, tm, (RowImage(None, ("1", "a")),)),
        QueryEvent(log.header(78), 5, 0, 0, "s", "XA END 'x'"),
    ]
    entries = build(builder, events)
    assert kinds(entries) == [B, R, E]
    assert entries[0].txn.start.offset == events[0].header.start and entries[-1].closes_txn
