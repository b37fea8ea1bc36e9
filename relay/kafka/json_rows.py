"""The canal-json row path: a row event's (or a snapshot chunk's) rows as canal-json records.

One record per row, keyed by the row's logical key (``relay.kafka.keys``), with the value canal's
FlatMessage holding that one row (``relay.kafka.canal_json``); an UPDATE that changes the key becomes a
DELETE under the old key and an INSERT under the new one (``relay.kafka.plans.key_change``); on a compacted
topic every DELETE is followed by its tombstone. Where the C helper is built (``canal_json.object_bytes``,
the compiled build), a row's ``data`` object is written as bytes directly; the Python path gives the same
bytes.

A snapshot chunk's rows (``snapshot_rows``) are INSERTs marked ``"snapshot":true``, every row with the
chunk's sequence and its own ``part``.

Functions called per row event by ``relay.kafka.codec.RecordEncoder`` on the publisher thread.
"""

from __future__ import annotations

from relay.binlog.events import RowImage
from relay.canal.entry import Entry, EventType, RowChange
from relay.kafka import canal_json as codec_json
from relay.kafka.headers import Headers, Origin, identity, snapshot_delete_headers, tombstone
from relay.kafka.plans import TablePlan, key_change
from relay.kafka.records import Record
from relay.kafka.sequences import row_part


def with_part(value: bytes, part: int) -> bytes:
    """A canal-json value with ``"part"`` after its last field (``sequence``)."""
    return b'%s,"part":%d}' % (value[:-1], part)


def rows(
    origin: Origin,
    entry: Entry,
    rc: RowChange,
    plan: TablePlan,
    table: codec_json.JsonTable,
    first: int,
    headers: Headers,
    type_name: str,
) -> list[Record]:
    """The records of a row event's rows; ``first``: the first row's sequence, ``headers``: what every
    record of the event carries before its identity."""
    je = codec_json.json_entry(table, origin.server(entry.header.server_id), entry, type_name)
    topic = plan.route.topic
    update = rc.event_type == EventType.UPDATE
    tombstones = plan.compact and rc.event_type == EventType.DELETE
    out: list[Record] = []
    in_payload = entry.payload_index >= 0
    # The C helper where built (canal_json.object_bytes): the row's bytes without a str of it first.
    key_bytes = table.key_bytes
    fast = codec_json.object_bytes if key_bytes is not None else None
    middle: bytes | None = None
    tail = b""
    for i, row in enumerate(rc.rows):
        seq = first if in_payload else first + i
        part = row_part(entry, i) if in_payload else None
        before, after = row.before, row.after
        image = after if after is not None else before
        assert image is not None  # a row image has at least one side
        if update and plan.key.changes(row):
            out.extend(_key_change(origin, entry, plan, table, row, seq, i, part))
            continue
        extra = codec_json.instants_text(table, image) if table.instants else ""
        data = fast(key_bytes, image) if fast is not None and key_bytes is not None else None
        if data is None:
            old = (
                codec_json.old_text(table.keys, before, after)
                if update and before is not None and after is not None
                else "null"
            )
            value = codec_json.row_text(
                je, seq, i, codec_json.object_text(table.data_format, image), old, extra
            )
        else:
            if middle is None:  # once per entry, and only where the C helper runs
                middle, tail = je.middle.encode(), je.tail.encode()
            old_field = _old(table, before, after) if update else b"null"
            value = codec_json.row_bytes(middle, tail, seq, i, data, old_field, extra)
        if part is not None:
            value = with_part(value, part)
        out.append(Record(topic, None, plan.key.of(image), value, (*headers, *identity(seq, part))))
        if tombstones:
            out.append(tombstone(out[-1]))
    return out


def _old(
    table: codec_json.JsonTable, before: tuple[str | None, ...] | None, after: tuple[str | None, ...] | None
) -> bytes:
    """An UPDATE's ``old`` field as UTF-8 (by the C helper where it takes the values)."""
    if before is None or after is None:
        return b"null"
    fast = codec_json.old_bytes
    key_bytes = table.key_bytes
    found = fast(key_bytes, before, after) if fast is not None and key_bytes is not None else None
    return found if found is not None else codec_json.old_text(table.keys, before, after).encode()


