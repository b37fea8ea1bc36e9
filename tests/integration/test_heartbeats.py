"""Positions that keep moving while the captured tables are idle, and heartbeats (real MariaDB, real broker).

- A busy uncaptured table, captured tables idle: the saved position (the position file, read here) follows
  the binlog end, ``relay status`` lag stays near zero (sampled from the status file while the writes go
  on), heartbeat records on ``kafka.heartbeat_topic`` (read with an independent consumer) carry positions
  that move forward to the binlog end; a restart resumes from the advanced position. In idempotent and
  in transactional mode (the position then moves with committed Kafka transactions).
- ``kafka.heartbeat_query`` on an otherwise idle server: its write to an uncaptured table moves the saved
  position and keeps the lag near zero; a query that fails stops the start with a clear error.
- No loss: captured rows interleaved with the busy uncaptured table, the relay killed (SIGKILL) and
  restarted twice: every captured row change is in Kafka, each key's changes in offset order, the state
  equal to SELECT.

Every wait is a condition with a deadline.
"""

from __future__ import annotations

import json
import signal
import statistics
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest
from prometheus_client.parser import text_string_to_metric_families

from relay.common.binlog_names import file_order
from relay.config.load import load_config
from relay.dev import services
from relay.dev.services import KafkaService
from relay.ops.status import status_report
from relay.positions.store import ResumePoint
from tests.integration.relay_harness import (
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
    read_topic,
    row_sequences,
    select_orders,
    wait_for,
)

SHARDS, TABLES = 1, 2
LAG_SAMPLE_SECONDS = 12.0


@dataclass
class Case(OneTableCase):
    EXTRA: ClassVar[dict[str, Any]] = {"logging": {"level": "INFO"}}

    @property
    def noise(self) -> str:
        """The uncaptured table (outside ``{prefix}_NN``: the filter drops it)."""
        return f"{self.prefix}_noise.busy"

    @property
    def heartbeat_topic(self) -> str:
        return f"{self.prefix}.heartbeats"

    def writer(self, rate: float = 150.0) -> Writer:
        return Writer(self.mysql, self.prefix, SHARDS, TABLES, rate=rate, seed=len(self.prefix))


class NoiseWriter(threading.Thread):
    """Inserts into the uncaptured table, one autocommitted row every ``pause`` seconds, until stopped."""

    def __init__(self, case: Case, pause: float = 0.02) -> None:
        super().__init__(name="noise", daemon=True)
        self.case, self.pause = case, pause
        self.halt = threading.Event()
        self.rows = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            conn = self.case.mysql.connect()
            try:
                with conn.cursor() as cur:
                    while not self.halt.wait(self.pause):
                        cur.execute(f"INSERT INTO {self.case.noise} (note) VALUES ('busy')")
                        self.rows += 1
            finally:
                conn.close()
        except BaseException as exc:
            self.error = exc

    def stop(self) -> int:
        self.halt.set()
        self.join(30)
        if self.error is not None:
            raise self.error
        return self.rows


@pytest.fixture
def case(mysql_service: Any, kafka_service: KafkaService, tmp_path: Path) -> Iterator[Case]:
    prefix = f"hb{time.monotonic_ns() % 10**8}"
    conn = mysql_service.connect()
    create_shards(conn, prefix, SHARDS, TABLES)
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {prefix}_noise")
        cur.execute(f"CREATE TABLE {prefix}_noise.busy (id BIGINT AUTO_INCREMENT PRIMARY KEY, note TEXT)")
        cur.execute(f"CREATE TABLE {prefix}_noise.beat (id INT PRIMARY KEY, at DATETIME(6))")
        cur.execute(f"INSERT INTO {prefix}_noise.beat VALUES (1, NOW(6))")
    made = Case(prefix, tmp_path, mysql_service, kafka_service.bootstrap_servers, conn, master_position(conn))
    yield made
    for proc in made.procs:
        proc.stop()
    drop_shards(conn, prefix, SHARDS)
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {prefix}_noise")
    conn.close()


Place = tuple[tuple[str, int], int]  # (binlog file order, offset): sorts as the binlog does


def place(point: ResumePoint | tuple[str, int]) -> Place:
    journal, offset = (point.journal, point.offset) if isinstance(point, ResumePoint) else point
    return file_order(journal), offset


def saved(proc: RelayProcess) -> ResumePoint | None:
    text = proc.position()
    return ResumePoint.from_json(text) if text else None


def saved_at_end(case: Case, proc: RelayProcess) -> bool:
    point = saved(proc)
    return point is not None and place(point) == place(master_position(case.conn))


def sample_lag(proc: RelayProcess, seconds: float) -> list[float]:
    """The status file's ``lag_seconds`` every 0.2 s for ``seconds`` (the relay's own figure, before
    ``relay status`` zeroes it at the binlog end)."""
    out: list[float] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        lag = proc.status().get("lag_seconds")
        if isinstance(lag, (int, float)):
            out.append(float(lag))
        time.sleep(0.2)
    return out


