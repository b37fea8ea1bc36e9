"""The topics page: per logical table its topic, partitions, offsets and retention runway; the record browser.

Owns the logical tables' topics (the current mapping's routes of the source's tables:
``Mapping.validate_against``, as ``relay mapping resolve --all`` lists them), what the broker says of each
topic (partitions, low and high offsets, ``retention.ms`` / ``retention.bytes``, the oldest record still
held: how far back a replay or a new consumer can read, and when those records go), and ``browse``: the
latest N records, a key's records (its partition by the producer's partitioner, scanned), records from an
offset or from a time (``offsets_for_times``). A consumer of its own reads with ``assign`` (no group, no
commit) and stops at each partition's end (``enable.partition.eof``: no high watermark is trusted to be
exact), within a deadline. Values are decoded by ``relay.console.records``. Runs on request threads; the
Kafka settings (SASL included) come from the relay's config and are never shown.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource  # type: ignore[attr-defined]

from mapping.model import Mapping
from relay.config.load import RelayConfig
from relay.console.records import Shown, decode
from relay.errors import ConsoleError
from relay.kafka.partitioner import partition_for_key
from relay.ops.mapping_live import live_source, reachable

__all__ = ["Browse", "LogicalTable", "Row", "TopicInfo", "browse", "logical_tables", "topic_info"]

TIMEOUT = 10.0
SCAN_LIMIT = 200_000  # records a key search reads at most


@dataclass
class LogicalTable:
    name: str
    topic: str
    codec: str
    physical: list[str] = field(default_factory=list)


@dataclass
class TopicInfo:
    topic: str
    partitions: list[tuple[int, int, int]] = field(default_factory=list)  # partition, low, high
    retention_ms: int | None = None
    retention_bytes: int | None = None
    oldest_ms: int | None = None
    error: str = ""

    @property
    def records(self) -> int:
        return sum(high - low for _, low, high in self.partitions)

    def runway(self, now_ms: float | None = None) -> str:
        """How far back the topic reaches, and when its oldest records go."""
        if self.oldest_ms is None:
            return "no records held" if not self.error else "-"
        now = time.time() * 1000 if now_ms is None else now_ms
        back = f"reaches back {_span(now - self.oldest_ms)}"
        if self.retention_ms is None or self.retention_ms < 0:
            return f"{back}; kept forever (retention.ms -1)"
        left = self.oldest_ms + self.retention_ms - now
        return f"{back}; retention {_span(self.retention_ms)}: the oldest go in {_span(max(left, 0))}"


def _span(ms: float) -> str:
    seconds = ms / 1000
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"


def kafka_settings(config: RelayConfig) -> dict[str, Any]:
    return {"bootstrap.servers": config.kafka.bootstrap_servers, **dict(config.kafka.settings)}


def logical_tables(config: RelayConfig, mapping: Mapping) -> tuple[list[LogicalTable], str]:
    """Every logical table the source's tables map to, with its topic; and a note when the source did
    not answer (then the mapping's own logical tables, with the topic their rules name)."""
    warned: list[str] = []
    live = reachable(live_source(config), columns=False, warn=warned.append)
    found: dict[tuple[str, str], LogicalTable] = {}
    if live is not None:
        for route in mapping.validate_against(live[0], raise_errors=False).routes:
            if not route.mapped:
                continue
            name = f"{route.logical_db}.{route.logical_table}"
            table = found.setdefault((name, route.topic), LogicalTable(name, route.topic, route.codec))
            table.physical.append(f"{route.physical_db}.{route.physical_table}")
        return sorted(found.values(), key=lambda t: (t.name, t.topic)), ""
    for db in mapping.logical_dbs:
        for t in db.tables:
            topic = t.topic or db.topic or mapping.defaults.topic
            found[(f"{db.name}.{t.name}", topic)] = LogicalTable(
                f"{db.name}.{t.name}", topic, t.codec or db.codec or mapping.defaults.codec
            )
    note = f"{warned[0] if warned else 'the source did not answer'}; topics as the mapping's rules name them"
    return sorted(found.values(), key=lambda t: (t.name, t.topic)), note


def _consumer(config: RelayConfig) -> Consumer:
    return Consumer(
        {
            **kafka_settings(config),
            "group.id": f"relay-console-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
        }
    )


def topic_info(config: RelayConfig, topics: list[str]) -> dict[str, TopicInfo]:
    """Partitions, offsets, retention and the oldest record of each topic (an error line where the
    broker does not know it)."""
    admin = AdminClient(kafka_settings(config))
    out = {t: TopicInfo(t) for t in topics}
    try:
        meta = admin.list_topics(timeout=TIMEOUT)
    except KafkaException as exc:
        raise ConsoleError("kafka.bootstrap_servers", f"the broker did not answer: {exc}") from exc
    consumer = _consumer(config)
    try:
        for topic, info in out.items():
            described = meta.topics.get(topic)
            if described is None or described.error is not None:
                info.error = "not on the broker (created with the first record)"
                continue
            for p in sorted(described.partitions):
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=TIMEOUT)
                info.partitions.append((p, low, high))
        _retention(admin, out)
        _oldest(consumer, out)
    finally:
        consumer.close()
    return out


