"""Schema changes applied as MySQL applies them: after each ALTER TABLE, once the mirror has caught up, the
mirror table read by engines that are not our code (``tests.spark.readers``: deltalake, polars, pyarrow and
DuckDB over the version's files; pyiceberg, pyarrow and DuckDB over the snapshot's) equals ``SELECT *`` of
the source table — columns and values — in both formats.

One table behind a real relay (real MariaDB binlog → real broker), one mirror query per format (the same
checkpoint throughout, ``availableNow`` after each step), the steps in sequence with writes before and after
each statement (so a micro-batch holds rows from both sides of it). The Delta mirror runs with consistent
cuts (the relay's transaction topic): after each step its latest cut names the table's newest version.

1. ADD COLUMN … NOT NULL DEFAULT 7, ADD COLUMN … NULL DEFAULT 'text' (every existing row gets the default),
   ADD COLUMN without a default (NULL), ADD COLUMN DECIMAL NOT NULL (MySQL's implicit 0.00);
   ``relay verify --against mirror`` then finds the (Delta) mirror equal;
2. DROP COLUMN (the column gone from the table), RENAME COLUMN and CHANGE old new (values kept under the
   new name);
3. MODIFY INT → BIGINT and VARCHAR(10) → VARCHAR(50) (values kept, the wider type); ``relay verify`` finds
   the (Iceberg) mirror equal;
4. an expression default (CURRENT_TIMESTAMP): the mirror query stops with one error naming the table and
   the statement, and the table is left as it was (no commit).
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from relay.spark.cut import find_cut
from relay.spark.mirror import MirrorConfig, start
from tests.integration.relay_harness import (
    REPO_ROOT,
    RelayProcess,
    master_position,
    single_table_mapping,
    wait_for,
    write_configs,
)
from tests.spark.readers import current_version, read_all, schema_of
from tests.spark.test_mirror import as_text, config_for, local_targets, select_all


@pytest.fixture
def source(
    mysql_service: Any, kafka_service: Any, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[tuple[str, Any, Path, Any]]:
    """``{prefix}_00.orders_00`` with rows, behind a running relay publishing the codec ``request.param``
    (default canal-json): (prefix, connection, config, relay)."""
    prefix = f"dd{time.monotonic_ns() % 10**8}"
    mapping = single_table_mapping(prefix)
    mapping["defaults"] = {"codec": getattr(request, "param", "canal-json")}
    conn = mysql_service.connect()
    relay = None
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {prefix}_00")
            cur.execute(
                f"CREATE TABLE {prefix}_00.orders_00 (id BIGINT PRIMARY KEY, qty INT, name VARCHAR(10), "
                "note VARCHAR(20))"
            )
        cfg = write_configs(
            tmp_path / "relay",
            mysql=mysql_service,
            bootstrap=kafka_service.bootstrap_servers,
            mapping=mapping,
            start=master_position(conn),
            instance=prefix,
            include=f"{prefix}_\\d+\\..*",
            extra={"kafka": {"transaction_topic": f"{prefix}.txn"}},
        )
        relay = RelayProcess(cfg, tmp_path / "relay.log").start()
        with conn.cursor() as cur:
            rows = [(i, i * 3 - 40, f"n{i}", None if i % 3 else f"note {i}") for i in range(1, 41)]
            cur.executemany(f"INSERT INTO {prefix}_00.orders_00 VALUES (%s, %s, %s, %s)", rows)
            cur.execute(f"UPDATE {prefix}_00.orders_00 SET qty = qty + 1 WHERE id % 4 = 0")
            cur.execute(f"DELETE FROM {prefix}_00.orders_00 WHERE id % 10 = 7")
        yield prefix, conn, cfg, relay
    finally:
        if relay is not None:
            relay.stop()
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {prefix}_00")
        conn.close()


def _published(relay: RelayProcess, conn: Any) -> None:
    """Wait until the relay's position is the binlog's end: every change before it is in the topic."""
    end = master_position(conn)

    def done() -> bool:
        position = relay.status().get("position") or {}
        return (position.get("journal", ""), position.get("offset", 0)) >= end

    wait_for(done, 120, "the relay published every change")


def _caught_up(spark: Any, config: MirrorConfig) -> None:
    query = start(spark, config)
    query.awaitTermination(300)
    assert not query.isActive, "availableNow query did not finish"
    assert query.exception() is None, query.exception()


def _mirrored(target: Any, table: str) -> tuple[dict[str, dict[str, str | None]], list[str]]:
    rows = read_all(target, table)
    data = {str(r["id"]): {c: v for c, v in r.items() if not c.startswith("_")} for r in rows}
    columns = [c for c in schema_of(target, table) if not c.startswith("_") and c != "relay_bucket"]
    return as_text(data), columns


def _selected(conn: Any, table: str) -> tuple[dict[str, dict[str, str | None]], list[str]]:
    with conn.cursor() as cur:
        cur.execute(f"SELECT * FROM {table} LIMIT 0")
        columns = [d[0] for d in cur.description]
    return select_all(conn, [table]), columns


def _verify(cfg: Path, table: str, out: Path, fmt: str) -> dict[str, Any]:
    ran = subprocess.run(
        [sys.executable, "-m", "relay.cli", "verify", "-c", str(cfg), "--table", table, "--json",
         "--against", f"mirror:{out}", "--format", fmt],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert ran.returncode in (0, 1, 3), ran.stdout[-2000:] + ran.stderr[-3000:]
    report: dict[str, Any] = json.loads(ran.stdout)
    return report


@pytest.mark.timeout(900)  # a relay, five steps of two mirror runs and two relay verify runs
@pytest.mark.parametrize(
    ("writers", "source"),
    [
        pytest.param("driver", "canal-json", id="delta-with-cuts-and-iceberg"),
        pytest.param("spark", "canal-json", id="delta-spark-writer", marks=pytest.mark.long),
        pytest.param("driver", "canal-protobuf", id="canal-protobuf", marks=pytest.mark.long),
    ],
    indirect=["source"],
)
def test_each_alter_leaves_the_mirror_equal_to_select(
    spark: Any, kafka_service: Any, source: tuple[str, Any, Path, Any], tmp_path: Path, writers: str
) -> None:
    """``driver``: Delta with consistent cuts (a statement's rewrite is a version of a cut) and Iceberg table
    by table, the default writer; ``spark`` (the longer suite): Delta by Spark's own connector; the longer
    suite also runs the default writer over a canal-protobuf topic."""
    prefix, conn, cfg, relay = source
    physical, table = f"{prefix}_00.orders_00", f"{prefix}.orders"
    bootstrap = kafka_service.bootstrap_servers
    targets = local_targets(tmp_path / "out")[: 1 if writers == "spark" else 2]
    cuts = {"delta": {"transaction_topic": f"{prefix}.txn"} if writers == "driver" else {}, "iceberg": {}}
    configs = [
        config_for(
            t,
            bootstrap,
            (table,),
            tmp_path / f"ck-{t.format}",
            available_now=True,
            writer=writers,
            **cuts[t.format],
        )
        for t in targets
    ]

    def sql(*statements: str) -> None:
        with conn.cursor() as cur:
            for s in statements:
                cur.execute(s)

    def step(what: str, kinds: dict[str, pa.DataType]) -> None:
        """Mirror what the relay published; each format equals SELECT *, columns and values."""
        _published(relay, conn)
        expected, columns = _selected(conn, physical)
        for config, target in zip(configs, targets, strict=True):
            _caught_up(spark, config)
            got, have = _mirrored(target, table)
            assert sorted(have) == sorted(columns), f"{what}, {target.format}: columns {have} != {columns}"
            assert got == expected, f"{what}, {target.format}: rows differ from SELECT"
            schema = schema_of(target, table)
            for column, kind in kinds.items():
                assert schema[column] == kind, f"{what}, {target.format}: {column} is {schema[column]}"
            if cuts[target.format]:
                version = find_cut(target).tables[table].version
                assert version == current_version(target, table), f"{what}: the latest commit is no cut's"

    def verify(target: Any, rows: int) -> None:
        """``relay verify --against mirror`` finds every row equal."""
        report = _verify(cfg, table, Path(target.storage.root), target.format)
        assert report["differences"] == [] and report["total"]["equal"] == rows, report["total"]

    step("before any ALTER", {"qty": pa.int32()})
    # 1. ADD COLUMN: a constant default, NOT NULL and nullable; none (NULL); NOT NULL without one (0.00).
    sql(
        f"UPDATE {physical} SET name = 'before' WHERE id = 2",
        f"ALTER TABLE {physical} ADD COLUMN c INT NOT NULL DEFAULT 7",
        f"ALTER TABLE {physical} ADD COLUMN d VARCHAR(8) NULL DEFAULT 'it''s', ADD COLUMN e INT NULL, "
        "ADD COLUMN f DECIMAL(6,2) NOT NULL",
        f"INSERT INTO {physical} (id, qty, name, c, d, e, f) VALUES (100, 1, 'after', 1, NULL, 5, 2.5)",
        f"UPDATE {physical} SET c = 8 WHERE id = 3",
    )
    step("ADD COLUMN", {"c": pa.int32(), "d": pa.string(), "f": pa.decimal128(6, 2)})
    expected, _ = _selected(conn, physical)
    assert expected["1"]["c"] == "7" and expected["1"]["d"] == "it's" and expected["1"]["f"] == "0.00"
    verify(targets[0], len(expected))
    # 2. DROP COLUMN; RENAME COLUMN, CHANGE old new.
    sql(
        f"ALTER TABLE {physical} DROP COLUMN note",
        f"UPDATE {physical} SET qty = 0, name = 'renamed' WHERE id = 5",
        f"ALTER TABLE {physical} RENAME COLUMN name TO title",
        f"ALTER TABLE {physical} CHANGE d dd VARCHAR(8) NULL DEFAULT 'it''s'",
        f"INSERT INTO {physical} (id, qty, title, c, dd, f) VALUES (101, 2, 'new', 3, 'x', 1)",
    )
    step("DROP / RENAME / CHANGE", {"title": pa.string(), "dd": pa.string()})
    # 3. MODIFY to wider types.
    sql(
        f"ALTER TABLE {physical} MODIFY qty BIGINT, MODIFY title VARCHAR(50)",
        f"INSERT INTO {physical} (id, qty, title, c, f) VALUES (102, 5000000000, '{'t' * 40}', 4, 0)",
    )
    step("MODIFY wider", {"qty": pa.int64()})
    verify(targets[-1], len(expected) + 2)
    # 4. An expression default: refused with one error naming the table and the statement; nothing written.
    versions = [current_version(t, table) for t in targets]
    statement = f"ALTER TABLE {physical} ADD COLUMN at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP"
    sql(statement, f"INSERT INTO {physical} (id, qty, title, c, f) VALUES (103, 1, 'x', 1, 0)")
    _published(relay, conn)
    for config, target, version in zip(configs, targets, versions, strict=True):
        query = start(spark, config)
        with contextlib.suppress(Exception):
            query.awaitTermination(300)
        failure = str(query.exception())
        line = re.search(r"MirrorDdlError: (mirror of [^\n]+)", failure)  # what relay spark mirror prints
        assert line and table in line[1] and statement in line[1], failure
        assert current_version(target, table) == version, f"{target.format}: the refused batch committed"
