"""Broker access for the ``relay-kafka`` source: topics, retained ranges, true ends, timestamps, reads.

Owns every confluent-kafka call of the Spark reader. ``Broker`` (metadata, watermarks, ends, timestamp
lookups) lives in the driver's Python process for one query (or one batch plan); ``read_range`` runs in a
Spark task on an executor's Python worker and hands Arrow record batches (Spark's ``kafka`` schema) to
Spark. Consumers only ``assign``: no group membership, no commits (Spark's checkpoint holds the offsets).

Ends. Kafka's high watermark is the end of what a consumer may read. Some brokers report less: Tansu
reports the base offset of the last record batch + 1, hiding the rest of that batch. So the end of a
partition is learned by reading: from ``high - 1`` to the consumer's end-of-partition event, whose offset
is where the readable log ends (on Apache Kafka that is exactly the high watermark, after one fetch).
The answer is cached per high watermark: any append moves the watermark and triggers a new probe.

Timestamps. ``offsets_for_times`` is Kafka's "earliest offset whose record timestamp is >= t". Its
answer is checked by reading the record it names; when that record is older than ``t`` the broker
answered wrongly (Tansu answers 0 for every lookup) and the partition is scanned forward from there for
the first record with timestamp >= t — the documented semantics, at the cost of a read. The scan is
logged. No such record: None (Spark's ``startingOffsetsByTimestampStrategy`` decides).
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

from relay.common.kafka_log import FETCH_QUEUE_BACKOFF_MS, quiet
from relay.errors import DataLossError, SparkSourceError
from relay.spark.offsets import TopicPartition

log = logging.getLogger(__name__)

PROBE_TIMEOUT = 15.0
_CONSUME_BATCH = 1000
_ARROW_ROWS = 8192


def consumer_config(options: Mapping[str, str]) -> dict[str, Any]:
    """The consumer settings: every ``kafka.*`` option (prefix removed), then what the reader needs."""
    conf: dict[str, Any] = {k[len("kafka.") :]: v for k, v in options.items() if k.startswith("kafka.")}
    if "bootstrap.servers" not in conf:
        raise SparkSourceError("option kafka.bootstrap.servers is required")
    conf.setdefault("group.id", f"relay-spark-{uuid.uuid4().hex[:12]}")
    conf.update(
        {
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            # Reading past the retained range must surface as an error (data loss), never be reset.
            "auto.offset.reset": "error",
            "fetch.wait.max.ms": int(conf.get("fetch.wait.max.ms", 50)),
            "fetch.queue.backoff.ms": int(conf.get("fetch.queue.backoff.ms", FETCH_QUEUE_BACKOFF_MS)),
        }
    )
    return conf


def _kafka() -> Any:
    import confluent_kafka

    return confluent_kafka


class Broker:
    """Metadata and offsets for one query, on the driver. Not thread-safe; ``close()`` when done."""

    def __init__(self, options: Mapping[str, str]) -> None:
        ck = _kafka()
        self._ck = ck
        self._conf = consumer_config(options)
        try:
            self._consumer = ck.Consumer(quiet(self._conf))
        except ck.KafkaException as exc:
            raise SparkSourceError(f"cannot create a Kafka consumer: {exc}") from exc
        self._ends: dict[TopicPartition, tuple[int, int]] = {}  # tp -> (high watermark, true end)

    def close(self) -> None:
        self._consumer.close()

    def partitions(self, subscribe: Mapping[str, str]) -> list[TopicPartition]:
        """The partitions named by ``assign`` / ``subscribe`` / ``subscribePattern`` (exactly one)."""
        if "assign" in subscribe:
            return sorted(_parse_json_assign(subscribe["assign"]))
        meta = self._metadata()
        if "subscribe" in subscribe:
            wanted = {t.strip() for t in subscribe["subscribe"].split(",") if t.strip()}
            topics = [t for t in meta if t in wanted]
        else:
            pattern = re.compile(subscribe["subscribepattern"])
            topics = [t for t in meta if pattern.fullmatch(t) and not t.startswith("__")]
        return sorted((t, p) for t in topics for p in meta[t])

    def _metadata(self) -> dict[str, list[int]]:
        try:
            meta = self._consumer.list_topics(timeout=30)
        except self._ck.KafkaException as exc:
            raise SparkSourceError(f"cannot list topics: {exc}") from exc
        return {
            name: sorted(t.partitions) for name, t in meta.topics.items() if t.error is None and t.partitions
        }

    def watermarks(self, tps: list[TopicPartition]) -> dict[TopicPartition, tuple[int, int]]:
        """(log start offset, high watermark) per partition, asked of the broker now."""
        out = {}
        for topic, partition in tps:
            try:
                low, high = self._consumer.get_watermark_offsets(
                    self._ck.TopicPartition(topic, partition), timeout=30, cached=False
                )
            except self._ck.KafkaException as exc:
                raise SparkSourceError(f"cannot read the offsets of {topic}-{partition}: {exc}") from exc
            out[(topic, partition)] = (int(low), int(high))
        return out

    def ranges(
        self, tps: list[TopicPartition]
    ) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
        """(lows, true ends) of ``tps``; see the module docstring for how an end is learned."""
        marks = self.watermarks(tps)
        lows = {tp: low for tp, (low, _) in marks.items()}
        ends: dict[TopicPartition, int] = {}
        probe: dict[TopicPartition, int] = {}
        for tp, (low, high) in marks.items():
            cached = self._ends.get(tp)
            if high <= low:
                ends[tp] = high
            elif cached is not None and cached[0] == high:
                ends[tp] = cached[1]
            else:
                probe[tp] = high
        if probe:
            found = self._probe_ends(probe)
            for tp, high in probe.items():
                ends[tp] = max(high, found.get(tp, high))
                self._ends[tp] = (high, ends[tp])
        return lows, ends

    def _probe_ends(self, highs: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Read each partition from ``high - 1`` to its end-of-partition event: the readable end."""
        ck = self._ck
        self._consumer.assign([ck.TopicPartition(t, p, h - 1) for (t, p), h in highs.items()])
        last: dict[TopicPartition, int] = {}
        found: dict[TopicPartition, int] = {}
        deadline = time.monotonic() + PROBE_TIMEOUT
        try:
            while len(found) < len(highs) and time.monotonic() < deadline:
                for msg in self._consumer.consume(_CONSUME_BATCH, 0.2):
                    tp = (msg.topic(), msg.partition())
                    err = msg.error()
                    if err is None:
                        last[tp] = max(last.get(tp, -1), msg.offset())
                    elif err.code() == ck.KafkaError._PARTITION_EOF:
                        found[tp] = max(msg.offset(), last.get(tp, -1) + 1)
                    else:
                        log.warning("probing the end of %s-%s: %s", tp[0], tp[1], err)
        finally:
            self._consumer.unassign()
        missing = sorted(set(highs) - set(found))
        if missing:
            log.warning(
                "no end-of-partition within %.0fs for %s; using the high watermark", PROBE_TIMEOUT, missing
            )
        return found

    def offset_for_time(self, tp: TopicPartition, stamp: int, end: int) -> int | None:
        """The earliest offset of ``tp`` whose record timestamp is >= ``stamp`` (ms), or None."""
        ck = self._ck
        try:
            (answer,) = self._consumer.offsets_for_times([ck.TopicPartition(tp[0], tp[1], stamp)], timeout=30)
        except ck.KafkaException as exc:
            raise SparkSourceError(f"cannot look up timestamp {stamp} in {tp[0]}-{tp[1]}: {exc}") from exc
        if answer.error is not None:
            raise SparkSourceError(f"cannot look up timestamp {stamp} in {tp[0]}-{tp[1]}: {answer.error}")
        if answer.offset < 0 or answer.offset >= end:
            return None
        return self._scan_time(tp, stamp, answer.offset, end)

    def _scan_time(self, tp: TopicPartition, stamp: int, start: int, end: int) -> int | None:
        ck = self._ck
        self._consumer.assign([ck.TopicPartition(tp[0], tp[1], start)])
        scanned = 0
        deadline = time.monotonic() + PROBE_TIMEOUT
        try:
            while time.monotonic() < deadline:
                for msg in self._consumer.consume(_CONSUME_BATCH, 0.2):
                    err = msg.error()
                    if err is not None:
                        if err.code() == ck.KafkaError._PARTITION_EOF:
                            return None
                        raise SparkSourceError(f"scanning {tp[0]}-{tp[1]} for timestamp {stamp}: {err}")
                    if msg.timestamp()[1] >= stamp:
                        if scanned:
                            log.info(
                                "broker answered offset %d for timestamp %d in %s-%s, but that record is "
                                "older; scanned %d records to offset %d",
                                start,
                                stamp,
                                tp[0],
                                tp[1],
                                scanned,
                                msg.offset(),
                            )
                        return int(msg.offset())
                    scanned += 1
                    if msg.offset() >= end - 1:
                        return None
                deadline = time.monotonic() + PROBE_TIMEOUT
        finally:
            self._consumer.unassign()
        raise SparkSourceError(f"scanning {tp[0]}-{tp[1]} for timestamp {stamp}: no answer in time")


