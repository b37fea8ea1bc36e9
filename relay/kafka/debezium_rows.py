"""The debezium-json row path: a row event's (or a snapshot chunk's) rows, and a DDL, as debezium-json
records.

One record per row, keyed by Debezium's key struct of the row's logical key, with Debezium's envelope as the
value (``relay.kafka.debezium_json``): INSERT ``op`` "c", UPDATE "u", DELETE "d", a snapshot read "r".

- An UPDATE that changes the key becomes a DELETE ("d") under the old key and a CREATE ("c") under the new
  one, as Debezium's MySQL connector publishes a primary key change, with its headers
  ``__debezium.newkey`` (on the DELETE) and ``__debezium.oldkey`` (on the CREATE); ``relay.part`` 0 and 1
  (``relay.kafka.sequences``) order the halves.
- With ``tombstones_on_delete`` (the mapping's ``debezium`` section; default true, as Debezium's
  ``tombstones.on.delete``) every DELETE is followed by its tombstone: same key, null value, the DELETE's
  headers. The tombstone is the next record of the same batch, right after its DELETE, so it is delivered,
  acknowledged and saved with it (or re-published with it after a rollback): the no-loss rules are
  unchanged, and a consumer sees it after the DELETE in the key's partition.
- A DDL goes to the schema change topic (``debezium.schema_change_topic``) as Debezium's schema-change
  event, keyed by the logical database, its ``tableChanges`` the captured tables' definitions from the
  schema history (``relay.kafka.debezium_ddl``); a TRUNCATE is an ``op`` "t" event on every partition of the
  table's topic (where canal's codecs put a DDL barrier). The data topics carry no other DDL record:
  Debezium's readers (Flink's ``debezium-json``, Kafka Connect sinks) fail on records that are not change
  events. Every DDL still goes to the DDL audit topic in canal-json (``relay.kafka.barriers``).

Every record carries our headers (``relay.kafka.headers``): logical and physical names, type, tag, source id
and the change identity (``relay.sequence``, ``relay.part``), so ordering and de-duplication by
(source id, sequence, part) work on debezium-json topics as on canal's.

Functions called per row event by ``relay.kafka.codec.RecordEncoder`` on the publisher thread.
"""

from __future__ import annotations

from collections.abc import Callable

from mapping.model import DebeziumSettings, Route
from relay.binlog.events import RowImage
from relay.canal.entry import Entry, EventType, RowChange
from relay.errors import CodecError
from relay.kafka import debezium_json as dbz
from relay.kafka.debezium_ddl import table_changes_text
from relay.kafka.headers import (
    H_PART,
    H_SEQUENCE,
    H_TYPE,
    Headers,
    Origin,
    identity,
    snapshot_delete_headers,
    tombstone,
)
from relay.kafka.plans import TablePlan
from relay.kafka.records import Record
from relay.kafka.sequences import row_part

H_NEWKEY = "__debezium.newkey"
H_OLDKEY = "__debezium.oldkey"
_OPS = {EventType.INSERT: "c", EventType.UPDATE: "u", EventType.DELETE: "d"}


def _server_id(origin: Origin, entry: Entry) -> int:
    return origin.source.server_id or entry.header.server_id


def rows(
    origin: Origin, entry: Entry, rc: RowChange, plan: TablePlan, first: int, headers: Headers
) -> list[Record]:
    """The records of a row event's rows; ``first``: the first row's sequence, ``headers``: what every
    record of the event carries before its identity."""
    table = plan.debezium
    assert table is not None
    head = dbz.source_head(origin.source_id, _server_id(origin, entry), entry, False, table.logical)
    ts_ms = entry.header.execute_time
    op = _OPS[rc.event_type]
    update = rc.event_type == EventType.UPDATE
    tombstones = plan.tombstones and rc.event_type == EventType.DELETE
    topic = plan.route.topic
    in_payload = entry.payload_index >= 0
    out: list[Record] = []
    for i, row in enumerate(rc.rows):
        seq = first if in_payload else first + i
        part = row_part(entry, i) if in_payload else None
        if update and plan.key.changes(row):
            out.extend(_key_change(origin, plan, head, ts_ms, row, i, seq, part or 0))
            continue
        image = row.after if row.after is not None else row.before
        assert image is not None  # a row image has at least one side
        value = dbz.envelope(
            table, head, i, op, ts_ms, dbz.image_text(table, row.before), dbz.image_text(table, row.after)
        )
        out.append(Record(topic, None, dbz.key_bytes(table, image), value, (*headers, *identity(seq, part))))
        if tombstones:
            out.append(tombstone(out[-1]))
    return out


