"""What the snapshot tests share: sharded tables with existing rows, a writer that also changes keys, the
relay as a child process, the state rebuilt from the topic, and the general query log's check.

``snapshot_case`` makes the shards (``SHARDS`` × ``TABLES`` orders tables, ``rows_per_table`` existing
rows each), turns the general query log on and yields a ``Case``; ``rebuild`` applies the records of a
topic in partition offset order (as ``relay_harness.apply_records``, plus key changes); ``check``
compares that state with SELECT, checks the snapshot marks and that the relay's account sent no locking
statement and no write. Every wait is a condition with a deadline.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
    same_content,
    select_orders,
    single_table_mapping,
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
    before_fill: tuple[str, int]  # the binlog end after the tables were made, before their rows
    procs: list[RelayProcess] = field(default_factory=list)

    @property
    def topic(self) -> str:
        return f"{self.prefix}.orders"

    def configure(
        self,
        start: tuple[str, int] | None = None,
        metrics_port: int = 0,
        snapshot: dict[str, Any] | None = None,
        mapping: dict[str, Any] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> Path:
        """The relay's config: ``LOAD`` with ``snapshot`` overriding keys of ``SNAPSHOT``."""
        return write_configs(
            self.tmp,
            mysql=self.mysql,
            bootstrap=self.bootstrap,
            mapping=mapping or single_table_mapping(self.prefix),
            start=start,
            instance=self.prefix,
            include=f"{self.prefix}_\\d+\\..*",
            extra={
                **LOAD,
                "snapshot": {**SNAPSHOT, **(snapshot or {})},
                "metrics": {"port": metrics_port},
                **(extra or {}),
            },
        )

    def relay(self, cfg: Path) -> RelayProcess:
        proc = RelayProcess(cfg, self.tmp / f"relay{len(self.procs)}.log").start()
        self.procs.append(proc)
        return proc


def fill(conn: Any, prefix: str, rows_per_table: int = ROWS_PER_TABLE) -> dict[int, str]:
    existing: dict[int, str] = {}
    next_id = FIRST_ID
    with conn.cursor() as cur:
        for d in range(SHARDS):
            for t in range(TABLES):
                table = f"{prefix}_{d:02d}.orders_{t:02d}"
                for start in range(0, rows_per_table, 500):
                    ids = range(next_id + start, next_id + min(start + 500, rows_per_table))
                    values = [(i, "OLD", f"{i % 997}.50", f"row {i}" if i % 3 else None) for i in ids]
                    marks = ", ".join(["(%s, %s, %s, %s)"] * len(values))
                    cur.execute(f"INSERT INTO {table} VALUES {marks}", [v for row in values for v in row])
                    existing.update(dict.fromkeys(ids, table))
                next_id += rows_per_table
    return existing


@contextmanager
def snapshot_case(
    mysql_service: Any, kafka_service: Any, tmp_path: Path, rows_per_table: int = ROWS_PER_TABLE
) -> Iterator[Case]:
    """Shards with existing rows and the general query log on; everything dropped and stopped after."""
    prefix = f"sn{time.monotonic_ns() % 10**8}"
    conn = mysql_service.connect()
    create_shards(conn, prefix, SHARDS, TABLES)
    before_fill = master_position(conn)
    existing = fill(conn, prefix, rows_per_table)
    with conn.cursor() as cur:
        cur.execute("SELECT NOW(6)")
        since = str(cur.fetchone()[0])
        cur.execute("SET GLOBAL log_output = 'TABLE'")
        cur.execute("SET GLOBAL general_log = ON")
    made = Case(
        prefix, tmp_path, mysql_service, kafka_service.bootstrap_servers, conn, existing, since, before_fill
    )
    try:
        yield made
    finally:
        for proc in made.procs:
            proc.stop()
        with conn.cursor() as cur:
            cur.execute("SET GLOBAL general_log = OFF")
        drop_shards(conn, prefix, SHARDS)
        conn.close()


def snapshot_status(proc: RelayProcess) -> dict[str, Any]:
    return proc.status().get("snapshot") or {}


def acked_rows(proc: RelayProcess) -> int:
    """Snapshot rows acknowledged, from the saved position's checkpoint."""
    text = proc.position()
    if not text:
        return 0
    state = ResumePoint.from_json(text).extra.get("snapshot") or {}
    if "rows" in state:  # finished: the compacted checkpoint
        return int(state["rows"])
    return sum(int(t["rows"]) for t in state.get("tables", {}).values())


def caught_up(case: Case, proc: RelayProcess) -> bool:
    text = proc.position()
    if not text:
        return False
    point = ResumePoint.from_json(text)
    end = master_position(case.conn)
    return sequence(point.journal, point.offset, 0) >= sequence(end[0], end[1], 0)


def read_all(case: Case) -> list[Rec]:
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
            assert same_content(rec, seen), (
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


def relay_statements(case: Case) -> list[str]:
    with case.conn.cursor() as cur:
        cur.execute(
            "SELECT command_type, CONVERT(argument USING utf8mb4) FROM mysql.general_log "
            "WHERE event_time >= %s AND user_host LIKE %s",
            (case.log_since, f"{case.mysql.replication_user}[%"),
        )
        return [f"{kind}: {arg}" for kind, arg in cur.fetchall()]


def check(
    case: Case, records: list[Rec], keep: Callable[[str], bool] | None = None
) -> tuple[list[Rec], int, list[str]]:
    """State from the topic == SELECT (of the keys ``keep`` keeps), repeats exact, snapshot reads
    marked, no lock or write by the relay's account; returns (snapshot records, exact repeats, the
    account's statements)."""
    state, repeats = rebuild(records)
    expected = select_orders(case.conn, case.prefix, SHARDS, TABLES)
    if keep is not None:
        expected = {k: v for k, v in expected.items() if keep(k)}
    missing = sorted(set(expected) - set(state))[:5]
    extra = sorted(set(state) - set(expected))[:5]
    differ = [k for k in expected if k in state and state[k] != expected[k]][:5]
    assert state == expected, f"missing {missing}, extra {extra}, different {differ}"
    snapshots = [r for r in records if r.json.get("snapshot")]
    assert snapshots, "no snapshot reads in the topic"
    for r in snapshots[:50]:
        assert r.headers.get("relay.snapshot") == b"true" and r.json["type"] == "INSERT"
    statements = relay_statements(case)
    assert any("SELECT" in s and case.prefix in s and "LIMIT" in s for s in statements), statements[:20]
    bad = [s for s in statements if s.startswith("Query") and FORBIDDEN.search(s.split(": ", 1)[1])]
    assert not bad, bad[:10]
    return snapshots, repeats, statements


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``relay …`` as the operator runs it, in a process of its own."""
    return subprocess.run(
        [sys.executable, "-m", "relay.cli", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
