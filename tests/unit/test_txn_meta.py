"""Transaction metadata (``kafka.transaction_topic``): the BEGIN/END shapes (Debezium's transaction metadata
with our identity range beside it), the counting and ordering of a transaction's data records, the headers
and debezium-json's ``transaction`` block, what makes nothing (filtered-away transactions, snapshot reads,
DDL), the state a resume point keeps; and the publish loop's side (``relay.daemon.txn_topic``): an END is
produced only into a delivered batch, a rollback restores the acknowledged state.

Pure logic: entries are built here as the entry builder makes them; the daemon room gets a scripted
publisher and instance. The Kafka side is proved in tests/integration/test_txn_topic.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from mapping.load import parse_mapping
from mapping.model import Mapping
from relay.binlog import types as t
from relay.binlog.column_types import table_map_meta, table_map_type
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
from relay.config.load import parse_config
from relay.daemon.txn_topic import TransactionTopic
from relay.errors import ConfigError
from relay.kafka.codec import RecordEncoder
from relay.kafka.records import BatchHandle, Record
from relay.kafka.txn_meta import (
    EXTRA_KEY,
    H_TXN_ID,
    H_TXN_ORDER,
    H_TXN_STATUS,
    H_TXN_TABLE_ORDER,
    OpenTxn,
    TransactionMeta,
    transaction_id,
)
from relay.kafka.window import InflightWindow
from relay.positions.store import ResumePoint, SourceIdentity
from relay.source.snapshot_entry import SNAPSHOT_PROP, SnapshotEntry

FILE = "mysql-bin.000042"
GTID = "0-7-1234"
SOURCE = SourceIdentity("db1.local", 3306, 7, "")
TOPIC = "relay.transactions"
ES = 1763700000000


def col(kind: str, name: str, index: int, key: bool = False, **size: int) -> ColumnMeta:
    real, width = table_map_type(kind, **size)
    code, meta = table_map_meta(real, width)
    return t.column_meta(
        index,
        code,
        meta,
        not key,
        name=name,
        unsigned=False,
        charset=45 if kind == "varchar" else None,
        is_key=key,
    )


COLUMNS = (col("bigint", "id", 0, key=True), col("varchar", "note", 1, length=64))


def mapping() -> Mapping:
    return parse_mapping(
        {
            "unmapped": {"action": "drop"},
            "logical_dbs": {
                "shop": {
                    "physical": [r"shop_\d+"],
                    "codec": "debezium-json",
                    "tables": {"orders": {"physical": [r"orders_\d+"], "topic": "shop.orders"}},
                },
                "crm": {
                    "physical": ["crm"],
                    "tables": {"users": {"physical": ["users"], "topic": "crm.users"}},
                },
            },
        }
    )


def encoder(m: Mapping | None = None) -> RecordEncoder:
    return RecordEncoder(
        m or mapping(), SOURCE, ddl_topic="relay.ddl", partitions=lambda _: 3, source_id="src-a"
    )


class Txn:
    """Entries of one source transaction, as the entry builder makes them."""

    def __init__(self, offset: int, gtid: str = GTID, generation: int = 0) -> None:
        self.ctx = TxnContext(start=EntryPosition(FILE, offset, 7, gtid, ES), gtid=gtid, mariadb=True)
        self.offset, self.gtid, self.generation, self.index = offset, gtid, generation, 0

    def _header(self, kind: EventType, db: str = "", table: str = "", at: int = 0) -> Header:
        return Header(
            FILE, self.offset + 100 * self.index + at, 7, ES + self.index, 50, kind, db, table, self.gtid
        )

    def _entry(self, header: Header, kind: EntryType, value: Any, closes: bool = False) -> Entry:
        entry = Entry(header, kind, value, self.ctx, self.index, closes, self.generation)
        self.index += 1
        return entry

    def begin(self) -> Entry:
        return self._entry(self._header(EventType.QUERY), EntryType.TRANSACTIONBEGIN, TransactionBegin(ES))

    def rows(self, db: str, table: str, kind: EventType, *rows: RowImage) -> Entry:
        rc = RowChange(event_type=kind, table_id=9, columns=COLUMNS, rows=rows)
        return self._entry(self._header(kind, db, table), EntryType.ROWDATA, rc)

    def end(self) -> Entry:
        return self._entry(
            self._header(EventType.QUERY), EntryType.TRANSACTIONEND, TransactionEnd(ES + 99), True
        )


def ins(i: int) -> RowImage:
    return RowImage(None, (str(i), f"n{i}"))


def run(meta: TransactionMeta, enc: RecordEncoder, entries: list[Entry]) -> tuple[list[Record], list[Record]]:
    """(the records of ``entries`` as sent, the END records made)."""
    out: list[Record] = []
    ends: list[Record] = []
    for e in entries:
        h = e.header
        route = enc.mapping.resolve(h.schema_name, h.table_name) if h.schema_name else None
        records, end = meta.follow(e, enc.encode(e), route is not None and route.codec == "debezium-json")
        out.extend(records)
        if end is not None:
            ends.append(end)
    return out, ends


def heads(record: Record) -> dict[str, bytes]:
    return dict(record.headers)


def test_a_transaction_over_two_tables_and_codecs() -> None:
    enc, meta = encoder(), TransactionMeta(TOPIC, "src-a")
    tx = Txn(4000)
    plain = encoder()
    entries = [
        tx.begin(),
        tx.rows("shop_1", "orders_1", EventType.INSERT, ins(1), ins(2)),
        tx.rows("crm", "users", EventType.INSERT, ins(7)),
        tx.rows("shop_2", "orders_9", EventType.DELETE, RowImage(("3", "x"), None)),
        tx.end(),
    ]
    records, ends = run(meta, enc, entries)
    # BEGIN first, then every data record (the DELETE's tombstone too, uncounted), nothing else
    begin = records[0]
    assert (begin.topic, begin.key) == (TOPIC, b"src-a")
    assert heads(begin)[H_TXN_STATUS] == b"BEGIN" and heads(begin)[H_TXN_ID] == GTID.encode()
    b = json.loads(begin.value or b"")
    assert b == {
        "status": "BEGIN",
        "id": GTID,
        "ts_ms": ES,
        "event_count": None,
        "data_collections": None,
        "source_id": "src-a",
        "position": f"{FILE}:4000",
        "first_sequence": int(heads(records[1])["relay.sequence"]),
        "first_part": 0,
        "last_sequence": None,
        "last_part": None,
    }
    data = [r for r in records[1:] if r.value is not None]
    assert [r.topic for r in data] == ["shop.orders", "shop.orders", "crm.users", "shop.orders"]
    assert records[-1].value is None and H_TXN_ID not in heads(records[-1])  # the tombstone
    assert [heads(r)[H_TXN_ORDER] for r in data] == [b"1", b"2", b"3", b"4"]
    assert [heads(r)[H_TXN_TABLE_ORDER] for r in data] == [b"1", b"2", b"1", b"3"]
    assert {heads(r)[H_TXN_ID] for r in data} == {GTID.encode()}
    # debezium-json: the envelope's transaction block; canal-json: the value as without the setting
    value = json.loads(data[3].value or b"")
    block = value["payload"]["transaction"]  # schemas_enable (the default): the schema declares the block
    assert [f["field"] for f in value["schema"]["fields"]][-1] == "transaction"
    assert block == {"id": GTID, "total_order": 4, "data_collection_order": 3}
    assert data[2].value == plain.encode(entries[2])[0].value
    # END: Debezium's counts per logical table and the identity range
    (end,) = ends
    assert (end.topic, end.key, heads(end)[H_TXN_STATUS]) == (TOPIC, b"src-a", b"END")
    e = json.loads(end.value or b"")
    assert e["status"] == "END" and e["id"] == GTID and e["ts_ms"] == entries[-1].header.execute_time
    assert e["event_count"] == 4
    assert e["data_collections"] == [
        {"data_collection": "shop.orders", "event_count": 3},
        {"data_collection": "crm.users", "event_count": 1},
    ]
    assert e["topics"] == [
        {"topic": "shop.orders", "event_count": 3},
        {"topic": "crm.users", "event_count": 1},
    ]
    assert "topics" not in b  # BEGIN: no counts
    last = data[3]
    assert (e["last_sequence"], e["last_part"]) == (int(heads(last)["relay.sequence"]), 0)
    assert (e["first_sequence"], e["first_part"]) == (b["first_sequence"], 0)


def test_without_a_gtid_the_id_is_the_file_offset_of_the_begin() -> None:
    tx = Txn(777, gtid="")
    assert transaction_id(tx.begin()) == f"{FILE}:777"
    enc, meta = encoder(), TransactionMeta(TOPIC, "src-a")
    tx = Txn(777, gtid="")
    records, ends = run(meta, enc, [tx.begin(), tx.rows("crm", "users", EventType.INSERT, ins(1)), tx.end()])
    assert json.loads(ends[0].value or b"")["id"] == f"{FILE}:777"
    assert heads(records[1])[H_TXN_ID] == f"{FILE}:777".encode()


def test_filtered_away_transactions_snapshots_and_ddl_make_nothing() -> None:
    enc, meta = encoder(), TransactionMeta(TOPIC, "src-a")
    tx = Txn(100)
    records, ends = run(meta, enc, [tx.begin(), tx.rows("other", "t", EventType.INSERT, ins(1)), tx.end()])
    assert records == [] and ends == []
    # a snapshot chunk: its records unchanged, no BEGIN/END
    header = Header(FILE, 199, 7, 0, 1, EventType.INSERT, "crm", "users")
    rc = RowChange(
        event_type=EventType.INSERT, columns=COLUMNS, rows=(ins(5),), props=[(SNAPSHOT_PROP, "true")]
    )
    chunk = SnapshotEntry(
        header, EntryType.ROWDATA, rc, TxnContext(start=EntryPosition(FILE, 199, 7)), 0, True
    )
    chunk.checkpoint, chunk.memory, chunk.ordinal, chunk.read_ms = {}, 10, 0, ES
    plain = enc.encode(chunk)
    out, end = meta.follow(chunk, enc.encode(chunk), False)
    assert [r.headers for r in out] == [r.headers for r in plain] and end is None
    # a DDL (its own transaction): no BEGIN/END
    ddl_ctx = TxnContext(start=EntryPosition(FILE, 300, 7))
    ddl = Entry(
        Header(FILE, 300, 7, ES, 80, EventType.ALTER, "crm", "users"),
        EntryType.ROWDATA,
        RowChange(event_type=EventType.ALTER, is_ddl=True, sql="ALTER TABLE users ADD c INT"),
        ddl_ctx,
        0,
        True,
    )
    out, end = meta.follow(ddl, enc.encode(ddl), False)
    assert end is None and all(H_TXN_ID not in heads(r) for r in out) and all(r.topic != TOPIC for r in out)


def test_the_saved_state_continues_counts_and_orders_after_a_restart() -> None:
    enc = encoder()
    whole, cut = TransactionMeta(TOPIC, "src-a"), TransactionMeta(TOPIC, "src-a")
    tx = Txn(5000)
    entries = [
        tx.begin(),
        tx.rows("shop_1", "orders_1", EventType.INSERT, ins(1)),
        tx.rows("crm", "users", EventType.INSERT, ins(2), ins(3)),
        tx.rows("shop_1", "orders_1", EventType.INSERT, ins(4)),
        tx.end(),
    ]
    one_run, one_end = run(whole, enc, entries)
    first, _ = run(cut, enc, entries[:3])
    assert cut.open is not None
    saved = json.loads(json.dumps(cut.open.to_extra()))  # as the resume point keeps it
    restarted = TransactionMeta(TOPIC, "src-a")
    restarted.open = OpenTxn.from_extra(saved)
    second, two_end = run(restarted, enc, entries[3:])
    assert [r.headers for r in first + second] == [r.headers for r in one_run]
    assert [r.value for r in first + second] == [r.value for r in one_run]
    assert two_end[0].value == one_end[0].value
    assert json.loads(two_end[0].value or b"")["topics"] == [
        {"topic": "shop.orders", "event_count": 2},
        {"topic": "crm.users", "event_count": 2},
    ]
    assert OpenTxn.from_extra({"journal": FILE}) is None and OpenTxn.from_extra(None) is None
    # A state saved before topics were counted: the END says it cannot give them (null), not a wrong count.
    older = {k: v for k, v in saved.items() if k != "topics"}
    resumed = TransactionMeta(TOPIC, "src-a")
    resumed.open = OpenTxn.from_extra(older)
    _, old_end = run(resumed, enc, entries[3:])
    assert json.loads(old_end[0].value or b"")["topics"] is None


def test_a_transaction_resumed_without_its_state_gets_no_metadata() -> None:
    enc, meta = encoder(), TransactionMeta(TOPIC, "src-a")
    tx = Txn(6000)
    entries = [
        tx.begin(),
        tx.rows("crm", "users", EventType.INSERT, ins(1)),
        tx.rows("crm", "users", EventType.INSERT, ins(2)),
        tx.end(),
    ]
    meta.unaccounted = (FILE, 6000, 0)
    records, ends = run(meta, enc, entries[2:])
    assert ends == [] and len(records) == 1 and H_TXN_ID not in heads(records[0])
    nxt = Txn(7000)
    records, ends = run(
        meta, enc, [nxt.begin(), nxt.rows("crm", "users", EventType.INSERT, ins(3)), nxt.end()]
    )
    assert len(ends) == 1 and records[0].topic == TOPIC


# -- the publish loop's side ----------------------------------------------------------------------------


class ScriptedPublisher:
    """The two calls the room makes: ``append`` into a batch once it and the ones before are delivered
    (an ``InflightWindow``, the publisher's own), ``flush``."""

    def __init__(self) -> None:
        self.window = InflightWindow()
        self.appended: dict[int, list[Record]] = {}

    def append(self, batch_id: int, records: list[Record]) -> bool:
        handle = self.window.settled_through(batch_id)
        if handle is None:
            return False
        handle.pending += len(records)
        self.appended.setdefault(batch_id, []).extend(records)
        return True

    def flush(self, timeout: float) -> int:
        return 0


class ScriptedInstance:
    def __init__(self, saved: ResumePoint | None = None) -> None:
        self.saved_point = saved
        self.carried: dict[int, Any] = {}

    def carry(self, batch_id: int, key: str, value: Any) -> None:
        assert key == EXTRA_KEY
        self.carried[batch_id] = value


def room(saved: ResumePoint | None = None) -> tuple[TransactionTopic, ScriptedPublisher, ScriptedInstance]:
    pub, inst = ScriptedPublisher(), ScriptedInstance(saved)
    topic = TransactionTopic(TOPIC, "src-a", inst, pub, 5.0)  # type: ignore[arg-type]
    topic.start()
    return topic, pub, inst


def send(
    topic: TransactionTopic, pub: ScriptedPublisher, batch_id: int, entries: list[Entry]
) -> list[Record]:
    enc = encoder()
    out: list[Record] = []
    for e in entries:
        out.extend(topic.follow(enc.mapping, e, enc.encode(e)))
    topic.batch_sent(batch_id)
    pub.window.add(BatchHandle(batch_id, len(out), len(out)))
    return out


def test_an_end_goes_out_only_into_a_delivered_batch_and_a_rollback_restores_the_state() -> None:
    topic, pub, inst = room()
    tx = Txn(8000)
    first = send(topic, pub, 1, [tx.begin(), tx.rows("crm", "users", EventType.INSERT, ins(1))])
    assert first[0].topic == TOPIC  # BEGIN before the row
    assert inst.carried[1]["total"] == 1  # the point after batch 1 keeps the open transaction
    second = send(topic, pub, 2, [tx.rows("shop_1", "orders_1", EventType.INSERT, ins(2)), tx.end()])
    assert inst.carried[2] is None and all(r.topic != TOPIC for r in second)
    assert not topic.release() and pub.appended == {}  # nothing delivered yet
    handles = {h.batch_id: h for h in pub.window.disown()}
    for h in handles.values():
        pub.window.add(h)
    handles[2].pending = 0  # batch 2 delivered, batch 1 not: still no END
    assert not topic.release()
    handles[1].pending = 0
    assert topic.release() and [json.loads(r.value or b"")["status"] for r in pub.appended[2]] == ["END"]
    # a rollback before the ack: the batches are sent again from the acked state (none): BEGIN again
    pub.appended.clear()
    topic.forget([1, 2])
    pub.window.disown()
    again = send(topic, pub, 3, [tx.begin(), tx.rows("crm", "users", EventType.INSERT, ins(1))])
    assert again[0].topic == TOPIC and heads(again[1])[H_TXN_ORDER] == b"1"
    topic.acked([3])
    topic.forget([])
    more = send(topic, pub, 4, [tx.rows("shop_1", "orders_1", EventType.INSERT, ins(2)), tx.end()])
    assert heads(more[0])[H_TXN_ORDER] == b"2"  # continued from the acked batch 3


def test_start_continues_the_transaction_the_saved_point_is_inside_of() -> None:
    state = OpenTxn(FILE, 9000, 0, GTID, ES, True, 2, {"crm.users": 2}, (5, 0), (6, 0))
    point = ResumePoint(journal=FILE, offset=9000, skip=3, extra={EXTRA_KEY: state.to_extra()})
    topic, pub, _ = room(point)
    tx = Txn(9000)
    tx.index = 3
    out = send(topic, pub, 1, [tx.rows("crm", "users", EventType.INSERT, ins(9)), tx.end()])
    assert [heads(r)[H_TXN_ORDER] for r in out] == [b"3"]  # no second BEGIN: it was published
    pub.window.last().pending = 0
    assert topic.release()
    end = json.loads(pub.appended[1][0].value or b"")
    assert end["event_count"] == 3 and end["first_sequence"] == 5
    # saved inside a transaction without the state: that transaction gets no metadata
    bare = ResumePoint(journal=FILE, offset=9000, skip=3)
    topic, pub, _ = room(bare)
    tx = Txn(9000)
    tx.index = 3
    out = send(topic, pub, 1, [tx.rows("crm", "users", EventType.INSERT, ins(9)), tx.end()])
    assert all(H_TXN_ID not in heads(r) for r in out)
    pub.window.last().pending = 0
    assert topic.release() and pub.appended == {}


@pytest.mark.parametrize(
    ("topic", "says"),
    [("", "empty"), ("bad topic", "not allowed"), ("relay.ddl", "kafka.ddl_topic")],
)
def test_the_setting_is_validated(topic: Any, says: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config({"kafka": {"transaction_topic": topic}})
    assert info.value.key == "kafka.transaction_topic" and says in info.value.problem
    with pytest.raises(ConfigError, match=r"kafka\.heartbeat_topic"):
        parse_config({"kafka": {"transaction_topic": TOPIC, "heartbeat_topic": TOPIC}})
    assert parse_config({}).kafka.transaction_topic is None
    assert parse_config({"kafka": {"transaction_topic": TOPIC}}).kafka.transaction_topic == TOPIC


def test_relay_check_looks_for_the_transaction_topic() -> None:
    from relay.ops.check_servers import _wanted_topics

    config = parse_config({"kafka": {"transaction_topic": TOPIC}})
    assert TOPIC in _wanted_topics(config, None, set())
    assert TOPIC not in _wanted_topics(parse_config({}), None, set())
