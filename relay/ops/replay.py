"""``relay replay --remap``: move the history retained in topics to the topics the current mapping names.

Owns the remap replay: it reads every record retained in the given topics (assign-based, from the
checkpoint or the beginning), asks the CURRENT mapping where each record's physical table goes now,
and re-publishes the records whose topic changed into their new topic — how a user migrates history
after giving a table its own topic. Runs on the CLI's thread; hands records to ``KafkaPublisher``
(idempotent, ``acks=all``) chunk by chunk, and saves the offsets done to a checkpoint file only after a
chunk is delivered, so an interrupted run resumes where it stopped.

What a moved record keeps and what changes:

- kept: the value (sequence, source block, data), the ``relay.sequence``, ``relay.type`` and physical
  headers — so a consumer de-duplicates a re-run, or an overlap with the live relay, by sequence;
- changed: the topic; the ``relay.db`` / ``relay.table`` / ``relay.tag`` headers, and for canal-json the
  value's ``database`` / ``table`` fields, when the logical names changed; the key, recomputed for
  canal-json rows from the mapping's key columns (or the primary key) and its ``key_shard``, so a row
  stays in one partition of its new topic; a tombstone (null value) goes under the key its DELETE got.
  canal-protobuf values and keys are re-published as they are;
- added: ``relay.ops.replay.from`` = ``topic:partition:offset`` of the original.

A DDL barrier (one copy per partition of the old topic) is re-published from its copy in partition 0,
to every partition of the new topic. Records still routed to the topic they are in, dropped tables, and
records without the relay's headers are left alone.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, TopicPartition

from mapping.checks import KEY_SHARD_PHYSICAL, SHARD_FIELD, shard_column
from mapping.model import Mapping, Route
from mapping.store import atomic_write
from relay.config.load import RelayConfig
from relay.errors import MappingError, PublishError
from relay.kafka.codec import H_DB, H_PHYSICAL_DB, H_PHYSICAL_TABLE, H_SEQUENCE, H_TABLE, H_TAG, H_TYPE
from relay.kafka.publisher import KafkaPublisher
from relay.kafka.records import Record
from relay.wiring import mapping_store, publisher_config

log = logging.getLogger(__name__)

H_REPLAY_FROM = "relay.replay.from"
_ROW_TYPES = frozenset({"INSERT", "UPDATE", "DELETE"})
_IDLE_SECONDS = 1.0  # after every partition reported its end: this long without a record ends the read
_NO_EOF_SECONDS = 10.0  # a broker that never reports a partition's end: give up after this much silence


@dataclass(frozen=True)
class ReplayOptions:
    topics: tuple[str, ...]
    checkpoint: Path | None = None  # None: replay-<topics>.json in the state directory
    restart: bool = False
    dry_run: bool = False
    chunk: int = 500


@dataclass
class ReplayReport:
    mapping_version: int
    read: int = 0
    moved: int = 0
    kept: int = 0
    dropped: int = 0
    foreign: int = 0
    ddl_copies: int = 0
    into: dict[str, int] = field(default_factory=dict)

    def describe(self) -> str:
        targets = ", ".join(f"{t}: {n}" for t, n in sorted(self.into.items())) or "none"
        return (
            f"replay under mapping version {self.mapping_version}: read {self.read}, moved {self.moved} "
            f"({targets}), kept {self.kept}, dropped tables {self.dropped}, "
            f"other DDL copies {self.ddl_copies}, not relay records {self.foreign}"
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

    def save(self) -> None:
        data = {"mapping_version": self.mapping_version, "offsets": self.offsets}
        atomic_write(self.path, json.dumps(data, indent=1, sort_keys=True))


def replay_remap(
    config: RelayConfig, options: ReplayOptions, progress: Callable[[str], None] = log.info
) -> ReplayReport:
    """Move the retained history of ``options.topics`` under the current mapping; see the module doc."""
    store = mapping_store(config)
    try:
        mapping = store.read()
    finally:
        store.close()
    path = options.checkpoint or config.state_path(f"replay-{'+'.join(options.topics)}.json")
    checkpoint = Checkpoint.load(path, mapping.version, options.restart)
    run = _Replay(config, mapping, options, checkpoint, progress)
    try:
        return run.run()
    finally:
        run.close()


class _Replay:
    def __init__(
        self,
        config: RelayConfig,
        mapping: Mapping,
        options: ReplayOptions,
        checkpoint: Checkpoint,
        progress: Callable[[str], None],
    ) -> None:
        self.config, self.mapping, self.options = config, mapping, options
        self.checkpoint, self.progress = checkpoint, progress
        self.report = ReplayReport(mapping.version)
        self.consumer = Consumer(self._consumer_settings())
        self.publisher = None if options.dry_run else KafkaPublisher(publisher_config(config, mapping))
        self.pending: list[Record] = []
        # (topic, original key) of a moved DELETE → its new key: where its tombstone goes
        self._moved_deletes: dict[tuple[str, bytes | None], bytes | None] = {}
        self.done: dict[tuple[str, int], int] = {}  # read positions covered by ``pending``
        self.ends: dict[tuple[str, int], int] = {}
        self._batch = 0

    def _consumer_settings(self) -> dict[str, Any]:
        settings: dict[str, Any] = {
            k: v
            for k, v in self.config.kafka.settings.items()
            if k.startswith(("security.", "sasl.", "ssl."))
        }
        settings.update(
            {
                "bootstrap.servers": self.config.kafka.bootstrap_servers,
                "group.id": f"relay-replay-{uuid.uuid4().hex[:8]}",  # assign() only: no group offsets used
                "enable.auto.commit": False,
                "enable.partition.eof": True,
            }
        )
        return settings

    def close(self) -> None:
        self.consumer.close()
        if self.publisher is not None:
            self.publisher.close(timeout=5.0)

    def run(self) -> ReplayReport:
        assignment = self._assign()
        eof: set[tuple[str, int]] = set()
        last = time.monotonic()
        while True:
            msg = self.consumer.poll(0.2)
            now = time.monotonic()
            if msg is None:
                quiet = now - last
                if (len(eof) == len(assignment) and quiet > _IDLE_SECONDS) or quiet > _NO_EOF_SECONDS:
                    break
                continue
            last = now
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    eof.add((str(msg.topic()), int(msg.partition() or 0)))
                    continue
                raise PublishError(f"cannot read {msg.topic()}: {err.str()}")
            eof.discard((str(msg.topic()), int(msg.partition() or 0)))
            self._take(msg)
            if len(self.pending) >= self.options.chunk:
                self._flush()
        self._flush()
        return self.report

    def _assign(self) -> list[TopicPartition]:
        try:
            meta = self.consumer.list_topics(timeout=30)
        except KafkaException as exc:
            raise PublishError(f"cannot list topics: {exc}") from exc
        parts: list[TopicPartition] = []
        for topic in self.options.topics:
            info = meta.topics.get(topic)
            if info is None or info.error is not None:
                raise MappingError("--from", f"topic {topic!r} does not exist")
            done = self.checkpoint.offsets.setdefault(topic, {})
            for p in sorted(info.partitions):
                start = done.get(p, OFFSET_BEGINNING)
                parts.append(TopicPartition(topic, p, start))
                _, high = self.consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                self.ends[(topic, p)] = high
        self.consumer.assign(parts)
        return parts

    def _take(self, msg: Message) -> None:
        topic, partition, offset = str(msg.topic()), int(msg.partition() or 0), int(msg.offset() or 0)
        self.report.read += 1
        self.done[(topic, partition)] = offset + 1
        pairs = _headers(msg)
        headers = dict(pairs)
        if H_PHYSICAL_DB not in headers or H_PHYSICAL_TABLE not in headers or H_SEQUENCE not in headers:
            self.report.foreign += 1
            return
        db, table = headers[H_PHYSICAL_DB].decode(), headers[H_PHYSICAL_TABLE].decode()
        route = self.mapping.resolve(db, table)  # an ambiguity stops the replay (fail closed)
        if route is None:
            self.report.dropped += 1
            return
        if route.topic == topic:
            self.report.kept += 1
            return
        origin = f"{topic}:{partition}:{offset}".encode()
        if headers.get(H_TYPE, b"").decode() in _ROW_TYPES:
            self._move_row(msg, pairs, route, origin)
        else:
            self._move_statement(msg, pairs, route, origin)

    def _move_row(self, msg: Message, pairs: Headers, route: Route, origin: bytes) -> None:
        old_key = _bytes(msg.key()) if msg.key() else None
        headers = _remap_headers(pairs, route, origin)
        if msg.value() is None:  # a compaction tombstone: under the key its DELETE was moved to
            key = self._moved_deletes.pop((str(msg.topic()), old_key), old_key)
            self.pending.append(Record(route.topic, None, key, None, headers))
            self._count(route.topic)
            return
        value, key = _remap_value(_bytes(msg.value()), route, old_key)
        if dict(pairs).get(H_TYPE) == b"DELETE":
            self._moved_deletes[(str(msg.topic()), old_key)] = key
        self.pending.append(Record(route.topic, None, key, value, headers))
        self._count(route.topic)

    def _move_statement(self, msg: Message, pairs: Headers, route: Route, origin: bytes) -> None:
        """A DDL barrier: moved from its copy in partition 0 only (every partition holds one), so the
        moved copies are the same whichever run, or resumed run, moves them."""
        if msg.partition() != 0:
            self.report.ddl_copies += 1
            return
        value, _ = _remap_value(_bytes(msg.value()), route, None)
        headers = _remap_headers(pairs, route, origin)
        count = 1 if self.publisher is None else self.publisher.partitions(route.topic)
        for p in range(count):
            self.pending.append(Record(route.topic, p, None, value, headers))
        self._count(route.topic)

    def _count(self, topic: str) -> None:
        self.report.moved += 1
        self.report.into[topic] = self.report.into.get(topic, 0) + 1

    def _flush(self) -> None:
        """Deliver the pending chunk, then checkpoint the read positions it covers."""
        if self.pending and self.publisher is not None:
            self._deliver(self.pending)
        for (topic, partition), next_offset in self.done.items():
            self.checkpoint.offsets.setdefault(topic, {})[partition] = next_offset
        if self.done and not self.options.dry_run:
            self.checkpoint.save()
        self.pending, self.done = [], {}
        self._show_progress()

    def _deliver(self, records: list[Record]) -> None:
        assert self.publisher is not None
        self.publisher.ensure_topics({r.topic for r in records})
        self._batch += 1
        handle = self.publisher.send(self._batch, records, "replay")
        deadline = time.monotonic() + self.config.kafka.delivery_timeout_seconds + 10
        while not self.publisher.completed_prefix():
            failed = self.publisher.failed()
            if failed is not None and failed.error is not None:
                raise failed.error
            if time.monotonic() > deadline:
                raise PublishError(f"{handle.label}: not delivered in time; re-run to resume")
            self.publisher.poll(0.1)

    def _show_progress(self) -> None:
        parts = []
        for (topic, p), end in sorted(self.ends.items()):
            at = self.checkpoint.offsets.get(topic, {}).get(p, 0)
            pct = 100 if end <= 0 else min(100, 100 * at // end)
            parts.append(f"{topic}[{p}] {at}/{end} ({pct}%)")
        r = self.report
        self.progress(f"replay: {'; '.join(parts)} | read {r.read}, moved {r.moved}, kept {r.kept}")


Headers = list[tuple[str, bytes]]


def _bytes(value: str | bytes | None) -> bytes:
    if value is None:
        return b""
    return value.encode() if isinstance(value, str) else value


def _headers(msg: Message) -> Headers:
    raw = msg.headers() or []
    items = raw.items() if isinstance(raw, dict) else raw
    return [(k, _bytes(v)) for k, v in items if v is not None]


def _remap_headers(headers: Headers, route: Route, origin: bytes) -> tuple[tuple[str, bytes], ...]:
    out = [(k, v) for k, v in headers if k not in (H_DB, H_TABLE, H_TAG, H_REPLAY_FROM)]
    out[:0] = [(H_DB, route.logical_db.encode()), (H_TABLE, route.logical_table.encode())]
    if route.tag is not None:
        out.append((H_TAG, route.tag.encode()))
    out.append((H_REPLAY_FROM, origin))
    return tuple(out)


def _remap_value(value: bytes, route: Route, key: bytes | None) -> tuple[bytes, bytes | None]:
    """canal-json: logical names and the key under ``route``; anything else as it is."""
    if route.codec != "canal-json" or not value.startswith(b"{"):
        return value, key
    try:
        msg = json.loads(value)
    except ValueError:
        return value, key
    if not isinstance(msg, dict):
        return value, key
    if (msg.get("database"), msg.get("table")) != (route.logical_db, route.logical_table):
        msg["database"], msg["table"] = route.logical_db, route.logical_table
        value = json.dumps(msg, ensure_ascii=False, separators=(",", ":")).encode()
    rows = msg.get("data") or []
    if key is None or not rows or not isinstance(rows[0], dict):
        return value, key
    names = route.key_columns if route.key_columns is not None else tuple(msg.get("pkNames") or ())
    row = {k.lower(): (k, v) for k, v in rows[0].items()}
    if not names or any(n.lower() not in row for n in names):
        return value, key
    new_key: dict[str, Any] = {}
    if route.key_shard == KEY_SHARD_PHYSICAL:
        new_key[SHARD_FIELD] = f"{route.physical_db}.{route.physical_table}"
    elif (column := shard_column(route.key_shard)) is not None:
        if column.lower() not in row:
            return value, key
        new_key[SHARD_FIELD] = row[column.lower()][1]
    new_key.update({n: row[n.lower()][1] for n in names})
    return value, json.dumps(new_key, ensure_ascii=False, separators=(",", ":")).encode()
