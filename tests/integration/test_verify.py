"""``relay verify`` against a running relay's topic, on real MariaDB and a real broker (``relay run`` and
``relay verify`` as child processes, the workload of ``snapshot_harness.KeyChangingWriter`` writing
throughout — inserts, updates, deletes, primary-key changes, multi-statement transactions):

- source and topic equal under continuous writes: exit status 0, zero differences, every row compared, the
  chunk digests computed by MySQL, and the general query log shows no locking statement and no write
  from the relay's account (which verify uses);
- four differences injected while the writes go on, each found and named by key (and column):
  a row inserted with ``sql_log_bin=0`` (missing on the topic), a row deleted that way (extra on the
  topic), a row updated that way (different, in ``status``), and a record "removed" from the topic — Tansu
  cannot delete records, so a tombstone (the key, a null value, no headers) is produced into the key's
  partition: the topic's latest state for the key is then a deletion, as after compaction removed the
  record. ``--repair`` snapshots exactly those keys through the relay (the deleted row as a snapshot DELETE
  followed by a tombstone on this compacted topic) and checks them again: exit status 0; the state rebuilt
  from the topic by an independent consumer (partition offset order) equals SELECT;
- usage errors exit with status 2; the metrics file carries ``relay_verify_*``;
- a record forged into the topic with an identity one binlog generation ahead of the relay (as a foreign
  producer, or a replay from another history, would leave it) — once with a changed value, once with the
  source's own — is a difference (never "changed during every pass", which made the run equal); ``--repair``
  moves the relay to a generation above it and re-snapshots the keys, after which the run is equal, and a
  later real change of the key is the topic's latest state (by change identity) too;
- ``--where``: each row that meets the condition is counted once — exactly SELECT COUNT(*) over the shards
  in a quiet state (seeded conditions), and never more than the keys that ever met it under writes.

Every wait is a condition with a deadline.
"""

from __future__ import annotations

import json
import random
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from relay.kafka.codec import GENERATION_SHIFT, sequence
from relay.kafka.partitioner import partition_for_key
from relay.positions.store import ResumePoint
from tests.integration.relay_harness import (
    Rec,
    RelayProcess,
    master_position,
    read_to_end,
    select_orders,
    single_table_mapping,
    wait_for,
)
from tests.integration.snapshot_harness import (
    FORBIDDEN,
    SHARDS,
    TABLES,
    Case,
    KeyChangingWriter,
    caught_up,
    relay_statements,
    run_cli,
    snapshot_case,
)

ROWS_PER_TABLE = 700  # 2,800 existing rows: several chunks per table at --chunk-rows 200


@pytest.fixture
def running(
    mysql_service: Any, kafka_service: Any, tmp_path: Path
) -> Iterator[tuple[Case, Path, RelayProcess]]:
    """Shards with existing rows, a relay that snapshotted them (compacted topic), its config."""
    with snapshot_case(mysql_service, kafka_service, tmp_path, ROWS_PER_TABLE) as case:
        mapping = single_table_mapping(case.prefix)
        mapping["topics"]["config"] = {"cleanup.policy": "compact"}
        cfg = case.configure(
            snapshot={"mode": "initial", "max_rows_per_second": 0, "chunk_rows": 500}, mapping=mapping
        )
        relay = case.relay(cfg)
        wait_for(lambda: bool((relay.status().get("snapshot") or {}).get("done")), 120, "the snapshot acked")
        yield case, cfg, relay


def verify(cfg: Path, table: str, *extra: str, timeout: float = 300) -> tuple[int, dict[str, Any], str]:
    ran = run_cli("verify", "-c", str(cfg), "--table", table, "--json", *extra, timeout=timeout)
    assert ran.returncode in (0, 1, 3), ran.stdout[-3000:] + ran.stderr[-3000:]
    return ran.returncode, json.loads(ran.stdout), ran.stderr