def _key_change(
    origin: Origin, plan: TablePlan, head: str, ts_ms: int, row: RowImage, row_index: int, seq: int, half: int
) -> list[Record]:
    """An UPDATE that changes the key: a DELETE of the before image (and its tombstone), a CREATE of the
    after image; ``relay.part`` ``half`` and ``half`` + 1."""
    table = plan.debezium
    assert table is not None and row.before is not None and row.after is not None
    old_key, new_key = dbz.key_bytes(table, row.before), dbz.key_bytes(table, row.after)
    topic, sequence = plan.route.topic, (H_SEQUENCE, str(seq).encode())
    deleted = dbz.envelope(table, head, row_index, "d", ts_ms, dbz.image_text(table, row.before), "null")
    created = dbz.envelope(table, head, row_index, "c", ts_ms, "null", dbz.image_text(table, row.after))
    delete_headers = (*plan.headers, (H_TYPE, b"DELETE"), *plan.tag, origin.header, sequence)
    insert_headers = (*plan.headers, (H_TYPE, b"INSERT"), *plan.tag, origin.header, sequence)
    delete = Record(
        topic, None, old_key, deleted, (*delete_headers, (H_PART, b"%d" % half), (H_NEWKEY, new_key))
    )
    insert = Record(
        topic, None, new_key, created, (*insert_headers, (H_PART, b"%d" % (half + 1)), (H_OLDKEY, old_key))
    )
    return [delete, tombstone(delete), insert] if plan.tombstones else [delete, insert]


def snapshot_rows(
    origin: Origin, entry: Entry, rc: RowChange, plan: TablePlan, seq: int, chunk: int, headers: Headers
) -> list[Record]:
    """A snapshot chunk's rows as ``op`` "r" events (``source.snapshot`` "true"); ``part`` = (``chunk`` |
    the row's ordinal in the chunk) << 1. A key snapshot's delete row is an ``op`` "d" event marked as a
    snapshot read, followed by its tombstone with ``tombstones_on_delete``."""
    table = plan.debezium
    assert table is not None
    head = dbz.source_head(origin.source_id, _server_id(origin, entry), entry, True, table.logical)
    ts_ms = entry.header.execute_time
    topic = plan.route.topic
    out: list[Record] = []
    for i, row in enumerate(rc.rows):
        part = (chunk | i) << 1
        if row.after is None:  # a key snapshot's delete row (relay.source.snapshot_keys)
            assert row.before is not None
            value = dbz.envelope(table, head, 0, "d", ts_ms, dbz.image_text(table, row.before), "null")
            deleted = (*snapshot_delete_headers(headers), *identity(seq, part))
            out.append(Record(topic, None, dbz.key_bytes(table, row.before), value, deleted))
            if plan.tombstones:
                out.append(tombstone(out[-1]))
            continue
        value = dbz.envelope(table, head, 0, "r", ts_ms, "null", dbz.image_text(table, row.after))
        out.append(
            Record(topic, None, dbz.key_bytes(table, row.after), value, (*headers, *identity(seq, part)))
        )
    return out


def statement(
    origin: Origin,
    entry: Entry,
    rc: RowChange,
    route: Route,
    compact: bool,
    settings: DebeziumSettings,
    partitions: Callable[[str], int],
    headers: Headers,
    captured: Callable[[str, str], bool],
) -> list[Record]:
    """A DDL of a debezium-json table: TRUNCATE as ``op`` "t" on every partition of the table's topic,
    any other to the schema change topic with the ``tableChanges`` of the tables ``captured`` (physical
    db, table) says the mapping takes; ``headers``: the statement's (``relay.kafka.barriers``)."""
    h = entry.header
    server_id = _server_id(origin, entry)
    if rc.event_type == EventType.TRUNCATE:
        return _truncate(origin, entry, route, compact, settings, partitions, headers)
    template = settings.schema_change_topic
    if not template:
        return []
    topic = template.replace("{source_id}", origin.source_id)
    if not topic:
        raise CodecError(
            f"debezium.schema_change_topic {template!r} expands to an empty topic name (no source id)"
        )
    change = dbz.SchemaChange(
        origin.source_id, server_id, route.logical_db, route.logical_table, h.schema_name, h.table_name
    )
    tables = table_changes_text(rc.table_changes, captured)
    key, value = dbz.schema_change(change, entry, rc.sql, settings.schemas_enable, tables)
    return [Record(topic, None, key, value, headers)]


def _truncate(
    origin: Origin,
    entry: Entry,
    route: Route,
    compact: bool,
    settings: DebeziumSettings,
    partitions: Callable[[str], int],
    headers: Headers,
) -> list[Record]:
    """Debezium's truncate event (``before`` and ``after`` null, ``op`` "t") on every partition of the
    table's topic, in order with the rows around it. Its key is null as Debezium's, except on a
    compacted topic, which refuses unkeyed records: there ``{"_ddl":"<physical db.table>"}`` as canal's
    barriers."""
    count = partitions(route.topic)
    if count < 1:
        raise CodecError(f"topic {route.topic!r} reports {count} partitions; cannot place a truncate event")
    h = entry.header
    table = dbz.empty_table(route, settings.schemas_enable)  # no images: the envelope needs no columns
    head = dbz.source_head(origin.source_id, _server_id(origin, entry), entry, False, table.logical)
    value = dbz.envelope(table, head, 0, "t", h.execute_time, "null", "null")
    key = None
    if compact:
        key = b'{"_ddl":%s}' % dbz.quote_bytes(f"{h.schema_name}.{h.table_name}")
    return [Record(route.topic, p, key, value, headers) for p in range(count)]
