"""A logical table moved to another topic while the relay runs keeps per-key order in its new topic.

On real MariaDB and a real broker, ``relay run`` as a child process, everything judged from what reached
Kafka, read partition by partition in offset order — never re-sorted by the relay's sequence:

- moved under continuous writes, the relay SIGKILLed in the middle of the history copy and restarted:
  in the new topic every key's changes are in binlog order, the copied history before every change
  published after the switch; no change is published live under both mappings; a consumer keeping the
  last record per key (what compaction leaves) and Flink SQL's ``canal-json`` both end equal to SELECT;
- moved back by ``relay mapping rollback`` (idempotent and transactional): the old topic gets the changes
  made while the table was away before its new ones, and again ends equal to SELECT by offset order, by last
  record per key and in Flink;
- ``relay replay --remap`` of history into a topic that already has the table's newer changes (a switch
  made with ``mapping.move: switch``) is refused and publishes nothing.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from relay.kafka.codec import sequence
from relay.positions.store import ResumePoint
from tests.flink_check import flink_state
from tests.integration.relay_harness import (
    REPO_ROOT,
    Rec,
    RelayProcess,
    Writer,
    apply_records,
    master_position,
    read_to_end,
    read_topic,
    select_orders,
    sharded_schema,
    wait_for,
    write_configs,
)

SHARDS, TABLES, PARTITIONS = 2, 2, 3
COLUMNS = ["id", "status", "amount", "note"]
FROM = "relay.replay.from"


@pytest.fixture()
def prefix(mysql_service: Any) -> Iterator[str]:
    with sharded_schema(mysql_service, "mv", SHARDS, TABLES) as made:
        yield made


def mapping_v1(prefix: str) -> dict[str, Any]:
    """Every table of the logical db in the db's topic ``prefix``, compacted (DELETEs get tombstones)."""
    return {
        "version": 1,
        "topics": {"partitions": PARTITIONS, "create": True, "config": {"cleanup.policy": "compact"}},
        "unmapped": {"action": "drop"},
        "logical_dbs": {
            prefix: {
                "physical": [f"{prefix}_\\d+"],
                "tables": {"orders": {"physical": ["orders_\\d+"]}, "customers": {"physical": ["customers"]}},
            }
        },
    }


def configure(
    tmp: Path,
    mysql: Any,
    bootstrap: str,
    prefix: str,
    conn: Any,
    *,
    transactions: bool = False,
    **mapping: Any,
) -> Path:
    """The relay's config; ``mapping``: settings of its ``mapping`` section (``move``, ``move_rate``)."""
    return write_configs(
        tmp,
        mysql=mysql,
        bootstrap=bootstrap,
        mapping=mapping_v1(prefix),
        start=master_position(conn),
        instance=prefix,
        include=f"{prefix}_\\d+\\..*",
        extra={
            "mapping": {"reload_check_seconds": 0.2, **mapping},
            "logging": {"level": "INFO"},
            "publish": {
                "batch_size": 64,
                "max_inflight_batches": 4,
                "retry": {"initial": 0.2, "maximum": 2.0},
            },
            "kafka": {
                "bootstrap_servers": bootstrap,
                "ddl_topic": f"{prefix}.ddl",
                "transactions": transactions,
            },
        },
    )


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "relay.cli", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def move_orders(prefix: str, cfg: Path) -> None:
    """``relay mapping table set PREFIX.orders --topic PREFIX.orders``: orders gets a topic of its own."""
    edit = cli("mapping", "table", "set", f"{prefix}.orders", "--topic", f"{prefix}.orders", "-c", str(cfg))
    assert edit.returncode == 0, edit.stderr


def is_orders_row(rec: Rec) -> bool:
    """An orders row change (not a tombstone, a DDL or another table's record), by its headers."""
    return (
        rec.value is not None
        and rec.headers.get("relay.table") == b"orders"
        and rec.headers.get("relay.type") in (b"INSERT", b"UPDATE", b"DELETE")
    )


def orders_rows(records: list[Rec]) -> list[Rec]:
    return [r for r in records if is_orders_row(r)]


def counting(minimum: int, copied: bool | None = None) -> Callable[[list[Rec]], bool]:
    """A ``read_topic`` condition: at least ``minimum`` orders row changes (only copies with True, only
    live ones with False), looking at each record once."""
    seen = 0
    looked = 0

    def until(records: list[Rec]) -> bool:
        nonlocal seen, looked
        for rec in records[looked:]:
            if is_orders_row(rec) and (copied is None or (FROM in rec.headers) == copied):
                seen += 1
        looked = len(records)
        return seen >= minimum

    return until


