"""The pure parts of a table move: the plan, the destination index, the remapped records, the merge rule
and the publish loop's decisions (``relay.kafka.history``, ``history_copy``, ``remap``,
``relay.daemon.moves``). The copy itself runs against a real broker in
tests/integration/test_table_move.py."""

from __future__ import annotations

import json
from collections import deque
from typing import Any

import pytest

from mapping.diff import codec_moves
from mapping.load import parse_mapping
from mapping.model import Mapping
from relay.binlog.events import ColumnMeta, RowImage
from relay.canal.entry import Entry, EntryPosition, EntryType, EventType, Header, RowChange, TxnContext
from relay.canal.proto.convert import decode_messages_packet
from relay.cli.positions import _renumbered
from relay.daemon.moves import MoveSwitch, _before, last_identity
from relay.errors import InvalidMappingError
from relay.kafka import canal_protobuf
from relay.kafka.codec import sequence
from relay.kafka.history import MovePlan, plan_move
from relay.kafka.history_copy import DestinationIndex, _Held, merge_head, round_done
from relay.kafka.partitioner import partition_for_key
from relay.kafka.records import Record
from relay.kafka.remap import Consumed, Remapper
from relay.positions.store import ResumePoint


def mapping(version: int = 1, orders: dict[str, Any] | None = None, **db: Any) -> Mapping:
    tables: dict[str, Any] = {"orders": {"physical": ["orders_\\d+"], **(orders or {})}}
    return parse_mapping(
        {
            "version": version,
            "topics": {"partitions": 3},
            "unmapped": {"action": "drop"},
            "logical_dbs": {"shop": {"physical": ["shop_\\d+"], "tables": tables, **db}},
        }
    )


V1 = mapping(1)
PROTO_COLUMNS = (
    ColumnMeta(0, "id", 3, 0, False, False, None, True, "int", 4, 11),
    ColumnMeta(1, "status", 15, 64, True, False, 45, False, "varchar(16)", 12, 16),
)
V2 = mapping(2, {"topic": "shop.orders"})
TABLES = [("shop_00", "orders_00"), ("shop_01", "orders_03"), ("shop_00", "customers"), ("other", "t")]


def consumed(
    topic: str = "shop",
    partition: int = 0,
    offset: int = 0,
    *,
    seq: int = 100,
    part: int | None = None,
    kind: str = "INSERT",
    table: tuple[str, str] = ("shop_00", "orders_00"),
    source: str = "src",
    key: bytes | None = b'{"id":"1"}',
    value: bytes | None = None,
    tombstone: bool = False,
) -> Consumed:
    headers = [
        ("relay.db", b"shop"),
        ("relay.table", b"orders"),
        ("relay.physical.db", table[0].encode()),
        ("relay.physical.table", table[1].encode()),
        ("relay.type", kind.encode()),
        ("relay.source.id", source.encode()),
        ("relay.sequence", str(seq).encode()),
    ]
    if part is not None:
        headers.append(("relay.part", str(part).encode()))
    if value is None and not tombstone:
        data = {"id": "1", "status": "NEW"}
        value = json.dumps(
            {
                "database": "shop",
                "table": "orders",
                "type": kind,
                "isDdl": kind not in ("INSERT", "DELETE"),
                "pkNames": ["id"],
                "data": [data],
                "sequence": seq,
            }
        ).encode()
    return Consumed(topic, partition, offset, key, value, tuple(headers))


# -- the plan ---------------------------------------------------------------------------------------


def test_a_plan_names_the_tables_that_change_topic_and_where_they_go() -> None:
    plan = plan_move(V1, V2, TABLES, "src")
    assert plan is not None
    assert plan.tables == (
        ("shop_00", "orders_00", "shop", "shop.orders"),
        ("shop_01", "orders_03", "shop", "shop.orders"),
    )
    assert (plan.origins, plan.destinations) == (("shop",), ("shop.orders",))
    assert plan_move(V1, V1.with_version(2), TABLES, "src") is None  # nothing moves
    assert plan_move(V1, mapping(2, {"tag": "t"}), TABLES, "src") is None  # a tag is no move


def test_a_move_that_changes_the_codec_or_a_protobuf_key_is_refused_naming_the_table() -> None:
    with pytest.raises(InvalidMappingError, match=r"shop_00\.orders_00.*canal-json.*canal-protobuf"):
        plan_move(V1, mapping(2, {"topic": "x", "codec": "canal-protobuf"}), TABLES, "src")
    proto = mapping(1, {"codec": "canal-protobuf", "topic": "shop.orders"})  # one codec per topic
    with pytest.raises(InvalidMappingError, match="another key"):
        plan_move(
            proto, mapping(2, {"codec": "canal-protobuf", "topic": "x", "key": ["status"]}), TABLES, "s"
        )
    assert plan_move(proto, mapping(2, {"codec": "canal-protobuf", "topic": "x"}), TABLES, "s") is not None