def _parse_json_assign(text: str) -> set[TopicPartition]:
    import json

    from relay.errors import OptionError

    try:
        data = json.loads(text)
        return {(str(t), int(p)) for t, parts in data.items() for p in parts}
    except (ValueError, TypeError, AttributeError) as exc:
        raise OptionError(f'assign: expected JSON like {{"topic":[0,1]}}, got {text!r}') from exc


def read_range(
    options: Mapping[str, str],
    tp: TopicPartition,
    start: int,
    until: int,
    *,
    fail_on_loss: bool,
    timeout: float,
) -> Iterator[Any]:
    """The records of ``tp`` in [start, until) as Arrow record batches in Spark's ``kafka`` schema."""
    import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]

    from relay.spark.schema import arrow_schema

    schema = arrow_schema(options.get("includeheaders", "false").lower() == "true")
    cols: list[list[Any]] = [[] for _ in schema]
    for record in _records(options, tp, start, until, fail_on_loss=fail_on_loss, timeout=timeout):
        for col, value in zip(cols, record, strict=False):
            col.append(value)
        if len(cols[0]) >= _ARROW_ROWS:
            yield pa.RecordBatch.from_arrays(
                [pa.array(c, f.type) for c, f in zip(cols, schema, strict=True)], schema=schema
            )
            cols = [[] for _ in schema]
    if cols[0]:
        yield pa.RecordBatch.from_arrays(
            [pa.array(c, f.type) for c, f in zip(cols, schema, strict=True)], schema=schema
        )