def _retention(admin: AdminClient, infos: dict[str, TopicInfo]) -> None:
    resources = [ConfigResource(ConfigResource.Type.TOPIC, t) for t, i in infos.items() if not i.error]
    if not resources:
        return
    for resource, future in admin.describe_configs(resources, request_timeout=TIMEOUT).items():
        try:
            entries = future.result(timeout=TIMEOUT)
        except KafkaException:
            continue
        info = infos[resource.name]
        for name, attr in (("retention.ms", "retention_ms"), ("retention.bytes", "retention_bytes")):
            entry = entries.get(name)
            if entry is not None and entry.value is not None:
                setattr(info, attr, int(entry.value))


def _oldest(consumer: Consumer, infos: dict[str, TopicInfo]) -> None:
    """The timestamp of the first record each partition holds (one record read per partition)."""
    starts = [
        TopicPartition(t, p, low) for t, i in infos.items() for p, low, high in i.partitions if high > low
    ]
    for msg in _read(consumer, starts, per_partition=1):
        info = infos[msg.topic()]
        stamp = msg.timestamp()[1]
        if stamp > 0 and (info.oldest_ms is None or stamp < info.oldest_ms):
            info.oldest_ms = stamp


def _read(
    consumer: Consumer, starts: list[TopicPartition], per_partition: int, limit: float = TIMEOUT
) -> list[Any]:
    """Up to ``per_partition`` records from each start, until each partition's end or the deadline."""
    if not starts:
        return []
    consumer.assign(starts)
    left = {(tp.topic, tp.partition): per_partition for tp in starts}
    out: list[Any] = []
    deadline = time.monotonic() + limit
    while left and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is None:
            continue
        where = (str(msg.topic()), int(msg.partition() or 0))
        err = msg.error()
        if err is not None:
            if err.code() == KafkaError._PARTITION_EOF:
                left.pop(where, None)
            continue
        if where not in left:
            continue
        out.append(msg)
        left[where] -= 1
        if left[where] <= 0:
            del left[where]
            consumer.pause([TopicPartition(*where)])
    consumer.unassign()
    return out


@dataclass(frozen=True)
class Row:
    partition: int
    offset: int
    timestamp: str
    key: str
    headers: list[tuple[str, str]]
    shown: Shown


@dataclass
class Browse:
    mode: str  # latest, key, offset, time
    rows: list[Row] = field(default_factory=list)
    note: str = ""


