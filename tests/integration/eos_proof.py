"""What the exactly-once and transactional proofs read from Kafka, and what they check in it.

``read_partitions`` is an independent confluent-kafka consumer with the isolation level the caller states,
reading every partition of a topic from offset 0 to its end (the last stable offset for ``read_committed``,
the high watermark for ``read_uncommitted``), after the relays stopped. ``Proof`` checks those records against
the source: the number of row changes the writer committed (nothing missing), each change once (no repeat: a
change is its source identity, sequence and part), and, walking each partition in offset order — never
re-sorting by our own sequence — that every key's changes come in binlog order; then the state they build
equals ``SELECT`` over the shards.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from tests.integration.relay_harness import Rec, partitions_of, select_orders


def read_partitions(bootstrap: str, topic: str, isolation: str, timeout: float = 60.0) -> list[Rec]:
    """Every record ``topic`` holds for a consumer with ``isolation.level`` = ``isolation``, in offset order
    per partition (partition by partition)."""
    n = partitions_of(bootstrap, topic)
    assert n > 0, f"topic {topic} does not exist"
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"proof-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": isolation,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(n)])
    deadline = time.monotonic() + timeout
    out: list[Rec] = []
    ended: set[int] = set()
    try:
        while len(ended) < n:
            assert time.monotonic() < deadline, f"{topic}: partitions {set(range(n)) - ended} never ended"
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    ended.add(int(msg.partition() or 0))
                    continue
                raise KafkaException(err)
            ended.discard(int(msg.partition() or 0))
            headers = dict(msg.headers() or [])
            ts_type, ts = msg.timestamp()
            out.append(
                Rec(msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value(), headers, ts, ts_type)
            )
    finally:
        consumer.close()
    return sorted(out, key=lambda r: (r.partition, r.offset))


def change_id(rec: Rec) -> tuple[str, int, int]:
    """A row change's identity: (source id, sequence, part)."""
    msg = rec.json
    return (str(msg["source"]["id"]), int(msg["sequence"]), int(msg.get("part") or 0))


@dataclass
class Proof:
    """What one isolation level's read shows, against the writer's count and SELECT."""

    rows: int  # row records read
    distinct: int  # distinct changes among them
    expected: int  # row changes the writer committed
    order_breaks: list[str]  # "key k: sequence s at p@o after t"
    state_equal: bool

    @property
    def missing(self) -> int:
        return self.expected - self.distinct

    @property
    def repeats(self) -> int:
        return self.rows - self.distinct

    def summary(self) -> str:
        return (
            f"{self.rows} row records, {self.distinct} distinct changes of {self.expected}: missing "
            f"{self.missing}, repeats {self.repeats}, order breaks {len(self.order_breaks)}, state "
            f"{'equals' if self.state_equal else 'DIFFERS FROM'} SELECT"
        )


def prove(records: list[Rec], expected: int, conn: Any, prefix: str, shards: int, tables: int) -> Proof:
    """Check ``records`` (one topic, offset order per partition) as the module docstring says."""
    rows = [r for r in records if not r.json["isDdl"]]
    ids = Counter(change_id(r) for r in rows)
    breaks: list[str] = []
    last: dict[tuple[int, bytes], tuple[int, int]] = {}
    state: dict[str, dict[str, str | None]] = {}
    for rec in rows:  # partition by partition, each in offset order, as a consumer meets them
        msg = rec.json
        ident = (rec.partition, rec.key or b"")
        seq = (int(msg["sequence"]), int(msg.get("part") or 0))
        before = last.get(ident)
        if before is not None and seq <= before:
            breaks.append(f"key {rec.key!r}: {seq} at {rec.partition}@{rec.offset} after {before}")
        last[ident] = max(seq, before) if before is not None else seq
        row = msg["data"][0]
        if msg["type"] == "DELETE":
            state.pop(str(row["id"]), None)
        else:
            state[str(row["id"])] = {k: row.get(k) for k in ("id", "status", "amount", "note")}
    want = select_orders(conn, prefix, shards, tables)
    return Proof(len(rows), len(ids), expected, breaks, state == want)
