"""``relay bench --peers``: reading each system's records back (Debezium's JSON, canal's flat JSON) into the
values ``SELECT`` returns, the completeness and sample checks that keep a fast wrong run from winning, the
side-by-side table and its targets, the command line, and the /proc probe. No timing is asserted."""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from decimal import Decimal
from typing import Any

import pytest

from relay.cli.bench import options_from_args
from relay.cli.main import build_parser
from relay.common import jars
from relay.dev.bench import workloads as wl
from relay.dev.bench.landed import (
    LOG_APPEND_TIME,
    Change,
    Landed,
    Verdict,
    check,
    decode_canal,
    decode_debezium,
    sample_keys,
)
from relay.dev.bench.observe import ProcessProbe, TopicWatch
from relay.dev.bench.peer_debezium import DebeziumPeer
from relay.dev.bench.peers import Capture
from relay.dev.bench.sidebyside_stats import (
    RunFigures,
    SideBySide,
    SystemFigures,
    render_side_by_side,
    targets,
)
from relay.dev.bench.stats import Latency
from relay.errors import ArgumentError, BenchError

COLUMNS = [c.strip() for c in wl.COLUMNS.split(",")]


def selected(i: int, big: bool = False) -> dict[str, Any]:
    """Row ``i`` of a workload as PyMySQL returns it from the bench table (the oracle)."""
    values = dict(zip(COLUMNS, wl.row(i, big), strict=True))
    values["price"] = Decimal(values["price"])
    values["created"] = dt.datetime.strptime(values["created"], "%Y-%m-%d %H:%M:%S.%f")
    values["day"] = dt.date.fromisoformat(values["day"])
    return values


# ---- the two formats, from records the real systems wrote -----------------------------------------------


def test_a_relay_record_reads_back_as_select_has_the_row() -> None:
    # A canal-json value the relay published for W2's row 5 (abridged: fields the reader ignores left out).
    value = (
        '{"id":4294980612,"database":"bench","table":"w2","pkNames":["id"],"isDdl":false,"type":"INSERT",'
        '"data":[{"id":"5","k":"39595","qty":"5","price":"5.05","ratio":"0.625","name":"name-5",'
        '"status":"PAID","created":"2026-11-21 06:00:05.005","day":"2026-06-06","note":"note 5",'
        '"payload":"\\u0000\\u0000\\u0000\\u0005"}],"old":null,"gtid":"0-1-4","sequence":4294980612}'
    )
    assert decode_canal(value.encode()) == [Change(5, "INSERT", selected(5))]


def test_a_debezium_record_reads_back_as_select_has_the_row() -> None:
    # The value Debezium 3.5.0's MariaDB connector wrote (JSON converter, schemas off) for a row with id 1,
    # price 1.01, created '2026-11-21 06:00:01.123', day '2026-01-02', payload 0x00000001.
    value = (
        '{"before":null,"after":{"id":1,"k":7919,"qty":1,"price":"ZQ==","ratio":0.125,"name":"name-1",'
        '"status":"PAID","created":1795240801123,"day":20455,"note":"note 1","payload":"AAAAAQ=="},'
        '"source":{"connector":"mariadb","db":"relay_bench","table":"w2"},"op":"c","ts_ms":1796592123762}'
    )
    [change] = decode_debezium(value.encode())
    assert change == Change(1, "INSERT", {
        "id": 1, "k": 7919, "qty": 1, "price": Decimal("1.01"), "ratio": 0.125, "name": "name-1",
        "status": "PAID", "created": dt.datetime(2026, 11, 21, 6, 0, 1, 123000), "day": dt.date(2026, 1, 2),
        "note": "note 1", "payload": b"\x00\x00\x00\x01",
    })  # fmt: skip


