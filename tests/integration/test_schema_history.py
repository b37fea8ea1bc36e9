"""The schema history against real MariaDB: MINIMAL and NO_LOG row metadata give what FULL gives.

The same scripted, sharded workload (ADD / DROP / MODIFY / CHANGE / RENAME COLUMN, RENAME TABLE,
CREATE … LIKE, DROP + CREATE with another layout, a new primary key) runs on three private servers
that differ only in ``binlog_row_metadata``. Each binlog is read by a ``BinlogSource`` with a schema
tracker; the decoded rows events — every ColumnMeta (names, key flags, mysqlType, charsets, members)
and every value — must be identical. A restart from a position in the middle, with the history file
of the first run, must give the same tail. A DDL the parser cannot apply stops the source with the
documented message, and ``resync`` from the live server lets it continue.
"""

from __future__ import annotations

import contextlib
import itertools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pymysql
import pytest

from relay.binlog import events as ev
from relay.cli.main import main
from relay.common.mysql import binlog_status
from relay.common.retry import RetryPolicy
from relay.config.sections import SourceConfig
from relay.dev.services import MySQLService
from relay.errors import SchemaError, SourceError
from relay.schema.history import FileSchemaHistory
from relay.source.binlog_source import BinlogSource
from relay.source.schema_start import attach_schema_history
from relay.source.start_point import StartPoint

pytestmark = pytest.mark.integration

_server_ids = itertools.count(61000)

BEFORE = [
    "CREATE DATABASE shop_00 CHARACTER SET utf8mb4",
    "CREATE DATABASE shop_01 CHARACTER SET latin1",
    """CREATE TABLE shop_00.orders_00 (id INT UNSIGNED NOT NULL, name VARCHAR(16) CHARACTER SET latin1,
       amt DECIMAL(12,2), st ENUM('new','paid','gône'), tags SET('a','b','c'), note TEXT, data BLOB,
       j JSON, ts DATETIME(3), b BIT(5), c CHAR(4), big BIGINT UNSIGNED, PRIMARY KEY (id))""",
    "CREATE TABLE shop_01.orders_01 LIKE shop_00.orders_00",
    "INSERT INTO shop_00.orders_00 VALUES (1, 'café', 12.50, 'gône', 'a,c', 'nöte', x'00ff', '{\"k\": 1}', "
    "'2024-01-02 03:04:05.678', b'10101', 'abcd', 18446744073709551615)",
]
WORKLOAD = [
    "INSERT INTO shop_01.orders_01 SELECT * FROM shop_00.orders_00",
    "ALTER TABLE shop_00.orders_00 ADD COLUMN extra VARCHAR(8) AFTER name",
    "INSERT INTO shop_00.orders_00 (id, name, extra, amt) VALUES (2, 'x', 'ext', 1.25)",
    "ALTER TABLE shop_00.orders_00 DROP COLUMN note",
    "UPDATE shop_00.orders_00 SET amt = amt + 1",
    "ALTER TABLE shop_00.orders_00 MODIFY amt DECIMAL(14,3) NOT NULL DEFAULT 0",
    "INSERT INTO shop_00.orders_00 (id, name, amt) VALUES (3, 'y', 7.125)",
    "ALTER TABLE shop_00.orders_00 RENAME COLUMN extra TO extra2",
    "ALTER TABLE shop_00.orders_00 CHANGE name title VARCHAR(20) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
    "INSERT INTO shop_00.orders_00 (id, title, amt) VALUES (4, 'héllo ☃', 2)",
    "RENAME TABLE shop_00.orders_00 TO shop_00.orders_00_old",
    "CREATE TABLE shop_00.orders_00 LIKE shop_00.orders_00_old",
    "INSERT INTO shop_00.orders_00 SELECT * FROM shop_00.orders_00_old",
    "DROP TABLE shop_00.orders_00_old",
    "DROP TABLE shop_01.orders_01",
    "CREATE TABLE shop_01.orders_01 (k VARCHAR(10) NOT NULL PRIMARY KEY, v INT, t TINYTEXT)",
    "INSERT INTO shop_01.orders_01 VALUES ('k1', -5, 'tïny'), ('k2', NULL, NULL)",
    "ALTER TABLE shop_00.orders_00 DROP PRIMARY KEY, ADD PRIMARY KEY (id, title)",
    "UPDATE shop_00.orders_00 SET tags = 'b' WHERE id = 1",
    "DELETE FROM shop_00.orders_00 WHERE id = 2",
    "ALTER TABLE shop_01.orders_01 ADD COLUMN f FLOAT FIRST, ADD COLUMN d DOUBLE AFTER v",
    "INSERT INTO shop_01.orders_01 VALUES (1.5, 'k3', 1, 2.25, 't')",
]


