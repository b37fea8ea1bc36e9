"""Record codecs: canal Entries → Kafka records under the logical mapping.

Owns ``RecordEncoder``: routing each change through the mapping (``Mapping.resolve``), the record key,
the headers, the partition of DDL barriers and the sequence; the value bytes are built by
``relay.kafka.canal_json`` (canal-json) and ``relay.kafka.canal_protobuf`` (canal-protobuf). It runs on the
publisher thread, one batch of entries at a time, and hands ``relay.kafka.records.Record`` values to the
publisher.

What becomes what:

- BEGIN / END / heartbeats: nothing.
- A row change (INSERT/UPDATE/DELETE): one record per row to the route's topic; nothing when the mapping
  drops the table. Key = the LOGICAL key: a compact JSON object of the key columns' canal-text values
  in key order (``{"id":"42"}``), from the after image (the before image of a DELETE). The key columns
  are the route's (spelled as the mapping writes them, so every shard of a logical table makes the same
  key) or else the table's primary key. With the route's ``key_shard`` the shard identity comes first,
  as ``"_shard"``: the physical ``db.table`` (``physical``) or a column's value (``column:<name>``),
  e.g. ``{"_shard":"shop_07.orders_33","id":"42"}``. A table with neither key nor primary key is keyed
  by its physical ``db.table``: all its changes go to one partition, so their order holds.
  ``partition`` is None: the publisher places the key with Kafka's murmur2.
- An UPDATE that changes the key (its key columns or its shard column) becomes two records: a DELETE of
  the before image under the OLD key, then an INSERT of the after image under the NEW key, both with
  the row's sequence; ``part`` (0 for the DELETE, 1 for the INSERT; a ``"part"`` field after
  ``sequence`` in canal-json, a ``relay.part`` prop in canal-protobuf, a ``relay.part`` header) tells
  them apart and orders them. They go to different keys, so each key's own order is unchanged. A keyed
  consumer is left with no row under the old key, as after any DELETE; a canal-json reader rebuilding
  state by primary key reaches the same state as from canal's single UPDATE.
- Where the mapping's topic config has ``cleanup.policy`` containing ``compact``, every DELETE record
  (a real one or the DELETE of a key change) is followed by a tombstone — same key, null value, the
  DELETE's headers — so compaction can eventually drop the key.
- A DDL: the same message to EVERY partition of its table's topic (explicit partition, no key; on a
  compacted topic, which refuses unkeyed records, the key ``{"_ddl":"<physical db.table>"}``) — a
  barrier every consumer sees in order with the rows around it — plus one canal-json record to the DDL
  audit topic (when configured) whatever the mapping says, keyed by the physical ``db.table`` (or db).
  A DDL without a table (CREATE DATABASE …) goes to the audit topic only: a mapping resolves tables,
  not databases. Other statements (QUERY, XA COMMIT …) go to the audit topic only.

Headers (bytes): ``relay.db``, ``relay.table`` (logical), ``relay.physical.db``,
``relay.physical.table``, ``relay.type`` (INSERT/UPDATE/DELETE/ALTER…), ``relay.tag`` (when the route
has one), ``relay.source.id`` (the relay's ``source.id``), ``relay.snapshot`` ("true", on snapshot reads
only), ``relay.sequence`` (decimal), ``relay.part`` (where it is not 0: the two records of a key change, the
rows of a transaction payload or of a snapshot chunk).

A snapshot chunk (an entry marked by ``relay.source.snapshot``) becomes one INSERT per row, every row with
the chunk's sequence (the entry sits at its binlog place ``P - 1``, see that module) and ``part`` =
((the chunk's ordinal among the chunks put at that place << 21) | the row's ordinal in the chunk) << 1:
its identity is (source id, sequence, part).

The change identity — what consumers de-duplicate by — is (source id, sequence); the sequence orders a
key's changes. It is ``(generation << 52) | (file_number << 32) | (event_start_offset + row_index)``:
``file_number`` is the numeric suffix of the binlog file name (``mysql-bin.000123`` → 123, below 2^20),
``generation`` the binlog history the entry was read in (``Entry.generation``, saved in the resume point,
below 2^11; +1 on a failover to the standby and on ``relay positions set``). Binlog offsets are 32-bit,
and a row index is smaller than its event's length, so ``start + row_index`` stays below the next
event's start: the sequence grows along a source's binlog (files are numbered in order), every later
generation sorts after every earlier one whatever its file numbers, and it depends only on where the
change is and the saved generation, so a re-published change gets the same number. The sequence is a
non-negative signed 64-bit integer for Java and Spark readers; generation 0 gives the numbers of earlier
versions. A file name without a numeric suffix, a file number, offset or generation past its bits raises
``SequenceError``: the relay stops rather than publish an unordered number.

The source block of a value names the source id and the server read from (``SourceIdentity``:
``host:port``, server id — the event's own when the configured one is 0 —, server UUID), the physical
db and table, the event's file, start offset and GTID, and the row's index in its event.

Key columns are checked (``Route.check_columns``) the first time a (db, table, columns) is seen; a
``MappingError`` propagates and stops the relay (fail closed). ``mapping`` is a plain attribute: the
caller may swap in a new mapping between batches; cached plans are dropped when it does.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import lru_cache

from mapping.checks import KEY_SHARD_NONE, KEY_SHARD_PHYSICAL, SHARD_FIELD
from mapping.model import Mapping, Route
from relay.binlog.events import ColumnMeta, RowImage
from relay.canal.entry import Entry, EntryType, EventType, RowChange
from relay.common import binlog_names
from relay.errors import CodecError, MappingError, SequenceError
from relay.kafka import canal_json as codec_json
from relay.kafka import canal_protobuf as codec_protobuf
from relay.kafka.records import Record
from relay.positions.store import MAX_GENERATION, SourceIdentity
from relay.source.snapshot import SNAPSHOT_PROP, SnapshotEntry

log = logging.getLogger(__name__)

H_DB = "relay.db"
H_TABLE = "relay.table"
H_PHYSICAL_DB = "relay.physical.db"
H_PHYSICAL_TABLE = "relay.physical.table"
H_TYPE = "relay.type"
H_TAG = "relay.tag"
H_SEQUENCE = "relay.sequence"
H_SOURCE_ID = "relay.source.id"
H_PART = "relay.part"
H_SNAPSHOT = SNAPSHOT_PROP  # "true" on a snapshot read (relay.source.snapshot); absent on live changes
_SNAPSHOT_MARK = (SNAPSHOT_PROP, "true")

MAX_OFFSET = 1 << 32
FILE_BITS = 20
GENERATION_SHIFT = 32 + FILE_BITS
MAX_FILE_NUMBER = (1 << FILE_BITS) - 1
assert MAX_GENERATION == (1 << (63 - GENERATION_SHIFT)) - 1  # the sequence stays below 2^63
PLAN_CACHE_SIZE = 65536

_ROW_TYPES = frozenset({EventType.INSERT, EventType.UPDATE, EventType.DELETE})
_TYPE_NAMES = {t: t.name for t in EventType}
_FILE_NUMBER = re.compile(r"\.(\d+)$")
_MISS = object()

Headers = tuple[tuple[str, bytes], ...]


@lru_cache(maxsize=1024)
def file_number(journal: str) -> int:
    """The numeric suffix of a binlog file name: ``mysql-bin.000123`` → 123 (``SequenceError`` when none)."""
    number = binlog_names.file_number(journal)
    if number is None:
        raise SequenceError(
            f"binlog file name {journal!r} has no numeric suffix (expected like mysql-bin.000123)"
        )
    if number > MAX_FILE_NUMBER:
        raise SequenceError(f"binlog file number of {journal!r} is above {MAX_FILE_NUMBER}")
    return number


def sequence(journal: str, offset: int, row_index: int, generation: int = 0) -> int:
    """The stable, monotonic order key of row ``row_index`` of the event at ``journal``:``offset``, read
    under binlog history ``generation`` (see the module docstring)."""
    if offset < 0 or row_index < 0 or offset + row_index >= MAX_OFFSET:
        raise SequenceError(
            f"binlog position {journal}:{offset} row {row_index} is outside 32-bit offsets; "
            "no sequence can order it"
        )
    if not 0 <= generation <= MAX_GENERATION:
        raise SequenceError(
            f"generation {generation} is outside 0..{MAX_GENERATION}; "
            f"no sequence can order {journal}:{offset}"
        )
    return (generation << GENERATION_SHIFT) | (file_number(journal) << 32) | (offset + row_index)


def entry_sequence(entry: Entry, row_index: int = 0) -> int:
    """``sequence`` of row ``row_index`` of ``entry``, under the generation it was read in."""
    h = entry.header
    return sequence(h.logfile_name, h.logfile_offset, row_index, entry.generation)


# Rows of one event inside a transaction payload: the row's ordinal sits above bit 1 of ``part``, the
# payload event's ordinal above it (see ``row_part``).
MAX_PAYLOAD_ROWS = 1 << 21


def row_part(entry: Entry, row_index: int) -> int | None:
    """The ``part`` of a row's records beyond its ``sequence``: None (0) for an event in its own place
    in the binlog; inside a transaction payload, where every event has the payload's place, the event's
    ordinal in the payload and the row's ordinal in the event, doubled so the two records of a key
    change (+0, +1) stay apart. (sequence, part) is then unique and in binlog order."""
    if entry.payload_index < 0:
        return None
    if row_index >= MAX_PAYLOAD_ROWS:
        raise SequenceError(
            f"{entry.header.logfile_name}:{entry.header.logfile_offset}: a payload event with more than "
            f"{MAX_PAYLOAD_ROWS} rows; no (sequence, part) can order it"
        )
    return ((entry.payload_index << 21) | row_index) << 1


def _text(value: str) -> bytes:
    # surrogateescape gives back the exact bytes of a name the binlog parser could not decode.
    return value.encode("utf-8", "surrogateescape")


@dataclass(frozen=True, slots=True)
class _Plan:
    """What every row of one physical table (with these columns) shares."""

    route: Route
    columns: tuple[ColumnMeta, ...]
    key_columns: tuple[tuple[str, int], ...] | None  # (name in the key, column index); None: no key
    fallback_key: bytes
    headers: Headers  # db, table, physical db, physical table
    tag: Headers  # () or the tag header
    json: codec_json.JsonTable | None
    # (object format, column indexes) of the key columns, for distinct key names; None otherwise
    key_text: tuple[str, tuple[int, ...]] | None = None
    # the ``_shard`` value: a constant (``physical``) or a column index (``column:<name>``); None: none
    shard: str | int | None = None
    # column indexes whose change changes the key (key columns and shard column): an UPDATE touching
    # one of them is published as DELETE (old key) + INSERT (new key)
    key_indexes: tuple[int, ...] = ()
    compact: bool = False  # the topic is compacted: a tombstone follows every DELETE


def _key_columns(route: Route, columns: tuple[ColumnMeta, ...]) -> tuple[tuple[str, int], ...] | None:
    checked = route.check_columns([c.name for c in columns])  # raises MappingError (fail closed)
    if checked is None or route.key_columns is None:
        return tuple((c.name, c.index) for c in columns if c.is_key) or None
    index = {c.name: c.index for c in columns}
    return tuple((wanted, index[actual]) for wanted, actual in zip(route.key_columns, checked, strict=True))


def _route_headers(route: Route) -> tuple[Headers, Headers]:
    headers = (
        (H_DB, _text(route.logical_db)),
        (H_TABLE, _text(route.logical_table)),
        (H_PHYSICAL_DB, _text(route.physical_db)),
        (H_PHYSICAL_TABLE, _text(route.physical_table)),
    )
    tag = ((H_TAG, _text(route.tag)),) if route.tag is not None else ()
    return headers, tag


def _shard(route: Route, columns: tuple[ColumnMeta, ...]) -> str | int | None:
    """The key's ``_shard`` value: the physical ``db.table``, or the index of the shard column."""
    if route.key_shard == KEY_SHARD_PHYSICAL:
        return f"{route.physical_db}.{route.physical_table}"
    column = route.check_shard_column([c.name for c in columns])  # raises MappingError (fail closed)
    return None if column is None else next(c.index for c in columns if c.name == column)


