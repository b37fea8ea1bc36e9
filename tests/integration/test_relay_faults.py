"""The relay contract under faults, on real MariaDB and a real broker, with ``relay run`` as a child process.

- SIGKILL under load, three times, restarted each time: every row change is in the topic (distinct
  sequences == rows written, state rebuilt by sequence == SELECT) and every repeat is an exact copy.
- SIGTERM under load: exit 0, status "stopped", the saved position is a boundary fully in Kafka.
- The broker frozen (SIGSTOP) for 30 s under load, on a broker of its own: the position holds, the store
  fills to its capacity, the relay stays up, then catches up without loss.
- A row too large for the broker: a quick, clear stop that keeps the position before it (again after a
  restart), or the dead-letter topic when one is configured.
- ``relay status``: position, lag in seconds and bytes, store fill, publish rate; exit 1 with no relay.
- DEBUG logs: every send/deliver/ack line names the batch and a binlog position.

Every wait is a condition with a deadline; the only timed wait is the 30 s the broker is kept frozen.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

import pytest
from confluent_kafka import Consumer, TopicPartition

from relay.config.load import load_config
from relay.dev import services
from relay.dev.services import KafkaService
from relay.kafka.codec import sequence
from relay.ops.status import status_report
from relay.positions.store import ResumePoint
from tests.integration.relay_harness import (
    REPO_ROOT,
    OneTableCase,
    Rec,
    RelayProcess,
    Writer,
    apply_records,
    check_exact_repeats,
    create_shards,
    distinct_rows_at_least,
    drop_shards,
    master_position,
    partitions_of,
    read_topic,
    row_sequences,
    select_orders,
    wait_for,
)

SHARDS, TABLES = 2, 2
SLOTS = 256
# A small store and small batches, so that kills and stalls land in the middle of the stream.
LOAD: dict[str, Any] = {
    "store": {"buffer_size": SLOTS, "batch_mode": "ITEMSIZE"},
    "publish": {
        "batch_size": 32,
        "max_inflight_batches": 4,
        "drain_seconds": 10.0,
        "retry": {"initial": 0.2, "maximum": 2.0},
    },
    "logging": {"level": "INFO"},
}
POSITION = re.compile(r"[\w.-]+\.\d+:\d+|journal='[^']+', offset=\d+")


@dataclass
class Case(OneTableCase):
    """One test's sharded tables, its relay configs (each call gives the whole ``extra``) and relays."""

    EXTRA: ClassVar[dict[str, Any]] = {}

    def writer(self, rate: float = 300.0) -> Writer:
        return Writer(self.mysql, self.prefix, SHARDS, TABLES, rate=rate, seed=len(self.prefix))

    def read(self, changes: int, relay: RelayProcess | None = None, timeout: float = 90.0) -> list[Rec]:
        """The topic, read until it holds ``changes`` distinct row changes.

        With ``relay``: first wait until its saved position reaches the binlog's end (everything is
        acknowledged, so in Kafka), then read with a short deadline: a loss fails fast.
        """
        if relay is not None:
            end = seq_of(master_position(self.conn))
            wait_for(
                lambda: bool(relay.position()) and seq_of(saved_point(relay)) >= end, timeout, "caught up"
            )
            timeout = 20.0
        try:
            return read_topic(
                self.bootstrap, self.topic, until=distinct_rows_at_least(changes), timeout=timeout
            )
        except AssertionError as exc:
            raise AssertionError(f"{changes} row changes written, not all in the topic: {exc}") from exc

    def assert_complete(self, records: list[Rec], changes: int) -> int:
        """Nothing lost, nothing invented, state equal to SELECT; returns the number of exact repeats."""
        assert len(row_sequences(records)) == changes
        assert apply_records(records) == select_orders(self.conn, self.prefix, SHARDS, TABLES)
        return check_exact_repeats(records)


@pytest.fixture
def case(mysql_service: Any, kafka_service: KafkaService, tmp_path: Path) -> Iterator[Case]:
    prefix = f"rf{time.monotonic_ns() % 10**8}"
    conn = mysql_service.connect()
    create_shards(conn, prefix, SHARDS, TABLES)
    made = Case(prefix, tmp_path, mysql_service, kafka_service.bootstrap_servers, conn, master_position(conn))
    yield made
    for proc in made.procs:
        proc.stop()
    drop_shards(conn, prefix, SHARDS)
    conn.close()


