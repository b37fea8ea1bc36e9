"""The relay's memory while its broker is stalled: a dedicated broker SIGSTOPped under a large backlog.

``run_stall`` runs on the bench's main thread: it starts a broker of its own, a ``relay-live`` child on
it, stops the broker, writes the backlog (MariaDB's sequence engine, ~4 KB rows), holds, and hands back
the child's peak RSS and store fill as a ``StallResult``. The broker is continued and stopped, and the
child killed, whatever happens.
"""

from __future__ import annotations

import os
import signal
import time

from relay.dev.bench import workloads as wl
from relay.dev.bench.common import STALL_CHUNK_ROWS, Context, LiveWorker, create_topics
from relay.dev.bench.stats import StallResult


def run_stall(ctx: Context) -> StallResult:
    from relay.dev.services import StartOptions, start_kafka, start_tansu

    o = ctx.options
    ctx.progress(f"[stall] a dedicated broker, SIGSTOPped under a {o.stall_mb:,} MB backlog …")
    starter = start_tansu if o.broker == "tansu" else start_kafka
    broker = starter(StartOptions(ctx.work / "stall-broker"))
    stopped = False
    live: LiveWorker | None = None
    try:
        bootstrap = broker.service.bootstrap_servers
        create_topics(bootstrap, ["bench.stall", "bench.ddl", "bench.warmup"])
        instance = f"stall-{time.monotonic_ns() % 10**6}"
        with wl.stall_table(ctx.conn) as table:
            start = wl.master_position(ctx.conn)
            live = LiveWorker(
                ctx, kafka=bootstrap, start=start, instance=instance, workdir=str(ctx.work / instance),
                ack_file=str(ctx.work / f"{instance}.acks.json"),
            )  # fmt: skip
            live.wait_for("ready", 60)
            os.killpg(broker.process.pid, signal.SIGSTOP)
            stopped = True
            began = time.monotonic()
            acked_before = live.last.get("acked_rows", 0)
            peak, fill, written = _write_stall(ctx, live, table, start)
            hold_until = time.monotonic() + o.stall_hold_seconds
            while time.monotonic() < hold_until:
                msg = live.next(0.5)
                if msg is not None and msg["event"] == "progress":
                    peak, fill = max(peak, msg["hwm_mb"]), max(fill, msg["store_mb"])
            acked = live.last.get("acked_rows", acked_before) - acked_before
            seconds = time.monotonic() - began
        return StallResult(written, peak, o.store_budget_mb, fill, acked, seconds)
    finally:
        if stopped:
            os.killpg(broker.process.pid, signal.SIGCONT)
        if live is not None:
            live.kill()
        broker.stop(remove_dir=True)


def _write_stall(
    ctx: Context, live: LiveWorker, table: str, start: tuple[str, int]
) -> tuple[float, float, int]:
    """Write the stall backlog; returns (peak RSS MB, peak store fill MB, binlog bytes written)."""
    peak = fill = 0.0
    written, first = 0, 1
    target = ctx.options.stall_mb * 2**20
    reported = 0
    with ctx.conn.cursor() as cur:
        while written < target:
            wl.write_stall_chunk(cur, table, first, STALL_CHUNK_ROWS)
            first += STALL_CHUNK_ROWS
            written = wl.binlog_bytes(ctx.conn, start, wl.master_position(ctx.conn))
            while (msg := live.next(0)) is not None:
                if msg["event"] == "progress":
                    peak, fill = max(peak, msg["hwm_mb"]), max(fill, msg["store_mb"])
            if written - reported >= 128 * 2**20:
                reported = written
                ctx.progress(
                    f"  [stall] {written / 2**20:,.0f} MB written; relay peak RSS so far {peak:.0f} MB"
                )
    return peak, fill, written
