"""The relay's measurements, one per worker mode: ``relay-drain``, ``relay-live`` and ``produce-only``.

Each takes the worker's spec, builds the relay (``relay.dev.bench.harness``), runs it in its own thread and
prints one ``result`` line (``relay-live`` also ``ready`` and ``progress`` lines). Runs on the worker's main
thread, polling the relay's thread until its saved position reaches ``end`` (or until SIGTERM for
``relay-live``).
"""

from __future__ import annotations

import gc
import json
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from relay.dev.bench.harness import (
    AckRecorder,
    BatchCapture,
    build_relay,
    reached,
    relay_mapping,
    run_in_thread,
    warm_up,
)
from relay.dev.bench.probes import GcClock, cpu_seconds, emit, memory_mb, thread_cpu
from relay.kafka.publisher import KafkaPublisher
from relay.kafka.records import Record


def relay_drain(spec: dict[str, Any]) -> None:
    relay, _, warm = build_relay(spec)
    end = (spec["end"][0], int(spec["end"][1]))
    thread, errors = run_in_thread(relay)
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
    while not reached(relay.instance.last_saved, end):
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
    relay, recorder, _ = build_relay(spec, AckRecorder)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    thread, errors = run_in_thread(relay)
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


def produce_only(spec: dict[str, Any]) -> None:
    from mapping import parse_mapping
    from relay.wiring import publisher_config

    relay, capture, _ = build_relay(spec, BatchCapture)
    config = relay.config
    done = _done(relay, spec)
    thread, errors = run_in_thread(relay)
    thread.start()
    deadline = time.monotonic() + spec.get("timeout", 600)
    while not done():
        if errors or not thread.is_alive() or time.monotonic() > deadline:
            raise SystemExit(f"relay (capturing the records) stopped: {errors[0] if errors else 'timeout'}")
        time.sleep(0.01)
    rows = relay.stats.rows_published
    relay.stop()
    thread.join(30)
    batches = [(i, records) for i, records in capture.batches if i >= 0]  # the warm-up record left out
    suffix = spec.get("topic_suffix", "")
    if suffix:  # topics of their own, which relay bench --peers watches as it watches every system's
        batches = [
            (i, [Record(r.topic + suffix, r.partition, r.key, r.value, r.headers) for r in rs])
            for i, rs in batches
        ]
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


def _done(relay: Any, spec: dict[str, Any]) -> Callable[[], bool]:
    """Whether the relay has done its run: its saved position at ``spec["end"]``, or (a snapshot,
    ``spec["rows"]``) its snapshot done with that many rows acknowledged."""
    if "end" in spec:
        end = (spec["end"][0], int(spec["end"][1]))
        return lambda: reached(relay.instance.last_saved, end)
    rows = int(spec["rows"])

    def snapped() -> bool:
        status = relay.instance.snapshot_status() if relay.instance.started.is_set() else None
        return status is not None and bool(status["done"]) and status["acked_rows"] >= rows

    return snapped


def relay_snapshot(spec: dict[str, Any]) -> None:
    """The relay with ``snapshot.mode: initial`` on the snapshot workload's table (``spec["config"]``), until
    Kafka acknowledged ``spec["rows"]`` snapshot rows; then its peak RSS (``relay bench --peers``, S)."""
    relay, _, _ = build_relay(spec)
    done = _done(relay, spec)
    thread, errors = run_in_thread(relay)
    thread.start()
    deadline = time.monotonic() + spec.get("timeout", 600)
    while not done():
        if errors or not thread.is_alive() or time.monotonic() > deadline:
            raise SystemExit(f"the relay's snapshot did not finish: {errors[0] if errors else 'timeout'}")
        time.sleep(0.01)
    peak = memory_mb()[1]
    relay.stop()
    thread.join(30)
    emit("result", rows=spec["rows"], peak_rss_mb=peak)
