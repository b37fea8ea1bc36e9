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
import json
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pymysql
import pytest

from relay.dev import services
from relay.dev.services import KafkaService
from relay.kafka.codec import sequence
from relay.positions.store import ResumePoint
from tests.integration.relay_harness import (
    REPO_ROOT,
    Rec,
    RelayProcess,
    Writer,
    create_shards,
    drop_shards,
    identity,
    master_position,
    read_topic,
    select_orders,
    single_table_mapping,
    wait_for,
    write_configs,
)

SHARDS, TABLES = 2, 2
ROWS_PER_TABLE = 1500  # 3000 existing rows per shard
FIRST_ID = 1_000_000
# Rate-limited, so that the kills land in the middle of the snapshot.
SNAPSHOT: dict[str, Any] = {
    "mode": "when_needed",
    "chunk_rows": 250,
    "parallelism": 2,
    "max_rows_per_second": 1500,
}
LOAD: dict[str, Any] = {
    "store": {"buffer_size": 256, "batch_mode": "ITEMSIZE"},
    "publish": {"batch_size": 32, "max_inflight_batches": 4, "drain_seconds": 10.0},
    "logging": {"level": "INFO"},
    "snapshot": SNAPSHOT,
}
# Statements that lock or write: none may come from the relay's account.
FORBIDDEN = re.compile(
    r"^\s*(LOCK|UNLOCK|FLUSH|INSERT|UPDATE|DELETE|REPLACE|CREATE|DROP|ALTER|TRUNCATE|RENAME|GRANT|REVOKE|"
    r"SET\s+GLOBAL|XA|LOAD|HANDLER|CALL|DO)\b|FOR\s+UPDATE|LOCK\s+IN\s+SHARE\s+MODE|GET_LOCK",
    re.IGNORECASE,
)


class KeyChangingWriter(Writer):
    """The harness writer over every row, the existing ones too, plus primary-key changes."""

    def __init__(self, service: Any, prefix: str, existing: dict[int, str], seed: int) -> None:
        super().__init__(service, prefix, SHARDS, TABLES, rate=250.0, seed=seed)
        self._live.update(existing)
        self.key_changes = 0

    def _write_one(self, cur: Any) -> None:
        if self.rng.random() < 0.15 and self._live:
            old = self.rng.choice(list(self._live))
            table = self._live.pop(old)
            new = self._next_id
            self._next_id += 1
            n = int(cur.execute(f"UPDATE {table} SET id = %s, status = 'MOVED' WHERE id = %s", (new, old)))
            self._live[new] = table
            self.changes += n
            self.key_changes += n
            self.statements += 1
            return
        super()._write_one(cur)

    def _update_rows(self, cur: Any, rows: int) -> int:
        if not self._live:
            return 0
        table = self.rng.choice(list(self._live.values()))
        ids = [i for i, t in self._live.items() if t == table]
        picked = self.rng.sample(ids, min(rows, len(ids)))
        marks = ", ".join(["%s"] * len(picked))
        status = self.rng.choice(["PAID", "SHIPPED", "DONE"])
        sql = f"UPDATE {table} SET amount = amount + 1, status = %s WHERE id IN ({marks})"
        return int(cur.execute(sql, [status, *picked]))


@dataclass
class Case:
    prefix: str
    tmp: Path
    mysql: Any
    bootstrap: str
    conn: Any
    existing: dict[int, str]
    log_since: str
    procs: list[RelayProcess] = field(default_factory=list)

    @property
    def topic(self) -> str:
        return f"{self.prefix}.orders"

    def configure(self, start: tuple[str, int] | None = None, metrics_port: int = 0) -> Path:
        return write_configs(
            self.tmp,
            mysql=self.mysql,
            bootstrap=self.bootstrap,
            mapping=single_table_mapping(self.prefix),
            start=start,
            instance=self.prefix,
            include=f"{self.prefix}_\\d+\\..*",
            extra={**LOAD, "metrics": {"port": metrics_port}},
        )

    def relay(self, cfg: Path) -> RelayProcess:
        proc = RelayProcess(cfg, self.tmp / f"relay{len(self.procs)}.log").start()
        self.procs.append(proc)
        return proc