def test_a_debezium_json_move_keeps_its_key_and_logical_names() -> None:
    dbz = {"codec": "debezium-json", "topic": "shop.orders"}
    old = mapping(1, dbz)
    assert plan_move(old, mapping(2, {**dbz, "topic": "x"}), TABLES, "s") is not None
    with pytest.raises(InvalidMappingError, match="another key"):
        plan_move(old, mapping(2, {**dbz, "topic": "x", "key": ["status"]}), TABLES, "s")
    renamed = parse_mapping(
        {
            "version": 2,
            "unmapped": {"action": "drop"},
            "logical_dbs": {
                "shop": {
                    "physical": ["shop_\\d+"],
                    "tables": {"sales": {"physical": ["orders_\\d+"], **dbz, "topic": "x"}},
                }
            },
        }
    )
    with pytest.raises(
        InvalidMappingError, match=r"as shop\.sales: debezium-json records name their logical table"
    ):
        plan_move(old, renamed, TABLES, "s")


def test_the_plan_copies_only_this_sources_records_of_moving_tables_from_their_old_topic() -> None:
    plan = plan_move(V1, V2, TABLES, "src")
    assert plan is not None
    route = plan.route(consumed())
    assert route is not None and route.topic == "shop.orders"
    assert plan.route(consumed(source="another")) is None  # another instance of the group moves its own
    assert plan.route(consumed(topic="shop.orders")) is None  # already in its new topic
    assert plan.route(consumed(table=("shop_00", "customers"))) is None  # stays in "shop"
    rec = Consumed("shop", 0, 0, None, b"{}", (("relay.type", b"INSERT"),))
    assert plan.route(rec) is None  # not a relay record


# -- records ----------------------------------------------------------------------------------------


def test_a_moved_row_keeps_its_identity_and_lands_where_its_key_hashes() -> None:
    route = V2.resolve("shop_00", "orders_00")
    assert route is not None
    rec = consumed(partition=2, offset=17, seq=4242)
    [out] = Remapper().records(rec, route, 5)
    assert out.topic == "shop.orders" and out.key == rec.key and out.value == rec.value
    assert out.partition == partition_for_key(b'{"id":"1"}', 5)
    headers = dict(out.headers)
    assert headers["relay.sequence"] == b"4242" and headers["relay.replay.from"] == b"shop:2:17"


def test_a_tombstone_follows_its_delete_under_the_delete_s_new_key() -> None:
    route = V2.resolve("shop_00", "orders_00")
    assert route is not None
    shard = mapping(2, {"topic": "shop.orders", "key_shard": "physical"}).resolve("shop_00", "orders_00")
    assert shard is not None
    remap = Remapper()
    [delete] = remap.records(consumed(kind="DELETE", offset=1), shard, 3)
    assert delete.key == b'{"_shard":"shop_00.orders_00","id":"1"}'
    [tomb] = remap.records(consumed(kind="DELETE", offset=2, tombstone=True), shard, 3)
    assert (tomb.key, tomb.value, tomb.partition) == (delete.key, None, delete.partition)


def test_a_ddl_barrier_goes_to_every_partition_under_its_own_key() -> None:
    route = V2.resolve("shop_00", "orders_00")
    assert route is not None
    ddl = consumed(kind="ALTER", key=b'{"_ddl":"shop_00.orders_00"}')
    out = Remapper().records(ddl, route, 4)
    assert [r.partition for r in out] == [0, 1, 2, 3]
    assert {r.key for r in out} == {b'{"_ddl":"shop_00.orders_00"}'}


