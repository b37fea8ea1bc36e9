"""The topic side of ``relay verify``: a topic's latest state per key, read like a compacted topic reads.

``TopicIndex`` consumes the logical table's topic from the start (``assign``, no group), keeping for each
join key the record with the highest change identity (sequence, part); of equal identities the later
offset wins, as compaction keeps the last record — the relay's repeats of a change are byte-identical, so
only a record someone else wrote under the relay's identity can differ, and it is then what readers of the
topic see. An older copy arriving late changes nothing, a key-changing UPDATE is a DELETE (part 0) under
the old key and an INSERT (part 1) under the new, and a tombstone (null value) deletes the key it follows
at the same identity. A tombstone without the relay's headers, produced by someone else, deletes the key
it names in its partition. Only records of this source (``relay.source.id``) and logical table, from the
shards verified, count. Values are parsed only for a record at or after what the key holds; what is kept
per key is its ``Held`` (identity, deleted, shard, digest, where the record is), not the row.

Each ``refresh`` opens a fresh consumer at the offsets the previous one stopped at and reads every
partition until the broker says its end was reached (``enable.partition.eof``; a high watermark is not
trusted: Tansu reports less than the end). What the relay published before the call is in the index.

A table without a key is rebuilt as a multiset from its history (its records share one key and
partition): INSERT adds the row, DELETE removes it, UPDATE both, and the first record of a new snapshot
sequence replaces everything (a keyless table is snapshotted whole). ``relay.ops.verify.topic_target``
makes the index a ``Target``. Runs on the caller's thread.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from relay.common.gc_tuning import RELAY_THRESHOLDS, gc_thresholds
from relay.common.kafka_log import FETCH_QUEUE_BACKOFF_MS, quiet
from relay.errors import VerifyError
from relay.kafka.codec import (
    H_DB,
    H_PART,
    H_PHYSICAL_DB,
    H_PHYSICAL_TABLE,
    H_SEQUENCE,
    H_SNAPSHOT,
    H_SOURCE_ID,
    H_TABLE,
    H_TYPE,
)
from relay.ops.verify.digest import ABSENT
from relay.ops.verify.shards import MULTISET, JoinKey, Shard
from relay.ops.verify.target import Held, Identity, Multiset
from relay.ops.verify.topic_values import (
    data_digest,
    digests_of,
    parse_all,
    parse_value,
    row_records,
    row_values,
)

log = logging.getLogger(__name__)

READ_TIMEOUT = 120.0  # seconds a refresh may take to see every partition's end
FETCH_GAP = 2000  # offsets apart two records are read through rather than sought again
# How long one consume() waits: it returns when it has its count of records OR the wait is over, so the
# last call of a read (fewer records left than asked for) always waits it out — 0.5 s was a fifth of a
# 100,000-record read (librdkafka hands over such a topic in ~0.2 s).
CONSUME_WAIT = 0.05
_ROW_TYPES = {b"INSERT": 0, b"UPDATE": 1, b"DELETE": 2}


class TopicIndex:
    """The latest change per key of one logical table in its topic(s), from this source."""

    def __init__(
        self,
        settings: dict[str, Any],
        topics: Sequence[str],
        logical: str,
        source_id: str,
        shards: Sequence[Shard],
        *,
        parse_values: bool = True,
        connect_timeout: float = 10.0,
    ) -> None:
        self.settings = dict(settings)
        self.connect_timeout = connect_timeout
        self.topics = list(topics)
        db, _, table = logical.partition(".")
        self._db, self._table = db.encode(), table.encode()
        self._source = source_id.encode()
        self._shards = {s.name.encode(): s for s in shards}
        # for the C helper: the shards the keyed path reads, and the others (read by ``_record``)
        self._keyed = {n: s for n, s in self._shards.items() if s.method != MULTISET and not s.by_data}
        self._others = {n for n in self._shards if n not in self._keyed}
        self.parse_values = parse_values
        self.held: dict[JoinKey, Held] = {}
        self.multisets: dict[str, Multiset] = {s.name: Multiset() for s in shards if s.method == MULTISET}
        self.snapshot_seq: dict[str, int] = {}
        self.next_offsets: dict[tuple[str, int], int] = {}
        self.records = 0  # records read, all refreshes
        self.by_shard: dict[str, list[JoinKey]] = {}
        self.only: set[tuple[str, int]] | None = None  # the partitions read (None: all; a forked reader's)

    # -- reading -------------------------------------------------------------------------------------
    def _consumer(self) -> Any:
        return Consumer(
            quiet(
                {
                    **self.settings,
                    "group.id": f"relay-verify-{uuid.uuid4().hex[:8]}",
                    "enable.auto.commit": False,
                    "enable.partition.eof": True,
                    "auto.offset.reset": "earliest",
                    "fetch.wait.max.ms": 20,  # an empty fetch (the end) answers at once
                    "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS,
                }
            )
        )

    def _partitions(self, consumer: Any) -> list[tuple[str, int]]:
        out: list[tuple[str, int]] = []
        try:  # every topic: naming one auto-creates it on some brokers
            meta = consumer.list_topics(timeout=self.connect_timeout)
        except KafkaException as exc:
            raise VerifyError(
                f"kafka {self.settings.get('bootstrap.servers')} (kafka.bootstrap_servers) did not answer "
                f"within {self.connect_timeout:g} s: {exc.args[0].str()}"
            ) from exc
        for topic in self.topics:
            info = meta.topics.get(topic)
            if info is None or info.error is not None or not info.partitions:
                raise VerifyError(f"topic {topic} does not exist (has the relay published this table?)")
            out.extend((topic, p) for p in sorted(info.partitions))
        return out if self.only is None else [tp for tp in out if tp in self.only]

    def partitions(self) -> list[tuple[str, int]]:
        """Every partition read (from metadata; the consumer asked is closed again)."""
        consumer = self._consumer()
        try:
            return self._partitions(consumer)
        finally:
            consumer.close()

    def refresh(self, *, log_it: bool = True) -> int:
        """Read every partition from where the last refresh stopped to its end; records read."""
        began = time.monotonic()
        consumer = self._consumer()
        try:
            parts = self._partitions(consumer)
            consumer.assign(
                [TopicPartition(t, p, self.next_offsets.get((t, p), OFFSET_BEGINNING)) for t, p in parts]
            )
            pending = set(parts)
            deadline = time.monotonic() + READ_TIMEOUT
            read = 0
            # every key's Held survives the read: at Python's thresholds it took 1.7x as long
            with gc_thresholds(RELAY_THRESHOLDS):
                while pending:
                    if time.monotonic() > deadline:
                        raise VerifyError(
                            f"the topic's end was not reached in {READ_TIMEOUT:.0f} s: {sorted(pending)}"
                        )
                    read += self._batch(consumer.consume(num_messages=2000, timeout=CONSUME_WAIT), pending)
        finally:
            consumer.close()
        self.finish_read(read, began, log_it=log_it)
        return read

    def finish_read(self, read: int, began: float = 0.0, *, log_it: bool = True) -> None:
        """After a read (``read`` records): the keys of each shard indexed, the read logged."""
        self.records += read
        self._index_shards()
        if log_it:
            log.info(
                "topic %s: %d record(s) read%s (%d keys held)",
                ",".join(self.topics),
                read,
                f" in {time.monotonic() - began:.2f} s" if began else "",
                len(self.held),
            )

    def _index_shards(self) -> None:
        by: dict[str, list[JoinKey]] = {}
        for key, held in self.held.items():
            by.setdefault(held.shard, []).append(key)
        self.by_shard = by

    def fetch(self, wheres: Iterable[tuple[str, int, int]]) -> dict[tuple[str, int, int], bytes | None]:
        """The values of the records at (topic, partition, offset)."""
        out: dict[tuple[str, int, int], bytes | None] = {}
        consumer = self._consumer()
        try:
            for segment in _segments(wheres):
                topic, partition, first = segment[0]
                wanted = {w[2] for w in segment}
                consumer.assign([TopicPartition(topic, partition, first)])
                deadline = time.monotonic() + 30
                end = segment[-1][2]
                at = first - 1
                while at < end:
                    if time.monotonic() > deadline:
                        raise VerifyError(
                            f"records {topic} [{partition}] {first}..{end} could not be read again"
                        )
                    for msg in consumer.consume(num_messages=500, timeout=CONSUME_WAIT):
                        if msg.error() is not None:
                            continue
                        at = max(at, int(msg.offset()))
                        if at in wanted:
                            out[(topic, partition, at)] = msg.value()
        finally:
            consumer.close()
        return out

    # -- records -------------------------------------------------------------------------------------
    def _batch(self, messages: list[Any], pending: set[tuple[str, int]]) -> int:
        """One consumed batch, in order: each partition's next offset noted, its end taken off ``pending``,
        the records indexed (keyed ones gathered, so that their keys and values are parsed by one
        ``json.loads`` each: a call per record costs more than the parse). Where the C helper is built, it
        reads the batch (``row_records``: the same tuples, and the messages it leaves to Python). The
        records read (not the partitions' ends)."""
        keyed: list[tuple[Shard, Identity, bytes, bytes | None, bytes | None, Any]] = []
        read = 0
        if row_records is None:
            for msg in messages:
                where = (str(msg.topic()), int(msg.partition() or 0))
                if msg.error() is not None:
                    _read_error(msg, where, pending)
                    continue
                self.next_offsets[where] = msg.offset() + 1
                read += 1
                keyed = self._record(msg, keyed)
        else:
            items, read = row_records(
                messages, self._db, self._table, self._source, self._keyed, self._others, self.next_offsets
            )
            for item in items:
                if item.__class__ is tuple:
                    keyed.append(item)
                elif item.error() is not None:
                    _read_error(item, (str(item.topic()), int(item.partition() or 0)), pending)
                else:
                    keyed = self._record(item, keyed)
        self._by_keys(keyed)
        return read

    def _record(self, msg: Any, keyed: list[Any]) -> list[Any]:
        """One record: a keyed row added to ``keyed``, or read now (after ``keyed``, which is then empty)."""
        pairs = msg.headers()
        value = msg.value()
        if not pairs:
            if value is None:  # someone else's tombstone: after what came before it
                self._by_keys(keyed)
                self._foreign_tombstone(msg, int(msg.partition() or 0))
                return []
            return keyed
        h = dict(pairs)
        if h.get(H_TABLE) != self._table or h.get(H_DB) != self._db:
            return keyed
        source = h.get(H_SOURCE_ID)
        if source is not None and source != self._source:
            return keyed
        shard = self._shards.get((h.get(H_PHYSICAL_DB) or b"") + b"." + (h.get(H_PHYSICAL_TABLE) or b""))
        kind = h.get(H_TYPE)
        if shard is None or kind not in _ROW_TYPES or H_SEQUENCE not in h:
            return keyed
        where = (msg.topic(), msg.partition(), msg.offset())
        try:
            ident = (int(h[H_SEQUENCE]), int(h.get(H_PART) or b"0"))
        except (TypeError, ValueError):
            raise VerifyError(
                f"{where[0]} [{where[1]}] offset {where[2]}: a record of {self._db.decode()}."
                f"{self._table.decode()} whose {H_SEQUENCE} / {H_PART} headers are not numbers "
                f"({h[H_SEQUENCE]!r}, {h.get(H_PART)!r}): not the relay's, and no change identity"
            ) from None
        if shard.method == MULTISET:
            self._multiset(shard, ident, value, h.get(H_SNAPSHOT) == b"true", where)
        elif shard.by_data:
            if value is not None:
                self._by_data(shard, ident, value, where)
        else:
            keyed.append((shard, ident, kind, msg.key(), value, where))
        return keyed

    def _by_keys(self, rows: list[tuple[Shard, Identity, bytes, bytes | None, bytes | None, Any]]) -> None:
        if not rows:
            return
        keys = parse_all([r[3] or b"null" for r in rows])
        held = self.held
        parse: list[tuple[Held, Shard, bytes, Any]] = []
        for (shard, ident, kind, _, value, where), parsed in zip(rows, keys, strict=True):
            if not isinstance(parsed, dict):
                continue
            jk = tuple(parsed.values())
            cur = held.get(jk)
            if value is None:  # a tombstone: deletes at the identity of the DELETE it follows
                if cur is None or ident >= cur.identity:
                    held[jk] = Held(ident, True, shard.name, 0, where)
                continue
            if cur is not None and ident < cur.identity:
                continue  # older (of equal identities the later record wins, as compaction keeps it)
            entry = Held(ident, _ROW_TYPES[kind] == 2, shard.name, 0, where)
            held[jk] = entry
            if self.parse_values and not entry.deleted:
                parse.append((entry, shard, value, jk))
        if parse:
            by_shard: dict[str, list[tuple[Held, Shard, bytes]]] = {}
            for entry, shard, value, jk in parse:
                if held.get(jk) is entry:  # not superseded later in the batch
                    by_shard.setdefault(shard.name, []).append((entry, shard, value))
            for items in by_shard.values():
                try:
                    digests = digests_of(items[0][1], [i[2] for i in items])
                except VerifyError as exc:  # say which record
                    raise VerifyError(f"{_unreadable(items)}: {exc}") from None
                for (entry, _, _), digest in zip(items, digests, strict=True):
                    entry.digest = digest

    def _by_data(self, shard: Shard, ident: Identity, value: bytes, where: Any) -> None:
        kind, data, old = parse_value(value)
        names = shard.key_names
        key = (shard.name, *(data.get(n) for n in names))
        if kind == "UPDATE" and old and any(n in old for n in names):
            before = (shard.name, *(old.get(n, data.get(n)) for n in names))
            cur = self.held.get(before)
            if before != key and (cur is None or ident > cur.identity):
                self.held[before] = Held(ident, True, shard.name, 0, where)
        cur = self.held.get(key)
        if cur is not None and ident < cur.identity:
            return
        deleted = kind == "DELETE"
        self.held[key] = Held(ident, deleted, shard.name, 0 if deleted else data_digest(shard, data), where)

    def _multiset(
        self, shard: Shard, ident: Identity, value: bytes | None, snapshot: bool, where: Any
    ) -> None:
        state = self.multisets[shard.name]
        if value is None or ident <= state.latest:
            return  # a tombstone (no row) or a repeat
        state.latest, state.where = ident, where
        if not self.parse_values:
            return
        kind, data, old = parse_value(value)
        row = _hashable(row_values(shard, data))
        if snapshot and self.snapshot_seq.get(shard.name) != ident[0]:
            self.snapshot_seq[shard.name] = ident[0]
            state.rows = Counter()  # a keyless table is snapshotted whole: the chunk replaces it
        if kind == "DELETE":
            _remove(state.rows, row)
        elif kind == "UPDATE":
            _remove(state.rows, _hashable(row_values(shard, {**data, **(old or {})})))
            state.rows[row] += 1
        else:
            state.rows[row] += 1

    def _foreign_tombstone(self, msg: Any, partition: int) -> None:
        """A tombstone someone else produced (no headers): it deletes the key it names, in the partition
        holding that key's records, as compaction would."""
        try:
            parsed = json.loads(msg.key()) if msg.key() else None
        except ValueError:
            return
        if not isinstance(parsed, dict):
            return
        cur = self.held.get(tuple(parsed.values()))
        if cur is not None and cur.where is not None and cur.where[:2] == (str(msg.topic()), partition):
            cur.deleted, cur.digest = True, 0
            cur.where = (str(msg.topic()), partition, int(msg.offset()))
            log.warning("topic %s [%d] offset %d: a tombstone without the relay's headers deletes key %s",
                        msg.topic(), partition, msg.offset(), msg.key())  # fmt: skip


def _read_error(msg: Any, where: tuple[str, int], pending: set[tuple[str, int]]) -> None:
    """A consumed error: a partition's end (taken off ``pending``), or a failure to read it."""
    err = msg.error()
    if err.code() == KafkaError._PARTITION_EOF:
        pending.discard(where)
        return
    raise VerifyError(f"cannot read {where[0]} [{where[1]}]: {err.str()}")


def _segments(wheres: Iterable[tuple[str, int, int]]) -> list[list[tuple[str, int, int]]]:
    """Records to read again as runs: nearby offsets of one partition are read through, not sought again."""
    segments: list[list[tuple[str, int, int]]] = []
    for where in sorted(set(wheres)):
        last = segments[-1][-1] if segments else None
        if last is not None and last[:2] == where[:2] and where[2] - last[2] <= FETCH_GAP:
            segments[-1].append(where)
        else:
            segments.append([where])
    return segments


def _unreadable(items: list[tuple[Held, Shard, bytes]]) -> str:
    """Where the first record of ``items`` that is not canal-json or canal-protobuf is."""
    for entry, _, value in items:
        try:
            parse_value(value)
        except VerifyError:
            topic, partition, offset = entry.where
            return f"{topic} [{partition}] offset {offset}"
    return "a record of the batch"


def _hashable(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """A row as a multiset member: a value that is not canal text (a JSON object or list in a forged record)
    as its JSON in a tuple, which no source text equals."""
    if all(v is None or v.__class__ is str or v is ABSENT for v in row):
        return row
    return tuple(
        v if v is None or v.__class__ is str or v is ABSENT else ("\x00json", json.dumps(v, sort_keys=True))
        for v in row
    )


def _remove(rows: Counter[tuple[Any, ...]], row: tuple[Any, ...]) -> None:
    if rows[row] > 1:
        rows[row] -= 1
    else:
        rows.pop(row, None)
