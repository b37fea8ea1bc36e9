"""Records read back from a topic and re-published into the topic a mapping names for them now.

Owns the one translation shared by the two ways history changes topic: a table move at a mapping switch
(``relay.kafka.history``, on the relay's move thread) and ``relay replay --remap`` (``relay.ops.replay``,
on the CLI's thread). Pure functions and one small stateful class, no I/O: the caller consumes, and
produces what ``Remapper.records`` hands back.

What a moved record keeps and what changes:

- kept: the value (sequence, source block, data), the ``relay.sequence``, ``relay.part``,
  ``relay.source.id``, ``relay.type`` and physical headers — its change identity (source id, sequence,
  part) is the one the original carries, so consumers order and de-duplicate copies like any record;
- changed: the topic; the ``relay.db`` / ``relay.table`` / ``relay.tag`` headers, and for canal-json the
  value's ``database`` / ``table`` fields (canal-protobuf: each entry header's ``schemaName`` /
  ``tableName``), when the logical names changed; the key, recomputed for canal-json rows from the
  route's key columns (or the primary key) and its ``key_shard``, so a row stays in one partition of its
  new topic; a tombstone (null value) goes under the key its DELETE got. canal-protobuf keys are
  re-published as they are (a move that changes a canal-protobuf table's key is refused:
  ``relay.kafka.history.plan_move``);
- added: ``relay.replay.from`` = ``topic:partition:offset`` of the original.

A DDL barrier (one copy per partition of the old topic) is re-published once, to every partition of the
new topic, under its own key (a compacted topic's ``{"_ddl":…}`` key, or none).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Message

from mapping.key_shard import KEY_SHARD_PHYSICAL, SHARD_FIELD, shard_column
from mapping.model import Route
from relay.canal.proto.convert import renamed_packet
from relay.kafka.codec import (
    H_DB,
    H_PART,
    H_PHYSICAL_DB,
    H_PHYSICAL_TABLE,
    H_SEQUENCE,
    H_SOURCE_ID,
    H_TABLE,
    H_TAG,
    H_TYPE,
)
from relay.kafka.partitioner import partition_for_key
from relay.kafka.records import Record

__all__ = ["H_REPLAY_FROM", "ROW_TYPES", "Consumed", "Identity", "Remapper", "remap_value"]

H_REPLAY_FROM = "relay.replay.from"
ROW_TYPES = frozenset({"INSERT", "UPDATE", "DELETE"})

Identity = tuple[int, int, int]
"""(sequence, part, 1 for a tombstone else 0): a record's place among its source's changes. A tombstone
sorts right after the DELETE it follows, which shares its sequence and part."""

Headers = tuple[tuple[str, bytes], ...]


@dataclass(frozen=True)
class Consumed:
    """One record as a consumer read it, with what the relay's headers say about it."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers

    @classmethod
    def of(cls, msg: Message) -> Consumed:
        raw = msg.headers() or []
        items = raw.items() if isinstance(raw, dict) else raw
        headers = tuple((k, _bytes(v)) for k, v in items if v is not None)
        key = msg.key()
        value = msg.value()
        return cls(
            str(msg.topic()),
            int(msg.partition() or 0),
            int(msg.offset() or 0),
            None if key is None else _bytes(key),
            None if value is None else _bytes(value),
            headers,
        )

    def header(self, name: str) -> bytes | None:
        for k, v in self.headers:
            if k == name:
                return v
        return None

    @property
    def physical(self) -> tuple[str, str] | None:
        """(db, table) of the physical table the record comes from; None: not a relay record."""
        db, table = self.header(H_PHYSICAL_DB), self.header(H_PHYSICAL_TABLE)
        if db is None or table is None or self.header(H_SEQUENCE) is None:
            return None
        return db.decode(), table.decode()

    @property
    def source_id(self) -> str | None:
        value = self.header(H_SOURCE_ID)
        return None if value is None else value.decode()

    @property
    def identity(self) -> Identity:
        seq, part = self.header(H_SEQUENCE), self.header(H_PART)
        return (int(seq or b"-1"), int(part or b"0"), 1 if self.value is None else 0)

    @property
    def is_row(self) -> bool:
        return (self.header(H_TYPE) or b"").decode() in ROW_TYPES

    @property
    def origin(self) -> str:
        return f"{self.topic}:{self.partition}:{self.offset}"


class Remapper:
    """Turns consumed records into the records that carry them in their new topic.

    Remembers, per origin partition, the last DELETE it moved and the key it got: that DELETE's
    compaction tombstone comes right after it in the same partition and goes under the same new key.
    Not thread-safe: one caller thread.
    """

    def __init__(self) -> None:
        self._last_delete: dict[tuple[str, int], tuple[bytes | None, bytes | None]] = {}

    def records(self, rec: Consumed, route: Route, partitions: int) -> list[Record]:
        """The records carrying ``rec`` into ``route.topic`` (``partitions`` partitions): one for a row
        (its partition by the new key's murmur2 hash, as librdkafka would place it), one per partition
        for a DDL barrier."""
        headers = remap_headers(rec.headers, route, rec.origin.encode())
        if not rec.is_row:
            value = None if rec.value is None else remap_value(rec.value, route, None)[0]
            return [Record(route.topic, p, rec.key, value, headers) for p in range(partitions)]
        where = (rec.topic, rec.partition)
        if rec.value is None:  # a tombstone: under the key its DELETE was moved to
            old, new = self._last_delete.get(where, (None, None))
            key = new if old == rec.key else rec.key
            return [Record(route.topic, _partition(key, rec, partitions), key, None, headers)]
        value, key = remap_value(rec.value, route, rec.key)
        if rec.header(H_TYPE) == b"DELETE":
            self._last_delete[where] = (rec.key, key)
        return [Record(route.topic, _partition(key, rec, partitions), key, value, headers)]


def _partition(key: bytes | None, rec: Consumed, partitions: int) -> int:
    return partition_for_key(key, partitions) if key is not None else rec.partition % partitions


def _bytes(value: str | bytes) -> bytes:
    return value.encode() if isinstance(value, str) else value


def remap_headers(headers: Headers, route: Route, origin: bytes) -> Headers:
    out = [(k, v) for k, v in headers if k not in (H_DB, H_TABLE, H_TAG, H_REPLAY_FROM)]
    out[:0] = [(H_DB, route.logical_db.encode()), (H_TABLE, route.logical_table.encode())]
    if route.tag is not None:
        out.append((H_TAG, route.tag.encode()))
    out.append((H_REPLAY_FROM, origin))
    return tuple(out)


def remap_value(value: bytes, route: Route, key: bytes | None) -> tuple[bytes, bytes | None]:
    """canal-json: logical names and the key under ``route``; canal-protobuf: logical names; anything
    else as it is."""
    if route.codec == "canal-protobuf" and not value.startswith(b"{"):
        renamed = renamed_packet(value, route.logical_db, route.logical_table)
        return (value if renamed is None else renamed), key
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