def test_a_canal_protobuf_row_and_barrier_moved_under_new_logical_names_carry_them() -> None:
    # canal-protobuf values name the logical table in each entry's header: a move that renames the table
    # (shop.orders -> sales.orders) must rename it there too, not copy the old names (it did)
    proto = {"codec": "canal-protobuf"}
    old = mapping(1, {**proto, "topic": "shop.orders"})
    new = parse_mapping(
        {
            "version": 2,
            "topics": {"partitions": 3},
            "unmapped": {"action": "drop"},
            "logical_dbs": {
                "sales": {
                    "physical": ["shop_\\d+"],
                    "tables": {"orders": {"physical": ["orders_\\d+"], **proto, "topic": "sales.orders"}},
                }
            },
        }
    )
    plan = plan_move(old, new, TABLES, "src")
    assert plan is not None
    before, after = old.resolve("shop_00", "orders_00"), new.resolve("shop_00", "orders_00")
    assert before is not None and after is not None and after.logical_db == "sales"
    row = RowImage(None, ("1", "NEW"))
    rc = RowChange(event_type=EventType.INSERT, table_id=7, columns=PROTO_COLUMNS, rows=(row,))
    h = Header("mysql-bin.000003", 1234, 7, 1_763_700_000_000, 88, EventType.INSERT, "shop_00", "orders_00")
    entry = Entry(h, EntryType.ROWDATA, rc, TxnContext(EntryPosition("mysql-bin.000003", 1000, 7, "", 0)))
    value = canal_protobuf.row_value(entry, rc, rc.rows[0], before, 4242, "srv", "src")
    ddl = RowChange(event_type=EventType.ALTER, is_ddl=True, sql="ALTER TABLE orders_00 ADD c INT")
    barrier = canal_protobuf.statement_value(entry, ddl, before, 4243, "srv", "src")
    for original, kind in ((value, "INSERT"), (barrier, "ALTER")):
        rec = consumed(value=original, kind=kind, key=b'{"id":"1"}')
        moved = Remapper().records(rec, after, 3)
        for out in moved:
            assert out.value is not None and out.topic == "sales.orders"
            _, [copied] = decode_messages_packet(out.value)
            assert (copied.header.schema_name, copied.header.table_name) == ("sales", "orders")
            _, [orig] = decode_messages_packet(original)
            assert (orig.header.schema_name, orig.header.table_name) == ("shop", "orders")
            assert copied.store_value == orig.store_value and copied.header.props == orig.header.props
            assert dict(out.headers)["relay.db"] == b"sales" and out.key == rec.key
        # a copy is byte-identical every time it is made (a re-copy after a crash repeats it exactly)
        assert [r.value for r in moved] == [r.value for r in Remapper().records(rec, after, 3)]


def test_identity_orders_a_tombstone_right_after_its_delete() -> None:
    delete, tomb = (
        consumed(kind="DELETE", seq=9, part=1),
        consumed(kind="DELETE", seq=9, part=1, tombstone=True),
    )
    assert consumed(seq=9).identity < delete.identity < tomb.identity < consumed(seq=10).identity


# -- the destination index --------------------------------------------------------------------------


def test_the_index_skips_what_a_partition_holds_of_a_table_and_records_what_it_adds() -> None:
    index = DestinationIndex()
    index.add(("shop.orders", 1, "src", "shop_00", "orders_00"), (50, 0, 0))
    held = Record("shop.orders", 1, b"k", b"v")
    assert index.holds(held, "src", ("shop_00", "orders_00"), (50, 0, 0))
    assert index.holds(held, "src", ("shop_00", "orders_00"), (40, 0, 0))  # older: the table was here then
    assert not index.holds(held, "src", ("shop_00", "orders_00"), (60, 0, 0))
    assert index.holds(held, "src", ("shop_00", "orders_00"), (60, 0, 0))  # counted as held once added
    assert not index.holds(Record("shop.orders", 2, b"k", b"v"), "src", ("shop_00", "orders_00"), (10, 0, 0))
    assert not index.holds(held, "other", ("shop_00", "orders_00"), (10, 0, 0))  # per source


# -- the merge --------------------------------------------------------------------------------------


def _held(seq: int, partition: int) -> _Held:
    route = V2.resolve("shop_00", "orders_00")
    assert route is not None
    return _Held(consumed(seq=seq, partition=partition), route, 10)


def test_the_merge_waits_for_every_partition_then_takes_the_lowest_identity() -> None:
    heads = {("shop", 0): deque([_held(5, 0)]), ("shop", 1): deque[_Held]()}
    assert merge_head(heads, set()) is None  # partition 1 may still hold something earlier
    assert merge_head(heads, {("shop", 1)}) == ("shop", 0)  # at its end: nothing earlier
    heads[("shop", 1)].append(_held(3, 1))
    assert merge_head(heads, set()) == ("shop", 1)
    assert merge_head({("shop", 0): deque[_Held]()}, {("shop", 0)}) is None  # all done


def test_a_round_ends_when_every_partition_is_at_its_end_or_past_the_bound() -> None:
    heads = {("shop", 0): deque([_held(5, 0)]), ("shop", 1): deque[_Held]()}
    assert not round_done(heads, {("shop", 1)}, (5, 0))  # 5 is acknowledged: copy it
    assert round_done(heads, {("shop", 1)}, (4, 0))  # 5 is not yet: next round
    assert not round_done(heads, set(), (4, 0))  # partition 1 not read to its end
    assert not round_done(heads, {("shop", 1)}, None)  # the final round takes everything


# -- the publish loop's side ------------------------------------------------------------------------