def _key_change(
    origin: Origin,
    entry: Entry,
    plan: TablePlan,
    table: codec_json.JsonTable,
    row: RowImage,
    seq: int,
    row_index: int,
    part: int | None,
) -> list[Record]:
    """An UPDATE that changes the key: a DELETE of the before image, an INSERT of the after image."""
    before, after = row.before, row.after
    assert before is not None and after is not None
    server = origin.server(entry.header.server_id)
    half = part or 0
    deleted = _whole_row(table, server, entry, "DELETE", seq, row_index, before, half)
    inserted = _whole_row(table, server, entry, "INSERT", seq, row_index, after, half + 1)
    return key_change(plan, origin, row, seq, deleted, inserted, half)


def _whole_row(
    table: codec_json.JsonTable,
    server: str,
    entry: Entry,
    type_name: str,
    seq: int,
    row_index: int,
    image: tuple[str | None, ...],
    part: int,
) -> bytes:
    """One half of a key change: the row as ``type_name``, ``old`` null, with its ``part``."""
    value = codec_json.row_text(
        codec_json.json_entry(table, server, entry, type_name),
        seq,
        row_index,
        codec_json.object_text(table.data_format, image),
        "null",
        codec_json.instants_text(table, image) if table.instants else "",
    )
    return with_part(value, part)


def snapshot_rows(
    origin: Origin, entry: Entry, rc: RowChange, plan: TablePlan, seq: int, chunk: int, headers: Headers
) -> list[Record]:
    """A snapshot chunk's rows as canal-json INSERTs marked as snapshot reads; ``part`` = (``chunk`` |
    the row's ordinal in the chunk) << 1."""
    table = plan.json
    assert table is not None
    je = codec_json.json_entry(table, origin.server(entry.header.server_id), entry, "INSERT")
    key_bytes = table.key_bytes
    fast = codec_json.object_bytes if key_bytes is not None else None
    middle: bytes | None = None
    tail = b""
    out = []
    for i, row in enumerate(rc.rows):
        part = (chunk | i) << 1
        if row.after is None:  # a key snapshot's delete row (relay.source.snapshot_keys)
            out.extend(_snapshot_delete(origin, entry, row, plan, seq, part, headers))
            continue
        extra = codec_json.instants_text(table, row.after) if table.instants else ""
        raw = fast(key_bytes, row.after) if fast is not None and key_bytes is not None else None
        if raw is None:
            data = codec_json.object_text(table.data_format, row.after)
            value = with_part(codec_json.snapshot_row_text(je, seq, data, extra), part)
        else:
            if middle is None:  # once per chunk, and only where the C helper runs
                middle, tail = je.middle.encode(), je.tail.encode()
            value = with_part(codec_json.snapshot_row_bytes(middle, tail, seq, raw, extra), part)
        key = plan.key.of(row.after)
        out.append(Record(plan.route.topic, None, key, value, (*headers, *identity(seq, part))))
    return out


def _snapshot_delete(
    origin: Origin, entry: Entry, row: RowImage, plan: TablePlan, seq: int, part: int, headers: Headers
) -> list[Record]:
    """A key snapshot's delete row: a DELETE of a key the table no longer has, marked as a snapshot read
    (the before image holds the key columns), then a tombstone on a compacted topic."""
    table = plan.json
    assert table is not None and row.before is not None
    je = codec_json.json_entry(table, origin.server(entry.header.server_id), entry, "DELETE")
    data = codec_json.object_text(table.data_format, row.before)
    value = with_part(codec_json.snapshot_row_text(je, seq, data), part)
    deleted = (*snapshot_delete_headers(headers), *identity(seq, part))
    record = Record(plan.route.topic, None, plan.key.of(row.before), value, deleted)
    return [record, tombstone(record)] if plan.compact else [record]
