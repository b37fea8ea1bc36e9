"""One measurement in a process of its own: ``python -m relay.dev.bench.worker '<json spec>'``.

Each measured reader runs in a fresh child so that its peak RSS and CPU time are its own and the bench's
writer does not share its interpreter. Modes (``spec["mode"]``):

- ``relay-drain``: the relay (``relay.daemon.pipeline.Relay``) from ``start`` until its SAVED position reaches
  ``end`` — every row of the backlog acknowledged by Kafka and the position written;
- ``relay-live``: the relay from ``start`` until SIGTERM, recording when each row was acknowledged
  (``ack_file``) and printing progress (RSS, store fill) twice a second;
- ``stock-parse``: python-mysql-replication's reader over ``start..end``, decoding every row, nothing else;
- ``naive-relay``: that reader → ``json.dumps`` per row → ``produce`` → ``flush()`` per transaction;
- ``produce-only``: the ceiling. The relay runs over ``start..end`` once, untimed, keeping every batch of
  records it sent; then a fresh publisher with the same settings sends those same pre-encoded batches
  with the relay's window (``publish.max_inflight_batches``) and acks them in order, timed until every
  record is acknowledged: what the broker and librdkafka allow here with nothing to parse or encode.

Output: JSON lines on stdout (``ready``, ``progress``, ``result``), read by ``relay.dev.bench.runner``.
"""

from __future__ import annotations

import gc
import json
import os
import resource
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from relay.kafka.publisher import KafkaPublisher
from relay.kafka.records import BatchHandle, Record

TOPIC_PARTITIONS = 3


def emit(event: str, **fields: Any) -> None:
    sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


def memory_mb() -> tuple[float, float]:
    """(current RSS, peak RSS) of this process in MB, from /proc (VmRSS, VmHWM)."""
    rss = hwm = 0.0
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) / 1024
            elif line.startswith("VmHWM:"):
                hwm = int(line.split()[1]) / 1024
    except OSError:
        hwm = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return rss, hwm


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def thread_cpu() -> dict[str, float]:
    """CPU seconds per thread name (/proc/self/task/*: the relay's threads, librdkafka's rdk:* threads)."""
    ticks = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for task in Path("/proc/self/task").glob("*"):
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        name = (
            name.split("-")[0]
            if name.startswith("parser")
            else name.split(":")[0] + ":"
            if ":" in name
            else name
        )
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / ticks
    return out


# ---- the relay ---------------------------------------------------------------------------------------


def relay_mapping(partitions: int = TOPIC_PARTITIONS) -> dict[str, Any]:
    """Logical db ``bench`` ← ``relay_bench``; one topic per table (``bench.w1`` …), canal-json."""
    return {
        "version": 1,
        "topics": {"partitions": partitions, "create": True},
        "unmapped": {"action": "drop"},
        "logical_dbs": {"bench": {"physical": ["relay_bench"], "topic": "bench.{table}"}},
    }


