"""The relay end to end on real MariaDB and a real broker: sharded rows land in their logical topic with
the right key, headers and values, in binlog order per key; a DDL reaches every partition and the audit
topic; bad configs and mappings are refused before anything is published."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.relay_harness import (
    Rec,
    RelayThread,
    apply_records,
    expected_partition,
    master_position,
    read_topic,
    select_orders,
    sharded_mapping,
    sharded_schema,
    topic_exists,
    write_configs,
)

SHARDS, TABLES = 3, 2


@pytest.fixture()
def shards(mysql_service: Any) -> Iterator[str]:
    with sharded_schema(mysql_service, "rl", SHARDS, TABLES) as prefix:
        yield prefix


def workload(conn: Any, prefix: str) -> int:
    """Inserts, updates and deletes across every shard; ids unique across shards. Returns row changes."""
    changes = 0
    with conn.cursor() as cur:
        for i in range(60):
            d, t = i % SHARDS, (i // SHARDS) % TABLES
            changes += cur.execute(
                f"INSERT INTO {prefix}_{d:02d}.orders_{t:02d} VALUES (%s, 'NEW', %s, %s)",
                (i, f"{i}.50", None if i % 7 else "first"),
            )
        for i in range(0, 60, 4):
            d, t = i % SHARDS, (i // SHARDS) % TABLES
            changes += cur.execute(
                f"UPDATE {prefix}_{d:02d}.orders_{t:02d} SET status='PAID', note='n' WHERE id=%s", (i,)
            )
        cur.execute(f"ALTER TABLE {prefix}_01.orders_00 ADD COLUMN extra INT NULL")
        for i in range(0, 60, 5):
            d, t = i % SHARDS, (i // SHARDS) % TABLES
            changes += cur.execute(f"DELETE FROM {prefix}_{d:02d}.orders_{t:02d} WHERE id=%s", (i,))
        cur.execute(f"INSERT INTO {prefix}_00.customers VALUES (1, 'ann')")
        changes += 1
        for i in range(1, 60, 6):  # a second change of the same keys, after the DDL
            d, t = i % SHARDS, (i // SHARDS) % TABLES
            changes += cur.execute(
                f"UPDATE {prefix}_{d:02d}.orders_{t:02d} SET amount=amount+1 WHERE id=%s", (i,)
            )
    return changes


def rows_of(records: list[Rec]) -> list[Rec]:
    return [r for r in records if not r.json["isDdl"]]


def test_sharded_rows_reach_their_logical_topic_with_key_headers_and_order(
    mysql_service: Any, kafka_service: Any, shards: str, tmp_path: Path
) -> None:
    prefix = shards
    conn = mysql_service.connect()
    cfg = write_configs(
        tmp_path,
        mysql=mysql_service,
        bootstrap=kafka_service.bootstrap_servers,
        mapping=sharded_mapping(prefix, partitions=3),
        start=master_position(conn),
        instance=prefix,
    )
    with RelayThread(cfg) as running:
        changes = workload(conn, prefix)
        order_changes = changes - 1  # one went to customers
        topic = f"{prefix}.orders"
        records = read_topic(
            kafka_service.bootstrap_servers,
            topic,
            until=lambda rs: (
                len({r.json["sequence"] for r in rows_of(rs)}) >= order_changes
                and sum(r.json["isDdl"] for r in rs) >= 3
            ),
        )
        customers = read_topic(kafka_service.bootstrap_servers, prefix, until=lambda rs: len(rs) >= 1)
        audit = read_topic(kafka_service.bootstrap_servers, f"{prefix}.ddl", until=lambda rs: len(rs) >= 1)
        assert running.error is None

    rows = rows_of(records)
    # every change once (no broker trouble here: no repeats either), values equal SELECT
    assert len(rows) == order_changes
    assert apply_records(records) == select_orders(conn, prefix, SHARDS, TABLES)
    for rec in rows:
        msg = rec.json
        assert (msg["database"], msg["table"]) == (prefix, "orders")
        src = msg["source"]
        assert src["database"].startswith(f"{prefix}_") and src["table"].startswith("orders_")
        assert rec.headers["relay.db"] == prefix.encode() and rec.headers["relay.table"] == b"orders"
        assert rec.headers["relay.physical.db"] == src["database"].encode()
        assert rec.headers["relay.physical.table"] == src["table"].encode()
        assert rec.headers["relay.type"] == msg["type"].encode()
        assert rec.headers["relay.tag"] == b"orders"
        assert json.loads(rec.key or b"") == {"id": msg["data"][0]["id"]}
        assert rec.partition == expected_partition(rec.key or b"", 3)
        assert msg["pkNames"] == ["id"]
        if msg["type"] == "UPDATE":
            assert set(msg["old"][0]) < set(msg["data"][0]), "old holds only the changed columns"
    # binlog order per key: within each partition, a key's sequences increase with the offset
    by_key: dict[bytes, list[Rec]] = {}
    for rec in sorted(rows, key=lambda r: (r.partition, r.offset)):
        by_key.setdefault(rec.key or b"", []).append(rec)
    for recs in by_key.values():
        seqs = [r.json["sequence"] for r in recs]
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    # the DDL: on every partition of the logical topic, between the rows before and after it, and audited
    ddl = [r for r in records if r.json["isDdl"]]
    assert sorted(r.partition for r in ddl) == [0, 1, 2]
    assert all("ADD COLUMN extra" in r.json["sql"] and r.json["type"] == "ALTER" for r in ddl)
    assert len({r.json["sequence"] for r in ddl}) == 1
    ddl_seq = ddl[0].json["sequence"]
    for part in range(3):
        in_part = sorted((r for r in records if r.partition == part), key=lambda r: r.offset)
        seqs = [r.json["sequence"] for r in in_part]
        assert seqs == sorted(seqs), f"partition {part} out of binlog order"
        assert ddl_seq in seqs
    assert [r.json["sql"] for r in audit if "ADD COLUMN extra" in r.json["sql"]]
    # the unsharded table: the logical db's own topic
    assert customers[0].json["table"] == "customers" and customers[0].json["data"] == [
        {"id": "1", "name": "ann"}
    ]
    # the saved position covers everything published
    status = json.loads((tmp_path / "var" / prefix / "status.json").read_text())
    assert status["state"] == "stopped" and status["batches_acked"] > 0


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "relay.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.mark.parametrize(
    ("relay_extra", "mapping_change", "named"),
    [
        ({"source": {"port": "not-a-port"}}, None, "source.port"),
        ({"kafka": {"settings": {"acks": "1"}}}, None, "kafka.settings.acks"),
        ({"store": {"buffer_size": 1000}}, None, "store.buffer_size"),
        (None, ("physical", ["orders_(\\d+"]), "orders.physical[0]"),
        (None, ("key", ["no_such_column"]), "key[0]"),
    ],
)
def test_invalid_config_or_mapping_is_refused_naming_the_key_and_nothing_is_published(
    mysql_service: Any,
    kafka_service: Any,
    shards: str,
    tmp_path: Path,
    relay_extra: dict[str, Any] | None,
    mapping_change: tuple[str, Any] | None,
    named: str,
) -> None:
    prefix = shards
    conn = mysql_service.connect()
    mapping = sharded_mapping(prefix)
    if mapping_change:
        mapping["logical_dbs"][prefix]["tables"]["orders"][mapping_change[0]] = mapping_change[1]
    cfg = write_configs(
        tmp_path,
        mysql=mysql_service,
        bootstrap=kafka_service.bootstrap_servers,
        mapping=mapping,
        start=master_position(conn),
        instance=prefix,
        extra=relay_extra,
    )
    with conn.cursor() as cur:
        cur.execute(f"INSERT INTO {prefix}_00.orders_00 VALUES (1, 'NEW', 1.00, NULL)")
    result = run_cli("run", "-c", str(cfg))
    assert result.returncode != 0
    assert named in result.stderr, result.stderr
    topic = f"{prefix}.orders"
    if topic_exists(kafka_service.bootstrap_servers, topic):  # a key column is only checked at the first row
        with pytest.raises(AssertionError, match="condition not met"):
            read_topic(kafka_service.bootstrap_servers, topic, until=lambda rs: len(rs) > 0, timeout=3)
    assert not (tmp_path / "var" / prefix / "position.json").exists()
