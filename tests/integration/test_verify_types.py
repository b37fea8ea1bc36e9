"""``relay verify`` on every column type of the type tests and on each way a table is compared, against a
running relay's topics on real MariaDB and a real broker.

- The type table of ``test_type_table`` (every type with limit and edge values and NULLs, GEOMETRY too),
  written while the relay runs (INSERT, UPDATE, DELETE: the binlog's images), in canal-json and in
  canal-protobuf, TIMESTAMPs rendered in a non-UTC ``source.timezone``: zero differences, and every chunk
  digest equal — MySQL's SQL rendering of every type hashes like the canal text the relay published.
- The same table without GEOMETRY (which a snapshot refuses), its rows published by ``relay snapshot run``:
  zero differences, every chunk digest equal (the snapshot's text is the binlog's).
- A change made with ``sql_log_bin=0`` to a JSON and a DATETIME(6) column of the type table is found, named
  by key and both columns.
- A table without a key (duplicate rows, snapshotted whole, then changed) is compared as a multiset of rows,
  and the report says so; one copy of a duplicated row deleted with ``sql_log_bin=0`` is found: one copy
  too many on the topic. A table with only a UNIQUE key (its records keyed by its physical name), one
  with a string key (ordered by collation) and one whose mapping names other key columns are compared by
  per-row digests: zero differences after live changes (a unique-key change included).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.relay_harness import RelayProcess, master_position, wait_for, write_configs
from tests.integration.snapshot_harness import run_cli
from tests.integration.test_type_table import _COLUMNS, _ROWS, _UPDATE, ZONE

COLUMNS_SQL = ", ".join(f"`{c.name}` {c.ddl}" for c in _COLUMNS)
NO_GEOMETRY = [c for c in _COLUMNS if c.name != "g"]


def _mapping(db: str) -> dict[str, Any]:
    tables = {
        "types": {"physical": ["types_t"]},
        # A topic of its own: one topic carries one codec (mapping validation).
        "types_pb": {"physical": ["types_p"], "codec": "canal-protobuf", "topic": f"{db}.pb"},
        "types_snap": {"physical": ["types_s"]},
        "keyless": {"physical": ["keyless"]},
        "uniq": {"physical": ["uniq"]},
        "strpk": {"physical": ["strpk"]},
        "mkey": {"physical": ["mkey"], "key": ["ext"]},
    }
    return {
        "version": 1,
        "topics": {"partitions": 3, "create": True},
        "unmapped": {"action": "drop"},
        "logical_dbs": {db: {"physical": [db], "topic": f"{db}.all", "tables": tables}},
    }


def _type_rows(cols: list[Any]) -> str:
    return ", ".join(
        "(" + ", ".join([str(i)] + [row.get(c.name, "NULL") for c in cols]) + ")" for i, row in _ROWS.items()
    )


def _prepare(cur: Any) -> None:
    cur.execute("SET SESSION sql_mode = ''")
    cur.execute(f"SET SESSION time_zone = '{ZONE}'")


@pytest.fixture
def case(
    mysql_service: Any, kafka_service: Any, tmp_path: Path
) -> Iterator[tuple[Any, str, Path, RelayProcess]]:
    db = f"vt{time.monotonic_ns() % 10**8}"
    conn = mysql_service.connect()
    procs: list[RelayProcess] = []
    try:
        with conn.cursor() as cur:
            _prepare(cur)
            cur.execute(f"CREATE DATABASE `{db}`")
            cur.execute(f"USE `{db}`")
            for table in ("types_t", "types_p"):
                cur.execute(
                    f"CREATE TABLE {table} (id int PRIMARY KEY, {COLUMNS_SQL}) DEFAULT CHARSET=utf8mb4"
                )
            snap_cols = ", ".join(f"`{c.name}` {c.ddl}" for c in NO_GEOMETRY)
            cur.execute(f"CREATE TABLE types_s (id int PRIMARY KEY, {snap_cols}) DEFAULT CHARSET=utf8mb4")
            cur.execute(f"INSERT INTO types_s VALUES {_type_rows(NO_GEOMETRY)}")
            cur.execute("CREATE TABLE keyless (a int, b varchar(10), c decimal(5,2)) DEFAULT CHARSET=utf8mb4")
            cur.execute("INSERT INTO keyless VALUES (1,'x',1.50),(1,'x',1.50),(2,NULL,NULL),(3,'é',0.00)")
            cur.execute(
                "CREATE TABLE uniq (n int NOT NULL, code varchar(8) NOT NULL, v text, UNIQUE KEY (code))"
            )
            cur.execute("INSERT INTO uniq VALUES (1,'a','one'),(2,'B','two'),(3,'c','three')")
            cur.execute("CREATE TABLE strpk (k varchar(20) PRIMARY KEY, v int) DEFAULT CHARSET=utf8mb4")
            cur.execute("INSERT INTO strpk VALUES ('a',1),('B',2),('ü',3),('z z',4),('Z',5)")
            cur.execute("CREATE TABLE mkey (id int PRIMARY KEY, ext varchar(10) NOT NULL, v int)")
            cur.execute("INSERT INTO mkey VALUES (1,'e1',10),(2,'e2',20),(3,'e3',30)")
        cfg = write_configs(
            tmp_path,
            mysql=mysql_service,
            bootstrap=kafka_service.bootstrap_servers,
            mapping=_mapping(db),
            start=master_position(conn),
            instance=db,
            include=f"{db}\\..*",
            extra={"source": {"timezone": ZONE}, "logging": {"level": "INFO"}},
        )
        relay = RelayProcess(cfg, tmp_path / "relay.log").start()
        procs.append(relay)
        wait_for(lambda: relay.status().get("state") == "running", 60, "the relay running")
        yield conn, db, cfg, relay
    finally:
        for proc in procs:
            proc.stop()
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
        conn.close()


def _verify(cfg: Path, table: str, *extra: str) -> tuple[int, dict[str, Any]]:
    ran = run_cli("verify", "-c", str(cfg), "--table", table, "--json", *extra, timeout=300)
    assert ran.returncode in (0, 1), ran.stdout[-2000:] + ran.stderr[-3000:]
    return ran.returncode, json.loads(ran.stdout)


def _snapshot(cfg: Path, table: str) -> None:
    ran = run_cli("snapshot", "run", "-c", str(cfg), "--table", table, "--follow", timeout=180)
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]


def _settle(cfg: Path, table: str) -> dict[str, Any]:
    """Verify until the relay has published what was written (a few tries): the report."""
    deadline = time.monotonic() + 90
    while True:
        code, report = _verify(cfg, table)
        if code == 0 or time.monotonic() > deadline:
            return report
        time.sleep(1)


def test_every_type_binlog_and_snapshot(case: tuple[Any, str, Path, RelayProcess]) -> None:
    conn, db, cfg, _ = case
    with conn.cursor() as cur:
        _prepare(cur)
        for table in ("types_t", "types_p"):
            cur.execute(f"INSERT INTO `{db}`.{table} VALUES {_type_rows(list(_COLUMNS))}")
            assignments = ", ".join(f"`{k}` = {v}" for k, v in _UPDATE.items())
            cur.execute(f"UPDATE `{db}`.{table} SET {assignments} WHERE id IN (1, 2, 5)")
            cur.execute(f"DELETE FROM `{db}`.{table} WHERE id = 4")
    _snapshot(cfg, f"{db}.types_snap")
    for table, rows in (("types", 4), ("types_pb", 4), ("types_snap", 5)):
        report = _settle(cfg, f"{db}.{table}")
        assert report["equal"] and report["differences"] == [], (table, report["differences"])
        assert report["total"]["rows"] == rows and report["total"]["equal"] == rows, table
        shard = report["shards"][0]
        assert shard["method"] == "range" and shard["chunks_differing"] == 0, (table, shard)

    # A silent change of a JSON and a DATETIME(6) value: found, both columns named.
    with conn.cursor() as cur:
        _prepare(cur)
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute(
            f"UPDATE `{db}`.types_t SET js = '{{\"k\": 2}}', dtm6 = '2001-01-01 00:00:00.000001' WHERE id = 5"
        )
        cur.execute("SET SESSION sql_log_bin = 1")
    code, report = _verify(cfg, f"{db}.types")
    assert code == 1
    [diff] = report["differences"]
    assert diff["kind"] == "different" and diff["key"] == {"id": "5"}
    columns = {c[0]: (c[1], c[2]) for c in diff["columns"]}
    assert set(columns) == {"js", "dtm6"}
    assert columns["dtm6"] == ("2001-01-01 00:00:00.000001", "2024-02-29 12:34:56.000789")


def test_keyless_unique_string_and_mapped_keys(case: tuple[Any, str, Path, RelayProcess]) -> None:
    conn, db, cfg, _ = case
    for table in ("keyless", "uniq", "strpk", "mkey"):
        _snapshot(cfg, f"{db}.{table}")
    with conn.cursor() as cur:
        cur.execute(f"USE `{db}`")
        cur.execute("INSERT INTO keyless VALUES (1,'x',1.50),(4,'d',4.00)")
        cur.execute("UPDATE keyless SET c = 2.50 WHERE a = 2")
        cur.execute("DELETE FROM keyless WHERE a = 3")
        cur.execute("UPDATE uniq SET code = 'A2', v = 'moved' WHERE code = 'a'")
        cur.execute("INSERT INTO uniq VALUES (4,'d','four')")
        cur.execute("DELETE FROM uniq WHERE code = 'c'")
        cur.execute("UPDATE strpk SET v = 22 WHERE k = 'B'")
        cur.execute("INSERT INTO strpk VALUES ('c', 6)")
        cur.execute("DELETE FROM strpk WHERE k = 'z z'")
        cur.execute("UPDATE mkey SET v = 11 WHERE id = 1")
        cur.execute("INSERT INTO mkey VALUES (4,'e4',40)")
    expected = {"keyless": ("multiset", 5), "uniq": ("rows", 3), "strpk": ("rows", 5), "mkey": ("rows", 4)}
    for table, (method, rows) in expected.items():
        report = _settle(cfg, f"{db}.{table}")
        assert report["equal"] and report["differences"] == [], (table, report["differences"])
        shard = report["shards"][0]
        assert (shard["method"], shard["rows"], shard["equal"]) == (method, rows, rows), (table, shard)
    assert any("multiset" in note for note in _verify(cfg, f"{db}.keyless")[1]["notes"])

    # One copy of a duplicated row deleted without a binlog record: one copy too many on the topic.
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute(f"DELETE FROM `{db}`.keyless WHERE a = 1 LIMIT 1")
        cur.execute("SET SESSION sql_log_bin = 1")
    code, report = _verify(cfg, f"{db}.keyless")
    assert code == 1
    [diff] = report["differences"]
    assert diff["kind"] == "extra" and diff["count"] == 1
    assert diff["key"] == {"a": "1", "b": "x", "c": "1.50"}
