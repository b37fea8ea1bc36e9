"""The snapshot workload (S): existing rows to Kafka, against a plain streaming SELECT of the same table.

Owned here: a mixed-type table (the workloads' eleven columns) filled with ``snapshot_rows`` rows without
binlogging them, then, in the same run: (1) a plain ``SELECT *`` of the table through an unbuffered
cursor (rows/s: what the server and PyMySQL give a client that only reads), (2) a relay in this process
with ``snapshot.mode: initial``, timed from its start until Kafka acknowledged every snapshot row and
the checkpoint saying so was saved (rows/s). For each, the source's query load it caused: the deltas
of the server's global status counters (statements, SELECTs, index reads, rows read, bytes sent). Runs
on the bench's main thread; the relay runs on a thread of its own.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pymysql

from relay.dev.bench import workloads as wl
from relay.dev.bench.common import Context
from relay.errors import BenchError

TABLE = "snap"
FILL_BATCH = 1000
COUNTERS = (
    "Questions",
    "Com_select",
    "Handler_read_first",
    "Handler_read_key",
    "Handler_read_next",
    "Handler_read_rnd_next",
    "Innodb_rows_read",
    "Bytes_sent",
)


@dataclass
class SnapshotResult:
    rows: int
    select_rows_per_second: float
    snapshot_rows_per_second: float
    select_load: dict[str, int] = field(default_factory=dict)
    snapshot_load: dict[str, int] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        return (
            self.snapshot_rows_per_second / self.select_rows_per_second
            if self.select_rows_per_second
            else 0.0
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "select_rows_per_second": round(self.select_rows_per_second),
            "snapshot_rows_per_second": round(self.snapshot_rows_per_second),
            "snapshot_vs_select": round(self.ratio, 3),
            "select_load": self.select_load,
            "snapshot_load": self.snapshot_load,
            "settings": self.settings,
        }


def render_snapshot(result: SnapshotResult) -> str:
    lines = [
        f"S (snapshot of {result.rows:,} existing rows, {result.settings}):",
        f"  plain streaming SELECT  {result.select_rows_per_second:>10,.0f} rows/s",
        f"  snapshot -> Kafka acked {result.snapshot_rows_per_second:>10,.0f} rows/s  "
        f"({result.ratio:.2f}x the SELECT)",
        "  source load (status counter deltas)   SELECT            snapshot",
    ]
    for name in COUNTERS:
        lines.append(
            f"    {name:<30} {result.select_load.get(name, 0):>12,} {result.snapshot_load.get(name, 0):>17,}"
        )
    return "\n".join(lines)


def _counters(conn: Any) -> dict[str, int]:
    with conn.cursor() as cur:
        marks = ", ".join(["%s"] * len(COUNTERS))
        cur.execute(f"SHOW GLOBAL STATUS WHERE Variable_name IN ({marks})", COUNTERS)
        return {str(k): int(v) for k, v in cur.fetchall()}


def _delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: after.get(k, 0) - before.get(k, 0) for k in COUNTERS}


def fill(conn: Any, rows: int) -> None:
    """The table with ``rows`` rows, not binlogged (the snapshot reads them; no relay must stream them)."""
    wl.create_table(conn, TABLE)
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        try:
            for start in range(1, rows + 1, FILL_BATCH):
                batch = [wl.row(i) for i in range(start, min(start + FILL_BATCH, rows + 1))]
                marks = ", ".join(["(" + ", ".join(["%s"] * 11) + ")"] * len(batch))
                cur.execute(
                    f"INSERT INTO {wl.DB}.{TABLE} ({wl.COLUMNS}) VALUES {marks}",
                    [v for r in batch for v in r],
                )
        finally:
            cur.execute("SET SESSION sql_log_bin = 1")


def buffered_select(ctx: Context) -> float:
    """Rows/s of a plain ``SELECT *`` through PyMySQL's default (buffered) cursor: every row fetched and
    converted before the call returns, as a client that just runs the query gets it."""
    m = ctx.mysql
    conn = pymysql.connect(
        host=m.host, port=m.port, user=m.replication_user, password=m.replication_password, charset="utf8mb4"
    )
    try:
        began = time.perf_counter()
        with conn.cursor() as cur:
            count = cur.execute(f"SELECT * FROM {wl.DB}.{TABLE}")
            rows = cur.fetchall()
        elapsed = time.perf_counter() - began
        assert len(rows) == count
        return float(count / elapsed)
    finally:
        conn.close()


def plain_select(ctx: Context) -> tuple[float, dict[str, int]]:
    """Rows/s of ``SELECT *`` through an unbuffered cursor on the relay's account, and its load."""
    m = ctx.mysql
    conn = pymysql.connect(
        host=m.host, port=m.port, user=m.replication_user, password=m.replication_password, charset="utf8mb4"
    )
    try:
        before = _counters(ctx.conn)
        began = time.perf_counter()
        count = 0
        with conn.cursor(pymysql.cursors.SSCursor) as cur:
            cur.execute(f"SELECT * FROM {wl.DB}.{TABLE}")
            while chunk := cur.fetchmany(10_000):
                count += len(chunk)
        elapsed = time.perf_counter() - began
        return count / elapsed, _delta(before, _counters(ctx.conn))
    finally:
        conn.close()