def _key_text(
    key_columns: tuple[tuple[str, int], ...], shard: str | int | None
) -> tuple[str, tuple[int, ...]] | None:
    """The key's (object format, column indexes) for distinct key names; None otherwise."""
    if len({name for name, _ in key_columns}) != len(key_columns):
        return None
    fragments = [f"{codec_json.dumps(name)}:" for name, _ in key_columns]
    indexes = tuple(i for _, i in key_columns)
    if isinstance(shard, int):
        return codec_json.object_format([f'"{SHARD_FIELD}":', *fragments]), (shard, *indexes)
    form = codec_json.object_format(fragments)
    if isinstance(shard, str):  # a constant: written into the format, its % escaped
        constant = f'"{SHARD_FIELD}":{codec_json.dumps(shard)}'.replace("%", "%%")
        form = "{" + constant + "," + form[1:]
    return form, indexes


def _plan(route: Route, columns: tuple[ColumnMeta, ...], compact: bool) -> _Plan:
    headers, tag = _route_headers(route)
    json_table = codec_json.json_table(route, columns) if route.codec == "canal-json" else None
    key_columns = _key_columns(route, columns)
    shard = None
    key_text = None
    key_indexes: tuple[int, ...] = ()
    if key_columns is not None:
        if route.key_shard != KEY_SHARD_NONE and any(n.lower() == SHARD_FIELD for n, _ in key_columns):
            where = f"{route.physical_db}.{route.physical_table}"
            raise MappingError(route.key_shard_rule, f"{where} has a key column named {SHARD_FIELD}")
        shard = _shard(route, columns)
        key_text = _key_text(key_columns, shard)
        key_indexes = tuple(
            sorted({i for _, i in key_columns} | ({shard} if isinstance(shard, int) else set()))
        )
    return _Plan(
        route=route,
        columns=columns,
        key_text=key_text,
        key_columns=key_columns,
        fallback_key=_text(f"{route.physical_db}.{route.physical_table}"),
        headers=headers,
        tag=tag,
        json=json_table,
        shard=shard,
        key_indexes=key_indexes,
        compact=compact,
    )


