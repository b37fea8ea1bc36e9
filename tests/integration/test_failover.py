"""MySQL failover on a real MariaDB primary and a real replica replicating over loopback
(``CHANGE MASTER TO ... MASTER_USE_GTID=slave_pos``), with ``relay run`` as a child process and the real
broker: the primary dies while the relay is behind, the relay switches to the replica (by GTID, or by
timestamp minus the fallback interval), the replica is promoted and written to, and the topic holds every
change exactly once per content — a change re-read from the replica that was already published from the
primary is dropped, so the only repeats are byte-identical re-publications — and rebuilds the table, both
in log order and as the Spark mirror (``apply_changes``), every column equal to SELECT on the promoted
replica.
"""

from __future__ import annotations

import contextlib
import json
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from relay.common.mysql import binlog_status
from relay.dev import services
from relay.dev.services import KafkaService, MySQLService
from relay.errors import ServiceError
from relay.kafka.codec import GENERATION_SHIFT
from tests.integration.relay_harness import (
    Rec,
    RelayProcess,
    Writer,
    apply_records,
    create_shards,
    orders_tables,
    read_topic,
    select_orders,
    wait_for,
    write_configs,
)
from tests.mirror_check import assert_mirror_equals, mirror_records, rows_by_key, select_rows

SHARDS, TABLES = 2, 2
MASTER_FLUSHES = 110  # the master's binlog is at mysql-bin.0001xx, the replica's at .00000x


class MixedWriter(Writer):
    """``Writer`` plus transactions that also write a table the relay's filter leaves out (``noise``),
    before or after their kept rows: what the sink drops must not make a failover re-publish them."""

    def _write_one(self, cur: Any) -> None:
        if self.rng.random() >= 0.3:
            super()._write_one(cur)
            return
        noise = f"INSERT INTO {self.prefix}_00.noise (v) VALUES (%s)"
        cur.execute("BEGIN")
        if self.rng.random() < 0.5:
            cur.execute(noise, (self.statements,))
        n = self._insert_rows(cur, 1) + self._update_rows(cur, 1)
        cur.execute(noise, (self.statements,))
        cur.execute("COMMIT")
        self.changes += n
        self.statements += 1


@dataclass
class Pair:
    primary: services.Running[MySQLService]
    replica: services.Running[MySQLService]


def _gtid_pos(service: MySQLService, variable: str) -> str:
    with contextlib.closing(service.connect()) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT @@GLOBAL.{variable}")
        row = cur.fetchone()
    return str(row[0]) if row else ""


def caught_up(pair: Pair) -> bool:
    return _gtid_pos(pair.replica.service, "gtid_slave_pos") == _gtid_pos(
        pair.primary.service, "gtid_binlog_pos"
    )


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[Pair]:
    try:
        services.find_binary("mariadbd")
    except ServiceError as exc:
        pytest.skip(str(exc))
    primary = services.start_mysql(services.StartOptions(tmp_path / "primary"))
    replica = services.start_mysql(
        services.StartOptions(tmp_path / "replica", extra_args=("--server-id=2", "--log-slave-updates"))
    )
    try:
        p = primary.service
        with contextlib.closing(replica.service.connect()) as conn, conn.cursor() as cur:
            cur.execute(
                "CHANGE MASTER TO MASTER_HOST=%s, MASTER_PORT=%s, MASTER_USER=%s, MASTER_PASSWORD=%s, "
                "MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1",
                (p.host, p.port, p.replication_user, p.replication_password),
            )
            cur.execute("START SLAVE")
        yield Pair(primary, replica)
    finally:
        replica.stop(remove_dir=True)
        primary.stop(remove_dir=True)


def promote(replica: MySQLService) -> None:
    with contextlib.closing(replica.connect()) as conn, conn.cursor() as cur:
        cur.execute("STOP SLAVE")
        cur.execute("RESET SLAVE ALL")


def change_identity(rec: Rec) -> tuple[str, str, str, str]:
    """What a change is on any server: its GTID, key, kind and row (not the server's file and offset)."""
    msg = rec.json
    return (msg["gtid"], (rec.key or b"").decode(), msg["type"], json.dumps(msg["data"], sort_keys=True))


def distinct_changes(wanted: int) -> Callable[[list[Rec]], bool]:
    """``read_topic``'s condition: ``wanted`` distinct changes, parsing each record once."""
    seen: set[tuple[str, str, str, str]] = set()
    done = 0

    def until(records: list[Rec]) -> bool:
        nonlocal done
        seen.update(change_identity(r) for r in records[done:] if not r.json["isDdl"])
        done = len(records)
        return len(seen) >= wanted

    return until


def master_position(service: MySQLService) -> tuple[str, int]:
    with contextlib.closing(service.connect()) as conn, conn.cursor() as cur:
        row = binlog_status(cur)
    assert row is not None
    return str(row[0]), int(row[1])