def _fill(conn: Any, prefix: str) -> dict[int, str]:
    existing: dict[int, str] = {}
    next_id = FIRST_ID
    with conn.cursor() as cur:
        for d in range(SHARDS):
            for t in range(TABLES):
                table = f"{prefix}_{d:02d}.orders_{t:02d}"
                for start in range(0, ROWS_PER_TABLE, 500):
                    ids = range(next_id + start, next_id + min(start + 500, ROWS_PER_TABLE))
                    values = [(i, "OLD", f"{i % 997}.50", f"row {i}" if i % 3 else None) for i in ids]
                    marks = ", ".join(["(%s, %s, %s, %s)"] * len(values))
                    cur.execute(f"INSERT INTO {table} VALUES {marks}", [v for row in values for v in row])
                    existing.update(dict.fromkeys(ids, table))
                next_id += ROWS_PER_TABLE
    return existing


@pytest.fixture
def case(mysql_service: Any, kafka_service: KafkaService, tmp_path: Path) -> Iterator[Case]:
    prefix = f"sn{time.monotonic_ns() % 10**8}"
    conn = mysql_service.connect()
    create_shards(conn, prefix, SHARDS, TABLES)
    existing = _fill(conn, prefix)
    with conn.cursor() as cur:
        cur.execute("SELECT NOW(6)")
        since = str(cur.fetchone()[0])
        cur.execute("SET GLOBAL log_output = 'TABLE'")
        cur.execute("SET GLOBAL general_log = ON")
    made = Case(prefix, tmp_path, mysql_service, kafka_service.bootstrap_servers, conn, existing, since)
    yield made
    for proc in made.procs:
        proc.stop()
    with conn.cursor() as cur:
        cur.execute("SET GLOBAL general_log = OFF")
    drop_shards(conn, prefix, SHARDS)
    conn.close()


def _snapshot_status(proc: RelayProcess) -> dict[str, Any]:
    return proc.status().get("snapshot") or {}


def _acked_rows(proc: RelayProcess) -> int:
    """Snapshot rows acknowledged, from the saved position's checkpoint."""
    text = proc.position()
    if not text:
        return 0
    state = ResumePoint.from_json(text).extra.get("snapshot") or {}
    if "rows" in state:  # finished: the compacted checkpoint
        return int(state["rows"])
    return sum(int(t["rows"]) for t in state.get("tables", {}).values())


def _caught_up(case: Case, proc: RelayProcess) -> bool:
    text = proc.position()
    if not text:
        return False
    point = ResumePoint.from_json(text)
    end = master_position(case.conn)
    return sequence(point.journal, point.offset, 0) >= sequence(end[0], end[1], 0)


def _read_all(case: Case) -> list[Rec]:
    """The topic from the start, until nothing new arrives for 3 s (the relay has caught up)."""
    seen = {"n": -1, "at": time.monotonic()}

    def idle(records: list[Rec]) -> bool:
        if len(records) != seen["n"]:
            seen["n"], seen["at"] = len(records), time.monotonic()
            return False
        return time.monotonic() - seen["at"] > 3.0

    return read_topic(case.bootstrap, case.topic, until=idle, timeout=180)


