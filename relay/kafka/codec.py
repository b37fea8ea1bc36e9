"""Record codecs: canal Entries → Kafka records under the logical mapping.

Owns ``RecordEncoder``: routing each change through the mapping (``Mapping.resolve``), the record key,
the headers, the partition of DDL barriers and the sequence; the value bytes are built by
``relay.kafka.canal_json`` (canal-json) and ``relay.kafka.canal_protobuf`` (canal-protobuf). It runs on the
publisher thread, one batch of entries at a time, and hands ``relay.kafka.publisher.Record`` values to the
publisher.

What becomes what:

- BEGIN / END / heartbeats: nothing.
- A row change (INSERT/UPDATE/DELETE): one record per row to the route's topic; nothing when the mapping
  drops the table. Key = the LOGICAL key: a compact JSON object of the key columns' canal-text values
  in key order (``{"id":"42"}``), from the after image (the before image of a DELETE). The key columns
  are the route's (spelled as the mapping writes them, so every shard of a logical table makes the same
  key) or else the table's primary key. A table with neither is keyed by its physical ``db.table``:
  all its changes go to one partition, so their order holds. ``partition`` is None: the publisher
  places the key with Kafka's murmur2. An UPDATE that changes the key is keyed by the new key.
- A DDL: the same message to EVERY partition of its table's topic (explicit partition, no key) — a
  barrier every consumer sees in order with the rows around it — plus one canal-json record to the DDL
  audit topic (when configured) whatever the mapping says, keyed by the physical ``db.table`` (or db).
  A DDL without a table (CREATE DATABASE …) goes to the audit topic only: a mapping resolves tables,
  not databases. Other statements (QUERY, XA COMMIT …) go to the audit topic only.

Headers (bytes): ``relay.db``, ``relay.table`` (logical), ``relay.physical.db``,
``relay.physical.table``, ``relay.type`` (INSERT/UPDATE/DELETE/ALTER…), ``relay.tag`` (when the route
has one), ``relay.sequence`` (decimal).

The sequence — the order key consumers de-duplicate and apply changes by — is
``(file_number << 32) | (event_start_offset + row_index)``, ``file_number`` being the numeric suffix of
the binlog file name (``mysql-bin.000123`` → 123). Binlog offsets are 32-bit, and a row index is smaller
than its event's length, so ``start + row_index`` stays below the next event's start: the sequence grows
along one source's binlog (files are numbered in order) and depends only on where the change is, so a
re-published change gets the same number. File numbers are limited to 2^31 - 1, keeping the sequence a
positive signed 64-bit integer for Java and Spark readers. A file name without a numeric suffix, or an
offset at or past 2^32, raises ``SequenceError``: the relay stops rather than publish an unordered number.

The source block of a value names the server read from (``SourceIdentity``: ``host:port``, server id
— the event's own when the configured one is 0 —, server UUID), the physical db and table, the event's
file, start offset and GTID, and the row's index in its event.

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

from mapping.model import Mapping, Route
from relay.binlog.events import ColumnMeta
from relay.canal.entry import Entry, EntryType, EventType, RowChange
from relay.common import binlog_names
from relay.errors import CodecError, SequenceError
from relay.kafka import canal_json as codec_json
from relay.kafka import canal_protobuf as codec_protobuf
from relay.kafka.publisher import Record
from relay.positions.store import SourceIdentity

log = logging.getLogger(__name__)

H_DB = "relay.db"
H_TABLE = "relay.table"
H_PHYSICAL_DB = "relay.physical.db"
H_PHYSICAL_TABLE = "relay.physical.table"
H_TYPE = "relay.type"
H_TAG = "relay.tag"
H_SEQUENCE = "relay.sequence"

MAX_OFFSET = 1 << 32
MAX_FILE_NUMBER = (1 << 31) - 1
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


def sequence(journal: str, offset: int, row_index: int) -> int:
    """The stable, monotonic order key of row ``row_index`` of the event at ``journal``:``offset``."""
    if offset < 0 or row_index < 0 or offset + row_index >= MAX_OFFSET:
        raise SequenceError(
            f"binlog position {journal}:{offset} row {row_index} is outside 32-bit offsets; "
            "no sequence can order it"
        )
    return (file_number(journal) << 32) | (offset + row_index)


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


def _plan(route: Route, columns: tuple[ColumnMeta, ...]) -> _Plan:
    headers, tag = _route_headers(route)
    json_table = codec_json.json_table(route, columns) if route.codec == "canal-json" else None
    key_columns = _key_columns(route, columns)
    key_text = None
    if key_columns is not None and len({name for name, _ in key_columns}) == len(key_columns):
        key_text = (
            codec_json.object_format([f"{codec_json.dumps(name)}:" for name, _ in key_columns]),
            tuple(i for _, i in key_columns),
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
    )


class RecordEncoder:
    """Entries → records. One per relay instance, used by the publisher thread only (not thread-safe)."""

    def __init__(
        self,
        mapping: Mapping,
        source: SourceIdentity,
        *,
        ddl_topic: str | None,
        partitions: Callable[[str], int],
    ) -> None:
        self.mapping = mapping  # may be replaced between batches (hot reload)
        self.source = source
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
            return self._rows(entry, rc)
        return self._audit(
            entry, rc, None, sequence(entry.header.logfile_name, entry.header.logfile_offset, 0)
        )

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
            plan = None if route is None else _plan(route, columns)
        if len(self._plans) >= PLAN_CACHE_SIZE:
            self._plans.clear()
        self._plans[(db, table)] = plan
        return plan

    def _rows(self, entry: Entry, rc: RowChange) -> list[Record]:
        h = entry.header
        plan = self._table_plan(h.schema_name, h.table_name, rc.columns)
        if plan is None or not rc.rows:
            return []
        first = sequence(h.logfile_name, h.logfile_offset, len(rc.rows) - 1) - len(rc.rows) + 1
        route = plan.route
        self._topics.add(route.topic)
        type_name = _TYPE_NAMES[rc.event_type]  # Enum.name is a descriptor call: a dict is cheaper per row
        headers = (*plan.headers, (H_TYPE, type_name.encode()), *plan.tag)
        if plan.json is not None:
            return self._json_rows(entry, rc, plan, plan.json, first, headers, type_name)
        server = self.source.address
        out = []
        for i, row in enumerate(rc.rows):
            seq = first + i
            value = codec_protobuf.row_value(entry, rc, row, route, seq, server)
            key = self._key(plan, row.after if row.after is not None else row.before)
            out.append(Record(route.topic, None, key, value, (*headers, (H_SEQUENCE, str(seq).encode()))))
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
        row_text, object_text, old_text, key_of = (
            codec_json.row_text,
            codec_json.object_text,
            codec_json.old_text,
            self._key,
        )
        out = []
        for i, row in enumerate(rc.rows):
            seq = first + i
            before, after = row.before, row.after
            image = after if after is not None else before
            assert image is not None  # a row image has at least one side
            old = (
                old_text(keys, before, after)
                if update and before is not None and after is not None
                else "null"
            )
            extra = codec_json.instants_text(table, image) if table.instants else ""
            value = row_text(je, seq, i, object_text(data_format, image), old, extra)
            out.append(
                Record(topic, None, key_of(plan, image), value, (*headers, (H_SEQUENCE, str(seq).encode())))
            )
        return out

    @staticmethod
    def _key(plan: _Plan, image: tuple[str | None, ...] | None) -> bytes:
        if plan.key_columns is None or image is None:
            return plan.fallback_key
        if plan.key_text is None:  # repeated names in the key: the dict decides which value stays
            return codec_json.dumps({name: image[i] for name, i in plan.key_columns}).encode()
        form, indexes = plan.key_text
        return codec_json.object_text(form, [image[i] for i in indexes]).encode()

    def _server(self, header_server_id: int) -> str:
        """The source block's server fields. ``serverId`` is the configured source's id, or the event's
        when the source's is unknown (0)."""
        server_id = self.source.server_id or header_server_id
        text = self._servers.get(server_id)
        if text is None:
            text = self._servers[server_id] = codec_json.server_block(self.source, server_id)
        return text

    # -- statements -----------------------------------------------------------------------------------

    def _ddl(self, entry: Entry, rc: RowChange) -> list[Record]:
        h = entry.header
        seq = sequence(h.logfile_name, h.logfile_offset, 0)
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
            value = codec_protobuf.statement_value(entry, rc, route, seq, self.source.address)
        headers = self._statement_headers(entry, rc, route, seq)
        self._topics.add(route.topic)
        return [Record(route.topic, p, None, value, headers) for p in range(count)]

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
            "server": self.source.address,
            "serverId": self.source.server_id or h.server_id,
            "serverUuid": self.source.server_uuid,
        }
        return codec_json.statement_value(
            entry, rc, sequence=seq, names=names, physical=physical, server=server
        )

    @staticmethod
    def _statement_headers(entry: Entry, rc: RowChange, route: Route | None, seq: int) -> Headers:
        h = entry.header
        if route is not None:
            headers, tag = _route_headers(route)
        else:
            physical = ((H_PHYSICAL_DB, _text(h.schema_name)), (H_PHYSICAL_TABLE, _text(h.table_name)))
            headers = ((H_DB, _text(h.schema_name)), (H_TABLE, _text(h.table_name)), *physical)
            tag = ()
        return (*headers, (H_TYPE, rc.event_type.name.encode()), *tag, (H_SEQUENCE, str(seq).encode()))