def acked_some(proc: RelayProcess) -> bool:
    return int(proc.status().get("batches_acked", 0)) > 20


def heartbeat_places(records: list[Rec]) -> list[Place]:
    return [(file_order(r.json["file"]), int(r.json["pos"])) for r in records]


@pytest.mark.parametrize("mode", ["idempotent", "transactional"])
def test_position_follows_a_busy_uncaptured_table_with_heartbeats(case: Case, mode: str) -> None:
    kafka = {"heartbeat_topic": case.heartbeat_topic, "heartbeat_seconds": 0.5}
    if mode == "transactional":
        kafka["transactions"] = True
    cfg = case.configure({"kafka": {"bootstrap_servers": case.bootstrap, **kafka}})
    config = load_config(cfg)
    relay = case.relay(cfg)
    wait_for(lambda: relay.status().get("state") == "running", 60, "the relay running")

    noise = NoiseWriter(case)
    noise.start()
    wait_for(lambda: saved(relay) is not None, 30, "a position saved through filtered-out traffic")
    first = saved(relay)
    lags = sample_lag(relay, LAG_SAMPLE_SECONDS)
    report = status_report(config)
    rows = noise.stop()
    median = statistics.median(lags)
    print(f"{mode}: {rows} uncaptured rows; lag median {median:.2f} s, max {max(lags):.2f} s")
    assert rows > 200, f"only {rows} uncaptured rows written"
    # The position moved with the uncaptured writes, and the lag stayed near zero meanwhile (the old
    # empty-transaction rule alone let it reach its 5 s binlog-time interval).
    assert first is not None and place(saved(relay) or first) > place(first)
    assert lags and max(lags) < 4.0 and statistics.median(lags) < 2.5, lags
    assert report["lag_seconds"] is not None and report["lag_seconds"] < 4.0, report
    assert (report["heartbeats"] or {}).get("records", 0) > 0, report

    # Writes over: the saved position reaches the binlog end, and relay status says no lag.
    wait_for(lambda: saved_at_end(case, relay), 30, "the saved position at the binlog end")
    end = place(master_position(case.conn))
    assert status_report(config)["lag_bytes"] == 0
    assert status_report(config)["lag_seconds"] == 0.0

    # Heartbeats, read with an independent consumer: keyed by the source id, positions moving forward
    # to the binlog end, Debezium's ts_ms beside the source time.
    beats = read_topic(
        case.bootstrap,
        case.heartbeat_topic,
        until=lambda recs: bool(recs) and heartbeat_places(recs)[-1] == end,
        timeout=60,
    )
    assert {json.loads(r.key or b"{}")["serverName"] for r in beats} == {config.source_id}
    assert {r.partition for r in beats} == {0}
    places = heartbeat_places(beats)
    assert places == sorted(places) and places[0] < places[-1], places
    last = beats[-1].json
    assert last["instance"] == config.instance and isinstance(last["ts_ms"], int)
    assert abs(last["ts_ms"] / 1000 - time.time()) < 60
    assert last["source_ts_ms"] >= last["position_ts_ms"] > 0
    times = [r.json["ts_ms"] for r in beats]
    assert times == sorted(times)

    # A restart resumes from the advanced position.
    at = saved(relay)
    assert at is not None
    relay.signal(signal.SIGTERM)
    assert relay.wait(30) == 0
    again = case.relay(cfg)
    wait_for(lambda: again.status().get("state") == "running", 60, "the restarted relay running")
    assert f"streaming from saved position {at.journal}:{at.offset}" in again.log(), again.log()[-3000:]
    case.sql(f"INSERT INTO {case.table} VALUES (1, 'AFTER', 1.00, NULL)")
    records = read_topic(case.bootstrap, case.topic, until=distinct_rows_at_least(1), timeout=60)
    assert [r.json["data"][0]["status"] for r in records] == ["AFTER"]


def test_heartbeat_query_moves_the_position_of_an_idle_server(case: Case) -> None:
    query = f"UPDATE {case.prefix}_noise.beat SET at = NOW(6) WHERE id = 1"
    kafka = {"heartbeat_topic": case.heartbeat_topic, "heartbeat_seconds": 0.5, "heartbeat_query": query}
    metrics = {"port": services.free_port(), "server_check_seconds": 0.5}
    cfg = case.configure({"kafka": {"bootstrap_servers": case.bootstrap, **kafka}, "metrics": metrics})
    config = load_config(cfg)
    # The query runs as source.user: it needs the grant, as a real deployment's relay user would.
    grant = f"UPDATE ON {case.prefix}_noise.beat"
    case.sql(f"GRANT {grant} TO '{case.mysql.replication_user}'@'%'")
    try:
        beating(case, cfg, config)
    finally:
        case.sql(f"REVOKE {grant} FROM '{case.mysql.replication_user}'@'%'")


