"""Snapshots asked for while the relay streams, on real MariaDB and a real broker (``relay run`` as a child
process, the workload of ``snapshot_harness.KeyChangingWriter`` running throughout):

- ``snapshot.mode: when_needed`` with ``source.start`` at an old place and no saved position: the
  history from there AND a snapshot, the chunks placed after the history by the watermarks;
- ``relay snapshot run --where``: the snapshot rows meet the condition, a bad condition is refused
  naming the shard, and ``--follow`` draws a progress bar to the end;
- ``relay snapshot cancel``, on the running relay and with the relay stopped (after a SIGKILL): nothing
  more of it is published, a restart does not continue it, and a later run completes the table;
- a mapping edit that adds shards to the logical table while the relay streams: they are snapshotted
  by themselves.

Each time the state rebuilt from the topic (partition offset order, per-key sequences checked, repeats
byte-identical) equals SELECT over the shards, and the general query log shows no locking statement and
no write by the relay's account. Every wait is a condition with a deadline.
"""

from __future__ import annotations

import json
import re
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from relay.dev.services import KafkaService
from relay.kafka.codec import sequence
from relay.positions.store import ResumePoint
from tests.integration.relay_harness import master_position, wait_for
from tests.integration.snapshot_harness import (
    SHARDS,
    Case,
    KeyChangingWriter,
    acked_rows,
    caught_up,
    check,
    read_all,
    run_cli,
    snapshot_case,
    snapshot_status,
)

ROWS_PER_TABLE = 600  # 1200 existing rows per shard: enough for several chunks per table


@pytest.fixture
def case(mysql_service: Any, kafka_service: KafkaService, tmp_path: Path) -> Iterator[Case]:
    with snapshot_case(mysql_service, kafka_service, tmp_path, ROWS_PER_TABLE) as made:
        yield made


def _finish(case: Case, writer: KeyChangingWriter, relay: Any) -> list[Any]:
    """Stop the writer, let the relay catch up, read the topic, stop the relay cleanly."""
    writer.stop()
    wait_for(lambda: caught_up(case, relay), 120, "the relay caught up with the binlog")
    records = read_all(case)
    relay.signal(signal.SIGTERM)
    assert relay.wait(30) == 0, relay.log()[-3000:]
    return records


def _saved_snapshot(relay: Any) -> dict[str, Any]:
    text = relay.position()
    return ResumePoint.from_json(text).extra.get("snapshot") or {} if text else {}


def test_when_needed_with_an_old_source_start_publishes_the_history_then_the_snapshot(case: Case) -> None:
    """No saved position, ``source.start`` before the existing rows were written: the relay publishes
    the binlog from there (the rows' INSERTs, the workload's changes) and snapshots the tables; each
    chunk waits until the parser has read past its SELECT, so per key it sorts after the history."""
    writer = KeyChangingWriter(case.mysql, case.prefix, dict(case.existing), seed=3)
    writer.start()
    wait_for(lambda: writer.changes >= 200, 60, "a history of changes before the relay starts")
    relay = case.relay(case.configure(start=case.before_fill, snapshot={"mode": "when_needed"}))
    wait_for(lambda: bool(snapshot_status(relay).get("done")), 180, "the snapshot done")
    records = _finish(case, writer, relay)
    snapshots, _, _ = check(case, records)
    history = [r for r in records if not r.json.get("snapshot") and r.json["type"] == "INSERT"]
    filled = {r.json["data"][0]["id"] for r in history if r.json["data"][0]["status"] == "OLD"}
    assert len(filled) == len(case.existing), "the fill's INSERTs, read from source.start, published"
    first_chunk = min(int(r.json["sequence"]) for r in snapshots)
    last_fill = max(int(r.json["sequence"]) for r in history if r.json["data"][0]["status"] == "OLD")
    assert first_chunk > last_fill, "every chunk is placed after the history it read"


def test_run_where_follow_and_a_bad_condition(case: Case) -> None:
    # Slow enough for --follow to draw the bar while it runs.
    cfg = case.configure(
        start=master_position(case.conn), snapshot={"mode": "never", "max_rows_per_second": 400}
    )
    writer = KeyChangingWriter(case.mysql, case.prefix, dict(case.existing), seed=5)
    writer.start()
    relay = case.relay(cfg)
    wait_for(lambda: relay.status().get("batches_acked", 0) >= 3, 60, "the relay streaming")
    table = f"{case.prefix}.orders"
    bad = run_cli("snapshot", "run", "-c", str(cfg), "--table", table, "--where", "no_such_column = 1")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    refusal = rf"refused: --where 'no_such_column = 1' fails on {case.prefix}_00\.orders_00: .*no_such_column"
    assert re.search(refusal, bad.stdout), bad.stdout
    ran = run_cli("snapshot", "run", "-c", str(cfg), "--table", table, "--where", "id % 3 = 0", "--follow",
                  timeout=180)  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    frames = [f for f in re.split(r"[\r\n]+", ran.stdout) if f.strip()]  # text mode reads \r as \n
    assert any(re.match(r"\[#*-*\]\s+\d+% \S+: running, ", f) for f in frames), frames[:5]
    assert re.match(r"\[#{30}\] 100% \S+: done, 4/4 tables", frames[-1]), frames[-3:]
    records = _finish(case, writer, relay)
    snapshot_ids = [int(r.json["data"][0]["id"]) for r in records if r.json.get("snapshot")]
    assert snapshot_ids and all(i % 3 == 0 for i in snapshot_ids)
    live = {str(json.loads(r.key or b"{}")["id"]) for r in records if not r.json.get("snapshot")}
    live |= {str(r.json["old"][0]["id"]) for r in records if r.json.get("old") and "id" in r.json["old"][0]}
    # The rows the WHERE selects, plus every row the live stream changed since the relay started.
    check(case, records, keep=lambda key: int(key) % 3 == 0 or key in live)


