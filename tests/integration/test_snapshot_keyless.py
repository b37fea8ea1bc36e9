"""Snapshots of tables without a primary key, on real MariaDB and a real broker (``relay run`` as a child
process):

- a table with a UNIQUE key over NOT NULL columns is read in chunks of that key, under a workload;
- a table with no usable key (duplicate rows included) is read in ONE chunk inside one watermark window:
  while the binlog keeps changing it, every read is dropped and read again, and after the last try the
  relay stops with an error naming the table; restarted while the table is quiet, it reads it whole,
  and live changes follow.

The keyless table is rebuilt as a consumer of its one partition must: in offset order, a snapshot chunk
(a new snapshot sequence) replaces the rows before it, INSERT adds a row, DELETE removes one equal row,
UPDATE replaces one equal row; it equals SELECT as a multiset. Every wait is a condition with a deadline.
"""

from __future__ import annotations

import contextlib
import json
import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from relay.dev.services import KafkaService
from tests.integration.relay_harness import (
    Rec,
    RelayProcess,
    identity,
    master_position,
    read_topic,
    wait_for,
    write_configs,
)

# The keyless table is big enough that reading it takes a while (the reader's CPU, which stretches with the
# machine's load as the writers slow down): a read window without any change of it must not happen by chance.
KEYLESS_ROWS, UNIQUE_ROWS = 3000, 1500
Row = tuple[str | None, ...]


@dataclass
class Tables:
    prefix: str
    tmp: Path
    mysql: Any
    bootstrap: str
    conn: Any
    procs: list[RelayProcess] = field(default_factory=list)

    def relay(self, cfg: Path) -> RelayProcess:
        proc = RelayProcess(cfg, self.tmp / f"relay{len(self.procs)}.log").start()
        self.procs.append(proc)
        return proc


@pytest.fixture
def tables(mysql_service: Any, kafka_service: KafkaService, tmp_path: Path) -> Iterator[Tables]:
    prefix = f"nk{time.monotonic_ns() % 10**8}"
    conn = mysql_service.connect()
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {prefix}_00")
        cur.execute(
            f"CREATE TABLE {prefix}_00.events (kind VARCHAR(16), amount INT, note TEXT) ENGINE=InnoDB"
        )
        cur.execute(
            f"CREATE TABLE {prefix}_00.codes (code VARCHAR(16) NOT NULL, v INT, UNIQUE KEY uk (code)) "
            "ENGINE=InnoDB"
        )
        rows = [(f"k{i % 7}", i % 50, None if i % 4 else f"n{i % 3}") for i in range(KEYLESS_ROWS)]
        cur.executemany(f"INSERT INTO {prefix}_00.events VALUES (%s, %s, %s)", rows)  # duplicates included
        codes = [(f"c{i:05d}", i) for i in range(UNIQUE_ROWS)]
        cur.executemany(f"INSERT INTO {prefix}_00.codes VALUES (%s, %s)", codes)
    made = Tables(prefix, tmp_path, mysql_service, kafka_service.bootstrap_servers, conn)
    try:
        yield made
    finally:
        for proc in made.procs:
            proc.stop()
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {prefix}_00")
        conn.close()


class TableWriter(threading.Thread):
    """Inserts, updates and deletes on one table, ``rate`` statements a second, until stopped."""

    def __init__(self, service: Any, sql: list[tuple[str, Any]], rate: float, seed: int) -> None:
        super().__init__(daemon=True)
        self.service, self.sql, self.rate = service, sql, rate
        self.rng = random.Random(seed)
        self.halt = threading.Event()
        self.statements = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with contextlib.closing(self.service.connect()) as conn, conn.cursor() as cur:
                while not self.halt.wait(1.0 / self.rate):
                    text, args = self.rng.choice(self.sql)
                    cur.execute(text, args(self.rng) if callable(args) else args)
                    self.statements += 1
        except BaseException as exc:
            self.error = exc

    def stop(self) -> None:
        self.halt.set()
        self.join(30)
        if self.error is not None:
            raise self.error