def test_equal_under_continuous_writes(running: tuple[Case, Path, RelayProcess], tmp_path: Path) -> None:
    case, cfg, _ = running
    writer = KeyChangingWriter(case.mysql, case.prefix, dict(case.existing), seed=11)
    writer.start()
    wait_for(lambda: writer.changes >= 300, 60, "writes flowing before the check")
    metrics = tmp_path / "verify.prom"
    code, report, _ = verify(cfg, case.topic, "--chunk-rows", "200", "--metrics-file", str(metrics))
    during = writer.changes
    writer.stop()
    assert during >= 600, "the writes went on during the check"
    assert report["differences"] == []
    total = report["total"]
    # equal only when every key was compared: a key that changed during every pass is not verified (exit 3)
    assert (code, report["equal"]) == ((0, True) if total["skipped"] == 0 else (3, False)), report["skipped"]
    assert {s["reason"] for s in report["skipped"]} <= {"changed during every pass"}
    assert total["rows"] == total["equal"] + total["skipped"]
    assert total["rows"] >= len(case.existing) * 0.9
    assert total["skipped"] <= 20, report["skipped"]
    assert {s["method"] for s in report["shards"]} == {"range"}
    assert sum(s["chunks"] for s in report["shards"]) >= SHARDS * TABLES * 3
    text = metrics.read_text()
    assert 'relay_verify_equal{instance="' in text and "} 1.0" in text.split("relay_verify_equal{", 1)[1]
    assert "relay_verify_rows_compared" in text
    # Digests were computed by the server, and nothing was locked or written.
    statements = relay_statements(case)
    assert any("SUM(CAST(CONV(LEFT(MD5(CONCAT(" in s for s in statements), statements[-5:]
    bad = [s for s in statements if s.startswith("Query") and FORBIDDEN.search(s.split(": ", 1)[1])]
    assert not bad, bad[:10]


def _inject(case: Case) -> dict[str, Any]:
    """The four differences; returns what each one is."""
    t00 = f"{case.prefix}_00.orders_00"
    ids = sorted(i for i, t in case.existing.items() if t == t00)
    gone, changed, dropped = ids[3], ids[4], ids[5]
    ghost = 9_000_001
    with case.conn.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        try:
            cur.execute(f"INSERT INTO {t00} VALUES (%s, 'GHOST', 1.00, NULL)", (ghost,))
            cur.execute(f"DELETE FROM {t00} WHERE id = %s", (gone,))
            cur.execute(f"UPDATE {t00} SET status = 'SILENT' WHERE id = %s", (changed,))
        finally:
            cur.execute("SET SESSION sql_log_bin = 1")
    key = json.dumps({"id": str(dropped)}, separators=(",", ":")).encode()
    producer = Producer({"bootstrap.servers": case.bootstrap})
    producer.produce(case.topic, key=key, value=None, partition=partition_for_key(key, 3))
    assert producer.flush(30) == 0
    return {"table": t00, "ghost": ghost, "gone": gone, "changed": changed, "dropped": dropped}


def _findings(report: dict[str, Any]) -> set[tuple[str, str, str, tuple[Any, ...]]]:
    return {
        (d["kind"], d["shard"], str(d["key"]["id"]), tuple(tuple(c) for c in d["columns"]))
        for d in report["differences"]
    }


