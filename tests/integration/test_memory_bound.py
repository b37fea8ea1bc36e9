"""The relay's memory stays within its bound — the store's budget + 200 MB — whatever a transaction's size
(issue 32), and such a transaction is still published exactly once, in order, and fail-closed.

A relay (``relay run``, a child process, default settings: a store of 16 MiB) reads ONE transaction
of 250,000 INSERTs and 100,000 UPDATEs (``INSERT … SELECT`` and ``UPDATE … WHERE``): about 350 MB once
decoded, 22 times the store's budget and more than the whole bound. Its RSS is sampled from /proc
while it works (and its peak, VmHWM, read before it is stopped). What reached Kafka is read back with an
independent consumer, each partition in offset order, and compared, per key, with SELECT on the source.
Not timed: every wait is a condition with a deadline.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from relay.dev.bench.workloads import sequence_source
from relay.kafka.codec import sequence
from relay.positions.store import ResumePoint
from tests.integration.relay_harness import (
    OneTableCase,
    Rec,
    RelayProcess,
    apply_records,
    check_exact_repeats,
    create_shards,
    drop_shards,
    master_position,
    read_topic,
    select_orders,
    wait_for,
)

INSERTS = 250_000
UPDATES = INSERTS * 2 // 5  # ids with id % 5 < 2
BOUND_MB = 16 + 200  # the default store's budget + the fixed allowance (README, "Memory")


@dataclass
class Bulk(OneTableCase):
    def bulk(self) -> tuple[str, int]:
        """The one large transaction (after a small one, before another); returns where it starts."""
        self.sql(f"INSERT INTO {self.table} VALUES (-1, 'BEFORE', 1.00, 'small')")
        at = master_position(self.conn)
        source = sequence_source(self.conn, INSERTS, f"{self.prefix}_00")
        self.sql(
            "BEGIN",
            f"INSERT INTO {self.table} SELECT seq, 'NEW', seq / 4, CONCAT('bulk ', seq) FROM {source}",
            f"UPDATE {self.table} SET status = 'PAID', note = CONCAT(note, ' paid')"
            " WHERE id > 0 AND id % 5 < 2",
            "COMMIT",
        )
        self.sql(f"UPDATE {self.table} SET status = 'AFTER' WHERE id IN (-1, 7)")
        return at

    def records(self, distinct: int, timeout: float = 300.0) -> list[Rec]:
        """The topic's row records once ``distinct`` different changes (sequence, part) arrived."""
        seen: set[tuple[int, int]] = set()
        looked = [0]

        def until(records: list[Rec]) -> bool:
            for rec in records[looked[0] :]:
                msg = rec.json
                if not msg["isDdl"]:
                    seen.add((int(msg["sequence"]), int(msg.get("part") or 0)))
            looked[0] = len(records)
            return len(seen) >= distinct

        return [r for r in read_topic(self.bootstrap, self.topic, until, timeout) if not r.json["isDdl"]]


class RssSampler(threading.Thread):
    """Samples a process's resident memory (VmRSS) every 50 ms and keeps the largest, and its VmHWM."""

    def __init__(self, pid: int) -> None:
        super().__init__(name=f"rss-{pid}", daemon=True)
        self.pid = pid
        self.peak_mb = 0.0
        self.hwm_mb = 0.0
        self.samples = 0
        self.halt = threading.Event()

    def read(self) -> None:
        try:
            text = Path(f"/proc/{self.pid}/status").read_text()
        except OSError:
            return
        for line in text.splitlines():
            if line.startswith("VmRSS:"):
                self.peak_mb = max(self.peak_mb, int(line.split()[1]) / 1024)
                self.samples += 1
            elif line.startswith("VmHWM:"):
                self.hwm_mb = max(self.hwm_mb, int(line.split()[1]) / 1024)

    def run(self) -> None:
        while not self.halt.wait(0.05):
            self.read()

    def stop(self) -> float:
        """Stop sampling; the peak seen (VmHWM, read while the process still runs, else the sampled peak)."""
        self.read()
        self.halt.set()
        self.join(5)
        return max(self.peak_mb, self.hwm_mb)


@pytest.fixture
def bulk(mysql_service: Any, kafka_service: Any, tmp_path: Path) -> Iterator[Bulk]:
    prefix = f"mem{time.monotonic_ns() % 10**8}"
    conn = mysql_service.connect()
    create_shards(conn, prefix, 1, 1)
    made = Bulk(prefix, tmp_path, mysql_service, kafka_service.bootstrap_servers, conn, master_position(conn))
    yield made
    for proc in made.procs:
        proc.stop()
    drop_shards(conn, prefix, 1)
    conn.close()


def _seq(point: tuple[str, int]) -> int:
    return sequence(point[0], point[1], 0)


def _saved(relay: RelayProcess) -> ResumePoint | None:
    text = relay.position()
    return ResumePoint.from_json(text) if text else None


def _caught_up(bulk: Bulk, relay: RelayProcess, timeout: float = 300.0) -> None:
    end = _seq(master_position(bulk.conn))

    def done() -> bool:
        assert relay.alive(), "the relay stopped:\n" + relay.log()[-3000:]
        point = _saved(relay)
        return point is not None and point.skip == 0 and _seq((point.journal, point.offset)) >= end

    wait_for(done, timeout, "the relay's saved position at the binlog end", interval=0.2)


