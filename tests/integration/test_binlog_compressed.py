"""MariaDB with ``log_bin_compress=ON``: rows and DDL written compressed are decoded, equal to SELECT.

A private MariaDB is started with ``--log-bin-compress=ON`` and the smallest
``--log-bin-compress-min-len`` (10 bytes; MariaDB compresses only events at least that long), so
every statement and row image below is written as QUERY_COMPRESSED / *_ROWS_COMPRESSED events. The
test checks that such events were written (their type codes), that the source accepts the server,
that the DDL text reads back exactly, and that the table state rebuilt from the decoded rows equals
what SELECT returns — value for value, in the relay's text form.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Callable
from typing import Any

from relay.binlog import events as ev
from relay.binlog.stream import BinlogStream, StreamConfig
from relay.common.mysql import binlog_status
from relay.config.sections import SourceConfig
from relay.dev.services import MySQLService
from relay.source.server import inspect_server

_server_ids = itertools.count(47000)
COLUMNS = "id, name, note, amount, CAST(at AS CHAR), e, s, doc, HEX(b), extra"


def execute(svc: MySQLService, *sql: str) -> list[tuple[Any, ...]]:
    with contextlib.closing(svc.connect()) as conn, conn.cursor() as cur:
        rows: list[tuple[Any, ...]] = []
        for statement in sql:
            cur.execute(statement)
            rows = list(cur.fetchall())
        return rows


def binlog_end(svc: MySQLService) -> tuple[str, int]:
    conn = svc.connect()
    with contextlib.closing(conn), conn.cursor() as cur:
        row = binlog_status(cur)
    assert row is not None
    return str(row[0]), int(row[1])


def read_until(svc: MySQLService, file: str, end: int) -> list[ev.BinlogEvent]:
    config = StreamConfig(
        host=svc.host,
        port=svc.port,
        user=svc.replication_user,
        password=svc.replication_password,
        server_id=next(_server_ids),
        heartbeat_seconds=1.0,
        read_timeout=15.0,
    )
    out: list[ev.BinlogEvent] = []
    deadline = time.monotonic() + 30
    with BinlogStream(config) as stream:
        stream.open_at(file, 4)
        while time.monotonic() < deadline:
            event = stream.read(1.0)
            if event is None or isinstance(event, ev.HeartbeatEvent):
                continue
            out.append(event)
            h = event.header
            if h.log_file == file and h.log_pos >= end and not h.artificial:
                return out
    raise AssertionError(f"stream did not reach {file}:{end}")


def as_text(row: tuple[Any, ...]) -> tuple[str | None, ...]:
    """A SELECT row in the relay's text form (HEX(b) back to canal's one-character-per-byte form)."""
    values = [None if v is None else str(v) for v in row]
    if values[8] is not None:
        values[8] = bytes.fromhex(values[8]).decode("latin-1")
    return tuple(values)


WORKLOAD = [
    "CREATE TABLE t (id INT PRIMARY KEY, name VARCHAR(64) CHARACTER SET utf8mb4, note TEXT, "
    "amount DECIMAL(12,2), at DATETIME(6), e ENUM('café','thé','naïve') CHARACTER SET latin1, "
    "s SET('x','y','z'), doc JSON, b BLOB) DEFAULT CHARSET=utf8mb4",
    "INSERT INTO t VALUES (1, 'Zoë 😀', REPEAT('long text ', 40), 19.90, '2024-02-29 12:34:56.000789', "
    "'café', 'x,z', '{\"a\": [1, 2], \"b\": \"ü\"}', x'00ff10'), "
    "(2, 'second', NULL, -0.01, '1999-12-31 23:59:59.5', 'thé', '', '[]', NULL), "
    "(3, 'third', 'short', 0.00, NULL, NULL, 'y', NULL, x'')",
    "UPDATE t SET name = CONCAT(name, ' updated'), amount = amount * 2, s = 'x,y,z' WHERE id IN (1, 2)",
    "DELETE FROM t WHERE id = 3",
    "ALTER TABLE t ADD COLUMN extra VARCHAR(32) NOT NULL DEFAULT 'added by DDL' COMMENT 'a compressed DDL'",
    "INSERT INTO t (id, name, note, e, doc) "
    "VALUES (4, 'after DDL', REPEAT('é', 300), 'naïve', '{\"k\": null}')",
    "UPDATE t SET extra = CONCAT('changed ', id)",  # every row's last image has the new column
]


def apply(state: dict[str, tuple[str | None, ...]], change: ev.RowsEvent) -> None:
    for image in change.rows:
        if image.before is not None:
            state.pop(str(image.before[0]), None)
        if image.after is not None:
            state[str(image.after[0])] = image.after


def test_compressed_rows_and_ddl_decode_equal_to_select(
    mysql_server_factory: Callable[..., MySQLService],
) -> None:
    svc = mysql_server_factory("--log-bin-compress=ON", "--log-bin-compress-min-len=10")
    assert execute(svc, "SELECT @@log_bin_compress, @@log_bin_compress_min_len") == [(1, 10)]
    info = inspect_server(
        SourceConfig(
            host=svc.host, port=svc.port, user=svc.replication_user, password=svc.replication_password
        )
    )
    assert info.mariadb  # accepted: a compressed binlog is no longer refused
    execute(svc, "CREATE DATABASE shop", "FLUSH BINARY LOGS")
    file, _ = binlog_end(svc)
    with contextlib.closing(svc.connect(database="shop")) as conn, conn.cursor() as cur:
        for statement in WORKLOAD:
            cur.execute(statement)
    end_file, end = binlog_end(svc)
    assert end_file == file
    events = read_until(svc, file, end)

    # MariaDB writes v1 rows events: their compressed twins are 166-168.
    codes = {e.header.type_code for e in events}
    assert ev.MARIADB_QUERY_COMPRESSED_EVENT in codes, codes
    compressed_rows = set(
        range(ev.MARIADB_WRITE_ROWS_COMPRESSED_EVENT_V1, ev.MARIADB_DELETE_ROWS_COMPRESSED_EVENT + 1)
    )
    plain_rows = {23, 24, 25, 30, 31, 32}
    assert len(codes & compressed_rows) == 3 and not codes & plain_rows, codes  # every row image compressed

    queries = [e.sql for e in events if isinstance(e, ev.QueryEvent)]
    assert WORKLOAD[0] in queries and WORKLOAD[4] in queries

    changes = [e for e in events if isinstance(e, ev.RowsEvent)]
    assert [c.kind for c in changes] == [ev.INSERT, ev.UPDATE, ev.DELETE, ev.INSERT, ev.UPDATE]
    state: dict[str, tuple[str | None, ...]] = {}
    for change in changes[:3]:
        apply(state, change)
    assert [c.name for c in changes[0].table.columns] == [
        "id",
        "name",
        "note",
        "amount",
        "at",
        "e",
        "s",
        "doc",
        "b",
    ]
    for change in changes[3:]:
        apply(state, change)
    selected = {str(r[0]): as_text(r) for r in execute(svc, f"SELECT {COLUMNS} FROM shop.t ORDER BY id")}
    assert state == selected
    assert selected["1"][1] == "Zoë 😀 updated" and selected["4"][5] == "naïve"
