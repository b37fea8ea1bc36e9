"""The sink: canal's include/black regex filters and empty-transaction trimming."""

from __future__ import annotations

import pytest

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
from relay.canal.sink import NameFilter, Sink
from relay.config.sections import SinkConfig
from relay.errors import ConfigError

T0 = 1_763_700_000_000


class Txns:
    """Makes entries of consecutive transactions, each with its own context."""

    def __init__(self) -> None:
        self.offset = 4

    def _header(self, event_type: EventType, schema: str = "", table: str = "", ms: int = T0) -> Header:
        self.offset += 50
        return Header("mysql-bin.000001", self.offset, 1, ms, 50, event_type, schema, table)

    def txn(self, *tables: str, ms: int = T0) -> list[Entry]:
        """BEGIN, one INSERT per ``schema.table``, END."""
        ctx = TxnContext(EntryPosition("mysql-bin.000001", self.offset + 50, 1, "", ms))
        out = [Entry(self._header(EventType(0), ms=ms), EntryType.TRANSACTIONBEGIN, TransactionBegin(), ctx)]
        for name in tables:
            schema, _, table = name.partition(".")
            value = RowChange(EventType.INSERT)
            out.append(
                Entry(
                    self._header(EventType.INSERT, schema, table, ms), EntryType.ROWDATA, value, ctx, len(out)
                )
            )
        end = Entry(
            self._header(EventType(0), ms=ms), EntryType.TRANSACTIONEND, TransactionEnd(), ctx, len(out), True
        )
        return [*out, end]

    def ddl(self, sql: str, event_type: EventType, schema: str, table: str = "") -> Entry:
        ctx = TxnContext(EntryPosition("mysql-bin.000001", self.offset + 50, 1))
        value = RowChange(event_type, is_ddl=event_type != EventType.QUERY, sql=sql, ddl_schema_name=schema)
        return Entry(self._header(event_type, schema, table), EntryType.ROWDATA, value, ctx, 0, True)


def names(entries: list[Entry]) -> list[str]:
    out = []
    for e in entries:
        if e.entry_type == EntryType.ROWDATA:
            out.append(f"{e.header.schema_name}.{e.header.table_name}")
        else:
            out.append(e.entry_type.name[len("TRANSACTION") :])
    return out


# -- filters -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "name", "expected"),
    [
        (".*\\..*", "shop_07.orders_33", True),
        ("shop_\\d+\\.orders_\\d+", "shop_07.orders_33", True),
        ("shop_\\d+\\.orders_\\d+", "shop_07.orders_33_bak", False),  # the whole name must match
        ("shop_\\d+\\.orders_\\d+", "xshop_07.orders_33", False),
        ("shop_\\d+\\.orders_\\d+", "shop_07.users", False),
        ("test.t1", "test.t1", True),
        ("test.t1", "TEST.T1", True),  # case-insensitive, as canal
        ("Test\\.T1", "test.t1", True),
        ("test.t", "test.t1", False),
        ("a\\.b, c\\..* ,,", "c.anything", True),  # spaces and blank items ignored
        ("a\\.b,c\\..*", "a.bc", False),
        ("", "any.thing", True),  # empty include keeps all
    ],
)
def test_include_filter(pattern: str, name: str, expected: bool) -> None:
    assert NameFilter("sink.filter", pattern, empty_value=True).matches(name) is expected


def test_empty_black_filter_drops_nothing() -> None:
    assert not NameFilter("sink.black_filter", "", empty_value=False).matches("a.b")


@pytest.mark.parametrize("key", ["filter", "black_filter"])
def test_invalid_regex_names_key_and_pattern(key: str) -> None:
    with pytest.raises(ConfigError) as info:
        SinkConfig(**{key: "ok\\..*,shop_(\\d+\\..*"})  # type: ignore[arg-type]
    assert info.value.key == f"sink.{key}"
    assert "shop_(\\d+\\..*" in str(info.value)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"empty_transaction_threshold": -1},
        {"empty_transaction_interval_ms": "5s"},
        {"empty_transaction_threshold": True},
    ],
)
def test_bad_empty_transaction_settings(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigError, match=r"sink\.empty_transaction"):
        SinkConfig(**kwargs)  # type: ignore[arg-type]


def test_rows_are_filtered_and_black_list_applies_after() -> None:
    t = Txns()
    sink = Sink(SinkConfig(filter="shop_\\d+\\..*", black_filter="shop_\\d+\\.audit_.*"))
    out = sink.process(t.txn("shop_01.orders", "other.orders", "shop_02.audit_log", "shop_03.users"))
    assert names(out) == ["BEGIN", "shop_01.orders", "shop_03.users", "END"]