def _execute(svc: MySQLService, statements: list[str]) -> None:
    conn = pymysql.connect(
        host=svc.host, port=svc.port, user=svc.user, password=svc.password, autocommit=True
    )
    with contextlib.closing(conn), conn.cursor() as cur:
        for sql in statements:
            cur.execute(sql)


def _end(svc: MySQLService) -> tuple[str, int]:
    conn = pymysql.connect(host=svc.host, port=svc.port, user=svc.user, password=svc.password)
    with contextlib.closing(conn), conn.cursor() as cur:
        row = binlog_status(cur)
        assert row is not None
        return str(row[0]), int(row[1])


def _config(svc: MySQLService) -> SourceConfig:
    return SourceConfig(
        host=svc.host, port=svc.port, user=svc.replication_user, password=svc.replication_password,
        server_id=next(_server_ids), heartbeat_seconds=1.0, read_timeout=10.0,
        retry=RetryPolicy(initial=0.05, maximum=0.5, jitter=0.0, deadline=10.0),
    )  # fmt: skip


def _source(svc: MySQLService, history: FileSchemaHistory, start: tuple[str, int]) -> BinlogSource:
    source = BinlogSource(_config(svc))
    source.accept_schema_history = True
    source.check()
    point = StartPoint(start[0], start[1])
    attach_schema_history(source, history, "always", point)
    source.open(point)
    return source


Rows = list[tuple[Any, ...]]


def _read(source: BinlogSource, end: tuple[str, int]) -> Rows:
    """Every rows event up to ``end``: (place, table, kind, columns, rows)."""
    out: Rows = []
    with contextlib.closing(source):
        while True:
            event = source.read(5.0)
            assert event is not None, "the binlog ended before the workload did"
            h = event.header
            if isinstance(event, ev.RowsEvent) and event.table.schema.startswith("shop_"):
                t = event.table
                out.append((h.log_pos, f"{t.schema}.{t.table}", event.kind, t.columns, event.rows))
            if not h.artificial and (h.log_file, h.log_pos) >= end and h.log_file == end[0]:
                return out


def _run(svc: MySQLService, tmp: Path) -> tuple[Rows, FileSchemaHistory, tuple[str, int], list[int]]:
    _execute(svc, BEFORE)
    start = _end(svc)
    history = FileSchemaHistory(tmp / "schema-history.jsonl")
    source = _source(svc, history, start)  # the definitions are read here, before the workload
    marks = []
    for sql in WORKLOAD:
        _execute(svc, [sql])
        marks.append(_end(svc)[1])
    end = _end(svc)
    return _read(source, end), history, end, marks


def _strip_places(rows: Rows) -> Rows:
    return [r[1:] for r in rows]


@pytest.fixture
def servers(mysql_server_factory: Callable[..., MySQLService]) -> dict[str, MySQLService]:
    return {m: mysql_server_factory(f"--binlog-row-metadata={m}") for m in ("FULL", "MINIMAL", "NO_LOG")}


def test_minimal_and_no_log_give_what_full_gives(servers: dict[str, MySQLService], tmp_path: Path) -> None:
    results = {m: _run(svc, tmp_path / m) for m, svc in servers.items()}
    full = _strip_places(results["FULL"][0])
    assert len(full) == 10  # one rows event per DML statement of the workload
    names = [[c.name for c in r[2]] for r in full]
    assert ["id", "title", "extra2", "amt", "st", "tags", "data", "j", "ts", "b", "c", "big"] in names
    assert any(c.is_key and c.name == "title" for r in full for c in r[2])  # the new primary key
    for mode in ("MINIMAL", "NO_LOG"):
        assert _strip_places(results[mode][0]) == full, mode

    # A restart in the middle (after the RENAME TABLE) with the history of the first run: same tail.
    for mode in ("MINIMAL", "NO_LOG"):
        rows, history, end, marks = results[mode]
        restart = (end[0], marks[10])
        again = _read(_source(servers[mode], FileSchemaHistory(history.path), restart), end)
        assert again == [r for r in rows if r[0] > restart[1]], mode


