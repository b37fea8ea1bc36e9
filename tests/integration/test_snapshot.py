"""Snapshots on real MariaDB and a real broker, with ``relay run`` as a child process.

A sharded table with existing rows (a few thousand per shard) under a concurrent workload of inserts,
updates, deletes and key changes is snapshotted while the relay streams; the relay is SIGKILLed twice
in the middle of the snapshot and restarted, and one shard's definition changes (ALTER) meanwhile. Then:

- the state rebuilt from the topic (read in log order, per-key sequences checked) equals SELECT over
  the shards, and every repeated change identity is a byte-identical copy;
- the snapshot reads are marked (header ``relay.snapshot``, ``"snapshot":true``, type INSERT);
- the general query log shows that the relay's account sent no locking statement and no write.

Every wait is a condition with a deadline.
"""

from __future__ import annotations

import contextlib
import re
import signal
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest

from relay.dev import services
from relay.dev.services import KafkaService
from tests.integration.relay_harness import master_position, wait_for
from tests.integration.snapshot_harness import (
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


@pytest.fixture
def case(mysql_service: Any, kafka_service: KafkaService, tmp_path: Path) -> Iterator[Case]:
    with snapshot_case(mysql_service, kafka_service, tmp_path) as made:
        yield made


def _kill_readers(case: Case) -> int:
    """KILL the relay account's connections other than the binlog dump (the snapshot readers)."""
    with case.conn.cursor() as cur:
        cur.execute(
            "SELECT ID FROM information_schema.PROCESSLIST WHERE USER = %s AND COMMAND <> 'Binlog Dump'",
            (case.mysql.replication_user,),
        )
        ids = [int(r[0]) for r in cur.fetchall()]
        for ident in ids:
            with contextlib.suppress(pymysql.err.MySQLError):
                cur.execute(f"KILL CONNECTION {ident}")
    return len(ids)


def _metrics(port: int) -> dict[str, float]:
    """The snapshot samples of /metrics: name{labels} → value."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
    except OSError:  # the (restarted) relay has not opened its exporter yet
        return {}
    out = {}
    for line in text.splitlines():
        if line.startswith("relay_snapshot_"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def test_snapshot_under_load_with_two_sigkills_rebuilds_the_tables(case: Case, record_property: Any) -> None:
    port = services.free_port()
    cfg = case.configure(metrics_port=port)
    writer = KeyChangingWriter(case.mysql, case.prefix, dict(case.existing), seed=7)
    writer.start()
    relay = case.relay(cfg)
    total = len(case.existing)
    for share in (0.2, 0.5):
        proc = relay
        wait_for(lambda: acked_rows(proc) >= total * share, 120, f"{share:.0%} of the snapshot acked")  # noqa: B023
        assert not snapshot_status(relay).get("read")
        relay.signal(signal.SIGKILL)
        assert relay.wait(10) == -signal.SIGKILL
        relay = case.relay(cfg)
        if share == 0.2:  # a DDL on a shard while it may be read: its chunks are read again if so
            with case.conn.cursor() as cur:
                cur.execute(f"ALTER TABLE {case.prefix}_01.orders_01 MODIFY status VARCHAR(32)")
            proc = relay
            wait_for(lambda: bool(snapshot_status(proc)), 60, "the snapshot continuing")  # noqa: B023
            # Kill the readers' connections: they reconnect and go on.
            wait_for(lambda: _kill_readers(case) > 0, 30, "a snapshot reader's connection killed")
    wait_for(lambda: _metrics(port).get("relay_snapshot_tables_remaining", 1) == 0, 180, "metrics: all read")
    samples = _metrics(port)
    table = f'relay_snapshot_rows{{table="{case.prefix}_01.orders_01"}}'
    assert samples[table] > 0 and samples["relay_snapshot_acked_rows"] > 0, samples
    assert samples["relay_snapshot_read_percent"] == 100.0, samples
    wait_for(lambda: bool(snapshot_status(relay).get("done")), 180, "the snapshot done")
    shown = run_cli("status", "-c", str(cfg))  # four orders shards and the customers table of shard 00
    assert re.search(
        r"^snapshot\s+\S+: done, 5/5 tables, \d+ rows \(100%\), \d+ acked", shown.stdout, re.M
    ), shown.stdout
    assert re.search(rf"^  {case.prefix}_01\.orders_01\s+chunk \d+, \d+/~\d+ rows, done$", shown.stdout, re.M)
    wait_for(lambda: writer.key_changes >= 30, 60, "30 key changes written")
    changes = writer.stop()
    wait_for(lambda: caught_up(case, relay), 120, "the relay caught up with the binlog")
    records = read_all(case)
    relay.signal(signal.SIGTERM)
    assert relay.wait(20) == 0

    snapshots, repeats, statements = check(case, records)
    logs = "".join(p.log() for p in case.procs)
    assert re.search(r"snapshot \S+: reading \S+: .*; reconnecting", logs), "the killed readers reconnected"
    record_property("snapshot_records", len(snapshots))
    record_property("row_changes", changes)
    print(
        f"snapshot x2 SIGKILL: {total} existing rows, {changes} live row changes "
        f"({writer.key_changes} key changes), {len(records)} records, {len(snapshots)} snapshot reads, "
        f"{repeats} exact repeats, {len(statements)} statements by the relay's account"
    )


def test_on_demand_snapshot_of_one_table_while_streaming_with_two_sigkills(case: Case) -> None:
    """Streaming from the binlog's end (``snapshot.mode: never``: no initial snapshot), then ``relay
    snapshot run`` re-reads the logical table (all four shards) under load; SIGKILL twice in the middle:
    the on-demand snapshot is continued whatever the mode."""
    cfg = case.configure(start=master_position(case.conn), snapshot={"mode": "never"})
    writer = KeyChangingWriter(case.mysql, case.prefix, dict(case.existing), seed=11)
    writer.start()
    relay = case.relay(cfg)
    wait_for(lambda: relay.status().get("batches_acked", 0) >= 3, 60, "the relay streaming")
    assert not relay.status().get("snapshot"), "no initial snapshot with snapshot.mode never"
    ran = run_cli("snapshot", "run", "-c", str(cfg), "--table", f"{case.prefix}.orders")
    assert ran.returncode == 0 and "accepted" in ran.stdout, ran.stdout + ran.stderr
    total = len(case.existing)
    for share in (0.2, 0.5):
        proc = relay
        wait_for(lambda: acked_rows(proc) >= total * share, 120, f"{share:.0%} of the snapshot acked")  # noqa: B023
        relay.signal(signal.SIGKILL)
        assert relay.wait(10) == -signal.SIGKILL
        shown = run_cli("snapshot", "status", "-c", str(cfg))
        assert "interrupted" in shown.stdout, shown.stdout + shown.stderr
        relay = case.relay(cfg)
    wait_for(lambda: bool(snapshot_status(relay).get("done")), 180, "the on-demand snapshot done")
    refused = run_cli("snapshot", "cancel", "-c", str(cfg))
    assert refused.returncode == 1 and "no snapshot is running" in refused.stdout, refused.stdout
    changes = writer.stop()
    wait_for(lambda: caught_up(case, relay), 120, "the relay caught up with the binlog")
    records = read_all(case)
    relay.signal(signal.SIGTERM)
    assert relay.wait(20) == 0
    snapshots, repeats, _ = check(case, records)
    print(
        f"on-demand snapshot, 2 SIGKILLs: {total} existing rows, {changes} live row changes, "
        f"{len(records)} records, {len(snapshots)} snapshot reads, {repeats} exact repeats"
    )
