"""What a system's run left in Kafka, read back by an independent consumer and checked against ``SELECT``.

``read_landed`` consumes every record of a run's topics from the start (each partition in offset order) and
keeps: the row changes per key (so that every row of the workload is counted, none twice), the broker's
append time of the first and the last record (the topics are ``LogAppendTime``: the broker's clock, the same
for every system), the first append time of each (key, change type) for the latency figure, and the last
row image of a few sampled keys. ``check`` holds the counts against what the bench's writer committed and
the sampled rows against ``SELECT`` of the same keys now, so that a fast but wrong run cannot win.

Two value formats are read, each decoded here on its own terms (not with the relay's code): canal's flat
JSON (the relay's canal-json, canal's own flatMessage: ``type`` and a ``data`` list of text values) and
Debezium's JSON without schemas (``op``, ``before``/``after`` with Debezium's default type mappings: DECIMAL
as base64 of the unscaled big-endian integer, DATETIME as epoch milliseconds, DATE as epoch days, BLOB as
base64). Both become the Python values PyMySQL returns for the bench table's eleven columns. Runs on the
caller's thread.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import random
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from relay.dev.bench import workloads as wl
from relay.dev.bench.common import end_offsets
from relay.errors import BenchError

LOG_APPEND_TIME = 2  # confluent_kafka.TIMESTAMP_LOG_APPEND_TIME
SAMPLE_KEYS = 25
_EPOCH = dt.datetime(1970, 1, 1)
_INTS = ("id", "k", "qty")
_TEXTS = ("name", "status", "note")


@dataclass(frozen=True)
class Change:
    """One row change as a record carried it: the key, INSERT/UPDATE/DELETE, the row after (None: deleted)."""

    id: int
    kind: str
    row: dict[str, Any] | None


Decoder = Callable[[bytes], list[Change]]


def _canal_row(data: dict[str, str | None]) -> dict[str, Any]:
    def text(name: str) -> str:
        value = data[name]
        if value is None:
            raise BenchError(f"unexpected NULL in column {name}")
        return value

    row: dict[str, Any] = {name: int(text(name)) for name in _INTS}
    row.update({name: data[name] for name in _TEXTS})
    row["price"] = Decimal(text("price"))
    row["ratio"] = float(text("ratio"))
    row["created"] = dt.datetime.strptime(text("created"), "%Y-%m-%d %H:%M:%S.%f")
    row["day"] = dt.date.fromisoformat(text("day"))
    row["payload"] = text("payload").encode("latin-1")  # canal's ISO-8859-1 text of the bytes
    return row


def decode_canal(value: bytes) -> list[Change]:
    """canal's flat JSON: one ``type`` for every row of ``data`` (the relay: one row a record)."""
    message = json.loads(value)
    if message.get("isDdl") or message.get("type") not in ("INSERT", "UPDATE", "DELETE"):
        return []
    kind = message["type"]
    out = []
    for data in message.get("data") or ():
        row = _canal_row(data)
        out.append(Change(row["id"], kind, None if kind == "DELETE" else row))
    return out


def _debezium_row(image: dict[str, Any]) -> dict[str, Any]:
    row = {name: image[name] for name in (*_INTS, *_TEXTS)}
    unscaled = int.from_bytes(base64.b64decode(image["price"]), "big", signed=True)
    row["price"] = Decimal(unscaled).scaleb(-2)  # DECIMAL(12,2), decimal.handling.mode=precise
    row["ratio"] = float(image["ratio"])
    row["created"] = _EPOCH + dt.timedelta(milliseconds=image["created"])
    row["day"] = dt.date(1970, 1, 1) + dt.timedelta(days=image["day"])
    row["payload"] = base64.b64decode(image["payload"])
    return row


_DEBEZIUM_KINDS = {"c": "INSERT", "r": "INSERT", "u": "UPDATE", "d": "DELETE"}


def decode_debezium(value: bytes) -> list[Change]:
    """Debezium's change event (JSON converter, schemas off); ``r`` (a snapshot read) counts as an INSERT."""
    event = json.loads(value)
    kind = _DEBEZIUM_KINDS.get(event.get("op", ""))
    if kind is None:
        return []
    image = event["before"] if kind == "DELETE" else event["after"]
    row = _debezium_row(image)
    return [Change(row["id"], kind, None if kind == "DELETE" else row)]


DECODERS: dict[str, Decoder] = {"canal": decode_canal, "debezium": decode_debezium}