def _check_against_select(bulk: Bulk, records: list[Rec]) -> None:
    state = apply_records(records)  # per key, in partition offset order; repeats must be identical
    expected = select_orders(bulk.conn, bulk.prefix, 1, 1)
    assert len(state) == len(expected) == INSERTS + 1
    assert state == expected


def test_a_transaction_far_larger_than_the_store_is_published_exactly_once_within_the_bound(
    bulk: Bulk,
) -> None:
    cfg = bulk.configure()
    relay = bulk.relay(cfg)
    wait_for(lambda: relay.status().get("state") == "running", 60, "the relay running")
    sampler = RssSampler(relay.pid)
    sampler.start()
    bulk.bulk()
    _caught_up(bulk, relay)
    peak = sampler.stop()
    assert sampler.samples > 20, "the relay's memory was hardly sampled"
    assert peak <= BOUND_MB, f"peak RSS {peak:.0f} MB above the bound {BOUND_MB} MB"
    assert "reading ahead the large transaction" in relay.log()  # streamed after a read ahead

    changes = 1 + INSERTS + UPDATES + 2
    records = bulk.records(changes)
    assert check_exact_repeats(records) == 0 and len(records) == changes  # each change exactly once
    _check_against_select(bulk, records)


def test_a_relay_killed_inside_the_large_transaction_resumes_inside_it(bulk: Bulk) -> None:
    """A resume point inside the transaction says how many of its entries are published: the restarted
    relay reads the transaction again from its start, reads it ahead, drops those and goes on."""
    cfg = bulk.configure()
    first = bulk.relay(cfg)
    wait_for(lambda: first.status().get("state") == "running", 60, "the relay running")
    sampler = RssSampler(first.pid)
    sampler.start()
    at = bulk.bulk()

    def inside() -> bool:
        assert first.alive(), first.log()[-3000:]
        point = _saved(first)
        return point is not None and point.skip > 0 and _seq((point.journal, point.offset)) == _seq(at)

    wait_for(inside, 300, "a saved position inside the large transaction", interval=0.02)
    first.signal(signal.SIGKILL)
    first.wait(10)
    peaks = [sampler.stop()]
    killed_at = _saved(first)
    assert killed_at is not None and killed_at.skip > 0

    second = bulk.relay(cfg)
    sampler = RssSampler(second.pid)
    sampler.start()
    _caught_up(bulk, second)
    peaks.append(sampler.stop())
    assert max(peaks) <= BOUND_MB, f"peak RSS {peaks} MB above the bound {BOUND_MB} MB"

    changes = 1 + INSERTS + UPDATES + 2
    records = bulk.records(changes)
    repeats = check_exact_repeats(records)  # what the kill left unacknowledged, published again identically
    assert len(records) == changes + repeats
    _check_against_select(bulk, records)


def test_a_schema_mismatch_deep_inside_a_large_transaction_stops_before_any_of_it_is_published(
    bulk: Bulk,
) -> None:
    """The read ahead checks every TABLE_MAP against the schema history as the parser does: a table
    changed outside the binlog, written after a large part of the transaction, is refused before the
    first change of that transaction reaches Kafka (schema.history: always stops on any mismatch)."""
    other = f"{bulk.prefix}_00.orders_01"
    bulk.sql(
        f"CREATE TABLE {other} (id BIGINT PRIMARY KEY, status VARCHAR(16), amount DECIMAL(12,2), note TEXT)"
    )
    bulk.start = master_position(bulk.conn)
    cfg = bulk.configure({"schema": {"history": "always"}})
    relay = bulk.relay(cfg)
    wait_for(lambda: relay.status().get("state") == "running", 60, "the relay running")
    bulk.sql(f"INSERT INTO {bulk.table} VALUES (-1, 'BEFORE', 1.00, 'small')")
    _caught_up(bulk, relay, timeout=60)
    # Changed where the binlog does not see it: the history still has the old definition.
    bulk.sql(
        "SET SESSION sql_log_bin = 0",
        f"ALTER TABLE {other} ADD COLUMN extra INT",
        "SET SESSION sql_log_bin = 1",
    )
    before_bad = master_position(bulk.conn)
    source = sequence_source(bulk.conn, 100_000, f"{bulk.prefix}_00")  # ~40 MB decoded
    bulk.sql(
        "BEGIN",
        f"INSERT INTO {bulk.table} SELECT seq, 'NEW', seq / 4, CONCAT('bulk ', seq) FROM {source}",
        f"INSERT INTO {other} VALUES (1, 'NEW', 1.00, 'late', 5)",
        "COMMIT",
    )
    deadline = time.monotonic() + 120
    while relay.alive():
        assert time.monotonic() < deadline, "the relay did not stop:\n" + relay.log()[-3000:]
        time.sleep(0.1)
    status = relay.status_path.read_text()
    assert "does not match the history" in status, status
    assert "reading ahead the large transaction" in relay.log()
    saved = _saved(relay)
    assert saved is not None and _seq((saved.journal, saved.offset)) <= _seq(before_bad)
    # Only the small transaction before it reached the topic (an independent consumer, from the start,
    # given time for anything more to arrive).
    settle: list[float] = []

    def settled(records: list[Rec]) -> bool:
        if not settle:
            settle.append(time.monotonic() + 3.0)
        return time.monotonic() >= settle[0]

    rows = [r for r in read_topic(bulk.bootstrap, bulk.topic, settled, 60) if not r.json["isDdl"]]
    assert [r.json["data"][0]["id"] for r in rows] == ["-1"]