def test_injected_differences_are_found_and_repaired(
    running: tuple[Case, Path, RelayProcess], monkeypatch: pytest.MonkeyPatch
) -> None:
    case, cfg, relay = running
    bad = run_cli("verify", "-c", str(cfg), "--table", "nodot")
    assert bad.returncode == 2 and "logical db.table" in bad.stderr, bad.stderr
    bad = run_cli("verify", "-c", str(cfg), "--table", case.topic, "--against", "parquet:/x")
    assert bad.returncode == 2 and "--against" in bad.stderr, bad.stderr
    bad = run_cli("verify", "-c", str(cfg), "--table", f"{case.prefix}.nosuch")
    assert bad.returncode == 2 and "no table" in bad.stderr, bad.stderr

    injected = _inject(case)
    spared = {injected[k] for k in ("gone", "changed", "dropped")}
    writer = KeyChangingWriter(
        case.mysql, case.prefix, {i: t for i, t in case.existing.items() if i not in spared}, seed=12
    )
    writer.start()
    wait_for(lambda: writer.changes >= 200, 60, "writes flowing")
    table = injected["table"]
    # the topic's first read split over forked processes (relay.ops.verify.topic_fork), whatever the load
    monkeypatch.setenv("RELAY_VERIFY_PROCESSES", "3")
    code, report, _ = verify(cfg, case.topic, "--chunk-rows", "200")
    monkeypatch.delenv("RELAY_VERIFY_PROCESSES")
    assert code == 1 and not report["equal"]
    assert _findings(report) == {
        ("missing", table, str(injected["ghost"]), ()),
        ("extra", table, str(injected["gone"]), ()),
        ("different", table, str(injected["changed"]), (("status", "SILENT", "OLD"),)),
        ("missing", table, str(injected["dropped"]), ()),
    }
    assert report["shards"][0]["name"] == table and report["shards"][0]["different"] == 1

    code, repaired, _ = verify(cfg, case.topic, "--chunk-rows", "200", "--repair", "--repair-timeout", "180")
    assert code == 0, repaired["repair"]
    assert repaired["repair"]["remaining"] == [] and repaired["repair"]["repaired"] == 4
    code, again, _ = verify(cfg, case.topic)
    assert code == 0 and again["differences"] == [], again["differences"]

    writer.stop()
    wait_for(lambda: caught_up(case, relay), 120, "the relay caught up")
    # Two more silent changes of one key, each repaired, with nothing written to the binlog in between: the
    # two repair snapshots sit at the same place (one sequence), and the second's row must still sort after
    # the first's, or the topic keeps the first and verify finds the key still different.
    for status in ("SILENT2", "SILENT3"):
        with case.conn.cursor() as cur:
            cur.execute("SET SESSION sql_log_bin = 0")
            try:
                cur.execute(f"UPDATE {table} SET status = %s WHERE id = %s", (status, injected["changed"]))
            finally:
                cur.execute("SET SESSION sql_log_bin = 1")
        code, again, _ = verify(cfg, case.topic, "--repair", "--repair-timeout", "180")
        assert code == 0 and again["repair"]["repaired"] == 1, (status, again["repair"])
    records = read_to_end(case.bootstrap, case.topic)
    relay.signal(signal.SIGTERM)
    assert relay.wait(30) == 0
    state = _latest_state(records)
    expected = select_orders(case.conn, case.prefix, SHARDS, TABLES)
    assert state == expected
    deletes = [
        r for r in records if r.headers.get("relay.type") == b"DELETE" and r.headers.get("relay.snapshot")
    ]
    assert [json.loads(r.key or b"{}")["id"] for r in deletes if r.value is not None] == [
        str(injected["gone"])
    ]
    after = next(
        r for r in records if r.partition == deletes[0].partition and r.offset == deletes[0].offset + 1
    )
    assert after.key == deletes[0].key and after.value is None, "a tombstone follows the snapshot DELETE"


def _latest_state(records: list[Rec]) -> dict[str, dict[str, str | None]]:
    """Latest state by key as a compacted topic keeps it: each partition in offset order, per key the
    record with the highest (sequence, part) — a null value (tombstone) deletes the key it names."""
    state: dict[str, tuple[tuple[int, int], dict[str, str | None] | None]] = {}
    for rec in sorted(records, key=lambda r: (r.partition, r.offset)):
        if rec.key is None or rec.key.startswith(b'{"_ddl"'):
            continue
        key = str(json.loads(rec.key)["id"])
        seq = rec.headers.get("relay.sequence")
        ident = (
            (int(seq), int(rec.headers.get("relay.part", b"0")))
            if seq
            else state.get(key, ((-1, -1), None))[0]
        )
        if key in state and ident < state[key][0]:
            continue
        if rec.value is None:
            state[key] = (ident, None)
            continue
        msg = rec.json
        row = msg["data"][0]
        value = (
            None if msg["type"] == "DELETE" else {k: row.get(k) for k in ("id", "status", "amount", "note")}
        )
        state[key] = (ident, value)
    return {k: v for k, (_, v) in state.items() if v is not None}