def browse(
    config: RelayConfig, topic: str, mode: str, value: str, partition: int | None, limit: int
) -> Browse:
    """The records of ``topic`` a browser query names (``mode``: latest, key, offset, time)."""
    limit = max(1, min(limit, 500))
    consumer = _consumer(config)
    try:
        meta = consumer.list_topics(topic, timeout=TIMEOUT).topics.get(topic)
        if meta is None or meta.error is not None:
            raise ConsoleError("topic", f"{topic}: not on the broker")
        parts = sorted(meta.partitions)
        marks = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=TIMEOUT) for p in parts}
        if mode == "key":
            return _by_key(consumer, topic, value, parts, marks, limit)
        chosen = [partition] if partition is not None and partition in parts else parts
        if mode == "offset":
            if partition is None or not value.strip().isdigit():
                raise ConsoleError("offset", "give a partition and an offset (a number)")
            starts = [TopicPartition(topic, partition, int(value))]
        elif mode == "time":
            starts = _at_time(consumer, topic, chosen, value)
        else:
            starts = [TopicPartition(topic, p, max(marks[p][0], marks[p][1] - limit)) for p in chosen]
        messages = _read(consumer, starts, limit)
    finally:
        consumer.close()
    rows = [_row(m) for m in messages]
    if mode == "latest":
        rows.sort(key=lambda r: (r.timestamp, r.partition, r.offset), reverse=True)
    return Browse(mode, rows[:limit])


def _at_time(consumer: Consumer, topic: str, parts: list[int], value: str) -> list[TopicPartition]:
    from datetime import datetime

    try:
        when = datetime.fromisoformat(value.strip())
    except ValueError:
        raise ConsoleError("time", f"{value!r}: give an ISO time, e.g. 2026-11-20T08:00:00+00:00") from None
    ms = int(when.timestamp() * 1000)
    found = consumer.offsets_for_times([TopicPartition(topic, p, ms) for p in parts], timeout=TIMEOUT)
    return [tp for tp in found if tp.offset >= 0]


def _by_key(
    consumer: Consumer,
    topic: str,
    value: str,
    parts: list[int],
    marks: dict[int, tuple[int, int]],
    limit: int,
) -> Browse:
    key = key_bytes(value)
    p = partition_for_key(key, len(parts))
    low, high = marks[p]
    consumer.assign([TopicPartition(topic, p, max(low, high - SCAN_LIMIT))])
    hits: list[Any] = []
    deadline, read = time.monotonic() + 3 * TIMEOUT, 0
    while time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is None:
            continue
        err = msg.error()
        if err is not None:
            if err.code() == KafkaError._PARTITION_EOF:
                break
            continue
        read += 1
        if msg.key() == key:
            hits.append(msg)
    note = f"key {key.decode('utf-8', 'replace')} is in partition {p}; read {read} records of it"
    if high - low > SCAN_LIMIT:
        note += f" (the last {SCAN_LIMIT})"
    return Browse("key", [_row(m) for m in hits[-limit:]][::-1], note)


def key_bytes(value: str) -> bytes:
    """The record key a browser query means: the key as written on the topic (``{"id":"42"}``), or
    ``column=value`` pairs separated by commas, in key order (``id=42``)."""
    text = value.strip()
    if not text:
        raise ConsoleError("key", 'give a key: {"id":"42"} as on the topic, or id=42')
    if text.startswith("{"):
        return text.encode()
    pairs = [part.partition("=") for part in text.split(",")]
    if any(not eq or not name.strip() for name, eq, _ in pairs):
        raise ConsoleError("key", f"{value!r}: write column=value[,column=value…] or the key's JSON")
    return json.dumps({n.strip(): v.strip() for n, _, v in pairs}, separators=(",", ":")).encode()


def _row(msg: Any) -> Row:
    stamp = msg.timestamp()[1]
    when = (
        time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(stamp / 1000)) + f".{stamp % 1000:03d}"
        if stamp > 0
        else "-"
    )
    headers = [(k, (v or b"").decode("utf-8", "replace")) for k, v in (msg.headers() or [])]
    key = msg.key()
    return Row(
        msg.partition(),
        msg.offset(),
        when,
        "(none)" if key is None else key.decode("utf-8", "replace"),
        headers,
        decode(msg.value()),
    )