def identity(rec: Rec) -> tuple[int, int]:
    return int(rec.headers["relay.sequence"]), int(rec.headers.get("relay.part", b"0"))


def in_offset_order(records: list[Rec]) -> list[Rec]:
    """Each partition in the order the broker gave its records (offsets): how a consumer reads it."""
    return sorted(records, key=lambda r: (r.topic, r.partition, r.offset))


def last_record_per_key(records: list[Rec]) -> dict[str, dict[str, str | None]]:
    """What log compaction leaves: per key, the record at the highest offset; a DELETE or a tombstone
    leaves no row."""
    last: dict[bytes, Rec] = {}
    for rec in in_offset_order(records):
        if rec.key is not None and (rec.value is None or rec.headers.get("relay.table") == b"orders"):
            last[rec.key] = rec
    state: dict[str, dict[str, str | None]] = {}
    for rec in last.values():
        if rec.value is None or rec.json["type"] == "DELETE" or rec.json["isDdl"]:
            continue
        row = rec.json["data"][0]
        state[str(row["id"])] = {c: row.get(c) for c in COLUMNS}
    return state


def history_first(records: list[Rec]) -> tuple[int, int]:
    """In every partition, no copied record (``relay.replay.from``) after a record published live there.
    Returns (copied, live) row records."""
    copied = live = 0
    for partition in {r.partition for r in records}:
        seen_live = None
        for rec in in_offset_order([r for r in records if r.partition == partition]):
            if FROM in rec.headers:
                assert seen_live is None, (
                    f"partition {partition}: copied record at offset {rec.offset} after the live record at "
                    f"offset {seen_live}"
                )
                copied += 1
            else:
                seen_live = rec.offset
                live += 1
    return copied, live


def check_topic(records: list[Rec], expected: dict[str, dict[str, str | None]], work: Path) -> None:
    """Per key in binlog order by offset; the state by offset order, by last record per key and in
    Flink SQL's canal-json all equal to SELECT."""
    rows = in_offset_order(orders_rows(records))
    assert apply_records(rows) == expected  # asserts per key: every change after the one before
    assert last_record_per_key(records) == expected
    values = [r.value for r in in_offset_order(records) if r.headers.get("relay.table") in (b"orders", None)]
    assert flink_state(values, "id", COLUMNS, work) == expected


def caught_up(proc: RelayProcess, conn: Any) -> None:
    end = master_position(conn)
    wait_for(
        lambda: bool(proc.position()) and sequence(*_point(proc), 0) >= sequence(end[0], end[1], 0),
        90,
        "the relay's saved position to reach the binlog end",
    )


def _point(proc: RelayProcess) -> tuple[str, int]:
    point = ResumePoint.from_json(proc.position())
    return point.journal, point.offset


def test_a_table_moved_under_writes_through_a_sigkill_keeps_each_keys_order(
    mysql_service: Any, kafka_service: Any, prefix: str, tmp_path: Path
) -> None:
    bootstrap, conn = kafka_service.bootstrap_servers, mysql_service.connect()
    cfg = configure(tmp_path, mysql_service, bootstrap, prefix, conn, move_rate=300)
    writer = Writer(mysql_service, prefix, SHARDS, TABLES, rate=50)
    relay = RelayProcess(cfg, tmp_path / "relay0.log").start()
    writer.start()
    try:
        read_topic(bootstrap, prefix, until=counting(1500), timeout=120)
        edit = cli(
            "mapping", "table", "set", f"{prefix}.orders", "--topic", f"{prefix}.orders", "-c", str(cfg)
        )
        assert edit.returncode == 0, edit.stderr
        wait_for(
            lambda: (relay.status().get("mapping_move") or {}).get("copied", 0) >= 400,
            90,
            "the history copy under way",
        )
        assert relay.status()["mapping_version"] == 1, "switched before the kill: not in the middle"
        relay.signal(signal.SIGKILL)
        relay.wait(10)

        relay = RelayProcess(cfg, tmp_path / "relay1.log").start()
        wait_for(lambda: relay.status().get("mapping_version") == 2, 120, "the switch after the copy")
        moved = relay.status()
        assert moved.get("mapping_move") is None
        # Live changes into the new topic after the switch, the writer still going.
        read_topic(bootstrap, f"{prefix}.orders", until=counting(200, copied=False), timeout=90)
    finally:
        writer.stop()
    caught_up(relay, conn)
    expected = select_orders(conn, prefix, SHARDS, TABLES)
    old = read_to_end(bootstrap, prefix)
    old_changes = {identity(r) for r in orders_rows(old)}
    new = read_to_end(bootstrap, f"{prefix}.orders")
    copied, live = history_first(orders_rows(new))
    assert copied >= 1500 and live >= 200
    live_changes = {identity(r) for r in orders_rows(new) if FROM not in r.headers}
    assert not live_changes & old_changes, "a change published under both mappings"
    assert {identity(r) for r in orders_rows(new)} == old_changes | live_changes
    check_topic(new, expected, tmp_path)
    conn.close()


