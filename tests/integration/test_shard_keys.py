"""Record keys unique across shards, and key changes, end to end on real MariaDB servers and a real broker.

Two servers, one relay each, feed ONE logical topic whose shards reuse primary keys (every ``orders_NN``
has its own ids 1, 2, 3…): with ``key_shard: physical`` the state rebuilt from the topic by record key
equals SELECT over both servers' shards, no row lost to a key collision. A key-changing UPDATE on a
compacted topic leaves no row under the old key: a DELETE, then a tombstone after it in the old key's
partition, then an INSERT under the new key. The topic is read back with an independent assign()-based
consumer, and each key's records are applied in their partition's offset order (never re-sorted by
sequence); the same records mirrored by Spark (``apply_changes``) equal SELECT too, every column, each key
with its shard — and mirroring them again, or in two batches, gives the same table.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.relay_harness import (
    Rec,
    RelayThread,
    master_position,
    read_topic,
    write_configs,
)
from tests.mirror_check import (
    assert_mirror_equals,
    assert_rebuilds_the_same,
    mirror_records,
    rows_by_key,
    select_rows,
)

COLUMNS = ("id", "status", "amount")
Row = dict[str, str | None]


def mapping(
    prefix: str, *, key_shard: str = "physical", config: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "version": 1,
        "topics": {"partitions": 3, "create": True, "config": config or {}},
        "unmapped": {"action": "drop"},
        "logical_dbs": {
            prefix: {
                "physical": [f"{prefix}_\\d+"],
                "tables": {
                    "orders": {
                        "physical": ["orders_\\d+"],
                        "topic": f"{prefix}.orders",
                        "key_shard": key_shard,
                    }
                },
            }
        },
    }


@contextlib.contextmanager
def shards(service: Any, prefix: str, dbs: range, tables: int) -> Iterator[list[str]]:
    """``{prefix}_NN.orders_NN`` for NN in ``dbs``: the physical tables, dropped afterwards."""
    names = [f"{prefix}_{d:02d}.orders_{t:02d}" for d in dbs for t in range(tables)]
    with contextlib.closing(service.connect()) as conn, conn.cursor() as cur:
        for d in dbs:
            cur.execute(f"CREATE DATABASE {prefix}_{d:02d}")
        for name in names:
            cur.execute(
                f"CREATE TABLE {name} (id BIGINT PRIMARY KEY, status VARCHAR(16), amount DECIMAL(12,2)) "
                "ENGINE=InnoDB"
            )
    try:
        yield names
    finally:
        with contextlib.closing(service.connect()) as conn, conn.cursor() as cur:
            for d in dbs:
                cur.execute(f"DROP DATABASE IF EXISTS {prefix}_{d:02d}")


def workload(conn: Any, tables: list[str]) -> int:
    """The same ids in every table: inserts, updates, deletes and one key change per table.
    Returns the records the relay publishes for them (a key change makes two)."""
    records = 0
    with conn.cursor() as cur:
        for name in tables:
            for i in range(1, 7):
                records += cur.execute(f"INSERT INTO {name} VALUES (%s, 'NEW', %s)", (i, f"{i}.25"))
            records += cur.execute(f"UPDATE {name} SET status = 'PAID' WHERE id IN (1, 4)")
            records += cur.execute(f"DELETE FROM {name} WHERE id = 3")
            records += 2 * cur.execute(f"UPDATE {name} SET id = 20 WHERE id = 2")  # DELETE + INSERT
            records += cur.execute(f"UPDATE {name} SET amount = amount + 1 WHERE id = 20")
    return records


def select_all(service: Any, tables: list[str]) -> dict[str, Row]:
    """SELECT over the shards, keyed by the key the relay should make for each row."""
    out: dict[str, Row] = {}
    with contextlib.closing(service.connect()) as conn, conn.cursor() as cur:
        for name in tables:
            cur.execute(f"SELECT CAST(id AS CHAR), status, CAST(amount AS CHAR) FROM {name}")
            for row in cur.fetchall():
                key = json.dumps({"_shard": name, "id": row[0]}, separators=(",", ":"))
                out[key] = dict(zip(COLUMNS, row, strict=True))
    return out


def rebuild(records: list[Rec]) -> dict[str, Row]:
    """The latest state by record key, each key's records applied in their partition's offset order
    (a tombstone or a DELETE removes the key)."""
    state: dict[str, Row] = {}
    for rec in sorted(records, key=lambda r: (r.partition, r.offset)):
        key = (rec.key or b"").decode()
        if rec.value is None or rec.json["type"] == "DELETE":
            state.pop(key, None)
        elif not rec.json["isDdl"]:
            state[key] = {c: rec.json["data"][0][c] for c in COLUMNS}
    return state


def row_records(records: list[Rec]) -> list[Rec]:
    return [r for r in records if r.value is not None and not r.json["isDdl"]]


def relay_config(tmp: Path, service: Any, bootstrap: str, prefix: str, instance: str, **kw: Any) -> Path:
    with contextlib.closing(service.connect()) as conn:
        start = master_position(conn)
    return write_configs(
        tmp, mysql=service, bootstrap=bootstrap, mapping=mapping(prefix, **kw), start=start, instance=instance
    )


def test_two_servers_one_logical_topic_with_overlapping_ids_lose_no_row(
    spark: Any, mysql_service: Any, mysql_server_factory: Any, kafka_service: Any, tmp_path: Path
) -> None:
    other = mysql_server_factory()
    prefix = f"sk{tmp_path.name[-6:].replace('-', '')}".lower()
    bootstrap = kafka_service.bootstrap_servers
    with (
        shards(mysql_service, prefix, range(0, 2), 2) as tables_a,
        shards(other, prefix, range(2, 4), 2) as tables_b,
    ):
        cfg_a = relay_config(tmp_path / "a", mysql_service, bootstrap, prefix, f"{prefix}a")
        cfg_b = relay_config(tmp_path / "b", other, bootstrap, prefix, f"{prefix}b")
        with RelayThread(cfg_a) as relay_a, RelayThread(cfg_b) as relay_b:
            with contextlib.closing(mysql_service.connect()) as a, contextlib.closing(other.connect()) as b:
                expected = workload(a, tables_a) + workload(b, tables_b)
            records = read_topic(
                bootstrap, f"{prefix}.orders", until=lambda rs: len(row_records(rs)) >= expected
            )
            assert relay_a.error is None and relay_b.error is None
        want = {**select_all(mysql_service, tables_a), **select_all(other, tables_b)}
        with contextlib.closing(mysql_service.connect()) as a, contextlib.closing(other.connect()) as b:
            selected = {
                **select_rows(a, tables_a, key_shard=True),
                **select_rows(b, tables_b, key_shard=True),
            }

    rows = row_records(records)
    assert len(rows) == expected  # every change once; no tombstones: the topic is not compacted
    assert len(want) == 4 * 2 * 5  # 8 tables x ids 1, 4, 5, 6, 20: equal ids of 8 shards, all kept
    assert rebuild(records) == want
    # the key's shape: the physical table first, then the primary key; it names the record's source
    for rec in rows:
        key = json.loads(rec.key or b"")
        src = rec.json["source"]
        assert list(key) == ["_shard", "id"] and key["_shard"] == f"{src['database']}.{src['table']}"
    # per key, log order is binlog order (one key = one shard = one server's binlog)
    by_key: dict[bytes, list[Rec]] = {}
    for rec in sorted(rows, key=lambda r: (r.partition, r.offset)):
        by_key.setdefault(rec.key or b"", []).append(rec)
    for recs in by_key.values():
        assert len({r.partition for r in recs}) == 1
        seqs = [r.json["sequence"] for r in recs]
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    # keyed by the primary key alone, the same records would collapse the shards' rows into 5
    naive = {json.loads(r.key or b"")["id"] for r in rows if r.json["type"] != "DELETE"}
    assert len(naive) < len(want)
    # The Spark mirror of the same records equals SELECT over both servers, every column, keys with their
    # shard; applied again, or rebuilt in two batches, it is the same table.
    assert len(selected) == len(want)
    mirrored = mirror_records(spark, records, tmp_path / "mirror", f"{prefix}.orders")
    assert_mirror_equals(rows_by_key(mirrored), selected)
    assert_rebuilds_the_same(
        spark, records, tmp_path / "mirror", tmp_path / "rebuilt", f"{prefix}.orders", mirrored
    )


def test_key_change_on_a_compacted_topic_leaves_no_row_under_the_old_key(
    spark: Any, mysql_service: Any, kafka_service: Any, tmp_path: Path
) -> None:
    prefix = f"kc{tmp_path.name[-6:].replace('-', '')}".lower()
    bootstrap = kafka_service.bootstrap_servers
    with shards(mysql_service, prefix, range(0, 2), 1) as tables:
        cfg = relay_config(
            tmp_path, mysql_service, bootstrap, prefix, prefix, config={"cleanup.policy": "compact"}
        )
        with RelayThread(cfg) as relay:
            with contextlib.closing(mysql_service.connect()) as conn:
                expected = workload(conn, tables)
            tombstones = 2 * len(tables)  # after each key change's DELETE and each ordinary DELETE
            records = read_topic(
                bootstrap,
                f"{prefix}.orders",
                until=lambda rs: (
                    len(row_records(rs)) >= expected and sum(r.value is None for r in rs) >= tombstones
                ),
            )
            assert relay.error is None
        want = select_all(mysql_service, tables)
        with contextlib.closing(mysql_service.connect()) as conn:
            selected = select_rows(conn, tables, key_shard=True)

    # Tansu keeps every record (it does not compact on demand): the records themselves are checked.
    assert len(row_records(records)) == expected
    assert sum(r.value is None for r in records) == tombstones
    state = rebuild(records)
    assert state == want
    for name in tables:
        old_key = json.dumps({"_shard": name, "id": "2"}, separators=(",", ":")).encode()
        new_key = json.dumps({"_shard": name, "id": "20"}, separators=(",", ":")).encode()
        assert old_key.decode() not in state and new_key.decode() in state
        old = sorted((r for r in records if r.key == old_key), key=lambda r: r.offset)
        # the old key's partition: INSERT, the key change's DELETE (part 0), then its tombstone
        assert len({r.partition for r in old}) == 1
        assert [r.json["type"] for r in old[:-1]] == ["INSERT", "DELETE"] and old[-1].value is None
        delete, tombstone = old[-2], old[-1]
        assert delete.json["part"] == 0 and delete.headers["relay.part"] == b"0"
        assert tombstone.offset > delete.offset and tombstone.headers == delete.headers
        new = sorted((r for r in records if r.key == new_key), key=lambda r: r.offset)
        assert [r.json["type"] for r in new] == ["INSERT", "UPDATE"]
        insert = new[0]
        assert insert.json["part"] == 1 and insert.json["sequence"] == delete.json["sequence"]
        assert insert.json["data"][0]["id"] == "20" and delete.json["data"][0]["id"] == "2"
    # the ordinary DELETE of id 3 is followed by its tombstone too
    for name in tables:
        gone = json.dumps({"_shard": name, "id": "3"}, separators=(",", ":")).encode()
        recs = sorted((r for r in records if r.key == gone), key=lambda r: r.offset)
        assert [r.value is None for r in recs] == [False, False, True]
        assert "part" not in recs[1].json and recs[1].json["type"] == "DELETE"
    # The Spark mirror of the same records (tombstones included) equals SELECT: nothing under an old key.
    mirrored = rows_by_key(mirror_records(spark, records, tmp_path / "mirror", f"{prefix}.orders"))
    assert_mirror_equals(mirrored, selected)
    assert all(key[1] not in ("2", "3") for key in mirrored)


@pytest.mark.parametrize("codec", ["canal-protobuf"])
def test_key_change_in_canal_protobuf_is_a_delete_then_an_insert(
    mysql_service: Any, kafka_service: Any, tmp_path: Path, codec: str
) -> None:
    from relay.canal.entry import EventType
    from relay.canal.proto.convert import decode_messages_packet

    prefix = f"kp{tmp_path.name[-6:].replace('-', '')}".lower()
    bootstrap = kafka_service.bootstrap_servers
    with shards(mysql_service, prefix, range(0, 1), 1) as tables:
        tree = mapping(prefix)
        tree["defaults"] = {"codec": codec}
        with contextlib.closing(mysql_service.connect()) as conn:
            start = master_position(conn)
        cfg = write_configs(
            tmp_path, mysql=mysql_service, bootstrap=bootstrap, mapping=tree, start=start, instance=prefix
        )
        with RelayThread(cfg):
            with contextlib.closing(mysql_service.connect()) as conn, conn.cursor() as cur:
                cur.execute(f"INSERT INTO {tables[0]} VALUES (2, 'NEW', 1.00)")
                cur.execute(f"UPDATE {tables[0]} SET id = 20 WHERE id = 2")
            records = read_topic(bootstrap, f"{prefix}.orders", until=lambda rs: len(rs) >= 3)
    by_key: dict[str, list[tuple[EventType, str | None]]] = {}
    for rec in sorted(records, key=lambda r: (r.partition, r.offset)):  # per key: log order
        _, (entry,) = decode_messages_packet(rec.value)
        part = dict(entry.header.props).get("relay.part")
        by_key.setdefault(json.loads(rec.key or b"")["id"], []).append((entry.header.event_type, part))
    assert by_key == {
        "2": [(EventType.INSERT, None), (EventType.DELETE, "0")],
        "20": [(EventType.INSERT, "1")],
    }