def _events_sql(prefix: str) -> list[tuple[str, Any]]:
    table = f"{prefix}_00.events"
    return [
        (f"INSERT INTO {table} VALUES (%s, %s, %s)", lambda r: (f"k{r.randrange(7)}", r.randrange(50), None)),
        (
            f"UPDATE {table} SET amount = amount + 1 WHERE kind = %s LIMIT 1",
            lambda r: (f"k{r.randrange(7)}",),
        ),
        (f"DELETE FROM {table} WHERE kind = %s LIMIT 1", lambda r: (f"k{r.randrange(7)}",)),
    ]


def _codes_sql(prefix: str) -> list[tuple[str, Any]]:
    table = f"{prefix}_00.codes"
    return [
        (f"INSERT INTO {table} VALUES (%s, %s)", lambda r: (f"z{r.randrange(10**9):09d}", r.randrange(99))),
        (f"UPDATE {table} SET v = v + 1 WHERE code = %s", lambda r: (f"c{r.randrange(UNIQUE_ROWS):05d}",)),
        (f"DELETE FROM {table} WHERE code = %s", lambda r: (f"c{r.randrange(UNIQUE_ROWS):05d}",)),
        (f"UPDATE {table} SET code = %s WHERE code = %s",  # a key change
         lambda r: (f"m{r.randrange(10**9):09d}", f"c{r.randrange(UNIQUE_ROWS):05d}")),
    ]  # fmt: skip


def _mapping(prefix: str) -> dict[str, Any]:
    return {
        "version": 1,
        "topics": {"partitions": 3, "create": True},
        "unmapped": {"action": "drop"},
        "logical_dbs": {
            prefix: {
                "physical": [f"{prefix}_\\d+"],
                "unclaimed_tables": "drop",
                "tables": {
                    "events": {"topic": f"{prefix}.events"},
                    "codes": {"topic": f"{prefix}.codes", "key": ["code"]},
                },
            }
        },
    }


def _rebuild_keyless(records: list[Rec]) -> Counter[Row]:
    """The keyless table as a consumer of its partition keeps it (see the module docstring)."""
    rows: Counter[Row] = Counter()
    seen: dict[Any, Rec] = {}
    chunk: int | None = None
    assert len({r.partition for r in records}) <= 1, "a keyless table's records share one key"
    for rec in sorted(records, key=lambda r: r.offset):
        msg = rec.json
        if msg["isDdl"]:
            continue
        first = seen.setdefault(identity(rec), rec)
        if first is not rec:
            assert (rec.key, rec.value, rec.headers) == (first.key, first.value, first.headers)
            continue
        data = msg["data"][0]
        row = (data["kind"], data["amount"], data["note"])
        if chunk is None and not msg.get("snapshot"):
            continue  # before the first chunk the consumer has no rows to change: the chunk replaces them
        if msg.get("snapshot"):
            if int(msg["sequence"]) != chunk:
                chunk, rows = int(msg["sequence"]), Counter()
            rows[row] += 1
        elif msg["type"] == "INSERT":
            rows[row] += 1
        else:
            before = {**data, **(msg.get("old") or [{}])[0]}
            old = (before["kind"], before["amount"], before["note"])
            assert rows[old] > 0, f"{msg['type']} of a row the consumer does not have: {old}"
            rows[old] -= 1
            if msg["type"] == "UPDATE":
                rows[row] += 1
    return +rows


def _rebuild_codes(records: list[Rec]) -> dict[str, str | None]:
    """The unique-key table by its key, each partition in offset order, per key (sequence, part) growing."""
    state: dict[str, str | None] = {}
    seen: dict[Any, Rec] = {}
    last: dict[str, tuple[int, int]] = {}
    for rec in sorted(records, key=lambda r: (r.partition, r.offset)):
        msg = rec.json
        if msg["isDdl"]:
            continue
        first = seen.setdefault(identity(rec), rec)
        if first is not rec:
            assert (rec.key, rec.value, rec.headers) == (first.key, first.value, first.headers)
            continue
        code = str(json.loads(rec.key or b"{}")["code"])
        order = (int(msg["sequence"]), int(msg.get("part") or 0))
        assert order > last.get(code, (-1, 0)), f"code {code}: {order} at {rec.partition}:{rec.offset}"
        last[code] = order
        if msg["type"] == "DELETE":
            state.pop(code, None)
        else:
            state[code] = msg["data"][0]["v"]
    return state