@pytest.mark.parametrize("transactions", [False, True], ids=["idempotent", "transactional"])
def test_a_rollback_moves_the_table_back_with_the_changes_made_while_away(
    mysql_service: Any, kafka_service: Any, prefix: str, tmp_path: Path, transactions: bool
) -> None:
    bootstrap, conn = kafka_service.bootstrap_servers, mysql_service.connect()
    cfg = configure(tmp_path, mysql_service, bootstrap, prefix, conn, transactions=transactions)
    writer = Writer(mysql_service, prefix, SHARDS, TABLES, rate=50, seed=7)
    relay = RelayProcess(cfg, tmp_path / "relay.log").start()
    writer.start()
    try:
        read_topic(bootstrap, prefix, until=counting(300), timeout=90)
        edit = cli(
            "mapping", "table", "set", f"{prefix}.orders", "--topic", f"{prefix}.orders", "-c", str(cfg)
        )
        assert edit.returncode == 0, edit.stderr
        wait_for(lambda: relay.status().get("mapping_version") == 2, 90, "the move to the new topic")
        read_topic(bootstrap, f"{prefix}.orders", until=counting(300, copied=False), timeout=90)
        back = cli("mapping", "rollback", "1", "-c", str(cfg))
        assert back.returncode == 0, back.stderr
        wait_for(lambda: relay.status().get("mapping_version") == 3, 90, "the move back")
        # The writer keeps going: the old topic gets new live changes after the copies.
        back_at = writer.changes
        wait_for(lambda: writer.changes > back_at + 100, 60, "writes after the move back")
    finally:
        writer.stop()
    caught_up(relay, conn)
    expected = select_orders(conn, prefix, SHARDS, TABLES)
    away = read_to_end(bootstrap, f"{prefix}.orders")
    away_live = {identity(r) for r in orders_rows(away) if FROM not in r.headers}
    old = read_to_end(bootstrap, prefix)
    # What was published live while the table was away came back as copies, each once.
    back_copies = [r for r in orders_rows(old) if FROM in r.headers]
    assert {identity(r) for r in back_copies} == away_live
    assert len(back_copies) == len(away_live)
    check_topic(old, expected, tmp_path)
    conn.close()


def test_replay_behind_newer_changes_is_refused_and_publishes_nothing(
    mysql_service: Any, kafka_service: Any, prefix: str, tmp_path: Path
) -> None:
    bootstrap, conn = kafka_service.bootstrap_servers, mysql_service.connect()
    cfg = configure(tmp_path, mysql_service, bootstrap, prefix, conn, move="switch")
    relay = RelayProcess(cfg, tmp_path / "relay.log").start()
    with conn.cursor() as cur:
        for i in range(1, 21):
            cur.execute(f"INSERT INTO {prefix}_00.orders_00 VALUES (%s, 'NEW', 1.5, NULL)", (i,))
    read_topic(bootstrap, prefix, until=counting(20), timeout=60)
    move_orders(prefix, cfg)
    wait_for(lambda: relay.status().get("mapping_version") == 2, 60, "the switch without a copy")
    with conn.cursor() as cur:
        cur.execute(f"UPDATE {prefix}_00.orders_00 SET status = 'PAID' WHERE id <= 10")
    read_topic(bootstrap, f"{prefix}.orders", until=counting(10), timeout=60)
    relay.signal(signal.SIGTERM)
    assert relay.wait(30) == 0
    before = read_to_end(bootstrap, f"{prefix}.orders")
    assert len(before) == 10 and not any(FROM in r.headers for r in before)  # switched: no history copied

    done = cli("replay", "-c", str(cfg), "--remap", "--from", prefix)
    assert done.returncode != 0
    message = done.stderr.strip().splitlines()[-1]
    assert "refused" in message and f"{prefix}_00.orders_00 into {prefix}.orders" in message, done.stderr
    assert "nothing was published" in message
    after = read_to_end(bootstrap, f"{prefix}.orders")
    assert [(r.partition, r.offset) for r in after] == [(r.partition, r.offset) for r in before]
    assert {json.loads(r.value or b"{}")["type"] for r in after} == {"UPDATE"}
    conn.close()