def _relay_config(ctx: Context, work: Path) -> dict[str, Any]:
    m = ctx.mysql
    data: dict[str, Any] = {
        "instance": "bench-snapshot",
        "source": {
            "host": m.host,
            "port": m.port,
            "user": m.replication_user,
            "password": m.replication_password,
            "server_id": ctx.server_id(),
        },
        "filter": {"include": f"relay_bench\\.{TABLE}"},
        "kafka": {"bootstrap_servers": ctx.kafka, "ddl_topic": "bench.ddl"},
        "state_dir": str(work),
        "status": {"interval_seconds": 1.0},
        "publish": {"drain_seconds": 2.0},
        "logging": {"level": "WARNING"},
        "snapshot": {"mode": "initial"},
    }
    for key, value in ctx.options.settings.items():  # --set section.key=value
        section, _, name = key.partition(".")
        data.setdefault(section, {})[name] = value
    return data


def snapshot_to_kafka(ctx: Context, rows: int) -> tuple[float, dict[str, int], dict[str, Any]]:
    """Rows/s of a relay's snapshot of the table until Kafka acknowledged every row; its load; settings."""
    from mapping.load import parse_mapping
    from relay.config.load import parse_config
    from relay.dev.bench.harness import relay_mapping, write_mapping_file
    from relay.wiring import build_relay

    work = ctx.work / "snapshot"
    work.mkdir(parents=True, exist_ok=True)
    config = parse_config(_relay_config(ctx, work), base_dir=str(work))
    write_mapping_file(config.config_path(config.mapping.file))
    relay = build_relay(config, parse_mapping(relay_mapping()))
    error: list[BaseException] = []

    def run() -> None:
        try:
            relay.run()
        except BaseException as exc:
            error.append(exc)

    thread = threading.Thread(target=run, name="bench-snapshot-relay", daemon=True)
    before = _counters(ctx.conn)
    began = time.perf_counter()
    thread.start()
    try:
        deadline = time.monotonic() + 900
        while True:
            status = relay.instance.snapshot_status() if relay.instance.started.is_set() else None
            if status is not None and status["done"] and status["acked_rows"] >= rows:
                break
            if error or not thread.is_alive() or time.monotonic() > deadline:
                raise BenchError(f"the snapshot did not finish: {error[0] if error else status}")
            time.sleep(0.01)
        elapsed = time.perf_counter() - began
        load = _delta(before, _counters(ctx.conn))
    finally:
        relay.stop()
        thread.join(30)
    s = config.snapshot
    settings = {
        "chunk_rows": s.chunk_rows,
        "parallelism": s.parallelism,
        "batch_size": config.publish.batch_size,
    }
    return rows / elapsed, load, settings


def run_snapshot(ctx: Context, rows: int) -> SnapshotResult:
    ctx.progress(f"[S] filling {rows:,} rows …")
    fill(ctx.conn, rows)
    ctx.progress("[S] plain streaming SELECT …")
    select_rate, select_load = plain_select(ctx)
    ctx.progress("[S] snapshot to Kafka …")
    snap_rate, snap_load, settings = snapshot_to_kafka(ctx, rows)
    result = SnapshotResult(rows, select_rate, snap_rate, select_load, snap_load, settings)
    ctx.progress(
        f"[S] SELECT {select_rate:,.0f} rows/s, snapshot {snap_rate:,.0f} rows/s ({result.ratio:.2f}x)"
    )
    return result
