"""``relay demo``: the README's main command, on an embedded default.

Starts a throwaway MariaDB with a ROW binlog, creates a sharded sample (``shop_00..shop_03`` ×
``orders_00..orders_03`` plus an unsharded ``shop_00.customers``), writes a realistic mix of inserts,
updates, deletes and a DDL, reads it back through a canal instance (source → entry builder → sink →
ring store → server, acknowledging every batch and saving the position) and shows the entries, then
cleans up. ``--keep`` leaves the server running and prints how to connect.

Runs in the CLI's thread; prints progress as it goes (this is the CLI layer, so printing is its job).
"""

from __future__ import annotations

import random
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from relay.binlog_source import SourceConfig, StartConfig
from relay.instance import CanalInstance, InstanceConfig
from relay.positions import FilePositionStore
from relay.protocol import EntryType, RowChange
from relay.ring_store import StoreConfig
from relay.sink import SinkConfig

SHARDS = 4
TABLES = 4
SHOWN_ENTRIES = 24


def _say(text: str) -> None:
    print(text, flush=True)


def _schema(conn: Any) -> None:
    with conn.cursor() as cur:
        for d in range(SHARDS):
            cur.execute(f"CREATE DATABASE IF NOT EXISTS shop_{d:02d}")
            for t in range(TABLES):
                cur.execute(
                    f"CREATE TABLE IF NOT EXISTS shop_{d:02d}.orders_{t:02d} ("
                    "id BIGINT PRIMARY KEY, customer_id INT NOT NULL, status VARCHAR(16) NOT NULL, "
                    "amount DECIMAL(12,2) NOT NULL, created_at DATETIME(3) NOT NULL) ENGINE=InnoDB"
                )
        cur.execute(
            "CREATE TABLE IF NOT EXISTS shop_00.customers (id INT PRIMARY KEY, name VARCHAR(64), "
            "email VARCHAR(128)) ENGINE=InnoDB"
        )


def _workload(conn: Any, orders: int) -> int:
    """Write the sample mix; returns the number of row changes written."""
    rng = random.Random(7)
    changes = 0
    with conn.cursor() as cur:
        for c in range(20):
            cur.execute(
                "INSERT INTO shop_00.customers VALUES (%s, %s, %s)", (c, f"customer {c}", f"c{c}@example.com")
            )
            changes += 1
        for oid in range(orders):
            d, t = oid % SHARDS, (oid // SHARDS) % TABLES
            cur.execute("BEGIN")
            cur.execute(
                f"INSERT INTO shop_{d:02d}.orders_{t:02d} VALUES (%s, %s, 'NEW', %s, NOW(3))",
                (oid, rng.randrange(20), f"{rng.randrange(100, 99999) / 100:.2f}"),
            )
            changes += 1
            if oid % 3 == 0:
                cur.execute(f"UPDATE shop_{d:02d}.orders_{t:02d} SET status='PAID' WHERE id=%s", (oid,))
                changes += 1
            cur.execute("COMMIT")
            if oid % 10 == 9:  # delete an earlier order, from the shard table that holds it
                gone = oid - 5
                gd, gt = gone % SHARDS, (gone // SHARDS) % TABLES
                cur.execute(f"DELETE FROM shop_{gd:02d}.orders_{gt:02d} WHERE id=%s", (gone,))
                changes += 1
        cur.execute("ALTER TABLE shop_00.orders_00 ADD COLUMN note VARCHAR(32) NULL")
        cur.execute("INSERT INTO shop_00.orders_00 VALUES (100000, 1, 'NEW', 1.00, NOW(3), 'after the DDL')")
        changes += 1
    return changes


def run_demo(keep: bool = False) -> int:
    from relay.cli import format_entry
    from relay.embedded import EmbeddedMySQL

    workdir = Path(tempfile.mkdtemp(prefix="relay-demo-"))
    _say(f"Starting a throwaway MariaDB with a ROW binlog in {workdir} ...")
    mysql = EmbeddedMySQL(workdir / "mysql", detached=keep)
    service = mysql.start()
    try:
        conn = service.connect()
        with conn.cursor() as cur:
            cur.execute("SHOW MASTER STATUS")
            row = cur.fetchone()
        start = (str(row[0]), int(row[1]))
        _say(
            f"  {service.flavor} {service.version} at {service.host}:{service.port}; "
            f"binlog at {start[0]}:{start[1]}"
        )
        _say(f"Creating {SHARDS} shard databases x {TABLES} order tables, and shop_00.customers ...")
        _schema(conn)
        written = _workload(conn, orders=200)
        _say(f"Wrote {written} row changes and one DDL.")
        positions = FilePositionStore(workdir / "position.json")
        instance = CanalInstance(
            InstanceConfig(
                source=SourceConfig(
                    host=service.host,
                    port=service.port,
                    user=service.replication_user,
                    password=service.replication_password,
                    start=StartConfig(journal=start[0], offset=start[1]),
                ),
                store=StoreConfig(ddl_isolation=True),
                sink=SinkConfig(filter="shop_\\d+\\..*"),
            ),
            positions,
        )
        _show(instance, written, format_entry)
        saved = positions.load()
        _say(f"Saved position ({positions.describe()}): {saved}")
        if keep:
            _say(
                f"\nLeft running. Connect: mysql -h {service.host} -P {service.port} -u {service.user} "
                f"-p{service.password}\nRead entries:  relay entries --mysql {service.url} --start-position "
                f"{start[0]}:{start[1]} --idle-exit 2\nStop it:       kill the mariadbd in {workdir}/mysql"
            )
        return 0
    finally:
        if not keep:
            mysql.stop()
            _say("Stopped MariaDB and removed its data.")


def _show(instance: CanalInstance, expected_rows: int, format_entry: Any) -> None:
    instance.start()
    counts: Counter[str] = Counter()
    rows = shown = 0
    deadline = time.monotonic() + 120
    try:
        while rows < expected_rows and time.monotonic() < deadline:
            message = instance.get_without_ack(256, timeout=0.5)
            for entry in message.entries:
                value = entry.store_value
                if isinstance(value, RowChange):
                    kind = "DDL" if value.is_ddl else value.event_type.name
                    counts[kind] += 1 if value.is_ddl else len(value.rows)
                    rows += 0 if value.is_ddl else len(value.rows)
                else:
                    counts[EntryType(entry.entry_type).name] += 1
                if shown < SHOWN_ENTRIES or (isinstance(value, RowChange) and value.is_ddl):
                    _say("\n".join(format_entry(entry)))
                    shown += 1
            if message.entries:
                instance.ack(message.batch_id)
                _say(
                    f"  ... batch {message.batch_id}: {len(message.entries)} entries, "
                    f"{rows}/{expected_rows} rows"
                )
    finally:
        instance.stop()
    _say("Entries by kind: " + ", ".join(f"{k}={v}" for k, v in sorted(counts.items())))