def rebuild(records: list[Rec]) -> tuple[dict[str, dict[str, str | None]], int]:
    """State by key, reading each partition in log order, as ``relay_harness.apply_records`` does, plus
    key changes: an UPDATE whose ``old`` names another id removes that id (a tombstone at its sequence,
    since the old key's records live in another partition). Returns (state, exact repeats)."""
    state: dict[str, tuple[int, dict[str, str | None] | None]] = {}
    first: dict[Any, Rec] = {}
    last: dict[str, int] = {}
    repeats = 0
    for rec in sorted(records, key=lambda r: (r.topic, r.partition, r.offset)):
        msg = rec.json
        if msg["isDdl"]:
            continue
        ident = identity(rec)
        seen = first.setdefault(ident, rec)
        if seen is not rec:
            assert (rec.key, rec.value, rec.headers) == (seen.key, seen.value, seen.headers), (
                f"{ident} at {rec.partition}:{rec.offset} repeats {seen.partition}:{seen.offset} differently"
            )
            repeats += 1
            continue
        seq = int(msg["sequence"])
        key = str(json.loads(rec.key or b"{}")["id"])
        where = f"{rec.partition}:{rec.offset}"
        assert seq > last.get(key, -1), f"key {key}: sequence {seq} at {where} out of order"
        last[key] = seq
        row = msg["data"][0]
        old = (msg.get("old") or [{}])[0]
        if msg["type"] == "UPDATE" and "id" in old and str(old["id"]) != key:
            gone = str(old["id"])
            if state.get(gone, (-1, None))[0] < seq:
                state[gone] = (seq, None)
        if state.get(key, (-1, None))[0] < seq:
            value = {k: row.get(k) for k in ("id", "status", "amount", "note")}
            state[key] = (seq, None if msg["type"] == "DELETE" else value)
    return {k: v for k, (_, v) in state.items() if v is not None}, repeats


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


def _relay_statements(case: Case) -> list[str]:
    with case.conn.cursor() as cur:
        cur.execute(
            "SELECT command_type, CONVERT(argument USING utf8mb4) FROM mysql.general_log "
            "WHERE event_time >= %s AND user_host LIKE %s",
            (case.log_since, f"{case.mysql.replication_user}[%"),
        )
        return [f"{kind}: {arg}" for kind, arg in cur.fetchall()]


def _check(case: Case, records: list[Rec]) -> tuple[list[Rec], int, list[str]]:
    """State from the topic == SELECT, repeats exact, snapshot reads marked, no lock or write by the
    relay's account; returns (snapshot records, exact repeats, the account's statements)."""
    state, repeats = rebuild(records)
    expected = select_orders(case.conn, case.prefix, SHARDS, TABLES)
    missing = sorted(set(expected) - set(state))[:5]
    extra = sorted(set(state) - set(expected))[:5]
    differ = [k for k in expected if k in state and state[k] != expected[k]][:5]
    assert state == expected, f"missing {missing}, extra {extra}, different {differ}"
    snapshots = [r for r in records if r.json.get("snapshot")]
    assert snapshots, "no snapshot reads in the topic"
    for r in snapshots[:50]:
        assert r.headers.get("relay.snapshot") == b"true" and r.json["type"] == "INSERT"
    statements = _relay_statements(case)
    assert any("SELECT" in s and case.prefix in s and "LIMIT" in s for s in statements), statements[:20]
    bad = [s for s in statements if s.startswith("Query") and FORBIDDEN.search(s.split(": ", 1)[1])]
    assert not bad, bad[:10]
    return snapshots, repeats, statements


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
        wait_for(lambda: _acked_rows(proc) >= total * share, 120, f"{share:.0%} of the snapshot acked")  # noqa: B023
        assert not _snapshot_status(relay).get("read")
        relay.signal(signal.SIGKILL)
        assert relay.wait(10) == -signal.SIGKILL
        relay = case.relay(cfg)
        if share == 0.2:  # a DDL on a shard while it may be read: its chunks are read again if so
            with case.conn.cursor() as cur:
                cur.execute(f"ALTER TABLE {case.prefix}_01.orders_01 MODIFY status VARCHAR(32)")
            proc = relay
            wait_for(lambda: bool(_snapshot_status(proc)), 60, "the snapshot continuing")  # noqa: B023
            # Kill the readers' connections: they reconnect and go on.
            wait_for(lambda: _kill_readers(case) > 0, 30, "a snapshot reader's connection killed")
    wait_for(lambda: _metrics(port).get("relay_snapshot_tables_remaining", 1) == 0, 180, "metrics: all read")
    samples = _metrics(port)
    table = f'relay_snapshot_rows{{table="{case.prefix}_01.orders_01"}}'
    assert samples[table] > 0 and samples["relay_snapshot_acked_rows"] > 0, samples
    wait_for(lambda: bool(_snapshot_status(relay).get("done")), 180, "the snapshot done")
    shown = _run_cli("status", "-c", str(cfg))  # four orders shards and the customers table of shard 00
    assert re.search(r"^snapshot\s+\S+: done, 5/5 tables, \d+ rows, \d+ acked", shown.stdout, re.M), (
        shown.stdout
    )
    assert re.search(rf"^  {case.prefix}_01\.orders_01\s+chunk \d+, \d+/~\d+ rows, done$", shown.stdout, re.M)
    wait_for(lambda: writer.key_changes >= 30, 60, "30 key changes written")
    changes = writer.stop()
    wait_for(lambda: _caught_up(case, relay), 120, "the relay caught up with the binlog")
    records = _read_all(case)
    relay.signal(signal.SIGTERM)
    assert relay.wait(20) == 0

    snapshots, repeats, statements = _check(case, records)
    logs = "".join(p.log() for p in case.procs)
    assert re.search(r"snapshot \S+: reading \S+: .*; reconnecting", logs), "the killed readers reconnected"
    record_property("snapshot_records", len(snapshots))
    record_property("row_changes", changes)
    print(
        f"snapshot x2 SIGKILL: {total} existing rows, {changes} live row changes "
        f"({writer.key_changes} key changes), {len(records)} records, {len(snapshots)} snapshot reads, "
        f"{repeats} exact repeats, {len(statements)} statements by the relay's account"
    )