def _forge(case: Case, records: list[Rec], ident: int, generation: int, status: str | None) -> Rec:
    """Produce a copy of ``ident``'s latest record with an identity in binlog generation ``generation``
    (beyond anything the relay has published) and, with ``status``, another status; returns the original."""
    latest = max(
        (r for r in records if r.key == _key(ident) and r.value is not None),
        key=lambda r: (int(r.headers["relay.sequence"]), int(r.headers.get("relay.part", b"0"))),
    )
    end = master_position(case.conn)
    forged = sequence(end[0], end[1], 0, generation)
    msg = latest.json
    msg["sequence"], msg["id"] = forged, forged
    if status is not None:
        msg["data"][0]["status"] = status
    headers = {**latest.headers, "relay.sequence": str(forged).encode()}
    producer = Producer({"bootstrap.servers": case.bootstrap})
    producer.produce(
        case.topic,
        key=latest.key,
        value=json.dumps(msg, separators=(",", ":")).encode(),
        partition=latest.partition,
        headers=list(headers.items()),
    )
    assert producer.flush(30) == 0
    return latest


def _key(ident: int) -> bytes:
    return json.dumps({"id": str(ident)}, separators=(",", ":")).encode()


def test_a_forged_future_record_is_a_difference_and_repair_moves_the_relay_above_it(
    running: tuple[Case, Path, RelayProcess],
) -> None:
    case, cfg, relay = running
    wait_for(lambda: caught_up(case, relay), 120, "the relay caught up")
    saved = ResumePoint.from_json(relay.position() or "")
    t00 = f"{case.prefix}_00.orders_00"
    ids = sorted(i for i, t in case.existing.items() if t == t00)
    changed, same = ids[7], ids[8]
    records = read_to_end(case.bootstrap, case.topic)
    ahead = saved.generation + 1  # "one generation ahead": nothing the relay publishes can reach it
    _forge(case, records, changed, ahead, "FORGED")
    _forge(case, records, same, ahead, None)  # the source's own values, under a foreign identity

    code, report, _ = verify(cfg, case.topic, "--chunk-rows", "200")
    assert code == 1 and not report["equal"], report
    found = {str(d["key"]["id"]): d for d in report["differences"]}
    assert set(found) == {str(changed), str(same)}, report["differences"]
    for ident, columns in ((changed, ["(change identity)", "status"]), (same, ["(change identity)"])):
        d = found[str(ident)]
        assert d["kind"] == "different" and d["foreign"], d
        assert [c[0] for c in d["columns"]] == columns, d
        assert d["target_identity"][0] >> GENERATION_SHIFT == ahead
    assert [c[1:] for c in found[str(changed)]["columns"][1:]] == [["OLD", "FORGED"]]

    code, repaired, _ = verify(cfg, case.topic, "--chunk-rows", "200", "--repair", "--repair-timeout", "180")
    assert code == 0, repaired["repair"]
    assert repaired["repair"]["generation_above"] == ahead and repaired["repair"]["remaining"] == []
    moved = ResumePoint.from_json(relay.position() or "")
    assert moved.generation == ahead + 1, moved

    # a later change of the key is the latest state again: it sorts above the forged record
    with case.conn.cursor() as cur:
        cur.execute(f"UPDATE {t00} SET status = 'AFTER' WHERE id = %s", (changed,))
    wait_for(lambda: caught_up(case, relay), 120, "the relay caught up")
    code, again, _ = verify(cfg, case.topic)
    assert code == 0 and again["equal"] and again["differences"] == [], again
    state = _latest_state(read_to_end(case.bootstrap, case.topic))
    assert state == select_orders(case.conn, case.prefix, SHARDS, TABLES)
    assert state[str(changed)]["status"] == "AFTER"


# --where conditions, a fixed seeded set: ranges, residues, the status column, combined
WHERE_SEED = 391