def _caught_up(t: Tables, relay: RelayProcess) -> bool:
    from relay.kafka.codec import sequence
    from relay.positions.store import ResumePoint

    text = relay.position()
    if not text:
        return False
    point, end = ResumePoint.from_json(text), master_position(t.conn)
    return sequence(point.journal, point.offset, 0) >= sequence(end[0], end[1], 0)


def _read(t: Tables, topic: str) -> list[Rec]:
    seen = {"n": -1, "at": time.monotonic()}

    def idle(records: list[Rec]) -> bool:
        if len(records) != seen["n"]:
            seen["n"], seen["at"] = len(records), time.monotonic()
            return False
        return time.monotonic() - seen["at"] > 3.0

    return read_topic(t.bootstrap, topic, until=idle, timeout=120)


def test_keyless_table_in_one_chunk_retried_then_refused_then_read_whole(tables: Tables) -> None:
    t = tables
    cfg = write_configs(
        t.tmp,
        mysql=t.mysql,
        bootstrap=t.bootstrap,
        mapping=_mapping(t.prefix),
        start=None,
        instance=t.prefix,
        include=f"{t.prefix}_\\d+\\..*",
        extra={
            "snapshot": {"mode": "when_needed", "chunk_rows": 200, "parallelism": 2},
            "logging": {"level": "INFO"},
            "publish": {"drain_seconds": 5.0},
        },
    )
    # 1. The keyless table changes all the time: every one-chunk read is voided; the relay stops. Two
    # writers, each as fast as its commits go (a read of 300 rows in a window of ~10 ms once saw no change
    # under load and succeeded, and the relay went on).
    busy = [TableWriter(t.mysql, _events_sql(t.prefix), rate=1000.0, seed=seed) for seed in (1, 11)]
    for writer in busy:
        writer.start()
    wait_for(lambda: min(w.statements for w in busy) >= 50, 30, "the keyless table changing")
    relay = t.relay(cfg)
    wait_for(lambda: not relay.alive(), 180, "the relay to stop on the keyless table")
    for writer in busy:
        writer.stop()
    assert relay.wait(5) != 0
    log = relay.log()
    table = f"{t.prefix}_00.events"
    assert (
        f"table {table} (no usable key, read in one chunk) changed while it was read; reading it again" in log
    )
    assert f"snapshot: table {table} has no PRIMARY KEY and no UNIQUE key over NOT NULL columns" in log
    assert "during each of 5 reads" in log, log[-3000:]

    # 2. Quiet keyless table, busy unique-key table: restarted, the snapshot is continued and finishes.
    codes = TableWriter(t.mysql, _codes_sql(t.prefix), rate=150.0, seed=2)
    codes.start()
    relay = t.relay(cfg)
    wait_for(lambda: bool((relay.status().get("snapshot") or {}).get("done")), 120, "the snapshot done")
    status = relay.status()["snapshot"]
    assert status["tables"][table]["chunks"] == 1 and status["tables"][table]["done"]
    assert status["tables"][f"{t.prefix}_00.codes"]["chunks"] > 1
    # 3. Live changes of the keyless table after its chunk.
    after = TableWriter(t.mysql, _events_sql(t.prefix), rate=100.0, seed=3)
    after.start()
    wait_for(lambda: after.statements >= 60, 30, "live changes of the keyless table")
    after.stop()
    codes.stop()
    wait_for(lambda: _caught_up(t, relay), 120, "the relay caught up")
    events, code_records = _read(t, f"{t.prefix}.events"), _read(t, f"{t.prefix}.codes")
    relay.signal(signal.SIGTERM)
    assert relay.wait(30) == 0

    with t.conn.cursor() as cur:
        cur.execute(f"SELECT kind, CAST(amount AS CHAR), note FROM {table}")
        expected = Counter(tuple(r) for r in cur.fetchall())
        cur.execute(f"SELECT code, CAST(v AS CHAR) FROM {t.prefix}_00.codes")
        expected_codes = dict(cur.fetchall())
    assert _rebuild_keyless(events) == expected
    assert sum(1 for r in events if r.json.get("snapshot")) >= KEYLESS_ROWS // 2
    assert _rebuild_codes(code_records) == expected_codes