def _debezium_image(row: dict[str, Any]) -> dict[str, Any]:
    """Debezium's documented default mappings, written out by hand for the test: DECIMAL as base64 of the
    unscaled two's-complement big-endian integer, DATETIME(3) as epoch ms, DATE as epoch days, BLOB base64."""
    unscaled = int(row["price"].scaleb(2))
    size = max(1, (unscaled.bit_length() + 8) // 8)
    epoch = dt.datetime(1970, 1, 1)
    return {
        **{k: row[k] for k in ("id", "k", "qty", "ratio", "name", "status", "note")},
        "price": base64.b64encode(unscaled.to_bytes(size, "big", signed=True)).decode(),
        "created": (row["created"] - epoch) // dt.timedelta(milliseconds=1),
        "day": (row["day"] - dt.date(1970, 1, 1)).days,
        "payload": base64.b64encode(row["payload"]).decode(),
    }


def _canal_data(row: dict[str, Any]) -> dict[str, str]:
    """canal's text forms: numbers as text, DATETIME(3) with milliseconds, bytes as ISO-8859-1 characters."""
    data = {k: str(row[k]) for k in ("id", "k", "qty", "price", "name", "status", "note", "day")}
    data["ratio"] = repr(row["ratio"])
    data["created"] = row["created"].strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    data["payload"] = row["payload"].decode("latin-1")
    return data


@pytest.mark.parametrize("seed", [1, 2, 3, 43])
def test_generated_rows_read_back_the_same_in_both_formats(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(200):
        i = rng.randrange(0, 10**9)
        row = selected(i, big=rng.random() < 0.3)
        row["price"] = Decimal(rng.randrange(-(10**12) + 1, 10**12)).scaleb(-2)  # negative ones too
        row["payload"] = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 64)))
        kind, op = rng.choice([("INSERT", "c"), ("UPDATE", "u"), ("DELETE", "d"), ("INSERT", "r")])
        image = _debezium_image(row)
        event = {"before": image if op == "d" else None, "after": None if op == "d" else image, "op": op}
        want = Change(i, kind, None if kind == "DELETE" else row)
        assert decode_debezium(json.dumps(event).encode()) == [want], f"seed {seed}, id {i}"
        message = {"isDdl": False, "type": kind, "data": [_canal_data(row)]}
        assert decode_canal(json.dumps(message, ensure_ascii=False).encode()) == [want], (
            f"seed {seed}, id {i}"
        )


def test_records_that_carry_no_row_change_are_not_counted() -> None:
    assert decode_canal(b'{"isDdl":true,"type":"CREATE","data":null,"sql":"CREATE TABLE t (a INT)"}') == []
    assert (
        decode_debezium(b'{"source":{"db":"relay_bench"},"ddl":"CREATE TABLE t (a INT)","tableChanges":[]}')
        == []
    )


def test_a_canal_message_of_several_rows_gives_each() -> None:
    message = {"isDdl": False, "type": "UPDATE", "data": [_canal_data(selected(7)), _canal_data(selected(8))]}
    assert [c.id for c in decode_canal(json.dumps(message).encode())] == [7, 8]


# ---- completeness and the sample against SELECT --------------------------------------------------------


def _landed(changes: list[Change], sample: set[int], ms: int = 1_000) -> Landed:
    landed = Landed()
    for n, change in enumerate(changes):
        landed.add((LOG_APPEND_TIME, ms + n), change, sample)
    return landed


def test_a_complete_copy_with_the_rows_select_has_passes() -> None:
    expected = Counter({1: 2, 2: 1, 3: 2})  # 1: inserted then updated; 3: inserted then deleted
    changes = [
        Change(1, "INSERT", selected(1)), Change(2, "INSERT", selected(2)), Change(3, "INSERT", selected(3)),
        Change(1, "UPDATE", {**selected(1), "k": 0}), Change(3, "DELETE", None),
    ]  # fmt: skip
    landed = _landed(changes, {1, 2, 3})
    verdict = check(landed, expected, {1: {**selected(1), "k": 0}, 2: selected(2)}, {1, 2, 3})
    assert verdict.ok and verdict.rows == verdict.expected == 5, verdict.detail
    assert landed.seconds() == pytest.approx(0.004) and landed.acked_ms[(3, "DELETE")] == 1_004


def test_a_missing_a_duplicated_or_a_wrong_row_fails() -> None:
    expected = Counter({1: 1, 2: 1})
    rows = {1: selected(1), 2: selected(2)}
    missing = check(_landed([Change(1, "INSERT", selected(1))], {1, 2}), expected, rows, {1, 2})
    assert not missing.complete and "1 row changes missing" in missing.detail
    twice = [
        Change(1, "INSERT", selected(1)),
        Change(2, "INSERT", selected(2)),
        Change(2, "INSERT", selected(2)),
    ]
    duplicated = check(_landed(twice, {1, 2}), expected, rows, {1, 2})
    assert not duplicated.complete and "1 extra" in duplicated.detail
    wrong = [Change(1, "INSERT", selected(1)), Change(2, "INSERT", {**selected(2), "note": "other"})]
    differs = check(_landed(wrong, {1, 2}), expected, rows, {1, 2})
    assert differs.complete and not differs.sample_equal and "id 2" in differs.detail


