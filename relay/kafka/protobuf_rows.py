"""The canal-protobuf row path: a row event's (or a snapshot chunk's) rows as canal-protobuf records.

One record per row, keyed by the row's logical key (``relay.kafka.keys``), with the value canal's
``Packet(MESSAGES)`` holding that one row (``relay.kafka.canal_protobuf``); an UPDATE that changes the key
becomes a DELETE under the old key and an INSERT under the new one (``relay.kafka.plans.key_change``), each
half with its ``relay.part`` prop; on a compacted topic every DELETE is followed by its tombstone.

Functions called per row event by ``relay.kafka.codec.RecordEncoder`` on the publisher thread. (The value
encoder ``canal_protobuf`` itself stays interpreted: mypyc refuses its surrogate-range regex literal.)
"""

from __future__ import annotations

from dataclasses import replace

from relay.binlog.events import RowImage
from relay.canal.entry import Entry, EventType, RowChange
from relay.kafka import canal_protobuf as codec_protobuf
from relay.kafka.headers import Headers, Origin, identity, snapshot_delete_headers, tombstone
from relay.kafka.plans import TablePlan, key_change
from relay.kafka.records import Record
from relay.kafka.sequences import row_part


def rows(
    origin: Origin, entry: Entry, rc: RowChange, plan: TablePlan, first: int, headers: Headers
) -> list[Record]:
    """The records of a row event's rows; ``first``: the first row's sequence, ``headers``: what every
    record of the event carries before its identity."""
    route = plan.route
    server = origin.source.address
    in_payload = entry.payload_index >= 0
    update, delete = rc.event_type == EventType.UPDATE, rc.event_type == EventType.DELETE
    out: list[Record] = []
    for i, row in enumerate(rc.rows):
        seq = first if in_payload else first + i
        part = row_part(entry, i) if in_payload else None
        if update and plan.key.changes(row):
            out.extend(_key_change(origin, entry, rc, plan, row, seq, part))
            continue
        value = codec_protobuf.row_value(entry, rc, row, route, seq, server, origin.source_id, part)
        key = plan.key.of(row.after if row.after is not None else row.before)
        out.append(Record(route.topic, None, key, value, (*headers, *identity(seq, part))))
        if delete and plan.compact:
            out.append(tombstone(out[-1]))
    return out


def _key_change(
    origin: Origin, entry: Entry, rc: RowChange, plan: TablePlan, row: RowImage, seq: int, part: int | None
) -> list[Record]:
    """An UPDATE that changes the key: a DELETE of the before image, an INSERT of the after image."""
    half = part or 0
    server, source_id = origin.source.address, origin.source_id
    deleted = codec_protobuf.row_value(
        *_as(entry, rc, EventType.DELETE),
        RowImage(row.before, None),
        plan.route,
        seq,
        server,
        source_id,
        half,
    )
    inserted = codec_protobuf.row_value(
        *_as(entry, rc, EventType.INSERT),
        RowImage(None, row.after),
        plan.route,
        seq,
        server,
        source_id,
        half + 1,
    )
    return key_change(plan, origin, row, seq, deleted, inserted, half)


def _as(entry: Entry, rc: RowChange, event_type: EventType) -> tuple[Entry, RowChange]:
    """``entry`` and ``rc`` as another row event type (the halves of a key change)."""
    return replace(entry, header=replace(entry.header, event_type=event_type)), replace(
        rc, event_type=event_type
    )


def snapshot_rows(
    origin: Origin, entry: Entry, rc: RowChange, plan: TablePlan, seq: int, chunk: int, headers: Headers
) -> list[Record]:
    """A snapshot chunk's rows as canal-protobuf INSERTs marked as snapshot reads; ``part`` = (``chunk`` |
    the row's ordinal in the chunk) << 1."""
    server = origin.source.address
    out = []
    for i, row in enumerate(rc.rows):
        part = (chunk | i) << 1
        if row.after is None:  # a key snapshot's delete row (relay.source.snapshot_keys)
            out.extend(_snapshot_delete(origin, entry, rc, row, plan, seq, part, headers))
            continue
        value = codec_protobuf.row_value(entry, rc, row, plan.route, seq, server, origin.source_id, part)
        key = plan.key.of(row.after)
        out.append(Record(plan.route.topic, None, key, value, (*headers, *identity(seq, part))))
    return out


def _snapshot_delete(
    origin: Origin,
    entry: Entry,
    rc: RowChange,
    row: RowImage,
    plan: TablePlan,
    seq: int,
    part: int,
    headers: Headers,
) -> list[Record]:
    """A key snapshot's delete row: a DELETE of a key the table no longer has, marked as a snapshot read
    (the before image holds the key columns), then a tombstone on a compacted topic."""
    value = codec_protobuf.row_value(
        *_as(entry, rc, EventType.DELETE), row, plan.route, seq, origin.source.address, origin.source_id, part
    )
    deleted = (*snapshot_delete_headers(headers), *identity(seq, part))
    record = Record(plan.route.topic, None, plan.key.of(row.before), value, deleted)
    return [record, tombstone(record)] if plan.compact else [record]
