"""Transactional mode's commit intent: a successor never re-publishes a Kafka transaction that committed.

In transactional mode the position lives outside Kafka (a file, ZooKeeper), so committing the transaction and
saving the position after it cannot be one step. The order that makes a crash between them harmless:

1. every record of the open transaction is delivered (its offsets are known);
2. the position store gets the *intent*: the point saved so far (``before``), and in its ``extra`` under
   ``commit_pending`` the point after the transaction (``after``) and a ``Probe`` — the topic, partition and
   offset of one record of the transaction;
3. the transaction commits;
4. the point after it is saved as usual (the intent is gone with that write).

A transaction can therefore commit only after an intent naming it was written. A relay that starts on an
intent (``settle``, after its ``init_transactions``, which completes or aborts whatever transaction its
predecessor left) asks Kafka what became of it: a ``read_committed`` consumer placed at the probe's offset
either gets the probe record (committed: continue from ``after``) or passes that offset without it (aborted:
continue from ``before``, the records are resent). Only on a broker that hides aborted records from such a
consumer does that answer mean anything, so ``settle`` first runs the exactly-once start-up proof
(``relay.kafka.positions.prove_aborted_records_hidden``); where it fails, where the probe's offset was deleted
(retention) or no answer comes in time, it continues from ``before``: at least once, never a loss.

A point written with an intent keeps ``before`` as its main fields, so an older relay that ignores ``extra``
reads it as the point before the transaction (records repeated, nothing lost).

Threads: the publisher thread (``intent``: the ack path writes it; ``settle``: at start, before the instance
reads its position). Every blocking call has a timeout.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition

from relay.common.kafka_log import quiet
from relay.errors import PositionError, RelayError
from relay.positions.store import ResumePoint

PENDING = "commit_pending"  # the key of the intent in a point's ``extra``


@dataclass(frozen=True)
class Probe:
    """One record of a transaction: where it landed."""

    topic: str
    partition: int
    offset: int

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "offset": self.offset}

    @classmethod
    def from_json(cls, data: Any) -> Probe:
        try:
            return cls(str(data["topic"]), int(data["partition"]), int(data["offset"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise PositionError(f"{PENDING}: not a probe record's place ({data!r})") from exc

    def __str__(self) -> str:
        return f"{self.topic} [{self.partition}] @{self.offset}"


def intent(before: ResumePoint, after: ResumePoint, probe: Probe) -> ResumePoint:
    """The point saved before a commit: ``before``, with ``after`` and the probe under ``commit_pending``."""
    pending = {"after": json.loads(after.to_json()), "probe": probe.to_json()}
    return replace(before, extra={**before.extra, PENDING: pending})


def pending(point: ResumePoint | None) -> tuple[ResumePoint, Probe] | None:
    """The point after the transaction and its probe, when ``point`` carries an intent."""
    if point is None or PENDING not in point.extra:
        return None
    data = point.extra[PENDING]
    try:
        after = ResumePoint.from_json(json.dumps(data["after"]), where=PENDING)
    except (KeyError, TypeError) as exc:
        raise PositionError(f"{PENDING}: no point after the transaction ({exc!r})") from exc
    return after, Probe.from_json(data.get("probe"))


def without_intent(point: ResumePoint) -> ResumePoint:
    return replace(point, extra={k: v for k, v in point.extra.items() if k != PENDING})


# The answers of ``probe_committed``
COMMITTED, ABORTED = "committed", "aborted"


@dataclass(frozen=True)
class Settler:
    """What ``settle`` needs: a consumer's librdkafka settings (brokers, security), the wait for an answer,
    and the proof that the broker hides aborted records (raises ``ConfigError`` where it does not)."""

    client: dict[str, Any]
    timeout_s: float
    prove_aborted_hidden: Callable[[], None]


def settle(point: ResumePoint, settler: Settler) -> tuple[ResumePoint, str]:
    """The point to continue from, and why (one log line), for a point saved with an intent."""
    found = pending(point)
    if found is None:
        return point, "no commit was pending"
    after, probe = found
    before = without_intent(point)
    try:
        settler.prove_aborted_hidden()
        answer = probe_committed(probe, settler.client, settler.timeout_s)
    except RelayError as exc:  # ConfigError: the proof failed; PositionError: no answer
        return before, f"outcome unknown, continuing before it (records may repeat): {exc}"
    if answer == COMMITTED:
        return after, f"the transaction of probe {probe} committed: continuing after it, at {after}"
    return before, f"the transaction of probe {probe} was aborted: continuing before it, at {before}"


def probe_committed(probe: Probe, client: dict[str, Any], timeout_s: float) -> str:
    """``COMMITTED`` when a read_committed consumer at the probe's offset gets the probe record, ``ABORTED``
    when it passes that offset without it; ``PositionError`` when neither is known within ``timeout_s``
    (the transaction's markers not yet written, the offset deleted by retention, the broker away)."""
    consumer = Consumer(
        quiet(
            {
                **client,
                "group.id": f"relay-commit-intent-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "isolation.level": "read_committed",
                "auto.offset.reset": "error",
            }
        )
    )
    try:
        consumer.assign([TopicPartition(probe.topic, probe.partition, probe.offset)])
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            err = msg.error()
            if err is None:
                return COMMITTED if msg.offset() == probe.offset else ABORTED
            if err.code() == KafkaError._PARTITION_EOF:
                end = msg.offset()
                if end is not None and end > probe.offset:  # the stable end is past it: nothing there
                    return ABORTED
                continue  # the end is not past it yet: the transaction's markers are on their way
            if err.code() == KafkaError._AUTO_OFFSET_RESET or not err.retriable():
                raise PositionError(f"probe {probe}: {err.str()}")
        raise PositionError(f"probe {probe}: no answer within {timeout_s:.0f}s")
    finally:
        consumer.close()
