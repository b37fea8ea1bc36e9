"""Offsets of the ``relay-kafka`` source: the option grammar of Spark's ``kafka`` source, as pure logic.

Owns what needs no broker: parsing ``startingOffsets`` / ``endingOffsets`` / ``startingOffsetsByTimestamp``
(Spark's JSON: ``{"topic":{"0":23,"1":-2}}``, -2 = earliest, -1 = latest), the offset dicts Spark
checkpoints (``{"topic":{"0":42}}``: the NEXT offset to read per partition, string keys as JSON wants),
the split of ``maxOffsetsPerTrigger`` over partitions (admission control), and the data-loss check of a
start against the retained range. Called by ``relay.spark.source`` on the driver's Python process; hands
plain dicts back. No state, no I/O: safe anywhere.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from relay.errors import DataLossError, OptionError

log = logging.getLogger(__name__)

EARLIEST = -2
LATEST = -1

TopicPartition = tuple[str, int]
Offsets = dict[TopicPartition, int]
OffsetJson = dict[str, dict[str, int]]


@dataclass(frozen=True, slots=True)
class StartSpec:
    """Where to start: ``kind`` is earliest | latest | offsets | timestamp | timestamps."""

    kind: str
    offsets: Mapping[TopicPartition, int] | None = None  # offsets / timestamps (per partition)
    timestamp: int | None = None  # kind == timestamp: one ms timestamp for every partition


def to_json(offsets: Mapping[TopicPartition, int]) -> OffsetJson:
    """Spark's offset JSON shape: ``{"topic": {"0": 42}}``, partitions in numeric order."""
    out: OffsetJson = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def from_json(data: Mapping[str, Any], option: str = "offsets") -> Offsets:
    """The inverse of ``to_json``; refuses anything that is not ``{topic: {partition: int}}``."""
    out: Offsets = {}
    if not isinstance(data, Mapping):
        raise OptionError(f'{option}: expected a JSON object like {{"topic":{{"0":23}}}}, got {data!r}')
    for topic, parts in data.items():
        if not isinstance(parts, Mapping):
            raise OptionError(f"{option}: topic {topic!r} must map partitions to offsets, got {parts!r}")
        for partition, offset in parts.items():
            try:
                out[(str(topic), int(partition))] = int(offset)
            except (TypeError, ValueError) as exc:
                raise OptionError(f"{option}: {topic}/{partition} = {offset!r} is not an integer") from exc
    return out


def _parse_json(text: str, option: str) -> Offsets:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise OptionError(f"{option}: not JSON ({exc}): {text!r}") from exc
    return from_json(data, option)


def parse_start(options: Mapping[str, str], default: str) -> StartSpec:
    """The start of a read, by Spark's precedence: startingTimestamp, startingOffsetsByTimestamp,
    startingOffsets (default ``default``)."""
    stamp = options.get("startingtimestamp")
    if stamp is not None:
        try:
            return StartSpec("timestamp", timestamp=int(stamp))
        except ValueError as exc:
            raise OptionError(f"startingTimestamp: {stamp!r} is not milliseconds since the epoch") from exc
    by_time = options.get("startingoffsetsbytimestamp")
    if by_time is not None:
        return StartSpec("timestamps", offsets=_parse_json(by_time, "startingOffsetsByTimestamp"))
    text = options.get("startingoffsets", default).strip()
    if text.lower() in ("earliest", "latest"):
        return StartSpec(text.lower())
    offsets = _parse_json(text, "startingOffsets")
    return StartSpec("offsets", offsets=offsets)


def parse_end(options: Mapping[str, str]) -> StartSpec:
    """``endingOffsets`` of a batch read: latest (default) or JSON (-1 = latest; -2 is refused, as Spark)."""
    text = options.get("endingoffsets", "latest").strip()
    if text.lower() == "latest":
        return StartSpec("latest")
    if text.lower() == "earliest":
        raise OptionError("endingOffsets: 'earliest' is not allowed")
    offsets = _parse_json(text, "endingOffsets")
    if any(v == EARLIEST for v in offsets.values()):
        raise OptionError("endingOffsets: -2 (earliest) is not allowed")
    return StartSpec("offsets", offsets=offsets)


