"""``relay verify --against mirror:PATH``: a real relay's topics (real MariaDB binlog → real broker) mirrored
by real local Spark (``relay.spark.mirror``) into Delta Lake and Iceberg tables, compared with the source.

- Sharded orders and the type table of ``test_type_table`` (every type, GEOMETRY included, TIMESTAMPs in a
  non-UTC source zone), inserted, updated and deleted while the relay runs, then mirrored: zero differences
  in both formats — each value compared in the mirror's Spark type.
- A row changed in the mirror's files and a row deleted from them (with deltalake, as a tool or a person
  would, no tombstone): found — the first named by key and column, the second as missing — and with the
  mirror job running, ``--repair`` snapshots those keys through the relay, the job applies them, and the
  check passes; a later run is equal too.
- A mirror whose job is stopped while the relay publishes more changes: ``--wait`` is honoured (the run
  takes at least that long, waiting for the mirror), then exactly the keys the mirror has not applied are
  reported as not verified — exit status 3, ``equal`` false, no difference; with the job running again the
  same check waits for it and ends equal (exit 0).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from relay.spark.mirror import MirrorConfig, start
from tests.integration.relay_harness import (
    REPO_ROOT,
    RelayProcess,
    create_shards,
    drop_shards,
    master_position,
    wait_for,
    write_configs,
)
from tests.integration.test_type_table import _COLUMNS, _ROWS, _UPDATE, ZONE

SHARDS, TABLES = 2, 1


def _mapping(prefix: str) -> dict[str, Any]:
    return {
        "version": 1,
        "topics": {"partitions": 3, "create": True},
        "unmapped": {"action": "drop"},
        "logical_dbs": {
            prefix: {
                "physical": [f"{prefix}_\\d+"],
                "topic": f"{prefix}.all",
                "tables": {"orders": {"physical": ["orders_\\d+"]}, "types": {"physical": ["types_t"]}},
            }
        },
    }


@pytest.fixture
def relayed(mysql_service: Any, kafka_service: Any, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """Orders shards and the type table written through a running relay; yields (prefix, config)."""
    prefix = f"vm{time.monotonic_ns() % 10**8}"
    conn = mysql_service.connect()
    relay = None
    try:
        create_shards(conn, prefix, SHARDS, TABLES)
        cols = ", ".join(f"`{c.name}` {c.ddl}" for c in _COLUMNS)
        with conn.cursor() as cur:
            cur.execute(
                f"CREATE TABLE {prefix}_00.types_t (id int PRIMARY KEY, {cols}) DEFAULT CHARSET=utf8mb4"
            )
        cfg = write_configs(
            tmp_path,
            mysql=mysql_service,
            bootstrap=kafka_service.bootstrap_servers,
            mapping=_mapping(prefix),
            start=master_position(conn),
            instance=prefix,
            include=f"{prefix}_\\d+\\..*",
            extra={"source": {"timezone": ZONE}},
        )
        relay = RelayProcess(cfg, tmp_path / "relay.log").start()
        _write(conn, prefix)
        end = master_position(conn)
        wait_for(lambda: _published(relay, end), 120, "the relay published the writes")
        yield prefix, cfg
    finally:
        if relay is not None:
            relay.stop()
        drop_shards(conn, prefix, SHARDS)
        conn.close()


def _published(relay: RelayProcess, end: tuple[str, int]) -> bool:
    position = relay.status().get("position") or {}
    return (position.get("journal", ""), position.get("offset", 0)) >= end


def _write(conn: Any, prefix: str) -> None:
    with conn.cursor() as cur:
        for d in range(SHARDS):
            table = f"{prefix}_{d:02d}.orders_00"
            rows = [(d * 1000 + i, "NEW", f"{i}.25", None if i % 4 else f"note {i}") for i in range(1, 61)]
            cur.executemany(f"INSERT INTO {table} VALUES (%s, %s, %s, %s)", rows)
            cur.execute(f"UPDATE {table} SET status = 'PAID', amount = amount + 1 WHERE id % 3 = 0")
            cur.execute(f"DELETE FROM {table} WHERE id % 10 = 7")
        cur.execute("SET SESSION sql_mode = ''")
        cur.execute(f"SET SESSION time_zone = '{ZONE}'")
        values = ", ".join(
            "(" + ", ".join([str(i)] + [row.get(c.name, "NULL") for c in _COLUMNS]) + ")"
            for i, row in _ROWS.items()
        )
        cur.execute(f"INSERT INTO {prefix}_00.types_t VALUES {values}")
        assignments = ", ".join(f"`{k}` = {v}" for k, v in _UPDATE.items())
        cur.execute(f"UPDATE {prefix}_00.types_t SET {assignments} WHERE id IN (2, 5)")
        cur.execute(f"DELETE FROM {prefix}_00.types_t WHERE id = 4")


def _mirror(spark: Any, prefix: str, out: Path, fmt: str = "delta", **kw: Any) -> Any:
    config = MirrorConfig(
        bootstrap_servers=_bootstrap(spark),
        topics=(f"{prefix}.all",),
        out=str(out),
        checkpoint=str(out.parent / f"{out.name}-checkpoint"),
        format=fmt,
        **kw,
    )
    return start(spark, config)


def _bootstrap(spark: Any) -> str:
    return str(spark.conf.get("relay.test.bootstrap"))


def _verify(
    cfg: Path, table: str, out: Path, *extra: str, timeout: float = 300
) -> tuple[int, dict[str, Any]]:
    ran = subprocess.run(
        [sys.executable, "-m", "relay.cli", "verify", "-c", str(cfg), "--table", table, "--json",
         "--against", f"mirror:{out}", *extra],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip
    assert ran.returncode in (0, 1, 3), ran.stdout[-2000:] + ran.stderr[-3000:]
    return ran.returncode, json.loads(ran.stdout)


@pytest.fixture
def spark_with_broker(spark: Any, kafka_service: Any) -> Any:
    spark.conf.set("relay.test.bootstrap", kafka_service.bootstrap_servers)
    return spark


def test_delta_mirror_equal_then_changed_files_are_found_and_repaired(
    spark_with_broker: Any, relayed: tuple[str, Path], tmp_path: Path
) -> None:
    spark = spark_with_broker
    prefix, cfg = relayed
    out = tmp_path / "mirror"
    _mirror(spark, prefix, out, available_now=True).awaitTermination()
    for table, rows in ((f"{prefix}.orders", 108), (f"{prefix}.types", 4)):
        code, report = _verify(cfg, table, out)
        assert code == 0 and report["differences"] == [], (table, report["differences"])
        assert report["total"]["rows"] == rows and report["total"]["equal"] == rows, (table, report["total"])

    from deltalake import DeltaTable

    orders = DeltaTable(str(out / f"{prefix}.orders"))
    orders.update(updates={"status": "'TAMPERED'"}, predicate="id = 1001")
    orders.delete("id = 1002")
    code, report = _verify(cfg, f"{prefix}.orders", out)
    assert code == 1
    found = {(d["kind"], d["key"]["id"], tuple(c[0] for c in d["columns"])) for d in report["differences"]}
    assert found == {("different", "1001", ("status",)), ("missing", "1002", ())}
    diff = next(d for d in report["differences"] if d["kind"] == "different")
    assert diff["columns"] == [["status", "NEW", "TAMPERED"]]

    query = _mirror(spark, prefix, out, trigger_seconds=1.0)  # the mirror job, running meanwhile
    try:
        code, repaired = _verify(cfg, f"{prefix}.orders", out, "--repair", "--repair-timeout", "180")
    finally:
        query.stop()
    assert code == 0, repaired["repair"]
    assert repaired["repair"]["remaining"] == []
    code, again = _verify(cfg, f"{prefix}.orders", out)
    assert code == 0 and again["differences"] == []


def test_iceberg_mirror_equal(spark_with_broker: Any, relayed: tuple[str, Path], tmp_path: Path) -> None:
    prefix, cfg = relayed
    out = tmp_path / "iceberg"
    _mirror(spark_with_broker, prefix, out, "iceberg", available_now=True).awaitTermination()
    for table in (f"{prefix}.orders", f"{prefix}.types"):
        code, report = _verify(cfg, table, out, "--format", "iceberg")
        assert code == 0 and report["differences"] == [], (table, report["differences"])
        assert report["target"].startswith("mirror")


@pytest.mark.timeout(900)  # Spark's start, a mirror run, a job catching up: on a loaded 2-core machine
def test_a_stopped_mirror_is_waited_for_then_reported_not_verified(
    spark_with_broker: Any, relayed: tuple[str, Path], tmp_path: Path, mysql_service: Any
) -> None:
    spark = spark_with_broker
    prefix, cfg = relayed
    out = tmp_path / "mirror"
    _mirror(spark, prefix, out, available_now=True).awaitTermination()  # then the job is stopped
    code, report = _verify(cfg, f"{prefix}.orders", out)
    assert code == 0 and report["equal"], report["differences"]

    conn = mysql_service.connect()  # the relay publishes these; the stopped mirror never applies them
    later = {3, 9, 1004}  # shard d holds ids d * 1000 + 1..60 (_write)
    with conn.cursor() as cur:
        assert cur.execute(f"UPDATE {prefix}_00.orders_00 SET status = 'LATER' WHERE id IN (3, 9)") == 2
        assert cur.execute(f"UPDATE {prefix}_01.orders_00 SET status = 'LATER' WHERE id = 1004") == 1
    wait = 8.0
    began = time.monotonic()
    code, report = _verify(cfg, f"{prefix}.orders", out, "--wait", str(wait))
    took = time.monotonic() - began
    assert code == 3 and not report["equal"] and not report["verified"], report
    assert report["differences"] == [], report["differences"]
    assert {int(s["key"]["id"]) for s in report["skipped"]} == later, report["skipped"]
    assert all(f"--wait {wait:g} s" in s["reason"] for s in report["skipped"]), report["skipped"]
    assert report["seconds"] >= wait and took >= wait, (report["seconds"], took)

    query = _mirror(spark, prefix, out, trigger_seconds=1.0)  # the job again: the same check waits for it
    try:
        code, report = _verify(cfg, f"{prefix}.orders", out, "--wait", "120")
    finally:
        query.stop()
        conn.close()
    assert code == 0 and report["equal"] and report["total"]["skipped"] == 0, report
