"""BinlogStream against a real server: event order and positions, resume by file/offset and by GTID,
a 20 MB row, a killed connection.

The workload runs once per module in a binlog file of its own (FLUSH BINARY LOGS), so events of other
tests on the shared server do not interleave. Assertions follow the server's flavor where MySQL and
MariaDB differ (MariaDB opens a transaction with its GTID event and writes no BEGIN query).
"""

from __future__ import annotations

import contextlib
import itertools
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from relay.binlog import events as ev
from relay.binlog.stream import BinlogStream, StreamConfig
from relay.common.mysql import binlog_status
from relay.dev.services import MySQLService
from relay.errors import SourceConnectionError, SourceError

_server_ids = itertools.count(41000)


@pytest.fixture(scope="module")
def source(mysql_service: MySQLService) -> MySQLService:
    """The server under test (the one place to change to run against another fixture)."""
    return mysql_service


def config(svc: MySQLService, **kw: Any) -> StreamConfig:
    args: dict[str, Any] = {
        "host": svc.host,
        "port": svc.port,
        "user": svc.replication_user,
        "password": svc.replication_password,
        "server_id": next(_server_ids),
        "heartbeat_seconds": 1.0,
        "read_timeout": 15.0,
    }
    args.update(kw)
    return StreamConfig(**args)


def execute(svc: MySQLService, *sql: str, args: Any = None) -> list[tuple[Any, ...]]:
    with contextlib.closing(svc.connect()) as conn, conn.cursor() as cur:
        rows: list[tuple[Any, ...]] = []
        for statement in sql:
            cur.execute(statement, args)
            rows = list(cur.fetchall())
        return rows


def binlog_end(svc: MySQLService) -> tuple[str, int]:
    conn = svc.connect()
    with contextlib.closing(conn), conn.cursor() as cur:
        row = binlog_status(cur)
    assert row is not None, "binary logging is off"
    return str(row[0]), int(row[1])


def executed_gtids(svc: MySQLService) -> str:
    variable = "@@global.gtid_binlog_pos" if svc.flavor == "mariadb" else "@@global.gtid_executed"
    return str(execute(svc, f"SELECT {variable}")[0][0])


@dataclass(frozen=True)
class Workload:
    schema: str
    file: str
    end: int
    gtids_after_first_insert: str
    ddl: str


@pytest.fixture(scope="module")
def workload(source: MySQLService) -> Iterator[Workload]:
    schema = f"binlog_stream_{uuid.uuid4().hex[:8]}"
    ddl = f"ALTER TABLE `{schema}`.orders ADD COLUMN extra INT"
    execute(source, "FLUSH BINARY LOGS")
    file, _ = binlog_end(source)
    execute(
        source,
        f"CREATE DATABASE `{schema}`",
        f"CREATE TABLE `{schema}`.orders (id INT PRIMARY KEY, note VARCHAR(32), amount DECIMAL(10,2))",
        f"INSERT INTO `{schema}`.orders VALUES (1, 'a', 1.50)",
    )
    after_first = executed_gtids(source)
    with contextlib.closing(source.connect()) as conn, conn.cursor() as cur:
        cur.execute(f"INSERT INTO `{schema}`.orders VALUES (2, 'b', 2.50), (3, 'c', 3.50)")
        cur.execute("BEGIN")
        cur.execute(f"UPDATE `{schema}`.orders SET note = 'bb' WHERE id = 2")
        cur.execute(f"DELETE FROM `{schema}`.orders WHERE id = 3")
        cur.execute("COMMIT")
        cur.execute(ddl)
        cur.execute(f"INSERT INTO `{schema}`.orders VALUES (4, 'd', 4.50, 7)")
    end_file, end = binlog_end(source)
    assert end_file == file
    yield Workload(schema, file, end, after_first, ddl)
    execute(source, f"DROP DATABASE IF EXISTS `{schema}`")


def read_until(stream: BinlogStream, file: str, end: int, limit: float = 30.0) -> list[ev.BinlogEvent]:
    """Events up to the one that ends at ``file``:``end``; heartbeats left out."""
    out: list[ev.BinlogEvent] = []
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        event = stream.read(1.0)
        if event is None or isinstance(event, ev.HeartbeatEvent):
            continue
        out.append(event)
        if event.header.log_file == file and event.header.log_pos >= end and not event.header.artificial:
            return out
    raise AssertionError(f"stream did not reach {file}:{end}; last: {out[-1:]}")