def bounded(value: int, low: int, end: int) -> int:
    """A special (-2/-1) or literal offset as a literal inside the partition's [low, end]."""
    if value == EARLIEST:
        return low
    if value == LATEST:
        return end
    return value


def limit_offsets(
    start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int], max_rows: int
) -> Offsets:
    """Admission control: the end of a micro-batch holding at most ``max_rows`` records.

    As Spark's kafka source, the budget is split over partitions in proportion to their lag (floor),
    and what the floors leave is handed out one by one to the partitions with most lag left, so the
    batch is exactly ``min(max_rows, total lag)`` offsets and every partition with lag makes progress
    as soon as the budget allows.
    """
    lags = {tp: max(0, end[tp] - start.get(tp, end[tp])) for tp in end}
    total = sum(lags.values())
    if total <= max_rows:
        return dict(end)
    share = {tp: lag * max_rows // total for tp, lag in lags.items()}
    left = max_rows - sum(share.values())
    for tp in sorted(lags, key=lambda tp: (share[tp] - lags[tp], tp)):
        if left <= 0:
            break
        if share[tp] < lags[tp]:
            share[tp] += 1
            left -= 1
    return {tp: start.get(tp, end[tp]) + share[tp] for tp in end}


def check_retained(
    start: Mapping[TopicPartition, int],
    lows: Mapping[TopicPartition, int],
    ends: Mapping[TopicPartition, int],
    *,
    fail: bool,
) -> Offsets:
    """``start`` checked against what the broker retains: each start must lie in [low, end].

    A start below the log start offset means retention (or a delete) removed records the query has
    not read; a start beyond the end means the partition's offsets went backwards (topic recreated,
    broker lost its data). With ``fail`` that is a ``DataLossError``; without, a warning and the start
    moves to the earliest retained offset (Spark's ``failOnDataLoss=false``). A partition that
    vanished is reported the same way and dropped.
    """
    problems: list[str] = []
    out: Offsets = {}
    for tp, wanted in start.items():
        if tp not in ends:
            problems.append(f"{tp[0]}-{tp[1]} no longer exists (it was at offset {wanted})")
            continue
        low, end, offset = lows[tp], ends[tp], wanted
        if offset < low:
            problems.append(
                f"{tp[0]}-{tp[1]}: offset {offset} is below the log start offset {low}: "
                f"{low - offset} records were deleted (retention) before they were read"
            )
            offset = low
        elif offset > end:
            problems.append(
                f"{tp[0]}-{tp[1]}: offset {offset} is beyond the end {end}: the partition's offsets went "
                "backwards (topic recreated or broker data lost); some data may have been missed"
            )
            offset = low
        out[tp] = offset
    report(problems, fail=fail)
    return out


def report(problems: Iterable[str], *, fail: bool) -> None:
    """Raise (``failOnDataLoss=true``) or log (false) data-loss findings."""
    found = list(problems)
    if not found:
        return
    text = "; ".join(found)
    if fail:
        raise DataLossError(
            f"data loss: {text}. Set failOnDataLoss=false to continue from the earliest retained offset "
            "(a warning is logged instead)."
        )
    log.warning("data loss (failOnDataLoss=false, continuing from what is retained): %s", text)


def fail_on_data_loss(options: Mapping[str, str]) -> bool:
    text = options.get("failondataloss", "true").strip().lower()
    if text not in ("true", "false"):
        raise OptionError(f"failOnDataLoss: expected true or false, got {text!r}")
    return text == "true"


def positive_int(options: Mapping[str, str], key: str, option: str) -> int | None:
    text = options.get(key)
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError as exc:
        raise OptionError(f"{option}: {text!r} is not an integer") from exc
    if value < 1:
        raise OptionError(f"{option}: must be at least 1, got {value}")
    return value
