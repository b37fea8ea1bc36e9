"""The bench's baselines, one per worker mode: ``stock-parse`` and ``naive-relay``.

``stock-parse`` is python-mysql-replication's reader over ``start..end``, decoding every row and nothing
else; ``naive-relay`` is that reader → ``json.dumps`` per row → ``produce`` → ``flush()`` per transaction.
Each prints one ``result`` line. Runs on the worker's main thread (librdkafka's threads beside it).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from relay.common.kafka_log import quiet
from relay.dev.bench.harness import WARM_UP_TOPIC
from relay.dev.bench.probes import cpu_seconds, emit


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
    producer = Producer(
        quiet({"bootstrap.servers": spec["kafka"], "acks": "all", "enable.idempotence": True})
    )
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