@pytest.fixture
def own_broker(spare_broker: services.KafkaCluster) -> services.KafkaCluster:
    """A broker of its own (the session's spare): freezing it must not stall the session's shared broker."""
    return spare_broker


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "relay.cli", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def high_watermarks(bootstrap: str, topic: str) -> dict[int, int]:
    """End offsets per partition. Exact on Tansu only when the producer sends one record per batch."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"hw-{time.monotonic_ns()}"})
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions_of(bootstrap, topic))
        }
    finally:
        consumer.close()


def read_to_end(bootstrap: str, topic: str) -> list[Rec]:
    """Every record up to the current end offsets (see ``high_watermarks``)."""
    ends = high_watermarks(bootstrap, topic)

    def done(records: list[Rec]) -> bool:
        last: dict[int, int] = {}
        for r in records:
            last[r.partition] = max(last.get(r.partition, -1), r.offset)
        return all(last.get(p, -1) >= end - 1 for p, end in ends.items())

    return read_topic(bootstrap, topic, until=done, timeout=30)


def seq_of(point: ResumePoint | tuple[str, int]) -> int:
    journal, offset = (point.journal, point.offset) if isinstance(point, ResumePoint) else point
    return sequence(journal, offset, 0)


def saved_point(proc: RelayProcess) -> ResumePoint:
    return ResumePoint.from_json(proc.position())


def stop_gracefully(proc: RelayProcess, deadline: float = 20.0, sig: int = signal.SIGTERM) -> float:
    """SIGTERM (or ``sig``); asserts exit 0 within ``deadline`` seconds and returns how long it took."""
    began = time.monotonic()
    proc.signal(sig)
    rc = proc.wait(deadline)
    assert rc == 0, proc.log()[-3000:]
    return time.monotonic() - began


def _reached(relay: RelayProcess, end: int) -> bool:
    return bool(relay.position()) and seq_of(saved_point(relay)) >= end


def _moved_on(relay: RelayProcess, ready: Callable[[dict[str, Any]], bool]) -> Callable[[], bool]:
    """A probe: this relay saved a new position and its status satisfies ``ready``."""
    before = relay.position()
    return lambda: relay.position() != before and ready(relay.status())


# ---------------------------------------------------------------------------------------------------------


def test_sigkill_under_load_three_times_loses_nothing_and_repeats_are_exact(
    case: Case, record_property: Any
) -> None:
    cfg = case.configure(LOAD)
    config = load_config(cfg)
    writer = case.writer()
    writer.start()
    relay = case.relay(cfg)
    moments = [
        ("its first position saved", lambda st: st.get("batches_acked", 0) >= 1),
        ("50 records published", lambda st: st.get("records_published", 0) >= 50),
        ("300 records published", lambda st: st.get("records_published", 0) >= 300),
    ]
    for what, ready in moments:
        moved_on = _moved_on(relay, ready)
        wait_for(moved_on, 60, f"relay {relay.pid} with {what}")
        relay.signal(signal.SIGKILL)
        assert relay.wait(10) == -signal.SIGKILL
        report = status_report(config)
        assert not report["running"] and report["state"].startswith("dead"), report
        relay = case.relay(cfg)
    wait_for(lambda: writer.changes >= 2000, 60, "the writer wrote 2000 row changes")
    changes = writer.stop()
    records = case.read(changes, relay)
    stop_gracefully(relay)

    repeats = case.assert_complete(records, changes)
    record_property("row_changes", changes)
    record_property("exact_repeats", repeats)
    print(f"SIGKILL x3: {changes} row changes, {len(records)} records, {repeats} exact repeats")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_sigterm_under_load_exits_0_at_a_boundary_fully_in_kafka(case: Case, sig: int) -> None:
    # One record per producer batch: Tansu then reports exact end offsets (what was in Kafka at the stop).
    cfg = case.configure({**LOAD, "kafka": {"settings": {"batch.num.messages": "1"}}})
    writer = case.writer()
    writer.start()
    relay = case.relay(cfg)
    wait_for(lambda: relay.status().get("batches_acked", 0) >= 5, 60, "the relay publishing under load")
    took = stop_gracefully(relay, deadline=15.0, sig=sig)
    status = json.loads(relay.status_path.read_text())
    assert status["state"] == "stopped" and status["pid"] == relay.pid
    assert status["inflight_batches"] == 0
    point = saved_point(relay)
    assert f"stopped; position {point}" in relay.log()
    at_stop = high_watermarks(case.bootstrap, case.topic)

    relay = case.relay(cfg)  # a restart continues from the saved position
    grown = writer.changes + 300
    wait_for(lambda: writer.changes >= grown, 60, "more writes after the restart")
    changes = writer.stop()
    records = case.read(changes, relay)
    stop_gracefully(relay)
    case.assert_complete(records, changes)

    boundary = seq_of(point)
    before = {s for s in row_sequences(records) if s < boundary}
    in_kafka = row_sequences([r for r in records if r.offset < at_stop.get(r.partition, 0)])
    assert before, "the position should be past some changes"
    assert before <= in_kafka, f"{len(before - in_kafka)} changes before {point} not in Kafka at the stop"
    name = signal.Signals(sig).name
    print(f"{name}: exited 0 in {took:.2f}s at {point}; {len(before)} changes before it were in Kafka")


def test_a_frozen_broker_is_waited_out_with_a_full_store_and_nothing_lost(
    case: Case, own_broker: services.Running[KafkaService]
) -> None:
    case = replace(case, bootstrap=own_broker.service.bootstrap_servers)
    # Deliveries time out during the freeze: the relay rolls back and resends, and still loses nothing.
    cfg = case.configure({**LOAD, "kafka": {"delivery_timeout_seconds": 8.0}})
    config = load_config(cfg)
    writer = case.writer(rate=250)
    writer.start()
    relay = case.relay(cfg)
    wait_for(lambda: relay.status().get("records_published", 0) >= 100, 60, "the relay publishing")

    broker = own_broker.process.pid
    rolled = relay.status().get("batches_rolled_back", 0)
    os.kill(broker, signal.SIGSTOP)
    frozen = time.monotonic()
    try:
        # Answers already on their way when the broker froze are still acked: once a delivery has timed
        # out (8 s) and its batches were rolled back, nothing more can be.
        wait_for(lambda: relay.status().get("batches_rolled_back", 0) > rolled, 20, "a delivery timed out")
        # Full: the parser's next put no longer fits. It puts a transaction's entries in bursts of up to a
        # quarter of the slots (relay.source.read_ahead.Pending.burst_entries), so "full" starts there.
        wait_for(
            lambda: relay.status().get("store_entries", 0) >= SLOTS - SLOTS // 4, 20, "the store filled up"
        )
        # Batches acknowledged just before the freeze are written by the position writer a moment later.
        wait_for(lambda: str(saved_point(relay)) == relay.status().get("last_position"), 20, "acks written")
        held, full = relay.position(), relay.status()["store_entries"]
        lag_before = status_report(config)["lag_bytes"]
        samples = 0
        while time.monotonic() - frozen < 30.0:  # the fault window: the broker stays frozen for 30 s
            status = relay.status()
            assert relay.alive(), relay.log()[-3000:]
            assert relay.position() == held, "the position moved while the broker was frozen"
            assert status["store_entries"] == full, "parsing should stay paused on a full store"
            samples += 1
            time.sleep(0.25)
        lag_after = status_report(config)["lag_bytes"]
        assert lag_after > lag_before, "the binlog moved on while the relay waited"
        assert relay.status()["publish_rate"] == 0, "nothing was published for the last 10 s"
    finally:
        os.kill(broker, signal.SIGCONT)

    wait_for(lambda: relay.position() != held, 60, "publishing resumed after the broker came back")
    grown = writer.changes + 300
    wait_for(lambda: writer.changes >= grown, 60, "more writes after the broker came back")
    changes = writer.stop()
    records = case.read(changes, relay, timeout=120)
    rolled_back = relay.status().get("batches_rolled_back", 0)
    stop_gracefully(relay)
    # Waiting on a full store is not a silent server: the replication connection must not be dropped.
    assert "reconnecting" not in relay.log()
    repeats = case.assert_complete(records, changes)
    print(f"frozen broker: {samples} samples, {rolled_back} batches rolled back, {repeats} exact repeats")


def test_a_row_too_large_stops_quickly_keeping_the_position_or_goes_to_the_dead_letter_topic(
    case: Case,
) -> None:
    with case.conn.cursor() as cur:
        cur.execute(f"ALTER TABLE {case.prefix}_00.orders_00 MODIFY note MEDIUMTEXT")
        case.start = master_position(case.conn)
        for i in range(1, 13):
            cur.execute(f"INSERT INTO {case.prefix}_{i % 2:02d}.orders_01 VALUES (%s, 'NEW', 1.5, 'a')", (i,))
        big_at = master_position(case.conn)
        cur.execute(f"INSERT INTO {case.prefix}_00.orders_00 VALUES (100, 'BIG', 2.5, %s)", ("x" * 300_000,))
        for i in range(201, 209):
            cur.execute(f"INSERT INTO {case.prefix}_{i % 2:02d}.orders_01 VALUES (%s, 'NEW', 3.5, 'b')", (i,))
    big = seq_of(big_at)
    small = {
        **LOAD,
        "publish": {**LOAD["publish"], "batch_size": 4},
        "kafka": {"settings": {"message.max.bytes": "100000", "batch.num.messages": "1"}},
    }
    cfg = case.configure(small)

    points = []
    for attempt in range(2):  # a restart stops the same way, at the same place
        relay = case.relay(cfg)
        rc = relay.wait(30)
        took = time.monotonic() - relay.started
        log = relay.log()
        assert rc == 2, log  # the command's exit status for a RelayError
        assert took < 10, f"took {took:.1f}s to stop, start-up included"
        errors = [line for line in log.splitlines() if "MSG_SIZE_TOO_LARGE" in line]
        assert 1 <= len(errors) <= 3, "one error reported (publisher, relay, command), not a loop:\n" + log
        # Nothing retried once the broker refused the record: one roll-back, at the stop. (Before it, a batch
        # to a just-created topic may be sent again after a delivery without an offset: not this record's.)
        after = log[log.index("MSG_SIZE_TOO_LARGE") :]
        assert "retrying" not in after and after.count("rolled back") <= 1, after
        assert f"'{case.topic}'" in errors[-1] and re.search(r"size 3\d{5} bytes", errors[-1]), errors[-1]
        status = json.loads(relay.status_path.read_text())
        assert status["state"] == "failed" and "MSG_SIZE_TOO_LARGE" in status["error"]
        points.append(saved_point(relay))
        assert seq_of(points[-1]) <= big, f"position {points[-1]} is past the rejected row at {big_at}"
        published = row_sequences(read_to_end(case.bootstrap, case.topic))
        assert len(published) == 12 and max(published) < big, f"attempt {attempt}: {sorted(published)}"
    assert points[0] == points[1]

    dead_letters = f"{case.prefix}.dlq"
    cfg = case.configure({**small, "kafka": {**small["kafka"], "dead_letter_topic": dead_letters}})
    relay = case.relay(cfg)
    dlq = read_topic(case.bootstrap, dead_letters, until=lambda rs: len(rs) >= 1)
    records = case.read(20)
    assert relay.alive(), relay.log()[-3000:]
    stop_gracefully(relay)
    assert len(dlq) == 1
    letter = dlq[0]
    assert b"MSG_SIZE_TOO_LARGE" in letter.headers["relay.error"]
    assert letter.headers["relay.original.topic"] == case.topic.encode()
    assert int(letter.headers["relay.original.size"]) > 300_000
    assert len(letter.value) == 1024
    rejected = int(letter.headers["relay.sequence"])
    seqs = row_sequences(records)
    assert rejected > big and rejected not in seqs
    assert len(seqs) == 20 and sum(s > rejected for s in seqs) == 8, "the rows after it were delivered"


def test_relay_status_shows_position_lag_store_fill_and_rate(case: Case) -> None:
    cfg = case.configure(LOAD)
    config = load_config(cfg)
    never = run_cli("status", "-c", str(cfg), "--json")
    assert never.returncode == 1 and json.loads(never.stdout)["state"] == "never ran"

    writer = case.writer(rate=200)
    writer.start()
    relay = case.relay(cfg)
    wait_for(lambda: relay.status().get("publish_rate", 0) > 0, 60, "a publish rate")
    shown = run_cli("status", "-c", str(cfg), "--json")
    assert shown.returncode == 0, shown.stderr
    report = json.loads(shown.stdout)
    assert report["running"] is True and report["pid"] == relay.pid
    assert POSITION.fullmatch(report["position"].split("+")[0]), report["position"]
    assert isinstance(report["lag_seconds"], float) and report["lag_seconds"] >= 0
    assert isinstance(report["lag_bytes"], int) and report["lag_bytes"] >= 0
    assert isinstance(report["store_entries"], int) and report["store_slots"] == SLOTS
    assert 0 <= report["store_fill_percent"] <= 100
    assert report["publish_rate"] > 0
    plain = run_cli("status", "-c", str(cfg))
    assert plain.returncode == 0
    for key in ("position", "lag_seconds", "lag_bytes", "store_entries", "publish_rate"):
        assert re.search(rf"^{key}\s+\S", plain.stdout, re.MULTILINE), plain.stdout

    writer.stop()
    wait_for(lambda: status_report(config)["lag_bytes"] == 0, 30, "the relay caught up", interval=0.2)
    caught_up = status_report(config)
    assert caught_up["lag_seconds"] == 0.0

    stop_gracefully(relay)
    with case.conn.cursor() as cur:
        for i in range(10**6, 10**6 + 50):
            cur.execute(f"INSERT INTO {case.prefix}_00.orders_00 VALUES (%s, 'LATE', 1, NULL)", (i,))
    stopped = run_cli("status", "-c", str(cfg), "--json")
    assert stopped.returncode == 1
    report = json.loads(stopped.stdout)
    assert report["running"] is False and report["state"] == "stopped" and report["publish_rate"] == 0
    assert report["lag_bytes"] > 50 * 30, "50 rows written while the relay is stopped"


def test_debug_log_names_batch_and_position_on_every_publish_and_ack_line(case: Case) -> None:
    cfg = case.configure({**LOAD, "logging": {"level": "DEBUG"}})
    writer = case.writer(rate=400)
    writer.start()
    relay = case.relay(cfg)
    wait_for(lambda: writer.changes >= 300, 60, "300 row changes written")
    changes = writer.stop()
    case.read(changes, relay)
    stop_gracefully(relay)

    lines = [
        line
        for line in relay.log().splitlines()
        if re.search(r" relay\.(?:\w+\.)?(pipeline|recovery|publisher|instance|server): ", line)
        and re.search(r"\bbatch(es)? \[?\d", line)
    ]
    sent = [line for line in lines if " sent " in line]
    acked = [line for line in lines if "acked" in line]
    assert sent and acked and any("delivered" in line for line in lines)
    missing = [line for line in lines if not POSITION.search(line)]
    assert not missing, "lines without a position:\n" + "\n".join(missing[:10])


def test_a_change_after_a_quiet_hour_shows_its_own_age_as_lag_not_the_hour(
    case: Case, own_broker: services.Running[KafkaService]
) -> None:
    """The last change acknowledged is an hour old (its binlog time set back with SET TIMESTAMP); a new
    change waits on a frozen broker. The lag the status file shows is the new change's age (seconds), as
    an operator must read it — not the hour since the previous change."""
    case = replace(case, bootstrap=own_broker.service.bootstrap_servers)
    cfg = case.configure({**LOAD, "kafka": {"delivery_timeout_seconds": 30.0}})
    config = load_config(cfg)
    table = f"{case.prefix}_00.orders_00"
    relay = case.relay(cfg)
    wait_for(lambda: relay.status().get("state") == "running", 60, "the relay running")
    with case.conn.cursor() as cur:
        cur.execute("SET TIMESTAMP = UNIX_TIMESTAMP() - 3600")
        cur.execute(f"INSERT INTO {table} VALUES (%s, 'QUIET', 1, NULL)", (2 * 10**6,))
        cur.execute("SET TIMESTAMP = DEFAULT")
    wait_for(lambda: status_report(config)["lag_bytes"] == 0, 60, "the hour-old change acknowledged")
    wait_for(lambda: relay.status().get("caught_up") is True, 30, "the relay caught up")
    broker = own_broker.process.pid
    os.kill(broker, signal.SIGSTOP)
    try:
        with case.conn.cursor() as cur:
            cur.execute(f"INSERT INTO {table} VALUES (%s, 'NEW', 1, NULL)", (2 * 10**6 + 1,))
        written = time.time()
        wait_for(lambda: relay.status().get("store_entries", 0) >= 1, 30, "the new change read")
        wait_for(lambda: relay.status().get("updated", 0) > written + 1, 30, "a status written after it")
        lags = []
        deadline = time.monotonic() + 3.0  # the window: the change read, the broker frozen
        while time.monotonic() < deadline:
            status = relay.status()
            assert status.get("caught_up") is False, status
            lags.append(status["lag_seconds"])
            time.sleep(0.2)
    finally:
        os.kill(broker, signal.SIGCONT)
    assert lags and max(lags) < 600, f"lag during the wait: {lags} (the previous change is 3600 s old)"
    assert max(lags) >= 1, f"the new change's own age shows: {lags}"
    print(f"lag while the new change waited: {min(lags):.1f}-{max(lags):.1f} s (the change before: 3600 s)")
    wait_for(lambda: status_report(config)["lag_bytes"] == 0, 60, "the new change acknowledged")
    stop_gracefully(relay)