@dataclass
class Landed:
    """What one run's topics held."""

    records: int = 0  # Kafka records read (row changes and anything else)
    changes: Counter[int] = field(default_factory=Counter)  # row changes per key
    first_ms: int | None = None  # append time of the first / last record carrying a row change
    last_ms: int | None = None
    acked_ms: dict[tuple[int, str], int] = field(default_factory=dict)  # first append per (key, kind)
    last: dict[int, Change] = field(default_factory=dict)  # the sampled keys' last change

    @property
    def rows(self) -> int:
        return sum(self.changes.values())

    def seconds(self) -> float:
        """First to last append, on the broker's clock (at least its 1 ms resolution)."""
        if self.first_ms is None or self.last_ms is None:
            return 0.0
        return max(self.last_ms - self.first_ms, 1) / 1000.0

    def add(self, timestamp: tuple[int, int], change: Change, sample: set[int]) -> None:
        kind, ms = timestamp
        if kind != LOG_APPEND_TIME:
            raise BenchError("the bench's topics must have message.timestamp.type=LogAppendTime")
        self.first_ms = ms if self.first_ms is None else min(self.first_ms, ms)
        self.last_ms = ms if self.last_ms is None else max(self.last_ms, ms)
        self.changes[change.id] += 1
        self.acked_ms.setdefault((change.id, change.kind), ms)
        if change.id in sample:
            self.last[change.id] = change


def read_landed(bootstrap: str, topics: list[str], decode: Decoder, sample: set[int]) -> Landed:
    """Every record of ``topics`` up to their high watermarks now, partition by partition in offset order."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "relay-bench-landed", "enable.auto.commit": False}
    )
    landed = Landed()
    try:
        meta = consumer.list_topics(timeout=30)
        for topic in topics:
            for partition in sorted(meta.topics[topic].partitions):
                tp = TopicPartition(topic, partition)
                low, high = end_offsets(consumer, tp)
                if high > low:
                    _read_partition(
                        consumer, TopicPartition(topic, partition, low), high, decode, sample, landed
                    )
    finally:
        consumer.close()
    return landed


def _read_partition(
    consumer: Any, tp: Any, high: int, decode: Decoder, sample: set[int], landed: Landed
) -> None:
    consumer.assign([tp])
    offset = tp.offset
    while offset < high:
        # no more than are left: consume() returns at its count or at its timeout, so asking for more than
        # the partition holds waited the 10 s out at the end of every partition
        messages = consumer.consume(num_messages=min(5000, high - offset), timeout=10)
        if not messages:
            raise BenchError(f"reading {tp.topic}[{tp.partition}] stalled at offset {offset} of {high}")
        for message in messages:
            if message.error() is not None:
                raise BenchError(f"reading {tp.topic}[{tp.partition}]: {message.error()}")
            offset = message.offset() + 1
            landed.records += 1
            value = message.value()
            for change in decode(value) if value is not None else ():
                landed.add(message.timestamp(), change, sample)
            if offset >= high:
                break
    consumer.unassign()


def sample_keys(expected: Counter[int], seed: int) -> set[int]:
    """A fixed-seed sample of the keys the workload changed."""
    keys = sorted(expected)
    return set(random.Random(seed).sample(keys, min(SAMPLE_KEYS, len(keys))))


def select_rows(conn: Any, table: str, keys: Iterable[int]) -> dict[int, dict[str, Any]]:
    """The rows of ``keys`` as ``SELECT`` returns them now (a key that is absent: deleted)."""
    wanted = sorted(keys)
    if not wanted:
        return {}
    columns = [c.strip() for c in wl.COLUMNS.split(",")]
    with conn.cursor() as cur:
        marks = ", ".join(["%s"] * len(wanted))
        cur.execute(f"SELECT {wl.COLUMNS} FROM {wl.DB}.{table} WHERE id IN ({marks})", wanted)
        rows = [dict(zip(columns, r, strict=True)) for r in cur.fetchall()]
    for row in rows:
        row["ratio"] = float(row["ratio"])
        row["payload"] = bytes(row["payload"])
    return {int(row["id"]): row for row in rows}


@dataclass(frozen=True)
class Verdict:
    """Whether the topics held every row change exactly once, and the sampled rows as ``SELECT`` has them."""

    rows: int  # row changes found
    expected: int
    complete: bool  # per key, as many changes as the writer committed
    sampled: int
    sample_equal: bool
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.complete and self.sample_equal

    def to_json(self) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "expected": self.expected,
            "complete": self.complete,
            "sampled": self.sampled,
            "sample_equal": self.sample_equal,
            "detail": self.detail,
        }


def check(
    landed: Landed, expected: Counter[int], selected: dict[int, dict[str, Any]], sample: set[int]
) -> Verdict:
    """``landed`` against the writer's per-key counts and ``SELECT``'s rows of the sampled keys."""
    details = []
    missing = expected - landed.changes
    extra = landed.changes - expected
    if missing or extra:
        worst = sorted(missing.items())[:3] if missing else sorted(extra.items())[:3]
        what = "missing" if missing else "extra"
        details.append(
            f"{sum(missing.values())} row changes missing, {sum(extra.values())} extra ({what}: {worst})"
        )
    unequal = []
    for key in sorted(sample):
        last = landed.last.get(key)
        want = selected.get(key)
        got = None if last is None else last.row
        if last is None or got != want:
            unequal.append(key)
    if unequal:
        key = unequal[0]
        details.append(
            f"{len(unequal)} of {len(sample)} sampled rows differ from SELECT, e.g. id {key}: "
            f"topic {landed.last.get(key)}, SELECT {selected.get(key)}"
        )
    return Verdict(
        landed.rows,
        sum(expected.values()),
        not (missing or extra),
        len(sample),
        not unequal,
        "; ".join(details),
    )