def _run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "relay.cli", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_on_demand_snapshot_of_one_table_while_streaming_with_two_sigkills(case: Case) -> None:
    """Streaming from the binlog's end (no initial snapshot: source.start is set), then ``relay snapshot
    run`` re-reads the logical table (all four shards) under load; SIGKILL twice in the middle."""
    cfg = case.configure(start=master_position(case.conn))
    writer = KeyChangingWriter(case.mysql, case.prefix, dict(case.existing), seed=11)
    writer.start()
    relay = case.relay(cfg)
    wait_for(lambda: relay.status().get("batches_acked", 0) >= 3, 60, "the relay streaming")
    assert not relay.status().get("snapshot"), "no initial snapshot with source.start set"
    ran = _run_cli("snapshot", "run", "-c", str(cfg), "--table", f"{case.prefix}.orders")
    assert ran.returncode == 0 and "accepted" in ran.stdout, ran.stdout + ran.stderr
    total = len(case.existing)
    for share in (0.2, 0.5):
        proc = relay
        wait_for(lambda: _acked_rows(proc) >= total * share, 120, f"{share:.0%} of the snapshot acked")  # noqa: B023
        relay.signal(signal.SIGKILL)
        assert relay.wait(10) == -signal.SIGKILL
        shown = _run_cli("snapshot", "status", "-c", str(cfg))
        assert "interrupted" in shown.stdout, shown.stdout + shown.stderr
        relay = case.relay(cfg)
    wait_for(lambda: bool(_snapshot_status(relay).get("done")), 180, "the on-demand snapshot done")
    refused = _run_cli("snapshot", "cancel", "-c", str(cfg))
    assert refused.returncode == 1 and "no snapshot is running" in refused.stdout, refused.stdout
    changes = writer.stop()
    wait_for(lambda: _caught_up(case, relay), 120, "the relay caught up with the binlog")
    records = _read_all(case)
    relay.signal(signal.SIGTERM)
    assert relay.wait(20) == 0
    snapshots, repeats, _ = _check(case, records)
    print(
        f"on-demand snapshot, 2 SIGKILLs: {total} existing rows, {changes} live row changes, "
        f"{len(records)} records, {len(snapshots)} snapshot reads, {repeats} exact repeats"
    )