def _key_changes(plan: _Plan, row: RowImage) -> bool:
    """Whether an UPDATE row moves to another record key (a key or shard column changed)."""
    before, after = row.before, row.after
    if before is None or after is None:
        return False
    for i in plan.key_indexes:  # a loop, not any(<generator>): this runs for every UPDATE row
        if before[i] != after[i]:
            return RecordEncoder._key(plan, before) != RecordEncoder._key(plan, after)
    return False


def _old(row: RowImage) -> RowImage:
    return RowImage(row.before, None)


def _new(row: RowImage) -> RowImage:
    return RowImage(None, row.after)


def _as(entry: Entry, rc: RowChange, event_type: EventType) -> tuple[Entry, RowChange]:
    """``entry`` and ``rc`` as another row event type (the halves of a key change)."""
    return replace(entry, header=replace(entry.header, event_type=event_type)), replace(
        rc, event_type=event_type
    )


def _with_part(value: bytes, part: int) -> bytes:
    """A canal-json value with ``"part"`` after its last field (``sequence``)."""
    return b'%s,"part":%d}' % (value[:-1], part)


def _identity(seq: int, part: int | None) -> Headers:
    """The change identity's headers: ``relay.sequence``, and ``relay.part`` where it is not 0."""
    if part is None:
        return ((H_SEQUENCE, str(seq).encode()),)
    return ((H_SEQUENCE, str(seq).encode()), (H_PART, str(part).encode()))