def test_ddl_filtering_by_schema_dot_table_and_schema_dot() -> None:
    t = Txns()
    sink = Sink(SinkConfig(filter="shop_\\d+\\..*,test.t1", filter_empty_transactions=True))
    kept = [
        t.ddl("ALTER TABLE orders ADD c INT", EventType.ALTER, "shop_01", "orders"),
        t.ddl("CREATE DATABASE shop_02", EventType.CREATE, "shop_02"),  # "shop_02." matches shop_\d+\..*
        t.ddl("ALTER TABLE t1 ADD c INT", EventType.ALTER, "test", "t1"),
    ]
    dropped = [
        t.ddl("CREATE DATABASE test", EventType.CREATE, "test"),  # "test." does not match test.t1
        t.ddl("ALTER TABLE t2 ADD c INT", EventType.ALTER, "test", "t2"),
        t.ddl("GRANT ALL ON *.* TO x", EventType.QUERY, ""),
    ]
    assert sink.process(kept + dropped) == kept


def test_everything_filter_keeps_statements_without_a_table() -> None:
    t = Txns()
    grant = t.ddl("GRANT ALL ON *.* TO x", EventType.QUERY, "")
    assert Sink(SinkConfig(filter=".*\\..*")).process([grant]) == [grant]


def test_rename_is_kept_when_source_or_target_is_included() -> None:
    t = Txns()
    sink = Sink(SinkConfig(filter="shop\\..*", black_filter="shop\\.tmp_.*"))
    into = t.ddl("RENAME TABLE stage.orders TO shop.orders", EventType.RENAME, "shop", "orders")
    out_of = t.ddl("RENAME TABLE shop.orders TO archive.orders", EventType.RENAME, "archive", "orders")
    neither = t.ddl("RENAME TABLE a.x TO b.x", EventType.RENAME, "b", "x")
    one_black = t.ddl("RENAME TABLE shop.tmp_1 TO shop.orders2", EventType.RENAME, "shop", "orders2")
    both_black = t.ddl("RENAME TABLE shop.tmp_1 TO shop.tmp_2", EventType.RENAME, "shop", "tmp_2")
    assert sink.process([into, out_of, neither, one_black, both_black]) == [into, out_of, one_black]


def test_no_filters_pass_everything() -> None:
    t = Txns()
    entries = t.txn("a.b", "c.d")
    assert Sink(SinkConfig()).process(entries) == entries


# -- transactions --------------------------------------------------------------------------------------


def test_begin_waits_for_the_first_kept_row_across_calls() -> None:
    t = Txns()
    sink = Sink(SinkConfig(filter="keep\\..*"))
    begin, drop1, keep1, keep2, end = t.txn("drop.x", "keep.a", "keep.b")
    assert sink.process([begin]) == []
    assert sink.process([drop1]) == []
    assert sink.process([keep1]) == [begin, keep1]  # BEGIN goes out first, once
    assert sink.process([keep2]) == [keep2]  # rows are never buffered
    assert sink.process([end]) == [end]


def test_empty_transactions_are_trimmed_with_canal_pass_through() -> None:
    t = Txns()
    sink = Sink(
        SinkConfig(filter="keep\\..*", empty_transaction_threshold=3, empty_transaction_interval_ms=5000)
    )
    passed = []
    for i in range(10):
        out = sink.process(t.txn("drop.x", ms=T0 + i))  # all within one second of binlog time
        passed.append(names(out))
    # the first passes (interval since "never"), then every 4th (count > threshold 3)
    assert passed == [
        ["BEGIN", "END"],
        [],
        [],
        [],
        ["BEGIN", "END"],
        [],
        [],
        [],
        ["BEGIN", "END"],
        [],
    ]
    assert sink.dropped == 10 * 1 + 7 * 2  # ten filtered rows, seven trimmed BEGIN/END pairs


def test_empty_transaction_passes_after_the_interval() -> None:
    t = Txns()
    sink = Sink(SinkConfig(filter="keep\\..*", empty_transaction_interval_ms=5000))
    assert names(sink.process(t.txn("drop.x", ms=T0))) == ["BEGIN", "END"]
    assert sink.process(t.txn("drop.x", ms=T0 + 4000)) == []
    assert sink.process(t.txn("drop.x", ms=T0 + 5000)) == []  # not more than the interval yet
    assert names(sink.process(t.txn("drop.x", ms=T0 + 5001))) == ["BEGIN", "END"]
    assert sink.process(t.txn("drop.x", ms=T0 + 6000)) == []


def test_a_transaction_that_goes_out_restarts_the_empty_clock() -> None:
    t = Txns()
    sink = Sink(
        SinkConfig(filter="keep\\..*", empty_transaction_threshold=2, empty_transaction_interval_ms=5000)
    )
    assert names(sink.process(t.txn("keep.a", ms=T0))) == ["BEGIN", "keep.a", "END"]
    assert sink.process(t.txn("drop.a", ms=T0 + 1)) == []  # right after real traffic: trimmed
    assert sink.process(t.txn("drop.a", ms=T0 + 2)) == []
    assert names(sink.process(t.txn("keep.a", ms=T0 + 3))) == ["BEGIN", "keep.a", "END"]
    assert sink.process(t.txn("drop.a", ms=T0 + 4)) == []  # the count started again
    assert sink.process(t.txn("drop.a", ms=T0 + 5)) == []
    assert names(sink.process(t.txn("drop.a", ms=T0 + 6))) == ["BEGIN", "END"]  # third in a row > 2
    assert names(sink.process(t.txn("drop.a", ms=T0 + 5007))) == ["BEGIN", "END"]  # interval elapsed


