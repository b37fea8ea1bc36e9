"""A failover during a snapshot, on a real MariaDB primary and a real replica (``--log-slave-updates``,
GTID replication) and a real broker, with ``relay run`` as a child process.

The relay snapshots a sharded table with existing rows under a workload of inserts, updates, deletes and
key changes; half-way the primary dies, the relay fails over to the replica — by GTID, or by timestamp
(``source.failover.mode: timestamp``: the replica is re-read from the last change put minus the fallback
interval, and what was already put is dropped by its changes' digests) — and the snapshot goes on there
from its checkpoint: the chunks read from the primary and put stay (placed in the primary's
binlog, generation 0), the rest is read from the replica with the replica's binlog as watermarks
(generation 1). The replica is promoted and written to. The state rebuilt from the topic (partition
offset order, per-key sequences growing, repeats byte-identical) equals SELECT on the promoted replica.
By timestamp the re-read begins before the relay's start (the fallback interval is longer than the run),
so the replica hands back the transactions just before it, in the same second as the first ones put:
they must be dropped too (``FingerprintSkip``), or their stale rows sort after the newer ones.
Every wait is a condition with a deadline.
"""

from __future__ import annotations

import contextlib
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from relay.dev.services import KafkaService
from relay.kafka.codec import GENERATION_SHIFT
from relay.positions.store import ResumePoint
from tests.integration.relay_harness import (
    RelayProcess,
    create_shards,
    read_topic,
    select_orders,
    single_table_mapping,
    wait_for,
    write_configs,
)
from tests.integration.snapshot_harness import SHARDS, TABLES, KeyChangingWriter, fill, rebuild
from tests.integration.test_failover import Pair, caught_up, master_position, pair, promote  # noqa: F401

ROWS_PER_TABLE = 800


def _acked(relay: RelayProcess) -> int:
    text = relay.position()
    state = ResumePoint.from_json(text).extra.get("snapshot") or {} if text else {}
    return (
        int(state["rows"])
        if "rows" in state
        else sum(int(t["rows"]) for t in state.get("tables", {}).values())
    )


@pytest.mark.parametrize("mode", ["gtid", "timestamp"])
def test_failover_during_a_snapshot_continues_it_on_the_replica(
    pair: Pair,  # noqa: F811 - the fixture of test_failover
    kafka_service: KafkaService,
    tmp_path: Path,
    mode: str,
) -> None:
    primary, replica = pair.primary.service, pair.replica.service
    prefix = f"sf{mode[0]}{time.monotonic_ns() % 10**7}"
    with contextlib.closing(primary.connect()) as conn:
        create_shards(conn, prefix, SHARDS, TABLES)
        existing = fill(conn, prefix, ROWS_PER_TABLE)
    wait_for(lambda: caught_up(pair), 60, "the replica has the tables and their rows")
    cfg = write_configs(
        tmp_path,
        mysql=primary,
        bootstrap=kafka_service.bootstrap_servers,
        mapping=single_table_mapping(prefix),
        start=None,
        instance=prefix,
        include=f"{prefix}_\\d+\\.orders_\\d+",
        extra={
            "source": {
                "standby": {"host": replica.host, "port": replica.port},
                "failover": {"attempts": 3, "mode": mode, "fallback_interval_seconds": 60.0},
                "retry": {"initial": 0.2, "maximum": 0.5},
            },
            "snapshot": {
                "mode": "when_needed",
                "chunk_rows": 200,
                "parallelism": 2,
                "max_rows_per_second": 400,
            },
            "store": {"buffer_size": 256, "batch_mode": "ITEMSIZE"},
            "kafka": {"settings": {"batch.num.messages": "1"}},  # Tansu serves a partition's last batch late
            "publish": {"batch_size": 32, "drain_seconds": 5.0},
            "logging": {"level": "INFO"},
        },
    )
    relay = RelayProcess(cfg, tmp_path / "relay.log").start()
    try:
        first = KeyChangingWriter(primary, prefix, dict(existing), seed=21)
        first.start()
        total = len(existing)
        wait_for(lambda: _acked(relay) >= total * 0.3, 120, "30% of the snapshot acked")
        assert _acked(relay) < total
        first.stop()
        wait_for(lambda: caught_up(pair), 30, "the replica has every change of the primary")
        pair.primary.process.stop()
        promote(replica)
        second = KeyChangingWriter(replica, prefix, {}, seed=22)
        second._next_id, second._live = first._next_id, dict(first._live)  # the same rows, on
        second.start()
        wait_for(lambda: bool((relay.status().get("snapshot") or {}).get("done")), 180, "the snapshot done")
        wait_for(lambda: second.key_changes >= 10, 60, "key changes on the promoted replica")
        second.stop()

        def relay_caught_up() -> bool:
            text = relay.position()
            if not text:
                return False
            point, end = ResumePoint.from_json(text), master_position(replica)
            return point.generation == 1 and (point.journal, point.offset) >= end

        wait_for(relay_caught_up, 120, "the relay caught up with the replica's binlog")
        seen = {"n": -1, "at": time.monotonic()}

        def idle(records: list[Any]) -> bool:
            if len(records) != seen["n"]:
                seen["n"], seen["at"] = len(records), time.monotonic()
                return False
            return time.monotonic() - seen["at"] > 3.0

        records = read_topic(kafka_service.bootstrap_servers, f"{prefix}.orders", until=idle, timeout=180)
        assert relay.alive(), relay.log()[-3000:]
        relay.signal(signal.SIGTERM)
        assert relay.wait(30) == 0
    finally:
        relay.stop()
    log = relay.log()
    assert "failing over to the standby" in log and "continues on the standby from its checkpoint" in log, (
        log[-3000:]
    )
    if mode == "timestamp":  # the re-read overlap was compared with what was put, to its end
        assert "re-read changes dropped up to here" in log, log[-3000:]
    with contextlib.closing(replica.connect()) as conn:
        expected = select_orders(conn, prefix, SHARDS, TABLES)
    state, _ = rebuild(records)
    assert state == expected, (sorted(set(expected) - set(state))[:5], sorted(set(state) - set(expected))[:5])
    primary_at, replica_at = f"{primary.host}:{primary.port}", f"{replica.host}:{replica.port}"
    reads = [r.json for r in records if r.json.get("snapshot")]
    by_server = {s: [m for m in reads if m["source"]["server"] == s] for s in (primary_at, replica_at)}
    assert by_server[primary_at] and by_server[replica_at], "chunks from both servers"
    for server, generation in ((primary_at, 0), (replica_at, 1)):
        assert {int(m["sequence"]) >> GENERATION_SHIFT for m in by_server[server]} == {generation}
    # Every key read once: the replica went on after the primary's last key put, nothing read twice.
    distinct = {(int(m["sequence"]), int(m.get("part") or 0)): m["data"][0]["id"] for m in reads}
    assert len(set(distinct.values())) == len(distinct)
