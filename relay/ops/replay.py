"""``relay replay --remap``: move the history retained in topics to the topics the current mapping names.

Owns the remap replay: it reads every record retained in the given topics (assign-based, from the
checkpoint or the beginning), asks the CURRENT mapping where each record's physical table goes now,
and re-publishes the records whose topic changed into their new topic (``relay.kafka.remap`` says what a
moved record keeps and what changes) — for history a relay did not move itself (a switch made with
``mapping.move: switch``, or before moves were copied). A running relay moves a table's history by
itself when its mapping sends the table elsewhere (``relay.kafka.history``). Runs on the CLI's thread;
hands records to ``KafkaPublisher`` (idempotent, ``acks=all``) chunk by chunk, and saves the offsets done
to a checkpoint file only after a chunk is delivered, so an interrupted run resumes where it stopped.

A run resumed from a checkpoint first compares it with where each partition's log starts now: records the
checkpoint still needed that retention (or DeleteRecords) deleted in between are a *gap*. The run stops
naming every gap (``ReplayGapError``), unless ``--accept-gaps`` says to continue from where the logs start;
the report then lists the gaps. Records deleted while the run reads are an error too (the reader never jumps
ahead: ``auto.offset.reset`` is ``error``). Nothing is ever skipped silently.

Per key, a topic must hold a table's changes in binlog order. So before anything is published, a first
pass reads what the destination topics hold of the moved tables (per partition, source and table, the
lowest and highest change identity) and what the replay would add: a replay that would place a record
behind a later change of its table in the same partition (history moved into a topic the table already
publishes its new changes to) is refused, naming the table and the topic. Records a destination already
holds (a re-run, an interrupted run) are skipped, not published twice.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING

from mapping.model import Mapping, Route
from mapping.store import atomic_write
from relay.config.load import RelayConfig
from relay.errors import MappingError, ReplayGapError
from relay.kafka.history_copy import CopySettings, HistoryCopy, Slot, TopicReader, log_starts, partitions_of
from relay.kafka.publisher import KafkaPublisher
from relay.kafka.remap import Consumed, Identity, Remapper
from relay.wiring import consumer_settings, mapping_store, publisher_config

log = logging.getLogger(__name__)

_SHOWN = 5  # refused slots named in the message


@dataclass(frozen=True)
class ReplayOptions:
    topics: tuple[str, ...]
    checkpoint: Path | None = None  # None: replay-<topics>.json in the state directory
    restart: bool = False
    dry_run: bool = False
    chunk: int = 500
    accept_gaps: bool = False  # records deleted since the checkpoint: continue from the log start


@dataclass
class ReplayReport:
    mapping_version: int
    read: int = 0
    moved: int = 0
    kept: int = 0
    dropped: int = 0
    foreign: int = 0
    ddl_copies: int = 0
    present: int = 0
    into: dict[str, int] = field(default_factory=dict)
    gaps: list[str] = field(default_factory=list)  # records deleted before they were replayed

    def describe(self) -> str:
        targets = ", ".join(f"{t}: {n}" for t, n in sorted(self.into.items())) or "none"
        gaps = f"; GAPS (deleted before they were replayed): {'; '.join(self.gaps)}" if self.gaps else ""
        return (
            f"replay under mapping version {self.mapping_version}: read {self.read}, moved {self.moved} "
            f"({targets}), kept {self.kept}, already there {self.present}, dropped tables {self.dropped}, "
            f"other DDL copies {self.ddl_copies}, not relay records {self.foreign}{gaps}"
        )


class Checkpoint:
    """The next offset to read per (topic, partition), and the mapping version it was made under."""

    def __init__(self, path: Path, mapping_version: int, offsets: dict[str, dict[int, int]]) -> None:
        self.path, self.mapping_version, self.offsets = path, mapping_version, offsets

    @classmethod
    def load(cls, path: Path, mapping_version: int, restart: bool) -> Checkpoint:
        if restart or not path.exists():
            return cls(path, mapping_version, {})
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            offsets = {t: {int(p): int(o) for p, o in parts.items()} for t, parts in data["offsets"].items()}
            version = int(data["mapping_version"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise MappingError("--checkpoint", f"cannot read {path}: {exc}") from exc
        if version != mapping_version:
            raise MappingError(
                "--checkpoint",
                f"{path} was made under mapping version {version}, the current one is {mapping_version}; "
                "re-run with --restart to move the whole history under the current mapping",
            )
        return cls(path, version, offsets)

    def starts(self) -> dict[tuple[str, int], int]:
        """Where each checkpointed partition is read from."""
        return {(t, p): o for t, parts in self.offsets.items() for p, o in parts.items()}

    def save(self) -> None:
        data = {"mapping_version": self.mapping_version, "offsets": self.offsets}
        atomic_write(self.path, json.dumps(data, indent=1, sort_keys=True))


def replay_remap(
    config: RelayConfig, options: ReplayOptions, progress: Callable[[str], None] = log.info
) -> ReplayReport:
    """Move the retained history of ``options.topics`` under the current mapping; see the module doc.
    Refuses (``MappingError``) a replay that would place records behind later changes of their table."""
    store = mapping_store(config)
    try:
        mapping = store.read()
    finally:
        store.close()
    path = options.checkpoint or config.state_path(f"replay-{'+'.join(options.topics)}.json")
    checkpoint = Checkpoint.load(path, mapping.version, options.restart)
    settings = consumer_settings(config)
    gaps = _gaps(settings, checkpoint, options.accept_gaps)
    plan = _ReplayPlan(mapping, options.topics)
    timeout = config.kafka.connect_timeout_seconds
    lowest, destinations = _lowest_additions(settings, plan, checkpoint, timeout)  # the first pass
    plan.destinations = tuple(sorted(destinations))
    plan.counts.clear()
    publisher = None if options.dry_run else KafkaPublisher(publisher_config(config, mapping))
    try:
        copy = HistoryCopy(
            plan,
            CopySettings(settings, publisher_config(config, mapping), chunk=options.chunk),
            publisher,
            stop=threading.Event(),
            starts=checkpoint.starts(),
            on_delivered=lambda copy: _delivered(copy, checkpoint, options, plan, progress),
        )
        copy.read_index()
        behind = [
            (slot, low, copy.index.span[slot][0])
            for slot, low in sorted(lowest.items())
            if slot in copy.index.span and low < copy.index.span[slot][0]
        ]
        if behind:
            raise MappingError("--from", _behind_message(behind))
        copy.round(None)  # everything, in merged order: the second pass
    finally:
        if publisher is not None:
            publisher.close(timeout=5.0)
    return ReplayReport(
        mapping.version,
        read=copy.read,
        moved=copy.moved,
        kept=plan.counts["kept"],
        dropped=plan.counts["dropped"],
        foreign=plan.counts["foreign"],
        ddl_copies=copy.barrier_copies,
        present=copy.skipped,
        into=dict(copy.into),
        gaps=gaps,
    )


def _gaps(settings: dict[str, Any], checkpoint: Checkpoint, accept: bool) -> list[str]:
    """The records a checkpoint still needs that are no longer in the log (each partition's log start
    moved past the checkpoint's offset). Refused (``ReplayGapError``) unless ``accept``: then the checkpoint
    continues from the log start, and the gaps are returned for the report."""
    starts = checkpoint.starts()
    if not starts:
        return []
    lows = log_starts(settings, list(starts))
    gaps: list[str] = []
    for (topic, partition), needed in sorted(starts.items()):
        low = lows.get((topic, partition), needed)
        if needed < low:
            gaps.append(f"{topic} [{partition}] offsets {needed}..{low - 1} ({low - needed} records)")
            if accept:
                checkpoint.offsets[topic][partition] = low
    if gaps and not accept:
        raise ReplayGapError(
            f"the checkpoint {checkpoint.path} needs records that are no longer in the log (deleted by "
            f"retention or DeleteRecords before they were replayed): {'; '.join(gaps)}. Re-run with "
            "--accept-gaps to continue from where the logs start now (the report lists the gaps), or with "
            "--restart to replay what is retained from its beginning"
        )
    for gap in gaps:
        log.warning("replay: continuing after a gap: %s", gap)
    return gaps


class _ReplayPlan:
    """What a replay moves: every source's records whose table the mapping now routes to another topic.
    Counts the records it leaves (``counts``: kept, dropped, foreign)."""

    source_id: str | None = None

    def __init__(self, mapping: Mapping, origins: tuple[str, ...]) -> None:
        self.mapping, self.origins = mapping, origins
        self.destinations: tuple[str, ...] = ()
        self.counts: Counter[str] = Counter()

    def route(self, rec: Consumed) -> Route | None:
        physical = rec.physical
        if physical is None:
            self.counts["foreign"] += 1
            return None
        route = self.mapping.resolve(*physical)  # an ambiguity stops the replay (fail closed)
        if route is None:
            self.counts["dropped"] += 1
            return None
        if route.topic == rec.topic:
            self.counts["kept"] += 1
            return None
        return route


def _lowest_additions(
    settings: dict[str, Any], plan: _ReplayPlan, checkpoint: Checkpoint, timeout: float
) -> tuple[dict[Slot, Identity], set[str]]:
    """The first pass: the destination topics, and per destination slot the lowest change identity the
    replay would add there (a topic that does not exist yet holds nothing to place records behind)."""
    lowest: dict[Slot, Identity] = {}
    destinations: set[str] = set()
    counts: dict[str, int] = {}
    remapper = Remapper()
    parts = partitions_of(settings, plan.origins, timeout)
    missing = set(plan.origins) - {t for t, _ in parts}
    if missing:
        raise MappingError("--from", f"topic {sorted(missing)[0]!r} does not exist")
    starts = checkpoint.starts()
    reader = TopicReader(settings, {tp: starts.get(tp, OFFSET_BEGINNING) for tp in parts})
    try:
        while not reader.at_end():
            rec = reader.poll(0.2)
            if rec is None or (route := plan.route(rec)) is None or (physical := rec.physical) is None:
                continue
            destinations.add(route.topic)
            if route.topic not in counts:
                counts[route.topic] = len(partitions_of(settings, [route.topic], timeout))
            if counts[route.topic] == 0:
                continue
            for record in remapper.records(rec, route, counts[route.topic]):
                assert record.partition is not None
                slot = (record.topic, record.partition, rec.source_id or "", *physical)
                lowest[slot] = min(lowest.get(slot, rec.identity), rec.identity)
    finally:
        reader.close()
    return lowest, destinations


def _delivered(
    copy: HistoryCopy,
    checkpoint: Checkpoint,
    options: ReplayOptions,
    plan: _ReplayPlan,
    progress: Callable[[str], None],
) -> None:
    """After every delivered chunk: checkpoint where the next run may start, show progress."""
    for (topic, partition), offset in copy.next_offsets.items():
        if offset >= 0:
            checkpoint.offsets.setdefault(topic, {})[partition] = offset
    if not options.dry_run:
        checkpoint.save()
    parts = [f"{t}[{p}] {o}" for (t, p), o in sorted(copy.next_offsets.items()) if o >= 0]
    progress(
        f"replay: at {'; '.join(parts) or 'the start'} | read {copy.read}, moved {copy.moved}, "
        f"kept {plan.counts['kept']}"
    )


def _behind_message(behind: list[tuple[Slot, Identity, Identity]]) -> str:
    shown = "; ".join(
        f"{db}.{table} into {topic} [{partition}]: from sequence {low[0]}, but it holds sequence {first[0]} "
        f"onwards already"
        for (topic, partition, _, db, table), low, first in behind[:_SHOWN]
    )
    more = f" (and {len(behind) - _SHOWN} more)" if len(behind) > _SHOWN else ""
    return (
        f"refused: the replay would place records behind later changes of the same table: {shown}{more}. "
        "Consumers applying those topics in offset order would end with stale rows. The destination "
        "already has the table's newer changes (it was switched without copying its history: "
        "mapping.move: switch). To give it the table's full state, re-snapshot the table "
        "(`relay snapshot run --table DB.TABLE`); nothing was published"
    )