def write_mapping_file(path: Path) -> None:
    """``relay_mapping()`` as the mapping file a relay's config names (``Relay.run`` reads it at start)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(relay_mapping()))


def relay_config_data(spec: dict[str, Any]) -> dict[str, Any]:
    work = spec["workdir"]
    data: dict[str, Any] = {
        "instance": spec["instance"],
        "source": {
            "host": spec["mysql"]["host"],
            "port": spec["mysql"]["port"],
            "user": spec["mysql"]["user"],
            "password": spec["mysql"]["password"],
            "server_id": spec["server_id"],
            "start": {"journal": spec["start"][0], "offset": spec["start"][1]},
        },
        "filter": {"include": "relay_bench\\..*"},
        # The workloads' rows are all in the binlog from "start": no snapshot of the tables beside.
        "snapshot": {"mode": "never"},
        "kafka": {"bootstrap_servers": spec["kafka"], "ddl_topic": "bench.ddl"},
        "state_dir": str(work),
        "status": {"interval_seconds": 1.0},
        "publish": {"drain_seconds": 2.0},
        "logging": {"level": "WARNING"},
    }
    for key, value in spec.get("settings", {}).items():  # --set section.key=value from the command line
        section, _, name = key.partition(".")
        data.setdefault(section, {})[name] = value
    return data


class AckRecorder(KafkaPublisher):
    """The relay's publisher, noting when each batch came back fully delivered (the relay then acks it).

    Only the two public calls the relay makes are wrapped; what is recorded is parsed after the run.
    """

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.sent: dict[int, Sequence[Record]] = {}
        self.acked: list[tuple[float, Sequence[Record]]] = []

    def send(self, batch_id: int, records: Sequence[Record], where: str = "") -> BatchHandle:
        self.sent[batch_id] = records
        return super().send(batch_id, records, where)

    def completed_prefix(self) -> list[BatchHandle]:
        done = super().completed_prefix()
        if done:
            now = time.monotonic()
            for handle in done:
                self.acked.append((now, self.sent.pop(handle.batch_id, ())))
        return done

    def ack_times(self) -> list[tuple[int, str, float]]:
        out = []
        for when, records in self.acked:
            for rec in records:
                headers = dict(rec.headers)
                kind = headers.get("relay.type", b"").decode()
                if rec.key is None or kind not in ("INSERT", "UPDATE", "DELETE"):
                    continue
                out.append((int(json.loads(rec.key)["id"]), kind, when))
        return out


WARM_UP_TOPIC = "bench.warmup"


def warm_up(publisher: KafkaPublisher, timeout: float = 30.0) -> float:
    """Deliver one record before the clock starts; returns how long that took.

    An idempotent producer delivers nothing until it has its producer id (about 0.5 s after it is
    created, on Tansu): a one-off of a relay's start, like the server checks, not part of its rate.
    """
    began = time.monotonic()
    publisher.ensure_topics([WARM_UP_TOPIC])
    publisher.send(-1, [Record(WARM_UP_TOPIC, 0, None, b"warm-up")], "warm-up")
    while publisher.inflight():
        if publisher.failed() is not None or time.monotonic() - began > timeout:
            raise SystemExit(f"the producer did not deliver a warm-up record: {publisher.failed()}")
        publisher.poll(0.01)
        publisher.completed_prefix()
    return time.monotonic() - began


def _build_relay(
    spec: dict[str, Any], publisher_class: type[KafkaPublisher] = KafkaPublisher
) -> tuple[Any, Any, float]:
    """The relay of ``spec`` on a warmed-up ``publisher_class``: (relay, publisher, warm-up seconds)."""
    from mapping import parse_mapping
    from relay.config.load import parse_config
    from relay.wiring import build_relay, publisher_config

    Path(spec["workdir"]).mkdir(parents=True, exist_ok=True)
    config = parse_config(relay_config_data(spec), base_dir=spec["workdir"])
    mapping = parse_mapping(relay_mapping())
    write_mapping_file(
        config.config_path(config.mapping.file)
    )  # the relay reads the store again when it starts
    publisher = publisher_class(publisher_config(config, mapping))
    warm = warm_up(publisher)
    return build_relay(config, mapping, publisher=publisher), publisher, warm


def _run_in_thread(relay: Any) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            relay.run()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run, name="relay", daemon=True)
    return thread, errors


def _reached(point: Any, end: tuple[str, int]) -> bool:
    return point is not None and point.skip == 0 and (point.journal, point.offset) >= end


class GcClock:
    """Wall time spent in the cycle collector while installed (``gc.callbacks``)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.collections = 0
        self._began = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._began
            self.collections += 1


def relay_drain(spec: dict[str, Any]) -> None:
    relay, _, warm = _build_relay(spec)
    end = (spec["end"][0], int(spec["end"][1]))
    thread, errors = _run_in_thread(relay)
    launched = time.monotonic()
    thread.start()
    deadline = launched + spec.get("timeout", 600)
    # The clock starts once the server checks are done and the parser thread runs: connecting and
    # checking the server is start-up, not throughput.
    while not relay.instance.started.wait(0.001):
        if errors or not thread.is_alive() or time.monotonic() > deadline:
            raise SystemExit(f"relay did not start: {errors[0] if errors else 'no error'}")
    marks = {"t0": time.monotonic(), "cpu0": cpu_seconds()}
    threads0 = thread_cpu()
    collector = GcClock()
    gc.callbacks.append(collector)
    while not _reached(relay.instance.last_saved, end):
        if errors or not thread.is_alive():
            raise SystemExit(f"relay stopped: {errors[0] if errors else 'no error'}")
        if time.monotonic() > deadline:
            raise SystemExit(f"relay did not reach {end} in time; saved {relay.instance.last_saved}")
        time.sleep(0.01)
    t1, cpu1 = time.monotonic(), cpu_seconds()
    threads1 = thread_cpu()
    gc.callbacks.remove(collector)
    rows = relay.stats.rows_published
    relay.stop()
    thread.join(30)
    elapsed = t1 - marks["t0"]
    emit(
        "result",
        rows=rows,
        seconds=elapsed,
        startup_seconds=marks["t0"] - launched + warm,
        rows_per_s=rows / elapsed,
        cpu_us_per_row=(cpu1 - marks["cpu0"]) * 1e6 / max(rows, 1),
        thread_cpu_us_per_row={
            name: round((spent - threads0.get(name, 0.0)) * 1e6 / max(rows, 1), 1)
            for name, spent in sorted(threads1.items())
            if spent - threads0.get(name, 0.0) > 0
        },
        peak_rss_mb=memory_mb()[1],
        gc_seconds=collector.seconds,
        gc_collections=collector.collections,
    )


