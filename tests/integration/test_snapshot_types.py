"""Snapshot rows of every column type equal the binlog's rows of the same data, text for text.

The table of ``test_type_table`` (every type, limit and edge values, NULLs; its GEOMETRY column too: a
snapshot reads the SRID + WKB bytes the binlog holds) is filled; the binlog's INSERT images are decoded with
our own stream, and the same rows are read the way a snapshot reads them (``relay.source.snapshot_tables``:
the chunk SELECT on a connection with decoders off, values converted to canal text). Values and column
metadata must be equal, so a snapshot row and a live change of a row are the same text in the same record
shape.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import pytest

from relay.binlog.events import INSERT
from relay.dev.services import MySQLService
from relay.errors import SourceError
from relay.source.snapshot_tables import describe_table
from tests.integration.test_type_table import (
    _COLUMNS,
    _ROWS,
    TABLE,
    ZONE,
    Captured,
    _master_status,
    _read_rows_events,
)

COLUMNS = _COLUMNS


@pytest.fixture(scope="module")
def filled(mysql_service: MySQLService) -> Iterator[tuple[str, Captured]]:
    schema = f"snaptypes_{int(time.time() * 1000) % 10**9}"
    with contextlib.closing(mysql_service.connect()) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{schema}`")
        try:
            cur.execute(f"USE `{schema}`")
            cur.execute("SET SESSION sql_mode = ''")
            cur.execute(f"SET SESSION time_zone = '{ZONE}'")
            cols = ", ".join(f"`{c.name}` {c.ddl}" for c in COLUMNS)
            cur.execute(f"CREATE TABLE `{TABLE}` (id int PRIMARY KEY, {cols}) DEFAULT CHARSET=utf8mb4")
            start = _master_status(cur)
            values = [
                "(" + ", ".join([str(i)] + [row.get(c.name, "NULL") for c in COLUMNS]) + ")"
                for i, row in _ROWS.items()
            ]
            cur.execute(f"INSERT INTO `{TABLE}` VALUES {', '.join(values)}")
            end = _master_status(cur)
            yield schema, Captured(start, end, {}, {}, {})
        finally:
            cur.execute(f"DROP DATABASE IF EXISTS `{schema}`")


def _snapshot_rows(service: MySQLService, schema: str) -> tuple[Any, dict[int, tuple[str | None, ...]]]:
    conn = service.connect(user=service.replication_user, password=service.replication_password)
    try:
        with conn.cursor() as cur:
            cur.execute(f"SET SESSION time_zone = '{ZONE}'")  # the zone the binlog side renders in
        spec = describe_table(conn, schema, TABLE)
        sql, params = spec.chunk_query(None, 1000)
        rows = spec.read(conn, sql, params)
        return spec, {int(str(r[0])): r for r in rows}
    finally:
        conn.close()


def test_snapshot_values_and_columns_equal_the_binlog(
    mysql_service: MySQLService, filled: tuple[str, Captured]
) -> None:
    schema, captured = filled
    events = [e for e in _read_rows_events(mysql_service, captured) if e.kind == INSERT]
    binlog = {int(str(row.after[0])): row.after for e in events for row in e.rows if row.after is not None}
    spec, snapshot = _snapshot_rows(mysql_service, schema)
    assert sorted(snapshot) == sorted(binlog)
    names = ["id", *(c.name for c in COLUMNS)]
    problems = [
        f"row {i} {name}: binlog {theirs!r}, snapshot {ours!r}"
        for i in binlog
        for name, theirs, ours in zip(names, binlog[i], snapshot[i], strict=True)
        if theirs != ours
    ]
    assert problems == []
    # TIMESTAMP values carry their instant both ways (the text alone repeats an hour at a DST change).
    instants = [
        (i, name, getattr(theirs, "micros", None), getattr(ours, "micros", None))
        for i in binlog
        for name, theirs, ours in zip(names, binlog[i], snapshot[i], strict=True)
        if getattr(theirs, "micros", None) is not None or getattr(ours, "micros", None) is not None
    ]
    assert instants, "the type table has TIMESTAMP values: the case was exercised"
    assert [x for x in instants if x[2] != x[3]] == []
    table_map = events[0].table.columns
    described = [(c.name, c.mysql_type, c.sql_type, c.length, c.is_key, c.nullable) for c in spec.columns]
    expected = [(c.name, c.mysql_type, c.sql_type, c.length, c.is_key, c.nullable) for c in table_map]
    assert described == expected
    assert spec.key_name == "PRIMARY" and spec.key == (0,)


def test_a_table_with_a_mariadb_inet6_column_is_refused_naming_it(mysql_service: MySQLService) -> None:
    if mysql_service.flavor != "mariadb":
        pytest.skip("INET6 is MariaDB's")
    schema = f"snapinet_{int(time.time() * 1000) % 10**9}"
    with contextlib.closing(mysql_service.connect()) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{schema}`")
        try:
            cur.execute(f"CREATE TABLE `{schema}`.t (id int PRIMARY KEY, a inet6)")
            with pytest.raises(SourceError, match=r"t: column 'a': type inet6 \(MariaDB\) is not captured"):
                describe_table(conn, schema, "t")
        finally:
            cur.execute(f"DROP DATABASE IF EXISTS `{schema}`")