def _records(
    options: Mapping[str, str],
    tp: TopicPartition,
    start: int,
    until: int,
    *,
    fail_on_loss: bool,
    timeout: float,
) -> Iterator[tuple[Any, ...]]:
    ck = _kafka()
    include_headers = options.get("includeheaders", "false").lower() == "true"
    consumer = ck.Consumer(quiet(consumer_config(options)))
    try:
        consumer.assign([ck.TopicPartition(tp[0], tp[1], start)])
        progress, at = time.monotonic(), start
        while True:
            # no more than the range has left: consume() waits its timeout out for a batch never filled
            batch = consumer.consume(max(1, min(_CONSUME_BATCH, until - at)), 0.2)
            if batch:
                progress = time.monotonic()
            for msg in batch:
                err = msg.error()
                if err is not None:
                    if err.code() == ck.KafkaError._PARTITION_EOF:
                        if msg.offset() >= until:
                            return
                        continue
                    if err.code() == ck.KafkaError.OFFSET_OUT_OF_RANGE:
                        _lost(tp, start, until, str(err), fail_on_loss)
                        return
                    raise SparkSourceError(f"reading {tp[0]}-{tp[1]} [{start}, {until}): {err}")
                offset = msg.offset()
                if offset >= until:
                    return
                at = offset + 1
                yield _row(msg, include_headers)
                if offset >= until - 1:
                    return
            if time.monotonic() - progress > timeout:
                raise SparkSourceError(
                    f"reading {tp[0]}-{tp[1]} [{start}, {until}): no record for {timeout:.0f}s "
                    "(kafkaConsumer.pollTimeoutMs)"
                )
    finally:
        consumer.close()


def _lost(tp: TopicPartition, start: int, until: int, why: str, fail: bool) -> None:
    text = f"{tp[0]}-{tp[1]}: offsets [{start}, {until}) are no longer retained ({why})"
    if fail:
        raise DataLossError(f"data loss: {text}. Set failOnDataLoss=false to skip them with a warning.")
    log.warning("data loss (failOnDataLoss=false): %s", text)


def _row(msg: Any, include_headers: bool) -> tuple[Any, ...]:
    kind, stamp = msg.timestamp()
    row: tuple[Any, ...] = (
        msg.key(),
        msg.value(),
        msg.topic(),
        msg.partition(),
        msg.offset(),
        stamp * 1000 if kind else None,  # Arrow timestamp in microseconds
        max(kind - 1, 0),  # Spark: 0 CreateTime, 1 LogAppendTime (librdkafka: 1, 2)
    )
    if include_headers:
        headers = msg.headers()
        row += ([{"key": k, "value": v} for k, v in headers] if headers is not None else None,)
    return row