def _tombstone(record: Record) -> Record:
    """The compaction tombstone of a DELETE record: same topic, key and headers, null value."""
    return Record(record.topic, None, record.key, None, record.headers)


def compacted(mapping: Mapping) -> bool:
    """Whether the mapping's topics are compacted (their ``cleanup.policy`` holds ``compact``)."""
    return "compact" in dict(mapping.topics.config).get("cleanup.policy", "")


class RecordEncoder:
    """Entries → records. One per relay instance, used by the publisher thread only (not thread-safe)."""

    def __init__(
        self,
        mapping: Mapping,
        source: SourceIdentity,
        *,
        ddl_topic: str | None,
        partitions: Callable[[str], int],
        source_id: str = "",
    ) -> None:
        self.mapping = mapping  # may be replaced between batches (hot reload)
        self.source = source
        self.source_id = source_id
        self._source_header = (H_SOURCE_ID, _text(source_id))
        self.ddl_topic = ddl_topic
        self.partitions = partitions
        self._plans: dict[tuple[str, str], _Plan | None] = {}
        self._plans_of: Mapping | None = None
        self._topics: set[str] = set()
        self._servers: dict[int, str] = {}

    def known_tables(self) -> list[tuple[str, str, tuple[str, ...] | None]]:
        """(db, table, column names) of the tables encoded since the mapping last changed (None: the
        table is dropped, its columns unknown): what a new mapping is checked against before a switch."""
        return [
            (db, table, None if plan is None else tuple(c.name for c in plan.columns))
            for (db, table), plan in self._plans.items()
        ]

    def topics(self) -> set[str]:
        """Every topic this encoder has produced records for."""
        return set(self._topics)

    def encode(self, entry: Entry) -> list[Record]:
        """The records of one entry, in binlog order ([] for BEGIN/END and dropped tables)."""
        rc = entry.store_value
        if entry.entry_type != EntryType.ROWDATA or not isinstance(rc, RowChange):
            return []
        if rc.is_ddl:
            return self._ddl(entry, rc)
        if rc.event_type in _ROW_TYPES:
            if rc.props and _SNAPSHOT_MARK in rc.props:
                return self._snapshot_rows(entry, rc)
            return self._rows(entry, rc)
        return self._audit(entry, rc, None, entry_sequence(entry))

    # -- row changes ----------------------------------------------------------------------------------

    def _table_plan(self, db: str, table: str, columns: tuple[ColumnMeta, ...]) -> _Plan | None:
        if self.mapping is not self._plans_of:
            self._plans.clear()
            self._plans_of = self.mapping
        plan = self._plans.get((db, table), _MISS)
        if plan is None or (isinstance(plan, _Plan) and plan.columns is columns):
            return plan
        if isinstance(plan, _Plan) and plan.columns == columns:
            plan = replace(plan, columns=columns)  # same table map decoded again: identity for next time
        else:
            route = self.mapping.resolve(db, table)
            plan = None if route is None else _plan(route, columns, compacted(self.mapping))
        if len(self._plans) >= PLAN_CACHE_SIZE:
            self._plans.clear()
        self._plans[(db, table)] = plan
        return plan

    def _rows(self, entry: Entry, rc: RowChange) -> list[Record]:
        h = entry.header
        plan = self._table_plan(h.schema_name, h.table_name, rc.columns)
        if plan is None or not rc.rows:
            return []
        # Inside a transaction payload every row shares the payload's sequence; ``row_part`` orders them.
        in_payload = entry.payload_index >= 0
        if in_payload:
            first = entry_sequence(entry)
        else:
            first = entry_sequence(entry, len(rc.rows) - 1) - len(rc.rows) + 1
        route = plan.route
        self._topics.add(route.topic)
        type_name = _TYPE_NAMES[rc.event_type]  # Enum.name is a descriptor call: a dict is cheaper per row
        headers = (*plan.headers, (H_TYPE, type_name.encode()), *plan.tag, self._source_header)
        if plan.json is not None:
            return self._json_rows(entry, rc, plan, plan.json, first, headers, type_name)
        server = self.source.address
        update, delete = rc.event_type == EventType.UPDATE, rc.event_type == EventType.DELETE
        out: list[Record] = []
        for i, row in enumerate(rc.rows):
            seq = first if in_payload else first + i
            part = row_part(entry, i) if in_payload else None
            if update and _key_changes(plan, row):
                half = part or 0
                parts = (
                    codec_protobuf.row_value(
                        *_as(entry, rc, EventType.DELETE), _old(row), route, seq, server, self.source_id, half
                    ),
                    codec_protobuf.row_value(
                        *_as(entry, rc, EventType.INSERT),
                        _new(row),
                        route,
                        seq,
                        server,
                        self.source_id,
                        half + 1,
                    ),
                )
                out.extend(self._key_change(plan, row, seq, *parts, half=half))
                continue
            value = codec_protobuf.row_value(entry, rc, row, route, seq, server, self.source_id, part)
            key = self._key(plan, row.after if row.after is not None else row.before)
            out.append(Record(route.topic, None, key, value, (*headers, *_identity(seq, part))))
            if delete and plan.compact:
                out.append(_tombstone(out[-1]))
        return out

    def _json_rows(
        self,
        entry: Entry,
        rc: RowChange,
        plan: _Plan,
        table: codec_json.JsonTable,
        first: int,
        headers: Headers,
        type_name: str,
    ) -> list[Record]:
        je = codec_json.json_entry(table, self._server(entry.header.server_id), entry, type_name)
        keys, data_format = table.keys, table.data_format
        topic = plan.route.topic
        update = rc.event_type == EventType.UPDATE
        row_text, object_text, old_text, key_of, json_entry = (
            codec_json.row_text,
            codec_json.object_text,
            codec_json.old_text,
            self._key,
            codec_json.json_entry,
        )
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
            if update and _key_changes(plan, row):
                assert before is not None and after is not None
                server = self._server(entry.header.server_id)
                half = part or 0
                parts = (
                    _with_part(
                        row_text(
                            json_entry(table, server, entry, "DELETE"),
                            seq,
                            i,
                            object_text(data_format, before),
                            "null",
                            codec_json.instants_text(table, before) if table.instants else "",
                        ),
                        half,
                    ),
                    _with_part(
                        row_text(
                            json_entry(table, server, entry, "INSERT"),
                            seq,
                            i,
                            object_text(data_format, after),
                            "null",
                            codec_json.instants_text(table, after) if table.instants else "",
                        ),
                        half + 1,
                    ),
                )
                out.extend(self._key_change(plan, row, seq, *parts, half=half))
                continue
            old = (
                old_text(keys, before, after)
                if update and before is not None and after is not None
                else "null"
            )
            extra = codec_json.instants_text(table, image) if table.instants else ""
            data = fast(key_bytes, image) if fast is not None and key_bytes is not None else None
            if data is None:
                value = row_text(je, seq, i, object_text(data_format, image), old, extra)
            else:
                if middle is None:  # once per entry, and only where the C helper runs
                    middle, tail = je.middle.encode(), je.tail.encode()
                value = codec_json.row_bytes(middle, tail, seq, i, data, old, extra)
            if part is not None:
                value = _with_part(value, part)
            out.append(Record(topic, None, key_of(plan, image), value, (*headers, *_identity(seq, part))))
            if tombstones:
                out.append(_tombstone(out[-1]))
        return out

    def _key_change(
        self, plan: _Plan, row: RowImage, seq: int, deleted: bytes, inserted: bytes, *, half: int = 0
    ) -> list[Record]:
        """A key-changing UPDATE: the DELETE under the old key (and its tombstone on a compacted topic),
        then the INSERT under the new key; ``relay.part`` ``half`` and ``half`` + 1 (0 and 1 outside a
        transaction payload)."""
        topic, sequence_header = plan.route.topic, (H_SEQUENCE, str(seq).encode())
        old_key, new_key = self._key(plan, row.before), self._key(plan, row.after)
        delete = Record(
            topic,
            None,
            old_key,
            deleted,
            (
                *plan.headers,
                (H_TYPE, b"DELETE"),
                *plan.tag,
                self._source_header,
                sequence_header,
                (H_PART, b"%d" % half),
            ),
        )
        insert = Record(
            topic,
            None,
            new_key,
            inserted,
            (
                *plan.headers,
                (H_TYPE, b"INSERT"),
                *plan.tag,
                self._source_header,
                sequence_header,
                (H_PART, b"%d" % (half + 1)),
            ),
        )
        return [delete, _tombstone(delete), insert] if plan.compact else [delete, insert]

    def _snapshot_rows(self, entry: Entry, rc: RowChange) -> list[Record]:
        """A snapshot chunk (``relay.source.snapshot``): INSERTs marked as snapshot reads, every row with
        the chunk's sequence and ``part`` = its ordinal in the chunk << 1 (so (source id, sequence, part)
        stays the identity), ``rowIndex`` 0."""
        h = entry.header
        plan = self._table_plan(h.schema_name, h.table_name, rc.columns)
        if plan is None or not rc.rows:
            return []
        route = plan.route
        self._topics.add(route.topic)
        seq = entry_sequence(entry)
        # Chunks put at one place share its sequence: the chunk's ordinal there and the row's in the chunk.
        chunk = entry.ordinal << 21 if isinstance(entry, SnapshotEntry) else 0
        headers = (
            *plan.headers,
            (H_TYPE, b"INSERT"),
            *plan.tag,
            self._source_header,
            (H_SNAPSHOT, b"true"),
        )
        out = []
        if plan.json is not None:
            je = codec_json.json_entry(plan.json, self._server(h.server_id), entry, "INSERT")
            key_bytes = plan.json.key_bytes
            fast = codec_json.object_bytes if key_bytes is not None else None
            middle: bytes | None = None
            tail = b""
            for i, row in enumerate(rc.rows):
                part = (chunk | i) << 1
                if row.after is None:  # a key snapshot's delete row (relay.source.snapshot_keys)
                    out.extend(self._snapshot_delete(plan, entry, rc, row, seq, part))
                    continue
                extra = codec_json.instants_text(plan.json, row.after) if plan.json.instants else ""
                raw = fast(key_bytes, row.after) if fast is not None and key_bytes is not None else None
                if raw is None:
                    data = codec_json.object_text(plan.json.data_format, row.after)
                    value = _with_part(codec_json.snapshot_row_text(je, seq, data, extra), part)
                else:
                    if middle is None:  # once per chunk, and only where the C helper runs
                        middle, tail = je.middle.encode(), je.tail.encode()
                    value = _with_part(codec_json.snapshot_row_bytes(middle, tail, seq, raw, extra), part)
                key = self._key(plan, row.after)
                out.append(Record(route.topic, None, key, value, (*headers, *_identity(seq, part))))
            return out
        server = self.source.address
        for i, row in enumerate(rc.rows):
            part = (chunk | i) << 1
            if row.after is None:
                out.extend(self._snapshot_delete(plan, entry, rc, row, seq, part))
                continue
            value = codec_protobuf.row_value(entry, rc, row, route, seq, server, self.source_id, part)
            key = self._key(plan, row.after)
            out.append(Record(route.topic, None, key, value, (*headers, *_identity(seq, part))))
        return out

    def _snapshot_delete(
        self, plan: _Plan, entry: Entry, rc: RowChange, row: RowImage, seq: int, part: int
    ) -> list[Record]:
        """A key snapshot's delete row: a DELETE of a key the table no longer has, marked as a snapshot
        read (the before image holds the key columns), then a tombstone on a compacted topic."""
        route = plan.route
        if plan.json is not None:
            je = codec_json.json_entry(plan.json, self._server(entry.header.server_id), entry, "DELETE")
            assert row.before is not None
            data = codec_json.object_text(plan.json.data_format, row.before)
            value = _with_part(codec_json.snapshot_row_text(je, seq, data), part)
        else:
            value = codec_protobuf.row_value(
                *_as(entry, rc, EventType.DELETE), row, route, seq, self.source.address, self.source_id, part
            )
        headers = (*plan.headers, (H_TYPE, b"DELETE"), *plan.tag, self._source_header, (H_SNAPSHOT, b"true"))
        record = Record(
            route.topic, None, self._key(plan, row.before), value, (*headers, *_identity(seq, part))
        )
        return [record, _tombstone(record)] if plan.compact else [record]

    @staticmethod
    def _key(plan: _Plan, image: tuple[str | None, ...] | None) -> bytes:
        if plan.key_columns is None or image is None:
            return plan.fallback_key
        if plan.key_text is None:  # repeated names in the key: the dict decides which value stays
            shard = plan.shard
            head = {} if shard is None else {SHARD_FIELD: image[shard] if isinstance(shard, int) else shard}
            return codec_json.dumps(head | {name: image[i] for name, i in plan.key_columns}).encode()
        form, indexes = plan.key_text
        return codec_json.object_text(form, [image[i] for i in indexes]).encode()

    def _server(self, header_server_id: int) -> str:
        """The source block's server fields. ``serverId`` is the configured source's id, or the event's
        when the source's is unknown (0)."""
        server_id = self.source.server_id or header_server_id
        text = self._servers.get(server_id)
        if text is None:
            text = self._servers[server_id] = codec_json.server_block(self.source, server_id, self.source_id)
        return text

    # -- statements -----------------------------------------------------------------------------------

    def _ddl(self, entry: Entry, rc: RowChange) -> list[Record]:
        h = entry.header
        seq = entry_sequence(entry)
        route = self.mapping.resolve(h.schema_name, h.table_name) if h.schema_name and h.table_name else None
        # The table's definition changes here: build its plan (and check its key columns) afresh.
        self._plans.pop((h.schema_name, h.table_name), None)
        out: list[Record] = []
        if route is not None:
            out.extend(self._barrier(entry, rc, route, seq))
        out.extend(self._audit(entry, rc, route, seq))
        return out

    def _barrier(self, entry: Entry, rc: RowChange, route: Route, seq: int) -> list[Record]:
        """The DDL to every partition of its table's topic."""
        count = self.partitions(route.topic)
        if count < 1:
            raise CodecError(f"topic {route.topic!r} reports {count} partitions; cannot place a DDL barrier")
        if route.codec == "canal-json":
            value = self._statement_json(entry, rc, route, seq)
        else:
            value = codec_protobuf.statement_value(entry, rc, route, seq, self.source.address, self.source_id)
        headers = self._statement_headers(entry, rc, route, seq)
        self._topics.add(route.topic)
        # A compacted topic refuses records without a key (Kafka: "Compacted topic cannot accept message
        # without key"): there the barrier gets one of its own shape, which no row key has.
        key = None
        if compacted(self.mapping):
            h = entry.header
            key = b'{"_ddl":%s}' % codec_json.dumps(f"{h.schema_name}.{h.table_name}").encode()
        return [Record(route.topic, p, key, value, headers) for p in range(count)]

    def _audit(self, entry: Entry, rc: RowChange, route: Route | None, seq: int) -> list[Record]:
        """One canal-json record to the DDL audit topic, keyed by the physical ``db.table`` (or db)."""
        if self.ddl_topic is None:
            return []
        h = entry.header
        db = h.schema_name or rc.ddl_schema_name
        key = f"{db}.{h.table_name}" if h.table_name else db
        value = self._statement_json(entry, rc, route, seq)
        self._topics.add(self.ddl_topic)
        return [
            Record(self.ddl_topic, None, _text(key), value, self._statement_headers(entry, rc, route, seq))
        ]

    def _statement_json(self, entry: Entry, rc: RowChange, route: Route | None, seq: int) -> bytes:
        h = entry.header
        physical = (h.schema_name, h.table_name)
        names = (route.logical_db, route.logical_table) if route is not None else physical
        server = {
            "id": self.source_id,
            "server": self.source.address,
            "serverId": self.source.server_id or h.server_id,
            "serverUuid": self.source.server_uuid,
        }
        return codec_json.statement_value(
            entry, rc, sequence=seq, names=names, physical=physical, server=server
        )

    def _statement_headers(self, entry: Entry, rc: RowChange, route: Route | None, seq: int) -> Headers:
        h = entry.header
        if route is not None:
            headers, tag = _route_headers(route)
        else:
            physical = ((H_PHYSICAL_DB, _text(h.schema_name)), (H_PHYSICAL_TABLE, _text(h.table_name)))
            headers = ((H_DB, _text(h.schema_name)), (H_TABLE, _text(h.table_name)), *physical)
            tag = ()
        return (
            *headers,
            (H_TYPE, rc.event_type.name.encode()),
            *tag,
            self._source_header,
            (H_SEQUENCE, str(seq).encode()),
        )