def test_a_key_deleted_in_the_topic_but_present_in_select_fails() -> None:
    landed = _landed([Change(4, "DELETE", None)], {4})
    assert not check(landed, Counter({4: 1}), {4: selected(4)}, {4}).sample_equal


def test_create_time_stamps_are_refused() -> None:
    with pytest.raises(BenchError, match="LogAppendTime"):
        Landed().add((1, 5), Change(1, "INSERT", None), set())


def test_the_sample_is_fixed_by_its_seed_and_drawn_from_the_changed_keys() -> None:
    expected = Counter({i: 1 for i in range(1000)})
    assert sample_keys(expected, 43) == sample_keys(expected, 43) != sample_keys(expected, 44)
    assert len(sample_keys(expected, 43)) == 25 and sample_keys(Counter({5: 2}), 43) == {5}


# ---- the table -----------------------------------------------------------------------------------------


def _figures(name: str, rate: float, cpu: float, rss: float, p99: float) -> SystemFigures:
    s = SystemFigures(name, f"{name} label")
    for k in (0.9, 1.0, 1.1):
        s.add(RunFigures(rate * k, cpu * k, rss, Verdict(100, 100, True, 25, True)))
    s.latency = Latency(1000.0, 1000.0, 100, 0, p99 / 2, p99, p99)
    return s


def test_the_side_by_side_table_has_ratios_and_targets() -> None:
    sbs = SideBySide("W2", "100-row INSERT transactions", 100, [_figures("relay", 80_000, 12, 100, 15)])
    sbs.systems.append(_figures("debezium", 4_000, 150, 900, 300))
    for v in (100_000.0, 120_000.0, 140_000.0):
        sbs.ceiling.add(RunFigures(v, 5.0, 0.0, Verdict(100, 100, True, 25, True)))
    assert sbs.ratios(sbs.peers[0]) == {
        "rows_per_s": pytest.approx(20.0),
        "cpu_us_per_row": pytest.approx(0.08),
        "peak_rss_mb": pytest.approx(100 / 900),
    }
    assert sbs.of_ceiling == pytest.approx(80_000 / 120_000)
    assert all(targets(sbs).values())
    text = render_side_by_side([sbs])
    assert re.search(r"relay / debezium +20\.00x +0\.08x +0\.11x +0\.05x", text), text
    assert "ok (100/100 rows, 25 sampled)" in text
    assert "at least 60% of the ceiling: met" in text
    markdown = render_side_by_side([sbs], markdown=True)
    assert "| relay label | 80,000 | 12.0 | 100 | 7.5 | 15.0 |" in markdown
    as_json = sbs.to_json()
    assert as_json["relay_vs"]["debezium"]["rows_per_s"] == pytest.approx(20.0)
    assert as_json["systems"][1]["verified"] is True


def test_a_slower_relay_or_a_failed_peer_shows_as_such() -> None:
    sbs = SideBySide("W3", "UPDATE statements", 100, [_figures("relay", 1_000, 200, 100, 15)])
    failed = SystemFigures("debezium", "debezium label", error="stopped with 10 of 100 records")
    sbs.systems += [_figures("other", 2_000, 100, 50, 30), failed]
    verdicts = targets(sbs)
    assert verdicts["faster than other"] is False and verdicts["lower peak RSS than other"] is False
    assert verdicts["faster than debezium"] is None
    assert verdicts["at least 60% of the ceiling"] is None  # no ceiling measured
    assert "debezium failed: stopped with 10 of 100 records" in render_side_by_side([sbs])


# ---- the command line and the peer's configuration -----------------------------------------------------


def test_peers_on_the_command_line() -> None:
    parser = build_parser()
    options = options_from_args(parser.parse_args(["bench", "--peers", "Debezium,debezium"]))
    assert options.peers == ("debezium",)
    assert options_from_args(parser.parse_args(["bench"])).peers == ()
    with pytest.raises(ArgumentError, match=r"--peers: canal: .*canal\.deployer.*1\.1\.4"):
        options_from_args(parser.parse_args(["bench", "--peers", "canal"]))