class FakeMove:
    def __init__(self, plan: MovePlan) -> None:
        self.plan = plan
        self.caught_up = self.finished = self.started = self.stopped = self.final = False
        self.error: BaseException | None = None
        self.bounds: list[tuple[int, int]] = []

    def start(self) -> None:
        self.started = True

    def acked_through(self, identity: tuple[int, int]) -> None:
        self.bounds.append(identity)

    def finish(self) -> None:
        self.final = True

    def stop(self) -> None:
        self.stopped = True

    def progress(self) -> dict[str, Any]:
        return {"copied": 0}


def test_the_loop_keeps_publishing_until_the_copy_catches_up_then_switches_after_the_final_copy() -> None:
    opened: list[FakeMove] = []

    def open_move(plan: MovePlan) -> Any:
        opened.append(FakeMove(plan))
        return opened[-1]

    switch = MoveSwitch(open_move, lambda: TABLES, "src")
    saved = ResumePoint("mysql-bin.000003", 1000)
    assert not switch.may_switch(V1, V2, saved)  # copying: keep publishing under V1
    [move] = opened
    assert move.started and move.bounds == [(sequence("mysql-bin.000003", 1000, 0) - 1, 1 << 30)]
    switch.acked((sequence("mysql-bin.000003", 2000, 0), 0))
    assert move.bounds[-1] == (sequence("mysql-bin.000003", 2000, 0), 0)
    switch.acked((5, 0))  # older than what it has: ignored
    assert len(move.bounds) == 2
    move.caught_up = True
    assert switch.may_switch(V1, V2, saved)
    assert not switch.finished() and move.final  # the final copy is asked for
    move.finished = True
    assert switch.finished()
    switch.switched()
    assert move.stopped and switch.progress() is None
    assert switch.may_switch(V2, mapping(3, {"topic": "shop.orders", "tag": "t"}), saved)  # no move


def test_a_newer_version_abandons_the_copy_and_plans_again_and_a_failed_copy_stops() -> None:
    opened: list[FakeMove] = []
    switch = MoveSwitch(lambda plan: opened.append(FakeMove(plan)) or opened[-1], lambda: TABLES, "src")  # type: ignore[func-returns-value]
    switch.may_switch(V1, V2, None)
    v3 = mapping(3, {"topic": "shop.orders.v3"})
    switch.may_switch(V1, v3, None)
    assert opened[0].stopped and opened[1].plan.destinations == ("shop.orders.v3",)
    opened[1].error = RuntimeError("broken")
    with pytest.raises(RuntimeError, match="broken"):
        switch.may_switch(V1, v3, None)


def test_with_mapping_move_switch_there_is_no_copy() -> None:
    assert MoveSwitch(None, lambda: TABLES, "src").may_switch(V1, V2, None)


def test_a_batch_s_last_record_bounds_what_it_acknowledged() -> None:
    rec = Record("t", None, None, b"v", (("relay.sequence", b"77"), ("relay.part", b"2")))
    assert last_identity([Record("t", None, None, b"v", (("relay.sequence", b"5"),)), rec]) == (77, 2)
    assert last_identity([]) is None
    assert _before(None) == (-1, -1)
    assert _before(ResumePoint("no-number", 4)) == (-1, -1)


def test_positions_set_keeps_the_mapping_version_the_relay_last_published_under() -> None:
    saved = ResumePoint("mysql-bin.000002", 400, generation=2, mapping_version=5)
    point = _renumbered(ResumePoint("mysql-bin.000001", 4), saved)
    assert (point.generation, point.mapping_version) == (3, 5)
    assert _renumbered(ResumePoint("mysql-bin.000001", 4), None).mapping_version is None


def test_an_edit_that_changes_a_tables_topic_and_codec_together_is_named() -> None:
    both = mapping(2, {"topic": "x", "codec": "canal-protobuf"})
    assert codec_moves(V1, both) == ["logical table shop.orders"]
    own = mapping(3, {"topic": "shop.orders", "codec": "canal-protobuf"})
    assert codec_moves(V2, own) == []  # the codec alone (in the table's own topic): no move
    assert codec_moves(V1, V2) == []  # the topic alone
    db = mapping(2, topic="shop.all", codec="canal-protobuf")
    assert codec_moves(V1, db) == [
        "logical db shop (the tables it routes without a rule of their own)",
        "logical table shop.orders",
    ]


def test_status_shows_a_move_in_one_line() -> None:
    from relay.ops.status import _move_line

    move = {"state": "copying", "caught_up": True, "to_version": 4, "from": ["shop"], "to": ["shop.c"],
            "tables": 1, "read": 10, "copied": 7, "already_there": 3, "error": None}  # fmt: skip
    assert _move_line(move) == (
        "copying history (caught up) for mapping version 4: shop -> shop.c, 1 table(s), read 10, copied 7, "
        "already there 3"
    )
    assert _move_line(None) is None
    assert str(_move_line({**move, "state": "failed", "error": "boom"})).endswith("; error: boom")
