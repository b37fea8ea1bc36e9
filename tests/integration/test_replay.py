"""``relay replay --remap`` on real MariaDB and a real broker: after a table gets its own topic, its history
moves there with the same values, keys and sequences; a re-run adds nothing (checkpoint); a run resumed from
an earlier point publishes nothing twice (what the destination holds is skipped); other tables stay put."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.relay_harness import (
    REPO_ROOT,
    Rec,
    RelayThread,
    master_position,
    read_to_end,
    read_topic,
    sharded_schema,
    write_configs,
)

SHARDS, TABLES, PARTITIONS = 2, 2, 2


@pytest.fixture()
def shards(mysql_service: Any) -> Iterator[str]:
    with sharded_schema(mysql_service, "rp", SHARDS, TABLES) as prefix:
        yield prefix


def mapping_v1(prefix: str) -> dict[str, Any]:
    """Every table of the logical db in one topic ``prefix`` (orders has no topic of its own yet)."""
    return {
        "version": 1,
        "topics": {"partitions": PARTITIONS},
        "unmapped": {"action": "drop"},
        "logical_dbs": {
            prefix: {
                "physical": [f"{prefix}_\\d+"],
                "tables": {"orders": {"physical": ["orders_\\d+"]}, "customers": {"physical": ["customers"]}},
            }
        },
    }


def workload(conn: Any, prefix: str) -> tuple[int, int]:
    """(order row changes, customer row changes), with one ALTER of an orders shard in between."""
    orders = 0
    with conn.cursor() as cur:
        for i in range(40):
            table = f"{prefix}_{i % SHARDS:02d}.orders_{i % TABLES:02d}"
            orders += cur.execute(f"INSERT INTO {table} VALUES (%s, 'NEW', 1.5, NULL)", (i,))
        cur.execute(f"ALTER TABLE {prefix}_00.orders_00 ADD COLUMN extra INT NULL")
        for i in range(0, 40, 3):
            orders += cur.execute(
                f"UPDATE {prefix}_{i % SHARDS:02d}.orders_{i % TABLES:02d} SET status='PAID' WHERE id=%s",
                (i,),
            )
        cur.execute(f"INSERT INTO {prefix}_00.customers VALUES (1, 'ann'), (2, 'bob')")
    return orders, 2


def replay(cfg: Path, prefix: str, *extra: str) -> dict[str, int]:
    out = subprocess.run(  # noqa: PLW1510 - the return code is asserted
        [sys.executable, "-m", "relay.cli", "replay", "-c", str(cfg), "--remap", "--from", prefix, *extra],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "replay:" in out.stderr  # progress lines
    counts = re.search(r"read (\d+), moved (\d+) .*kept (\d+), already there (\d+)", out.stdout)
    assert counts is not None, out.stdout
    return {
        "read": int(counts[1]),
        "moved": int(counts[2]),
        "kept": int(counts[3]),
        "present": int(counts[4]),
    }


def is_row(rec: Rec) -> bool:
    return not rec.json["isDdl"]


def test_replay_remap_moves_history_and_reruns_add_nothing_new(
    mysql_service: Any, kafka_service: Any, shards: str, tmp_path: Path
) -> None:
    prefix, bootstrap = shards, kafka_service.bootstrap_servers
    conn = mysql_service.connect()
    cfg = write_configs(
        tmp_path,
        mysql=mysql_service,
        bootstrap=bootstrap,
        mapping=mapping_v1(prefix),
        start=master_position(conn),
        instance=prefix,
    )
    order_changes, customer_changes = workload(conn, prefix)
    with RelayThread(cfg):
        old = read_topic(
            bootstrap,
            prefix,
            until=lambda rs: (
                sum(map(is_row, rs)) >= order_changes + customer_changes and any(not is_row(r) for r in rs)
            ),
        )
    conn.close()
    old_orders = {int(r.json["sequence"]): r for r in old if is_row(r) and r.json["table"] == "orders"}
    assert len(old_orders) == order_changes

    edit = [
        sys.executable,
        "-m",
        "relay.cli",
        "mapping",
        "topic",
        "set",
        f"{prefix}.orders",
        f"{prefix}.orders",
        "-c",
        str(cfg),
    ]
    assert subprocess.run(edit, check=False, cwd=REPO_ROOT, capture_output=True, timeout=60).returncode == 0

    first = replay(cfg, prefix, "--chunk", "7")
    assert first["moved"] == order_changes + 1  # every order change + the ALTER (once, not per partition)
    assert first["kept"] == customer_changes
    moved = read_topic(
        bootstrap,
        f"{prefix}.orders",
        until=lambda rs: (
            sum(map(is_row, rs)) >= order_changes and sum(not is_row(r) for r in rs) >= PARTITIONS
        ),
    )
    rows = {int(r.json["sequence"]): r for r in moved if is_row(r)}
    assert rows.keys() == old_orders.keys()
    for seq, rec in rows.items():
        was = old_orders[seq]
        assert (rec.value, rec.key) == (was.value, was.key)  # same logical names, key and sequence
        assert rec.headers["relay.sequence"] == was.headers["relay.sequence"]
        assert rec.headers["relay.replay.from"] == f"{prefix}:{was.partition}:{was.offset}".encode()
    assert sorted(r.partition for r in moved if not is_row(r)) == list(range(PARTITIONS))  # a barrier again

    assert replay(cfg, prefix)["moved"] == 0  # the checkpoint: a re-run adds nothing

    checkpoint = tmp_path / "var" / prefix / f"replay-{prefix}.json"
    saved = json.loads(checkpoint.read_text())
    assert saved["mapping_version"] == 2
    saved["offsets"][prefix]["0"] = 0  # as if interrupted before partition 0 was done: resume from there
    checkpoint.write_text(json.dumps(saved))
    again = replay(cfg, prefix)
    assert again["moved"] == 0 and again["present"] > 0  # already there: skipped, not published twice

    everything = read_to_end(bootstrap, f"{prefix}.orders")
    assert sorted(int(r.json["sequence"]) for r in everything if is_row(r)) == sorted(old_orders)
    assert len(everything) == len(moved)