def test_debezium_is_configured_for_a_safe_producer_and_a_large_batch(tmp_path: Any) -> None:
    from relay.dev.bench.peer_debezium import SETTINGS, WORKER

    assert WORKER["producer.acks"] == "all" and WORKER["producer.enable.idempotence"] == "true"
    assert WORKER["value.converter.schemas.enable"] == "false"
    assert int(SETTINGS["max.queue.size"]) > int(SETTINGS["max.batch.size"]) > 2048  # above the defaults

    class Ctx:
        class mysql:  # noqa: N801 (the attributes a Context's MySQLService has)
            host, port, user, password = "127.0.0.1", 3306, "root", "pw"

    config = DebeziumPeer().connector(Ctx(), Capture("w2", ("mysql-bin.000001", 4), "0-1-3"), tmp_path, 7)  # type: ignore[arg-type]
    assert config["snapshot.mode"] == "recovery" and config["table.include.list"] == "relay_bench.w2"
    assert DebeziumPeer().connector(Ctx(), Capture("snap"), tmp_path, 7)["snapshot.mode"] == "initial"  # type: ignore[arg-type]
    assert DebeziumPeer().topics("w2") == ["dbz.relay_bench.w2"]
    assert "debezium-connector-mariadb" in " ".join(jars.SETS["debezium"].artifacts)


# ---- /proc ---------------------------------------------------------------------------------------------


def test_the_probe_counts_the_cpu_and_memory_of_a_process_and_its_children() -> None:
    busy = (
        "import time\nx = bytearray(64 << 20)\nend = time.process_time() + 0.3\n"
        "while time.process_time() < end: pass\ntime.sleep(60)"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", f"import subprocess, sys; subprocess.run([sys.executable, '-c', {busy!r}])"]
    )
    try:
        probe = ProcessProbe(parent.pid)
        deadline = time.monotonic() + 60
        while (probe.cpu_seconds() or 0.0) < 0.3:
            assert time.monotonic() < deadline, "the child's CPU time never showed"
            probe.refresh()
            time.sleep(0.05)
        assert len(probe.pids()) == 2
        assert probe.peak_rss_mb() > 64
    finally:
        for pid in ProcessProbe(parent.pid).pids()[::-1]:  # the processes this test started
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        parent.wait(30)
    assert ProcessProbe(parent.pid).cpu_seconds() is None  # gone


# ---- the watch: broker errors ---------------------------------------------------------------------------


class _Partitions:
    def __init__(self, count: int) -> None:
        self.partitions = dict.fromkeys(range(count))


class _Metadata:
    def __init__(self, topics: dict[str, int]) -> None:
        self.topics = {name: _Partitions(count) for name, count in topics.items()}


class _ScriptedConsumer:
    """Answers get_watermark_offsets from a script: a (low, high) pair, or a KafkaError raised."""

    def __init__(self, topics: dict[str, int], script: list[Any]) -> None:
        self.metadata = _Metadata(topics)
        self.script = script
        self.closed = False

    def list_topics(self, timeout: float) -> _Metadata:
        return self.metadata

    def get_watermark_offsets(self, tp: Any, timeout: float, cached: bool) -> tuple[int, int]:
        from confluent_kafka import KafkaException

        answer = self.script.pop(0) if len(self.script) > 1 else self.script[0]
        if not isinstance(answer, tuple):
            raise KafkaException(answer)
        return answer

    def close(self) -> None:
        self.closed = True


def test_the_watch_takes_a_retriable_broker_error_as_no_news_and_counts_high_minus_low() -> None:
    from confluent_kafka import KafkaError

    not_leader = KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION, "scripted", retriable=True)
    # two partitions: a retriable error on the first look, then records above a moved low watermark
    script: list[Any] = [not_leader, (0, 0), (0, 0), (5, 9), (10, 16), (5, 9), (10, 16)]
    consumer = _ScriptedConsumer({"t": 2}, script)
    watch = TopicWatch("unused:1", ["t"], 10, None, consumer=consumer)
    assert watch.count() == 0  # the error: the last count (none yet)
    assert watch.count() == 0
    watch.start()
    try:
        assert watch.wait(30), watch.marks
        assert watch.marks.records == 10 and watch.marks.first_at is not None
    finally:
        watch.close()
    assert consumer.closed


def test_a_watch_that_cannot_read_the_watermarks_fails_its_run_with_the_reason() -> None:
    from confluent_kafka import KafkaError

    denied = KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "scripted: not allowed", retriable=False)
    consumer = _ScriptedConsumer({"t": 1}, [(0, 1), denied])
    watch = TopicWatch("unused:1", ["t"], 10, None, consumer=consumer).start()
    try:
        with pytest.raises(BenchError, match=r"watching t failed: .*not allowed"):
            deadline = time.monotonic() + 30
            while not watch.wait(0.5):
                assert time.monotonic() < deadline, "the watch neither finished nor failed"
    finally:
        watch.close()