def test_non_empty_transactions_do_not_count_as_empty() -> None:
    t = Txns()
    sink = Sink(SinkConfig(filter="keep\\..*", empty_transaction_threshold=0))
    assert names(sink.process(t.txn("keep.a"))) == ["BEGIN", "keep.a", "END"]
    assert names(sink.process(t.txn("drop.a"))) == ["BEGIN", "END"]  # threshold 0: every one passes


def test_trimming_can_be_switched_off() -> None:
    t = Txns()
    sink = Sink(SinkConfig(filter="keep\\..*", filter_empty_transactions=False))
    for _ in range(3):
        assert names(sink.process(t.txn("drop.x"))) == ["BEGIN", "END"]


def test_an_abandoned_begin_is_replaced() -> None:
    t = Txns()
    sink = Sink(SinkConfig(filter="keep\\..*"))
    stale_begin = t.txn("drop.x")[0]
    begin, row, end = t.txn("keep.a")
    assert sink.process([stale_begin, begin, row, end]) == [begin, row, end]


def test_end_without_seen_begin_passes() -> None:
    """After a restart with skip, the transaction's BEGIN was published before: its END must pass."""
    t = Txns()
    _, row, end = t.txn("keep.a")
    assert Sink(SinkConfig(filter="keep\\..*")).process([row, end]) == [row, end]


def test_heartbeat_like_entries_pass() -> None:
    t = Txns()
    begin = t.txn()[0]
    beat = Entry(begin.header, EntryType.HEARTBEAT, None, begin.txn)
    assert Sink(SinkConfig(filter="x\\.y")).process([beat]) == [beat]


# -- the last empty transaction dropped, passed at the binlog end ----------------------------------------


def test_the_last_empty_transaction_dropped_is_passed_on_request() -> None:
    t = Txns()
    sink = Sink(SinkConfig(filter="keep\\..*", empty_transaction_interval_ms=5000))
    assert names(sink.process(t.txn("drop.x", ms=T0))) == ["BEGIN", "END"]  # the first passes
    assert not sink.holds_dropped
    sink.process(t.txn("drop.x", ms=T0 + 10))
    last = t.txn("drop.x", ms=T0 + 20)
    sink.process(last)
    assert sink.holds_dropped and sink.dropped == 3 + 2 * 2
    passed = sink.pass_dropped()
    assert passed == [last[0], last[-1]]  # the newest one: the saved position reaches its END
    assert sink.dropped == 3 + 2  # it went out after all
    assert sink.pass_dropped() == []  # once
    # Its END restarted the empty-transaction clock like any END that goes out.
    assert sink.process(t.txn("drop.x", ms=T0 + 4000)) == []
    assert names(sink.process(t.txn("drop.x", ms=T0 + 5021))) == ["BEGIN", "END"]
    assert sink.last_seen_ms == T0 + 5021


def test_a_dropped_transaction_is_not_passed_after_something_that_followed_it() -> None:
    t = Txns()
    sink = Sink(SinkConfig(filter="keep\\..*", empty_transaction_interval_ms=5000))
    sink.process(t.txn("keep.a", ms=T0))
    sink.process(t.txn("drop.x", ms=T0 + 1))
    assert sink.holds_dropped
    assert names(sink.process(t.txn("keep.a", ms=T0 + 2))) == ["BEGIN", "keep.a", "END"]
    assert sink.pass_dropped() == []  # it lies before what went out: out of order now
    sink.process(t.txn("drop.x", ms=T0 + 3))
    sink.process([t.ddl("CREATE DATABASE keep", EventType.QUERY, "keep")])  # a non-transaction entry
    assert sink.pass_dropped() == []
    sink.process(t.txn("drop.x", ms=T0 + 4))
    sink.forget_dropped()  # a snapshot chunk was put after it
    assert sink.pass_dropped() == []


def test_a_dropped_transaction_passes_while_the_next_one_is_open() -> None:
    t = Txns()
    sink = Sink(SinkConfig(filter="keep\\..*", empty_transaction_interval_ms=5000))
    sink.process(t.txn("keep.a", ms=T0))
    empty = t.txn("drop.x", ms=T0 + 1)
    sink.process(empty)
    following = t.txn("keep.a", ms=T0 + 2)
    assert sink.process(following[:1]) == []  # its BEGIN is held back
    assert sink.pass_dropped() == [empty[0], empty[-1]]  # before that BEGIN in binlog order
    assert sink.process(following[1:]) == following  # the open transaction goes on whole