def beating(case: Case, cfg: Path, config: Any) -> None:
    before = master_position(case.conn)
    relay = case.relay(cfg)
    wait_for(lambda: relay.status().get("state") == "running", 60, "the relay running")
    # Nothing else writes: only the query's updates move the binlog, and the saved position with it.
    wait_for(lambda: place(master_position(case.conn)) > place(before), 30, "the query writing")
    wait_for(
        lambda: (point := saved(relay)) is not None and place(point) > place(before),
        30,
        "the saved position moved by the heartbeat query",
    )
    lags = sample_lag(relay, 6.0)
    assert lags and max(lags) < 4.0, lags
    report = status_report(config)
    beats = report["heartbeats"] or {}
    assert beats.get("queries", 0) >= 5 and beats.get("query_failures") == 0, report
    assert report["lag_seconds"] is not None and report["lag_seconds"] < 4.0, report
    with urllib.request.urlopen(f"http://127.0.0.1:{config.metrics.port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    scraped = {
        (sample.name, sample.labels.get("kind")): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
    assert scraped[("relay_heartbeats_total", "queries")] >= 5
    assert scraped[("relay_heartbeats_total", "query_failures")] == 0
    assert scraped[("relay_heartbeats_total", "records")] >= 1
    first = saved(relay)
    assert first is not None
    wait_for(
        lambda: (point := saved(relay)) is not None and place(point) > place(first),
        30,
        "the saved position moving on",
    )


def test_a_failing_heartbeat_query_stops_the_start(case: Case) -> None:
    query = f"UPDATE {case.prefix}_noise.missing SET at = NOW() WHERE id = 1"
    cfg = case.configure({"kafka": {"bootstrap_servers": case.bootstrap, "heartbeat_query": query}})
    relay = case.relay(cfg)
    assert relay.wait(60) != 0
    log = relay.log()
    assert "kafka.heartbeat_query" in log and "missing" in log, log[-3000:]


def test_no_loss_with_captured_rows_among_busy_uncaptured_ones_across_kills(case: Case) -> None:
    load = {
        "store": {"buffer_size": 256, "batch_mode": "ITEMSIZE"},
        "publish": {"batch_size": 32, "max_inflight_batches": 4, "retry": {"initial": 0.2, "maximum": 2.0}},
        "kafka": {
            "bootstrap_servers": case.bootstrap,
            "heartbeat_topic": case.heartbeat_topic,
            "heartbeat_seconds": 0.3,
        },
    }
    cfg = case.configure(load)
    noise, writer = NoiseWriter(case, pause=0.005), case.writer(rate=150)
    noise.start()
    writer.start()
    relay = case.relay(cfg)
    for _ in range(2):
        wait_for(lambda: acked_some(relay), 60, "batches acknowledged")  # noqa: B023
        relay.signal(signal.SIGKILL)
        assert relay.wait(10) == -signal.SIGKILL
        relay = case.relay(cfg)
    changes = writer.stop()
    noise.stop()
    wait_for(lambda: saved_at_end(case, relay), 90, "the saved position at the binlog end")
    records = read_topic(case.bootstrap, case.topic, until=distinct_rows_at_least(changes), timeout=30)
    assert len(row_sequences(records)) == changes
    # apply_records reads each partition in offset order and checks every key's order on the way.
    assert apply_records(records) == select_orders(case.conn, case.prefix, SHARDS, TABLES)
    check_exact_repeats(records)


def test_heartbeats_during_a_snapshot_carry_real_times(case: Case) -> None:
    """A snapshot on an idle server: every saved position is the point after a snapshot chunk, which has no
    binlog time. The heartbeats made meanwhile (read with an independent consumer) carry the chunks' read
    times as ``position_ts_ms`` / ``ts_sec`` — real, recent, moving forward — never 0 (which a consumer
    computing lag read as ~20,000 days)."""
    values = ", ".join(f"({i}, 'S', {i}.00, NULL)" for i in range(1, 1501))
    case.sql(f"INSERT INTO {case.table} VALUES {values}")
    case.start = master_position(case.conn)  # after the rows: only the snapshot publishes them
    began = time.time()
    kafka = {
        "bootstrap_servers": case.bootstrap,
        "heartbeat_topic": case.heartbeat_topic,
        "heartbeat_seconds": 0.3,
    }
    snapshot = {"mode": "initial", "chunk_rows": 50, "max_rows_per_second": 250}
    relay = case.relay(case.configure({"kafka": kafka, "snapshot": snapshot}))
    beats = read_topic(
        case.bootstrap,
        case.heartbeat_topic,
        until=lambda recs: len({r.json["position_ts_ms"] for r in recs}) >= 4,
        timeout=120,
    )
    assert relay.alive()
    running = relay.status().get("snapshot") or {}
    assert not running.get("done", False), "the snapshot ended before the heartbeats were read: too fast"
    times = [(int(r.json["position_ts_ms"]), int(r.json["ts_sec"])) for r in beats]
    assert all(ms > 0 and sec == ms // 1000 for ms, sec in times), times
    assert all(began - 5 <= ms / 1000 <= time.time() + 5 for ms, _ in times), (began, times)
    assert [ms for ms, _ in times] == sorted(ms for ms, _ in times)