def _conditions(case: Case) -> list[str]:
    rng = random.Random(WHERE_SEED)
    first = min(case.existing)
    out = [f"id <= {first + 20}", f"id % {rng.randint(3, 9)} = 1", "status = 'OLD'"]
    for _ in range(3):
        low = first + rng.randint(0, len(case.existing))
        out.append(f"id BETWEEN {low} AND {low + rng.randint(10, 400)} AND amount > {rng.randint(0, 900)}")
    return out


def _matching(case: Case, where: str) -> int:
    total = 0
    with case.conn.cursor() as cur:
        for d in range(SHARDS):
            for t in range(TABLES):
                cur.execute(f"SELECT COUNT(*) FROM {case.prefix}_{d:02d}.orders_{t:02d} WHERE {where}")
                total += int(cur.fetchone()[0])
    return total


def test_where_counts_each_matching_row_once(running: tuple[Case, Path, RelayProcess]) -> None:
    case, cfg, relay = running
    ids = sorted(case.existing)
    with case.conn.cursor() as cur:  # deletes and key changes, through the binlog
        for ident in ids[::37]:
            cur.execute(f"DELETE FROM {case.existing[ident]} WHERE id = %s", (ident,))
        for n, ident in enumerate(ids[5::41]):
            cur.execute(f"UPDATE {case.existing[ident]} SET id = %s WHERE id = %s", (9_100_000 + n, ident))
    wait_for(lambda: caught_up(case, relay), 120, "the relay caught up")
    for where in _conditions(case):
        code, report, _ = verify(cfg, case.topic, "--where", where, "--chunk-rows", "200")
        expected = _matching(case, where)
        assert code == 0 and report["equal"], (WHERE_SEED, where, report["differences"][:3])
        assert report["total"]["rows"] == report["total"]["equal"] == expected, (WHERE_SEED, where)

    # under writes: never more rows than the keys that ever met the condition (each counted once)
    live = {i: t for i, t in case.existing.items() if i not in ids[::37] and i not in ids[5::41]}
    writer = KeyChangingWriter(case.mysql, case.prefix, live, seed=14)
    before = {i for i in live if i % 5 == 1}
    writer.start()
    wait_for(lambda: writer.changes >= 200, 60, "writes flowing")
    code, report, _ = verify(cfg, case.topic, "--where", "id % 5 = 1", "--chunk-rows", "200")
    writer.stop()
    created = range(1, writer._next_id)  # every id the writer inserted or moved a row to
    ever = before | {i for i in created if i % 5 == 1}
    assert code in (0, 3) and report["differences"] == [], report["differences"][:3]
    assert report["total"]["rows"] <= len(ever), (report["total"], len(ever))


def test_columns_added_after_a_row_was_published_hold_their_default(
    running: tuple[Case, Path, RelayProcess],
) -> None:
    """``ADD COLUMN`` gives every existing row the column's default; their records, published before it,
    have no such column. They agree while the row holds the default, and not once it holds another value
    (changed without the binlog)."""
    case, cfg, relay = running
    t00 = f"{case.prefix}_00.orders_00"
    with case.conn.cursor() as cur:
        cur.execute(
            f"ALTER TABLE {t00} ADD COLUMN prio INT NOT NULL DEFAULT 7, "
            "ADD COLUMN tag VARCHAR(8) DEFAULT 'it''s', ADD COLUMN seen DATETIME NULL"
        )
    wait_for(lambda: caught_up(case, relay), 120, "the relay caught up")
    code, report, _ = verify(cfg, case.topic)
    assert (code, report["differences"]) == (0, []), report["differences"][:5]
    first = min(i for i, t in case.existing.items() if t == t00)
    with case.conn.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        try:
            cur.execute(f"UPDATE {t00} SET prio = 8 WHERE id = %s", (first,))
        finally:
            cur.execute("SET SESSION sql_log_bin = 1")
    code, report, _ = verify(cfg, case.topic)
    assert code == 1
    assert _findings(report) == {("different", t00, str(first), (("prio", "8", "(no such column)"),))}