@pytest.mark.parametrize("mode", ["gtid", "timestamp"])
def test_primary_dies_the_relay_continues_on_the_replica_without_loss_or_foreign_repeats(
    pair: Pair, kafka_service: KafkaService, spark: Any, tmp_path: Path, mode: str
) -> None:
    primary, replica = pair.primary.service, pair.replica.service
    prefix = f"fo{mode[0]}{time.monotonic_ns() % 10**7}"
    with contextlib.closing(primary.connect()) as conn, conn.cursor() as cur:
        for _ in range(MASTER_FLUSHES):
            cur.execute("FLUSH BINARY LOGS")
        create_shards(conn, prefix, SHARDS, TABLES)
        cur.execute(f"CREATE TABLE {prefix}_00.noise (id INT AUTO_INCREMENT PRIMARY KEY, v INT)")
    wait_for(lambda: caught_up(pair), 30, "the replica applies the schema")
    master_file = master_position(primary)[0]
    assert int(master_file.rsplit(".", 1)[1]) > 100
    assert int(master_position(replica)[0].rsplit(".", 1)[1]) < 10
    cfg = write_configs(
        tmp_path,
        mysql=primary,
        bootstrap=kafka_service.bootstrap_servers,
        mapping=_mapping(prefix),
        start=master_position(primary),
        instance=prefix,
        include=f"{prefix}_\\d+\\.orders_\\d+",
        extra={
            "source": {
                "standby": {"host": replica.host, "port": replica.port},
                "failover": {"attempts": 3, "mode": mode, "fallback_interval_seconds": 60.0},
                "retry": {"initial": 0.2, "maximum": 0.5},
            },
            "store": {"buffer_size": 256, "batch_mode": "ITEMSIZE"},
            # One record per producer batch: Tansu's high watermark is then exact (the records of a
            # partition's last multi-record batch are otherwise not served to consumers).
            "kafka": {"settings": {"batch.num.messages": "1"}},
            "publish": {"batch_size": 32, "drain_seconds": 5.0},
            "logging": {"level": "INFO"},
        },
    )
    relay = RelayProcess(cfg, tmp_path / "relay.log").start()
    try:
        # Load on the primary; the relay is frozen half-way, so that it is behind when the primary dies.
        first = MixedWriter(primary, prefix, SHARDS, TABLES, rate=300.0, seed=7)
        first.start()
        wait_for(lambda: first.changes >= 150, 30, "writes on the primary")
        wait_for(lambda: relay.status().get("batches_acked", 0) > 0, 60, "the relay publishes", 0.1)
        relay.signal(signal.SIGSTOP)
        wait_for(lambda: first.changes >= 400, 30, "more writes while the relay is frozen")
        changes = first.stop()
        wait_for(lambda: caught_up(pair), 30, "the replica has every change of the primary")
        pair.primary.process.stop()
        relay.signal(signal.SIGCONT)

        promote(replica)
        second = MixedWriter(replica, prefix, SHARDS, TABLES, rate=300.0, seed=8)
        second._next_id, second._live = first._next_id, dict(first._live)  # continue the same rows
        second.start()
        wait_for(lambda: second.changes >= 150, 60, "writes on the promoted replica")
        changes += second.stop()

        records = read_topic(
            kafka_service.bootstrap_servers, f"{prefix}.orders", until=distinct_changes(changes), timeout=90
        )
        assert relay.alive(), relay.log()[-3000:]
    finally:
        if relay.alive():
            relay.signal(signal.SIGCONT)
        relay.stop()
    log = relay.log()
    assert "failing over to the standby" in log, log[-3000:]
    rows = [r for r in records if not r.json["isDdl"]]
    by_change: dict[tuple[str, str, str, str], Rec] = {}
    for rec in rows:
        seen = by_change.setdefault(change_identity(rec), rec)
        assert (rec.value, rec.headers, rec.partition) == (seen.value, seen.headers, seen.partition), (
            f"change {change_identity(rec)} published twice with different content (from both servers?)"
        )
    assert len(by_change) == changes  # nothing lost, nothing invented
    servers = {r.json["source"]["server"] for r in rows}
    primary_at, replica_at = f"{primary.host}:{primary.port}", f"{replica.host}:{replica.port}"
    assert servers == {primary_at, replica_at}
    # The standby's changes continue under the next generation: they sort after the master's, although
    # its binlog numbers are far lower; every record names the same source id (the instance).
    for rec in rows:
        msg = rec.json
        generation = int(msg["sequence"]) >> GENERATION_SHIFT
        assert generation == (0 if msg["source"]["server"] == primary_at else 1), msg
        assert msg["source"]["id"] == prefix and rec.headers["relay.source.id"] == prefix.encode()
    assert {r.json["source"]["file"] for r in rows if r.json["source"]["server"] == primary_at} >= {
        master_file
    }
    with contextlib.closing(replica.connect()) as conn:
        # Each partition in log order, each key's sequences increasing: the state equals SELECT.
        assert apply_records(records) == select_orders(conn, prefix, SHARDS, TABLES)
        selected = select_rows(conn, orders_tables(prefix, SHARDS, TABLES))
    # The Spark mirror of the same records (both servers', both generations') equals SELECT on the replica.
    mirrored = mirror_records(spark, records, tmp_path / "mirror", f"{prefix}.orders")
    assert_mirror_equals(rows_by_key(mirrored), selected)


def _mapping(prefix: str) -> dict[str, Any]:
    return {
        "version": 1,
        "topics": {"partitions": 3, "create": True},
        "unmapped": {"action": "drop"},
        "logical_dbs": {
            prefix: {
                "physical": [f"{prefix}_\\d+"],
                "tables": {"orders": {"physical": ["orders_\\d+"], "topic": f"{prefix}.orders"}},
            }
        },
    }