def test_unreadable_ddl_stops_and_resync_recovers(
    mysql_server_factory: Callable[..., MySQLService], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    svc = mysql_server_factory("--binlog-row-metadata=MINIMAL")
    _execute(svc, BEFORE[:3])
    start = _end(svc)
    history = FileSchemaHistory(tmp_path / "schema-history.jsonl")
    source = _source(svc, history, start)
    _execute(svc, [
        "ALTER TABLE shop_00.orders_00 CONVERT TO CHARACTER SET latin1",
        "INSERT INTO shop_00.orders_00 (id, name, note) VALUES (9, 'é', 'ü')",
    ])  # fmt: skip
    end = _end(svc)
    with pytest.raises(SchemaError) as caught:
        _read(source, end)
    message = str(caught.value)
    assert "the DDL at" in message and "shop_00.orders_00" in message and "CONVERT TO" in message
    assert "relay schema resync -c CONFIG --table shop_00.orders_00" in message

    # The same place stops again after a restart: the broken record is durable.
    with pytest.raises(SchemaError):
        _read(_source(svc, FileSchemaHistory(history.path), start), end)

    # `relay schema resync` takes the live definition at the broken DDL's place (after --yes).
    config = tmp_path / "relay.yaml"
    config.write_text(
        f"source: {{host: {svc.host}, port: {svc.port}, user: {svc.user}, password: {svc.password}}}\n"
        f"schema: {{history: auto}}\n"
        f"state_dir: {history.path.parent}\n"
    )
    table = ["--table", "shop_00.orders_00"]
    assert main(["schema", "resync", "-c", str(config), *table]) == 1  # not confirmed: nothing written
    assert main(["schema", "resync", "-c", str(config), *table, "--yes"]) == 0
    assert main(["schema", "show", "-c", str(config), *table, "--at", f"{end[0]}:{end[1]}"]) == 0
    assert "latin1" in capsys.readouterr().out
    # A MINIMAL server is accepted where the relay keeps a schema history: `positions show` reads its end.
    assert main(["positions", "show", "-c", str(config), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert "server_error" not in shown and shown["server_end"] == f"{end[0]}:{end[1]}", shown
    rows = _read(_source(svc, FileSchemaHistory(history.path), start), end)
    assert len(rows) == 1
    columns, images = rows[0][3], rows[0][4]
    assert [c.name for c in columns][:2] == ["id", "name"]
    assert images[0].after is not None and images[0].after[1] == "é"


def test_a_table_changed_outside_the_binlog_stops_the_source(
    mysql_server_factory: Callable[..., MySQLService], tmp_path: Path
) -> None:
    svc = mysql_server_factory("--binlog-row-metadata=MINIMAL")
    _execute(svc, BEFORE[:3])
    start = _end(svc)
    history = FileSchemaHistory(tmp_path / "schema-history.jsonl")
    source = _source(svc, history, start)
    # A DDL the binlog never sees (sql_log_bin=0) leaves the history behind the table.
    conn = pymysql.connect(
        host=svc.host, port=svc.port, user=svc.user, password=svc.password, autocommit=True
    )
    with contextlib.closing(conn), conn.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute("ALTER TABLE shop_00.orders_00 ADD COLUMN z INT")
        cur.execute("SET SESSION sql_log_bin = 1")
        cur.execute("INSERT INTO shop_00.orders_00 (id) VALUES (5)")
    with pytest.raises(SourceError) as caught:
        _read(source, _end(svc))
    message = str(caught.value)
    assert (
        "TABLE_MAP of shop_00.orders_00" in message
        and "13 columns in the event, 12 in the history" in message
    )