def relay_live(spec: dict[str, Any]) -> None:
    relay, recorder, _ = _build_relay(spec, AckRecorder)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    thread, errors = _run_in_thread(relay)
    thread.start()
    ready = False
    while not stop.wait(0.5 if ready else 0.01):
        if errors or not thread.is_alive():
            raise SystemExit(f"relay stopped: {errors[0] if errors else 'no error'}")
        if not ready and relay.stats.state == "running":
            ready = True
            emit("ready")
        if ready:
            rss, hwm = memory_mb()
            fill = relay.instance.store.fill()
            emit(
                "progress",
                rss_mb=rss,
                hwm_mb=hwm,
                store_mb=fill.bytes / 2**20,
                acked_rows=relay.stats.rows_published,
            )
    relay.stop()
    thread.join(60)
    acks = recorder.ack_times()
    Path(spec["ack_file"]).write_text(json.dumps(acks))
    emit("result", acked=len(acks), peak_rss_mb=memory_mb()[1])


class BatchCapture(KafkaPublisher):
    """The relay's publisher, keeping a copy of every batch of records it was given to send."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.batches: list[tuple[int, list[Record]]] = []

    def send(self, batch_id: int, records: Sequence[Record], where: str = "") -> BatchHandle:
        self.batches.append((batch_id, list(records)))
        return super().send(batch_id, records, where)


def produce_only(spec: dict[str, Any]) -> None:
    from mapping import parse_mapping
    from relay.wiring import publisher_config

    relay, capture, _ = _build_relay(spec, BatchCapture)
    config = relay.config
    end = (spec["end"][0], int(spec["end"][1]))
    thread, errors = _run_in_thread(relay)
    thread.start()
    deadline = time.monotonic() + spec.get("timeout", 600)
    while not _reached(relay.instance.last_saved, end):
        if errors or not thread.is_alive() or time.monotonic() > deadline:
            raise SystemExit(f"relay (capturing the records) stopped: {errors[0] if errors else 'timeout'}")
        time.sleep(0.01)
    rows = relay.stats.rows_published
    relay.stop()
    thread.join(30)
    batches = [(i, records) for i, records in capture.batches if i >= 0]  # the warm-up record left out
    records = sum(len(r) for _, r in batches)

    window = config.publish.max_inflight_batches
    publisher = KafkaPublisher(publisher_config(config, parse_mapping(relay_mapping())))  # the same settings
    warm_up(publisher)
    t0, cpu0 = time.monotonic(), cpu_seconds()
    for batch_id, batch in batches:
        while publisher.inflight() >= window:
            publisher.poll(0.001)
            publisher.completed_prefix()
            if publisher.failed() is not None:
                raise SystemExit(f"produce-only: {publisher.failed()}")
        publisher.send(batch_id, batch, "produce-only")
        publisher.poll(0)
        publisher.completed_prefix()
    while publisher.inflight():
        if publisher.failed() is not None or time.monotonic() > deadline:
            raise SystemExit(f"produce-only: not delivered: {publisher.failed()}")
        publisher.poll(0.001)
        publisher.completed_prefix()
    elapsed = time.monotonic() - t0
    cpu = cpu_seconds() - cpu0
    publisher.close(timeout=5.0)
    emit(
        "result",
        rows=rows,
        records=records,
        batches=len(batches),
        seconds=elapsed,
        rows_per_s=rows / elapsed,
        cpu_us_per_row=cpu * 1e6 / max(rows, 1),
    )


# ---- the baselines -----------------------------------------------------------------------------------


def _stock_stream(spec: dict[str, Any]) -> Any:
    from pymysqlreplication import BinLogStreamReader

    m = spec["mysql"]
    return BinLogStreamReader(
        connection_settings={
            "host": m["host"],
            "port": m["port"],
            "user": m["user"],
            "passwd": m["password"],
        },
        server_id=spec["server_id"],
        log_file=spec["start"][0],
        log_pos=int(spec["start"][1]),
        resume_stream=True,
        blocking=True,
        is_mariadb=False,  # file/pos resume works on MariaDB only this way (found by trying)
    )


def _at_end(stream: Any, event: Any, end: tuple[str, int]) -> bool:
    pos = event.packet.log_pos
    return bool(pos) and (stream.log_file, pos) >= end


def stock_parse(spec: dict[str, Any]) -> None:
    from pymysqlreplication.row_event import RowsEvent

    end = (spec["end"][0], int(spec["end"][1]))
    stream = _stock_stream(spec)
    rows = 0
    t0, cpu0 = time.monotonic(), cpu_seconds()
    try:
        for event in stream:
            if isinstance(event, RowsEvent):
                rows += len(event.rows)
            if _at_end(stream, event, end):
                break
    finally:
        stream.close()
    elapsed = time.monotonic() - t0
    cpu = cpu_seconds() - cpu0
    emit(
        "result",
        rows=rows,
        seconds=elapsed,
        rows_per_s=rows / elapsed,
        cpu_us_per_row=cpu * 1e6 / max(rows, 1),
    )


def _produce(producer: Any, topic: str, value: bytes, key: bytes, delivered: Callable[..., None]) -> None:
    """``produce``, waiting while librdkafka's queue is full (a transaction larger than the queue: W5)."""
    while True:
        try:
            producer.produce(topic, value, key=key, on_delivery=delivered)
            return
        except BufferError:
            producer.poll(0.05)