@pytest.fixture(scope="module")
def full_read(source: MySQLService, workload: Workload) -> list[ev.BinlogEvent]:
    with BinlogStream(config(source)) as stream:
        stream.open_at(workload.file, 4)
        return read_until(stream, workload.file, workload.end)


def shape(events: list[ev.BinlogEvent]) -> list[str]:
    """The events that matter to the relay, as short labels."""
    out = []
    for e in events:
        if isinstance(e, ev.GtidEvent):
            out.append("GTID-DDL" if e.is_ddl else "GTID")
        elif isinstance(e, ev.QueryEvent):
            out.append("BEGIN" if e.sql == "BEGIN" else "QUERY")
        elif isinstance(e, ev.TableMapEvent):
            out.append(f"MAP {e.table}")
        elif isinstance(e, ev.RowsEvent):
            out.append(e.kind)
        elif isinstance(e, ev.XidEvent):
            out.append("XID")
    return out


def test_event_sequence_and_positions(
    source: MySQLService, workload: Workload, full_read: list[ev.BinlogEvent]
) -> None:
    first, fde = full_read[0], full_read[1]
    assert isinstance(first, ev.RotateEvent) and first.header.artificial
    assert (first.next_file, first.position, first.header.log_file) == (workload.file, 4, workload.file)
    assert isinstance(fde, ev.FormatDescriptionEvent) and fde.header.start == 4
    real = [e for e in full_read if not e.header.artificial]
    assert all(e.header.log_file == workload.file for e in real)
    for prev, cur in itertools.pairwise(real):
        assert cur.header.start == prev.header.log_pos, (prev, cur)
    assert real[-1].header.log_pos == workload.end

    mariadb = source.flavor == "mariadb"
    ddl = ["GTID-DDL" if mariadb else "GTID", "QUERY"]
    begin = [] if mariadb else ["BEGIN"]
    assert shape(full_read) == [
        *ddl,  # CREATE DATABASE
        *ddl,  # CREATE TABLE
        "GTID", *begin, "MAP orders", "INSERT", "XID",
        "GTID", *begin, "MAP orders", "INSERT", "XID",
        "GTID", *begin, "MAP orders", "UPDATE", "MAP orders", "DELETE", "XID",
        *ddl,  # ALTER TABLE
        "GTID", *begin, "MAP orders", "INSERT", "XID",
    ]  # fmt: skip


def test_table_maps_and_ddl_text(workload: Workload, full_read: list[ev.BinlogEvent]) -> None:
    maps = [e for e in full_read if isinstance(e, ev.TableMapEvent)]
    assert {(m.schema, m.table) for m in maps} == {(workload.schema, "orders")}
    assert [c.name for c in maps[0].columns] == ["id", "note", "amount"]
    assert [c.is_key for c in maps[0].columns] == [True, False, False]
    assert [c.nullable for c in maps[0].columns] == [False, True, True]
    assert maps[0].names_from_binlog
    assert [c.name for c in maps[-1].columns] == ["id", "note", "amount", "extra"]
    queries = [e.sql for e in full_read if isinstance(e, ev.QueryEvent)]
    assert workload.ddl in queries
    alter = next(e for e in full_read if isinstance(e, ev.QueryEvent) and e.sql == workload.ddl)
    assert alter.error_code == 0


def test_rows_carry_values(full_read: list[ev.BinlogEvent]) -> None:
    changes = [e for e in full_read if isinstance(e, ev.RowsEvent)]
    assert changes[0].rows == (ev.RowImage(None, ("1", "a", "1.50")),)
    assert [r.after for r in changes[1].rows] == [("2", "b", "2.50"), ("3", "c", "3.50")]
    assert changes[2].rows == (ev.RowImage(("2", "b", "2.50"), ("2", "bb", "2.50")),)
    assert changes[3].rows == (ev.RowImage(("3", "c", "3.50"), None),)
    assert changes[4].rows == (ev.RowImage(None, ("4", "d", "4.50", "7")),)


def transaction_starts(events: list[ev.BinlogEvent]) -> list[ev.GtidEvent]:
    return [e for e in events if isinstance(e, ev.GtidEvent)]


