"""Snapshot logic without a server: the chunk SELECT, column metadata as a TABLE_MAP describes it, the
watermark merge on the parser side (superseded rows dropped, the chunk's place and sequence), the
checkpoint, and the snapshot record's format."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from mapping.load import parse_mapping
from relay.binlog import types as t
from relay.binlog.events import BinlogEvent, EventHeader, RowImage
from relay.canal.entry import Entry, EntryPosition, EntryType, EventType, Header, RowChange, TxnContext
from relay.canal.proto import entry_pb2, packet_pb2
from relay.config.sections import SnapshotConfig, SourceConfig
from relay.kafka.codec import H_SNAPSHOT, RecordEncoder, sequence
from relay.positions.store import SourceIdentity, resume_after
from relay.source.snapshot import Snapshot
from relay.source.snapshot_checkpoint import new_state
from relay.source.snapshot_entry import SnapshotEntry
from relay.source.snapshot_rows import parse_row
from relay.source.snapshot_tables import K_BINARY, K_DECIMAL, K_INT, TableSpec, column_meta
from relay.source.snapshot_watermarks import Chunk, position

FILE = "mysql-bin.000007"


def _col(name: str, data_type: str, column_type: str, **kw: Any) -> dict[str, Any]:
    row = {
        "COLUMN_NAME": name,
        "DATA_TYPE": data_type,
        "COLUMN_TYPE": column_type,
        "IS_NULLABLE": "NO",
        "CHARACTER_OCTET_LENGTH": None,
        "NUMERIC_PRECISION": None,
        "NUMERIC_SCALE": None,
        "DATETIME_PRECISION": None,
        "COLLATION_ID": None,
    }
    row.update(kw)
    return row


def _spec() -> TableSpec:
    id_meta, id_kind = column_meta(0, _col("id", "bigint", "bigint(20)"), True)
    st_meta, st_kind = column_meta(
        1, _col("status", "varchar", "varchar(16)", CHARACTER_OCTET_LENGTH=64, COLLATION_ID=45), False
    )
    return TableSpec("shop_01", "orders_02", (id_meta, st_meta), (id_kind, st_kind), (0,), "PRIMARY", 10)


def test_column_metadata_is_what_a_full_table_map_says() -> None:
    meta, kind = column_meta(0, _col("id", "bigint", "bigint(20) unsigned"), True)
    assert meta == t.column_meta(0, t.LONGLONG, 0, False, name="id", unsigned=True, charset=None, is_key=True)
    assert kind == K_INT
    dec, kind = column_meta(
        1, _col("amount", "decimal", "decimal(12,2)", NUMERIC_PRECISION=12, NUMERIC_SCALE=2), False
    )
    assert (dec.mysql_type, dec.sql_type, kind) == ("decimal(12,2)", t.T_DECIMAL, K_DECIMAL)
    char, _ = column_meta(
        2, _col("code", "char", "char(100)", CHARACTER_OCTET_LENGTH=400, COLLATION_ID=45), False
    )
    assert t.string_type(char.meta) == (t.STRING, 400) and char.mysql_type == "char(100)"
    binary, kind = column_meta(3, _col("raw", "varbinary", "varbinary(8)", CHARACTER_OCTET_LENGTH=8), False)
    assert kind == K_BINARY and binary.charset == 63
    enum, _ = column_meta(4, _col("e", "enum", "enum('a','it''s')", COLLATION_ID=45), False)
    assert enum.type_code == t.ENUM and enum.enum_values == ("a", "it's")


def test_chunk_query_is_a_plain_keyset_select() -> None:
    spec = _spec()
    sql, params = spec.chunk_query(None, 100)
    assert sql == "SELECT `id`, `status` FROM `shop_01`.`orders_02` ORDER BY `id` LIMIT 100"
    assert params == []
    sql, params = spec.chunk_query(["41"], 100, where="status <> 'X'")
    assert sql.endswith("WHERE ((`id` > %s)) AND (status <> 'X') ORDER BY `id` LIMIT 100")
    assert params == [41]  # an int: never compared as a double
    assert parse_row(b"\x017\x03NEW", spec.kinds, spec.timestamps) == ("7", "NEW")
    # A ``%`` in the condition stays one once the driver fills the placeholders in (with or without).
    for after, params in ((None, ()), (["41"], (41,))):
        sql, args = spec.chunk_query(after, 100, where="id % 3 = 0 AND status LIKE 'P%'")
        assert tuple(args) == params
        assert (sql % tuple(args)).endswith("(id % 3 = 0 AND status LIKE 'P%') ORDER BY `id` LIMIT 100")


def _event(offset: int, size: int = 40) -> BinlogEvent:
    return BinlogEvent(EventHeader(1, 2, 1, size, offset + size, 0, FILE))


def _rows_entry(offset: int, table: str, rows: tuple[RowImage, ...]) -> Entry:
    spec = _spec()
    header = Header(FILE, offset, 1, 0, 40, EventType.UPDATE, spec.db, table)
    ctx = TxnContext(EntryPosition(FILE, offset))
    return Entry(header, EntryType.ROWDATA, RowChange(EventType.UPDATE, columns=spec.columns, rows=rows), ctx)


def _snapshot(spec: TableSpec) -> Snapshot:
    state = new_state([spec], "s1")
    snap = Snapshot(SnapshotConfig(), SourceConfig(), state, server_id=1, mariadb=True)
    snap.start((FILE, 1000))
    snap.stop()  # no readers needed: chunks are handed in by hand
    return snap


def test_rows_changed_in_the_window_are_dropped_and_the_chunk_sits_just_before_its_place() -> None:
    spec = _spec()
    snap = _snapshot(spec)
    snap.watermarks.watch(spec)
    rows = [("1", "A"), ("2", "B"), ("3", "C")]
    chunk = Chunk(spec, position(FILE, 1000), position(FILE, 1200), rows, ["3"], False)
    snap.watermarks.submit(chunk)
    assert snap.due(False, None) == []  # the parser has not reached the high watermark
    changed = _rows_entry(1100, spec.table, (RowImage(("2", "A"), ("2", "Z")),))
    snap.observe(_event(1100, 100), [changed])  # ends at 1200 = high
    assert snap.due(True, None) == []  # inside a transaction: wait for its end
    (entry,) = snap.due(False, "0-1-5")
    assert isinstance(entry, SnapshotEntry) and chunk.emitted.is_set()
    rc = entry.store_value
    assert isinstance(rc, RowChange)
    assert [r.after for r in rc.rows] == [("1", "A"), ("3", "C")]  # key 2 superseded by the binlog
    assert (entry.header.logfile_name, entry.header.logfile_offset, entry.header.event_length) == (
        FILE,
        1199,
        1,
    )
    point = resume_after(entry)
    assert (point.journal, point.offset, point.skip, point.gtid_set) == (FILE, 1200, 0, "0-1-5")
    assert entry.checkpoint["tables"][spec.name] == {
        "after": ["3"], "rows": 2, "chunks": 1, "done": False, "estimated_rows": 10,
    }  # fmt: skip
    # Every earlier row change sorts below the chunk, every later one above.
    chunk_seq = sequence(FILE, entry.header.logfile_offset, 0)
    assert sequence(FILE, 1100, 0) < chunk_seq < sequence(FILE, 1200, 0)


def test_the_last_chunk_finishes_the_table_and_the_snapshot() -> None:
    spec = _spec()
    snap = _snapshot(spec)
    snap.watermarks.submit(Chunk(spec, position(FILE, 900), position(FILE, 1000), [("9", "x")], ["9"], True))
    (entry,) = snap.due(False, None)
    assert isinstance(entry, SnapshotEntry)
    assert entry.checkpoint["done"] and snap.done


def _mapping() -> Any:
    return parse_mapping(
        {
            "unmapped": {"action": "drop"},
            "logical_dbs": {
                "shop": {"physical": [r"shop_\d+"], "tables": {"orders": {"physical": [r"orders_\d+"]}}}
            },
        }
    )


def test_a_snapshot_record_is_a_marked_insert_with_the_chunk_sequence() -> None:
    spec = _spec()
    snap = _snapshot(spec)
    before = int(time.time() * 1000)
    chunk = Chunk(spec, position(FILE, 900), position(FILE, 1000), [("5", "A"), ("6", None)], ["6"], True)
    after = int(time.time() * 1000)
    snap.watermarks.submit(chunk)
    (entry,) = snap.due(False, None)
    encoder = RecordEncoder(_mapping(), SourceIdentity("db", 3306, 1), ddl_topic=None, partitions=lambda _: 3)
    records = encoder.encode(entry)
    assert [r.key for r in records] == [b'{"id":"5"}', b'{"id":"6"}']
    seq = sequence(FILE, 999, 0)
    for r in records:
        headers = dict(r.headers)
        assert headers[H_SNAPSHOT] == b"true" and headers["relay.type"] == b"INSERT"
        assert headers["relay.sequence"] == str(seq).encode()
        value = json.loads(r.value)
        assert (value["type"], value["snapshot"], value["sequence"], value["id"]) == (
            "INSERT",
            True,
            seq,
            seq,
        )
        assert value["old"] is None and value["source"]["rowIndex"] == 0
        # the time the chunk was read, not 0 (1970)
        assert before <= value["es"] == value["ts"] == chunk.read_ms <= after
    assert json.loads(records[1].value)["data"] == [{"id": "6", "status": None}]
    assert encoder.encode(entry)[0].value == records[0].value  # the same chunk again: the same bytes
    # The entry keeps execute time 0: the resume point after it claims no binlog time (timestamp
    # failover treats timestamp <= 0 as "unknown"), whatever time its records carry.
    assert entry.header.execute_time == 0 and resume_after(entry).timestamp == 0


def test_a_snapshot_record_in_canal_protobuf_carries_the_read_time_too() -> None:
    spec = _spec()
    snap = _snapshot(spec)
    chunk = Chunk(spec, position(FILE, 900), position(FILE, 1000), [("5", "A")], ["5"], True)
    snap.watermarks.submit(chunk)
    (entry,) = snap.due(False, None)
    protobuf = parse_mapping(
        {
            "unmapped": {"action": "drop"},
            "logical_dbs": {"shop": {"physical": [r"shop_\d+"], "codec": "canal-protobuf"}},
        }
    )
    encoder = RecordEncoder(protobuf, SourceIdentity("db", 3306, 1), ddl_topic=None, partitions=lambda _: 3)
    (record,) = encoder.encode(entry)
    packet = packet_pb2.Packet.FromString(record.value)
    (raw,) = packet_pb2.Messages.FromString(packet.body).messages
    pb = entry_pb2.Entry.FromString(raw)
    assert pb.header.executeTime == chunk.read_ms > 0
    assert resume_after(entry).timestamp == 0


def test_a_snapshot_record_in_debezium_json_is_a_read_at_the_read_time() -> None:
    spec = _spec()
    snap = _snapshot(spec)
    before = int(time.time() * 1000)
    chunk = Chunk(spec, position(FILE, 900), position(FILE, 1000), [("5", "A")], ["5"], True)
    after = int(time.time() * 1000)
    snap.watermarks.submit(chunk)
    (entry,) = snap.due(False, None)
    debezium = parse_mapping(
        {
            "unmapped": {"action": "drop"},
            "logical_dbs": {"shop": {"physical": [r"shop_\d+"], "codec": "debezium-json"}},
        }
    )
    encoder = RecordEncoder(debezium, SourceIdentity("db", 3306, 1), ddl_topic=None, partitions=lambda _: 3)
    (record,) = encoder.encode(entry)
    payload = json.loads(record.value)["payload"]
    assert payload["op"] == "r" and payload["source"]["snapshot"] == "true"
    # ts_ms and source.ts_ms: the time the chunk was read (canal-json's es), not 0 (1970)
    assert before <= payload["ts_ms"] == payload["source"]["ts_ms"] == chunk.read_ms <= after
    assert entry.header.execute_time == 0 and resume_after(entry).timestamp == 0


def test_a_snapshot_record_has_the_same_bytes_with_and_without_the_c_helper(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from relay.kafka import canal_json

    spec = _spec()
    snap = _snapshot(spec)
    rows = [("5", 'A "quoted"\n\x01 naïve'), ("6", None), ("7", "中文")]
    snap.watermarks.submit(Chunk(spec, position(FILE, 900), position(FILE, 1000), rows, ["7"], True))
    (entry,) = snap.due(False, None)

    def encode() -> list[bytes | None]:
        encoder = RecordEncoder(
            _mapping(), SourceIdentity("db", 3306, 1), ddl_topic=None, partitions=lambda _: 3
        )
        return [r.value for r in encoder.encode(entry)]

    built = encode()  # the C helper where the build is compiled
    monkeypatch.setattr(canal_json, "object_bytes", None)
    assert encode() == built
    assert json.loads(built[0] or b"")["data"] == [{"id": "5", "status": 'A "quoted"\n\x01 naïve'}]


def test_a_ddl_between_the_read_and_the_place_makes_the_chunk_read_again() -> None:
    spec = _spec()
    snap = _snapshot(spec)
    snap.watermarks.watch(spec)
    chunk = Chunk(spec, position(FILE, 1000), position(FILE, 1200), [("1", "A")], ["1"], False, ddls=0)
    snap.watermarks.submit(chunk)
    header = Header(FILE, 1100, 1, 0, 100, EventType.ALTER, spec.db, spec.table)
    ddl = Entry(
        header,
        EntryType.ROWDATA,
        RowChange(EventType.ALTER, is_ddl=True),
        TxnContext(EntryPosition(FILE, 1100)),
    )
    snap.observe(_event(1100, 100), [ddl])
    assert snap.due(False, None) == []  # nothing put
    assert chunk.emitted.is_set() and chunk.redo
    assert snap.state["tables"][spec.name]["chunks"] == 0  # the checkpoint did not move


def test_a_finished_checkpoint_is_compacted_and_still_reported() -> None:
    from relay.ops.status import snapshot_report
    from relay.positions.store import ResumePoint
    from relay.source.snapshot_checkpoint import compacted, state_rows

    spec = _spec()
    snap = _snapshot(spec)
    snap.watermarks.submit(Chunk(spec, position(FILE, 900), position(FILE, 1000), [("9", "x")], ["9"], True))
    (entry,) = snap.due(False, None)
    assert isinstance(entry, SnapshotEntry)
    small = compacted(entry.checkpoint)
    assert small == {
        "id": "s1", "done": True, "cancelled": False, "rows": 1, "table_count": 1, "skipped": {},
        "place": [["mysql-bin", 7], 1000, 0],  # where its last chunk sits: a next snapshot numbers on there
    }  # fmt: skip
    assert state_rows(small) == state_rows(entry.checkpoint) == 1
    point = ResumePoint(FILE, 1000, extra={"snapshot": small})
    report = snapshot_report(None, ResumePoint.from_json(point.to_json()))
    assert report["snapshot"] == "s1: done, 1/1 tables, 1 rows (100%)"
    cancelled = compacted({**snap.state, "cancelled": True})
    report = snapshot_report(None, ResumePoint(FILE, 1000, extra={"snapshot": cancelled}))
    assert report["snapshot"] == "s1: cancelled, 1/1 tables, 1 rows (100%)"


class _FakeInstance:
    def __init__(self) -> None:
        self.asked: list[tuple[str, str]] = []

    def request_snapshot(
        self,
        only: Any,
        snapshot_id: str,
        where: str = "",
        keys: dict[str, Any] | None = None,
        above_generation: int | None = None,
    ) -> str | None:
        from relay.source.snapshot_control import NO_CAPTURED_TABLE

        self.asked.append((snapshot_id, where))
        if not only("shop_03", "orders_07"):
            return NO_CAPTURED_TABLE
        assert not only("shop_03", "other")
        return None

    def cancel_snapshot(self) -> str | None:
        return "no snapshot is running"


def test_requests_from_the_cli_are_checked_then_carried_out(tmp_path: Any) -> None:
    from relay.daemon import snapshot_requests as requests

    inst: Any = _FakeInstance()
    mapping = _mapping()
    answer = requests.handle(
        inst, mapping, {"id": "r1", "action": "run", "table": "shop.orders", "where": "id > 5"}
    )
    assert answer["accepted"] and inst.asked == [("r1", "id > 5")]
    bad = requests.handle(
        inst, mapping, {"id": "r2", "action": "run", "table": "shop.orders", "where": "1; DROP"}
    )
    assert not bad["accepted"] and "';'" in bad["reason"]
    unknown = requests.handle(inst, mapping, {"id": "r6", "action": "run", "table": "shop.nothing"})
    assert unknown["reason"] == (
        "--table shop.nothing: no table of the server that mapping version 1 routes to it is kept by "
        "filter.include/filter.exclude"
    )
    assert (
        requests.handle(inst, mapping, {"id": "r3", "action": "cancel"})["reason"] == "no snapshot is running"
    )
    assert not requests.handle(inst, mapping, {"id": "r4", "action": "wipe"})["accepted"]
    path = tmp_path / "req.json"
    assert requests.take_request(path) is None
    path.write_text('{"id": "r5", "action": "cancel"}')
    assert requests.take_request(path) == {"id": "r5", "action": "cancel"} and not path.exists()


def _keyless() -> TableSpec:
    spec = _spec()
    return TableSpec(spec.db, "events", spec.columns, spec.kinds, (), "", 3)


def test_a_keyless_table_is_one_chunk_voided_by_any_change_of_the_table_in_its_window() -> None:
    spec = _keyless()
    assert (
        spec.whole_query(101, "id > 1")
        == "SELECT `id`, `status` FROM `shop_01`.`events` WHERE (id > 1) LIMIT 101"
    )
    snap = _snapshot(spec)
    snap.watermarks.watch(spec)
    rows = [("1", "A"), ("1", "A"), ("2", None)]
    chunk = Chunk(spec, position(FILE, 1000), position(FILE, 1200), rows, None, True, whole=True)
    snap.watermarks.submit(chunk)
    other = _rows_entry(1100, "orders_02", (RowImage(("9", "A"), ("9", "B")),))  # another table
    snap.observe(_event(1100, 100), [other])
    (entry,) = snap.due(False, None)  # nothing of the table changed: every row, duplicates too
    rc = entry.store_value
    assert isinstance(rc, RowChange) and [r.after for r in rc.rows] == rows
    assert snap.state["tables"][spec.name]["done"] and not chunk.redo

    snap = _snapshot(spec)
    snap.watermarks.watch(spec)
    chunk = Chunk(spec, position(FILE, 1000), position(FILE, 1200), rows, None, True, whole=True)
    snap.watermarks.submit(chunk)
    mine = _rows_entry(1100, "events", (RowImage(("5", "A"), ("5", "B")),))  # a row not in the chunk
    snap.observe(_event(1100, 100), [mine])
    assert snap.due(False, None) == []  # which rows it superseded cannot be told: nothing is put
    assert chunk.emitted.is_set() and chunk.redo and snap.state["tables"][spec.name]["chunks"] == 0


def test_progress_is_a_share_of_the_estimated_rows_and_a_bar() -> None:
    from relay.ops.snapshot import progress_bar
    from relay.source.snapshot_checkpoint import read_percent

    state = {
        "id": "s",
        "done": False,
        "tables": {
            "a.t1": {"rows": 300, "chunks": 3, "done": True, "estimated_rows": 250},  # done: its real rows
            "a.t2": {"rows": 100, "chunks": 1, "done": False, "estimated_rows": 500},
            "a.t3": {"rows": 700, "chunks": 7, "done": False, "estimated_rows": 600},  # past its estimate
        },
    }
    assert read_percent(state) == 100.0 * 1100 / (300 + 500 + 701)
    assert read_percent({**state, "done": True}) == 100.0
    assert progress_bar(25.0, width=8) == "[##------]  25%"
    assert progress_bar(100.0, width=4) == "[####] 100%"
    assert progress_bar(0.0, width=4) == "[----]   0%"


def test_changes_below_the_watch_start_neither_supersede_nor_void() -> None:
    """What the parser reads below the binlog end at the watch's start (a relay behind, or replaying from
    an old ``source.start``) was in the binlog before the table was read: not recorded."""
    spec = _spec()
    snap = _snapshot(spec)
    snap.watermarks.watch(spec, since=position(FILE, 1000))
    chunk = Chunk(spec, position(FILE, 1000), position(FILE, 1200), [("1", "A"), ("2", "B")], ["2"], False)
    snap.watermarks.submit(chunk)
    old = _rows_entry(400, spec.table, (RowImage(("1", "X"), ("1", "A")),))  # history: before the watch
    ddl = Entry(
        Header(FILE, 500, 1, 0, 100, EventType.ALTER, spec.db, spec.table),
        EntryType.ROWDATA,
        RowChange(EventType.ALTER, is_ddl=True),
        TxnContext(EntryPosition(FILE, 500)),
    )
    snap.observe(_event(400, 100), [old])
    snap.observe(_event(500, 100), [ddl])
    new = _rows_entry(1100, spec.table, (RowImage(("2", "B"), ("2", "C")),))  # after: supersedes key 2
    snap.observe(_event(1100, 100), [new])
    (entry,) = snap.due(False, None)
    rc = entry.store_value
    assert isinstance(rc, RowChange) and [r.after for r in rc.rows] == [("1", "A")] and not chunk.redo


def test_a_later_snapshot_at_the_same_place_numbers_its_chunks_on() -> None:
    """No binlog written between two snapshots of a key (``relay verify --repair`` right after a snapshot):
    the second one's chunk sits at the same place, and takes the next ordinal there, so its rows sort after
    the first one's — also after a restart, from the place the saved checkpoint keeps."""
    from relay.source.snapshot_checkpoint import compacted
    from relay.source.snapshot_watermarks import place_of

    spec = _spec()
    first = _snapshot(spec)
    first.watermarks.submit(Chunk(spec, position(FILE, 900), position(FILE, 1000), [("9", "x")], ["9"], True))
    (earlier,) = first.due(False, None)
    assert isinstance(earlier, SnapshotEntry) and earlier.ordinal == 0
    saved = compacted(earlier.checkpoint)  # what a resume point keeps of a finished snapshot
    for after in (first.watermarks.last_place(), place_of(saved)):
        again = Snapshot(SnapshotConfig(), SourceConfig(), new_state([spec], "s2"), server_id=1, mariadb=True,
                         after=after)  # fmt: skip
        again.start((FILE, 1000))
        again.stop()
        again.watermarks.submit(
            Chunk(spec, position(FILE, 900), position(FILE, 1000), [("9", "y")], ["9"], True)
        )
        (later,) = again.due(False, None)
        assert isinstance(later, SnapshotEntry)
        assert (
            later.header.logfile_offset == earlier.header.logfile_offset
        )  # the same place, the same sequence
        assert later.ordinal == 1, "numbered on after the earlier snapshot's chunk"
    fresh = _snapshot(spec)  # no earlier snapshot: counting starts at 0
    fresh.watermarks.submit(Chunk(spec, position(FILE, 900), position(FILE, 1000), [("9", "z")], ["9"], True))
    (alone,) = fresh.due(False, None)
    assert isinstance(alone, SnapshotEntry) and alone.ordinal == 0