def naive_relay(spec: dict[str, Any]) -> None:
    from confluent_kafka import Producer
    from pymysqlreplication.event import QueryEvent, XidEvent
    from pymysqlreplication.row_event import RowsEvent, UpdateRowsEvent, WriteRowsEvent

    end = (spec["end"][0], int(spec["end"][1]))
    producer = Producer({"bootstrap.servers": spec["kafka"], "acks": "all", "enable.idempotence": True})
    failures: list[str] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    producer.produce(WARM_UP_TOPIC, b"warm-up", on_delivery=delivered)  # the same start-up as the relay's
    producer.flush(30)
    stream = _stock_stream(spec)
    rows = 0
    t0 = time.monotonic()
    try:
        for event in stream:
            if isinstance(event, RowsEvent):
                kind = (
                    "UPDATE"
                    if isinstance(event, UpdateRowsEvent)
                    else "INSERT"
                    if isinstance(event, WriteRowsEvent)
                    else "DELETE"
                )
                topic = f"naive.{event.table}"
                for r in event.rows:
                    values = r.get("after_values") or r["values"]
                    message = {"database": event.schema, "table": event.table, "type": kind, "data": values}
                    if kind == "UPDATE":
                        message["old"] = r["before_values"]
                    value = json.dumps(message, default=str).encode()
                    _produce(producer, topic, value, str(values["id"]).encode(), delivered)
                    rows += 1
            elif isinstance(event, XidEvent) or (isinstance(event, QueryEvent) and event.query == "COMMIT"):
                producer.flush()
            if _at_end(stream, event, end):
                break
        producer.flush()
    finally:
        stream.close()
    elapsed = time.monotonic() - t0
    if failures:
        raise SystemExit(f"naive relay: {len(failures)} deliveries failed, first: {failures[0]}")
    emit("result", rows=rows, seconds=elapsed, rows_per_s=rows / elapsed)


MODES = {
    "relay-drain": relay_drain,
    "relay-live": relay_live,
    "stock-parse": stock_parse,
    "naive-relay": naive_relay,
    "produce-only": produce_only,
}


def profile_threads(out: Path) -> Callable[[], None]:
    """cProfile every thread started from now on (py-spy's stand-in); the returned call writes ``out``.

    Each thread's ``run`` gets a profiler of its own (cProfile sees one thread); their stats are merged.
    """
    import cProfile
    import pstats

    profiles: list[cProfile.Profile] = []
    original = threading.Thread.run

    def run(self: threading.Thread) -> None:
        profile = cProfile.Profile()
        profiles.append(profile)
        profile.enable()
        try:
            original(self)
        finally:
            profile.disable()

    threading.Thread.run = run  # type: ignore[method-assign]

    def dump() -> None:
        threading.Thread.run = original  # type: ignore[method-assign]
        for profile in profiles:
            profile.disable()  # a daemon thread still running: its samples so far
        merged = pstats.Stats(*profiles) if profiles else None
        if merged is not None:
            out.parent.mkdir(parents=True, exist_ok=True)
            merged.dump_stats(str(out))

    return dump


def main(argv: Sequence[str]) -> int:
    import logging

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    spec = json.loads(argv[0])
    dump = profile_threads(Path(spec["profile_to"]).with_suffix(".prof")) if spec.get("cprofile") else None
    MODES[spec["mode"]](spec)
    if dump is not None:
        dump()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