def test_resume_by_file_and_offset_gives_the_same_events(
    source: MySQLService, workload: Workload, full_read: list[ev.BinlogEvent]
) -> None:
    update_txn = transaction_starts(full_read)[4]  # CREATE DB, CREATE TABLE, INSERT, INSERT, UPDATE+DELETE
    start = update_txn.header.start
    with BinlogStream(config(source)) as stream:
        stream.open_at(workload.file, start)
        resumed = read_until(stream, workload.file, workload.end)
    head = [e for e in resumed if e.header.artificial]
    assert isinstance(head[0], ev.RotateEvent) and head[0].position == start
    tail = [e for e in resumed if not e.header.artificial]
    expected = [e for e in full_read if not e.header.artificial and e.header.start >= start]
    assert tail == expected
    assert tail[0] == update_txn


def test_resume_by_gtid_starts_after_the_given_set(
    source: MySQLService, workload: Workload, full_read: list[ev.BinlogEvent]
) -> None:
    second_insert = transaction_starts(full_read)[3]
    with BinlogStream(config(source)) as stream:
        stream.open_at_gtid(workload.gtids_after_first_insert)
        resumed = read_until(stream, workload.file, workload.end)
    first = transaction_starts([e for e in resumed if not e.header.artificial])[0]
    assert first == second_insert
    tail = [e for e in resumed if not e.header.artificial and e.header.start >= first.header.start]
    assert tail == [e for e in full_read if not e.header.artificial and e.header.start >= first.header.start]


def test_unknown_binlog_file_is_not_retriable(source: MySQLService) -> None:
    with BinlogStream(config(source)) as stream:
        stream.open_at("no-such-binlog.000042", 4)
        with pytest.raises(SourceError, match="1236") as info:
            stream.read(10.0)
    assert not info.value.retriable


def test_heartbeats_then_killed_connection(source: MySQLService) -> None:
    file, pos = binlog_end(source)
    with BinlogStream(config(source)) as stream:
        stream.open_at(file, pos)
        deadline = time.monotonic() + 10
        beat = None
        while beat is None and time.monotonic() < deadline:
            event = stream.read(1.0)
            beat = event if isinstance(event, ev.HeartbeatEvent) else None
        assert beat is not None and beat.log_file_name == file
        execute(source, f"KILL {stream.connection_id}")
        with pytest.raises(SourceConnectionError) as info:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                stream.read(1.0)
        assert info.value.retriable


def test_a_20_mb_row_arrives_intact(source: MySQLService, workload: Workload) -> None:
    size = 20 * 1024 * 1024
    blob = bytes(range(256)) * (size // 256)
    old = execute(source, "SELECT @@global.max_allowed_packet")[0][0]
    execute(source, f"SET GLOBAL max_allowed_packet = {64 * 1024 * 1024}")
    try:
        file, pos = binlog_end(source)
        execute(source, f"CREATE TABLE `{workload.schema}`.blobs (id INT PRIMARY KEY, b LONGBLOB)")
        with (
            contextlib.closing(source.connect(max_allowed_packet=64 * 1024 * 1024)) as conn,
            conn.cursor() as cur,
        ):
            cur.execute(f"INSERT INTO `{workload.schema}`.blobs VALUES (1, %s)", (blob,))
        end_file, end = binlog_end(source)
    finally:
        execute(source, f"SET GLOBAL max_allowed_packet = {int(old)}")
    with BinlogStream(config(source)) as stream:
        stream.open_at(file, pos)
        events = read_until(stream, end_file, end, limit=60)
    big = [e for e in events if isinstance(e, ev.RowsEvent)]
    assert len(big) == 1 and big[0].header.event_size > size
    value = big[0].rows[0].after
    assert value is not None and value[0] == "1"
    text = value[1]
    assert text is not None and len(text) == size
    assert text.encode("latin-1") == blob


def test_rotation_to_a_new_file_while_streaming(source: MySQLService) -> None:
    file, pos = binlog_end(source)
    with BinlogStream(config(source)) as stream:
        stream.open_at(file, pos)
        execute(source, "FLUSH BINARY LOGS")
        new_file, new_end = binlog_end(source)
        events = read_until(stream, new_file, new_end)
    rotate = next(e for e in events if isinstance(e, ev.RotateEvent) and not e.header.artificial)
    assert (rotate.header.log_file, rotate.next_file, rotate.position) == (file, new_file, 4)
    after = events[events.index(rotate) + 1 :]
    # MariaDB repeats the rotation as an artificial ROTATE before the new file's FORMAT_DESCRIPTION.
    fde = next(e for e in after if not isinstance(e, ev.RotateEvent))
    assert isinstance(fde, ev.FormatDescriptionEvent) and fde.header.log_file == new_file
    real = [e for e in after if not e.header.artificial]
    assert real[0].header.start == 4 and all(e.header.log_file == new_file for e in after)