def test_cancel_running_and_stopped_then_run_again(case: Case) -> None:
    cfg = case.configure(
        start=master_position(case.conn), snapshot={"mode": "never", "max_rows_per_second": 200}
    )
    writer = KeyChangingWriter(case.mysql, case.prefix, dict(case.existing), seed=9)
    writer.start()
    relay = case.relay(cfg)
    wait_for(lambda: relay.status().get("batches_acked", 0) >= 3, 60, "the relay streaming")
    table, total = f"{case.prefix}.orders", len(case.existing)

    # 1. Cancelled while the relay runs: what was put is published, nothing after it, not continued.
    first_at = master_position(case.conn)
    assert run_cli("snapshot", "run", "-c", str(cfg), "--table", table).returncode == 0
    wait_for(lambda: acked_rows(relay) >= total * 0.2, 60, "20% of the first snapshot acked")
    cancelled = run_cli("snapshot", "cancel", "-c", str(cfg))
    assert cancelled.returncode == 0 and "cancel: accepted" in cancelled.stdout, cancelled.stdout
    wait_for(lambda: bool(_saved_snapshot(relay).get("cancelled")), 30, "the cancel saved with the position")
    shown = run_cli("snapshot", "status", "-c", str(cfg))
    assert re.search(r": cancelled, \d+/4 tables", shown.stdout), shown.stdout
    first_rows = int(_saved_snapshot(relay)["rows"])
    assert first_rows < total

    # 2. Cancelled with the relay stopped (SIGKILLed mid-snapshot): a restart does not continue it.
    second_at = master_position(case.conn)
    assert run_cli("snapshot", "run", "-c", str(cfg), "--table", table).returncode == 0
    wait_for(lambda: acked_rows(relay) >= total * 0.2, 60, "20% of the second snapshot acked")
    relay.signal(signal.SIGKILL)
    assert relay.wait(10) == -signal.SIGKILL
    offline = run_cli("snapshot", "cancel", "-c", str(cfg))
    assert offline.returncode == 0 and "marked cancelled in the saved position" in offline.stdout, (
        offline.stdout + offline.stderr
    )
    again = run_cli("snapshot", "cancel", "-c", str(cfg))
    assert again.returncode != 0 and "no unfinished snapshot" in again.stdout + again.stderr
    relay = case.relay(cfg)
    wait_for(lambda: relay.status().get("batches_acked", 0) >= 3, 60, "the restarted relay streaming")
    assert not snapshot_status(relay), "the cancelled snapshot is not continued"

    # 3. A full run completes the table.
    third_at = master_position(case.conn)
    assert run_cli("snapshot", "run", "-c", str(cfg), "--table", table).returncode == 0
    wait_for(lambda: bool(snapshot_status(relay).get("done")), 120, "the third snapshot done")
    records = _finish(case, writer, relay)
    check(case, records)

    reads = {
        (int(r.json["sequence"]), int(r.json.get("part") or 0)) for r in records if r.json.get("snapshot")
    }

    def between(since: tuple[str, int], until: tuple[str, int] | None) -> int:
        low, high = sequence(*since, 0), sequence(*until, 0) if until else 1 << 62
        return sum(1 for seq, _ in reads if low <= seq < high)

    assert between(first_at, second_at) == first_rows, "exactly what the cancelled snapshot had put"
    assert 0 < between(second_at, third_at) < total
    assert between(third_at, None) > 0


def test_a_mapping_edit_that_adds_shards_snapshots_them(case: Case) -> None:
    """The logical table first maps ``orders_00`` of each shard (snapshotted at the first start), then an
    edit adds ``orders_01``: the relay snapshots the two new tables while it streams."""
    mapping = json.loads(json.dumps(_mapping(case.prefix)))
    cfg = case.configure(mapping=mapping, extra={"mapping": {"reload": True, "reload_check_seconds": 0.1}})
    writer = KeyChangingWriter(case.mysql, case.prefix, dict(case.existing), seed=13)
    writer.start()
    relay = case.relay(cfg)
    wait_for(lambda: bool(snapshot_status(relay).get("done")), 120, "the initial snapshot done")
    assert set(snapshot_status(relay)["tables"]) == {
        f"{case.prefix}_{d:02d}.orders_00" for d in range(SHARDS)
    }
    edit = run_cli(
        "mapping", "table", "set", f"{case.prefix}.orders", "--physical", "orders_\\d+", "-c", str(cfg)
    )
    assert edit.returncode == 0, edit.stdout + edit.stderr
    wait_for(lambda: relay.status().get("mapping_version") == 2, 60, "the relay switched to version 2")
    wait_for(
        lambda: (
            set(snapshot_status(relay).get("tables", {}))
            == {f"{case.prefix}_{d:02d}.orders_01" for d in range(SHARDS)}
        ),
        60,
        "a snapshot of the added tables",
    )
    assert relay.status()["snapshot_request"]["id"] == "mapping-v2"
    wait_for(lambda: bool(snapshot_status(relay).get("done")), 120, "the added tables' snapshot done")
    records = _finish(case, writer, relay)
    check(case, records)
    assert "mapping version 2 adds tables" not in relay.log(), "the added tables were snapshotted"


def _mapping(prefix: str) -> dict[str, Any]:
    return {
        "version": 1,
        "topics": {"partitions": 3, "create": True},
        "unmapped": {"action": "drop"},
        "logical_dbs": {
            prefix: {
                "physical": [f"{prefix}_\\d+"],
                "unclaimed_tables": "drop",
                "tables": {"orders": {"physical": ["orders_00"], "topic": f"{prefix}.orders"}},
            }
        },
    }
