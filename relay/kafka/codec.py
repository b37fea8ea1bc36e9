"""Record codecs: canal Entries → Kafka records under the logical mapping.

Owns ``RecordEncoder``, which routes each change through the mapping (``Mapping.resolve``) and hands it to
the room that makes its records:

- ``relay.kafka.plans``: the routing plan of each physical table (route, columns, keys, headers), cached;
- ``relay.kafka.keys``, ``relay.kafka.headers``, ``relay.kafka.sequences``: record keys, headers, and the
  change identity (sequence, part);
- ``relay.kafka.json_rows`` / ``relay.kafka.protobuf_rows`` / ``relay.kafka.debezium_rows``: the row paths
  of the three codecs, whose value bytes ``relay.kafka.canal_json``, ``relay.kafka.canal_protobuf`` and
  ``relay.kafka.debezium_json`` build (debezium-json's DDL too: see ``relay.kafka.debezium_rows``);
- ``relay.kafka.barriers``: DDL barriers and the DDL audit topic.

It runs on the publisher thread, one batch of entries at a time, and hands ``relay.kafka.records.Record``
values to the publisher.

What becomes what:

- BEGIN / END / heartbeats: nothing.
- A row change (INSERT/UPDATE/DELETE): one record per row to the route's topic; nothing when the mapping
  drops the table. Key = the LOGICAL key (``relay.kafka.keys``); ``partition`` is None: the publisher
  places the key with Kafka's murmur2.
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
- A DDL: a barrier on every partition of its table's topic, plus a copy on the DDL audit topic
  (``relay.kafka.barriers``); other statements go to the audit topic only. A debezium-json table's DDL
  goes to the schema change topic instead of a barrier (a TRUNCATE: an ``op`` "t" event on every
  partition), and to the audit topic.

A snapshot chunk (an entry marked by ``relay.source.snapshot_entry``) becomes one INSERT per row carrying
the time the chunk was read (ms) as its execute time (canal-json ``es`` and ``ts``, canal-protobuf
``executeTime``; the entry itself keeps 0, see ``_read_at``), every row with the chunk's sequence (the
entry sits at its binlog place ``P - 1``, see that module) and ``part`` = ((the chunk's ordinal among
the chunks put at that place << 21) | the row's ordinal in the chunk) << 1: its identity is (source id,
sequence, part).

The change identity — (source id, sequence), see ``relay.kafka.sequences`` — and the header names
(``relay.kafka.headers``) are also importable from here, where readers of the records have always found
them.

The source block of a value names the source id and the server read from (``SourceIdentity``:
``host:port``, server id — the event's own when the configured one is 0 —, server UUID), the physical
db and table, the event's file, start offset and GTID, and the row's index in its event.

Column controls (``relay.kafka.columns``) are applied to a change's columns and images before either codec
sees them, for binlog rows and snapshot rows alike; a table without controls skips that step.

Key columns are checked (``Route.check_columns``) the first time a (db, table, columns) is seen; a
``MappingError`` propagates and stops the relay (fail closed). ``mapping`` is a plain attribute: the
caller may swap in a new mapping between batches; cached plans are dropped when it does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from mapping.model import Mapping, Route
from relay.binlog.events import ColumnMeta
from relay.canal.entry import Entry, EntryType, EventType, Header, RowChange
from relay.kafka import debezium_rows, json_rows, protobuf_rows
from relay.kafka.barriers import StatementRecords
from relay.kafka.headers import (
    H_DB,
    H_PART,
    H_PHYSICAL_DB,
    H_PHYSICAL_TABLE,
    H_SEQUENCE,
    H_SNAPSHOT,
    H_SOURCE_ID,
    H_TABLE,
    H_TAG,
    H_TYPE,
    Origin,
)
from relay.kafka.plans import PLAN_CACHE_SIZE, PlanCache, compacted
from relay.kafka.records import Record
from relay.kafka.sequences import (
    FILE_BITS,
    GENERATION_SHIFT,
    MAX_FILE_NUMBER,
    MAX_OFFSET,
    MAX_PAYLOAD_ROWS,
    entry_sequence,
    file_number,
    row_part,
    sequence,
)
from relay.positions.store import MAX_GENERATION, SourceIdentity
from relay.source.snapshot_entry import SNAPSHOT_PROP, SnapshotEntry

__all__ = [
    "FILE_BITS",
    "GENERATION_SHIFT",
    "H_DB",
    "H_PART",
    "H_PHYSICAL_DB",
    "H_PHYSICAL_TABLE",
    "H_SEQUENCE",
    "H_SNAPSHOT",
    "H_SOURCE_ID",
    "H_TABLE",
    "H_TAG",
    "H_TYPE",
    "MAX_FILE_NUMBER",
    "MAX_GENERATION",
    "MAX_OFFSET",
    "MAX_PAYLOAD_ROWS",
    "PLAN_CACHE_SIZE",
    "RecordEncoder",
    "compacted",
    "entry_sequence",
    "file_number",
    "row_part",
    "sequence",
]

log = logging.getLogger(__name__)

_SNAPSHOT_MARK = (SNAPSHOT_PROP, "true")
_ROW_TYPES = frozenset({EventType.INSERT, EventType.UPDATE, EventType.DELETE})
_TYPE_NAMES = {t: t.name for t in EventType}


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
        self._origin = Origin(source, source_id)
        self._plans = PlanCache()
        self._statements = StatementRecords(self._origin, ddl_topic, partitions)
        self._topics: set[str] = set()

    @property
    def source(self) -> SourceIdentity:
        """The server the records are read from (the relay makes a new encoder after a failover)."""
        return self._origin.source

    @property
    def source_id(self) -> str:
        return self._origin.source_id

    @property
    def ddl_topic(self) -> str | None:
        return self._statements.ddl_topic

    def known_tables(self) -> list[tuple[str, str, tuple[str, ...] | None]]:
        """(db, table, column names) of the tables encoded since the mapping last changed (None: the
        table is dropped, its columns unknown): what a new mapping is checked against before a switch."""
        return self._plans.known_tables()

    def known_columns(self) -> list[tuple[str, str, tuple[ColumnMeta, ...]]]:
        """(db, table, columns) of the tables encoded since the mapping last changed (not dropped): what a
        new mapping's column controls are checked against before a switch."""
        return self._plans.known_columns()

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

    def _rows(self, entry: Entry, rc: RowChange) -> list[Record]:
        h = entry.header
        plan = self._plans.get(self.mapping, h.schema_name, h.table_name, rc.columns)
        if plan is None or not rc.rows:
            return []
        if plan.projection is not None:  # column controls: the rows as the mapping publishes them
            rc = plan.projection.apply(rc)
        # Inside a transaction payload every row shares the payload's sequence; ``row_part`` orders them.
        if entry.payload_index >= 0:
            first = entry_sequence(entry)
        else:
            first = entry_sequence(entry, len(rc.rows) - 1) - len(rc.rows) + 1
        self._topics.add(plan.route.topic)
        type_name = _TYPE_NAMES[rc.event_type]  # Enum.name is a descriptor call: a dict is cheaper per row
        headers = (*plan.headers, (H_TYPE, type_name.encode()), *plan.tag, self._origin.header)
        if plan.json is not None:
            return json_rows.rows(self._origin, entry, rc, plan, plan.json, first, headers, type_name)
        if plan.debezium is not None:
            return debezium_rows.rows(self._origin, entry, rc, plan, first, headers)
        return protobuf_rows.rows(self._origin, entry, rc, plan, first, headers)

    def _snapshot_rows(self, entry: Entry, rc: RowChange) -> list[Record]:
        """A snapshot chunk (``relay.source.snapshot_entry``): INSERTs marked as snapshot reads, every row
        with the chunk's sequence and ``part`` = its ordinal in the chunk << 1 (so (source id, sequence, part)
        stays the identity), ``rowIndex`` 0."""
        h = entry.header
        plan = self._plans.get(self.mapping, h.schema_name, h.table_name, rc.columns)
        if plan is None or not rc.rows:
            return []
        if plan.projection is not None:
            rc = plan.projection.apply(rc)
        self._topics.add(plan.route.topic)
        seq = entry_sequence(entry)
        # Chunks put at one place share its sequence: the chunk's ordinal there and the row's in the chunk.
        chunk = entry.ordinal << 21 if isinstance(entry, SnapshotEntry) else 0
        if isinstance(entry, SnapshotEntry) and entry.read_ms > 0:
            entry = _read_at(entry, entry.read_ms)
        headers = (*plan.headers, (H_TYPE, b"INSERT"), *plan.tag, self._origin.header, (H_SNAPSHOT, b"true"))
        if plan.json is not None:
            return json_rows.snapshot_rows(self._origin, entry, rc, plan, seq, chunk, headers)
        if plan.debezium is not None:
            return debezium_rows.snapshot_rows(self._origin, entry, rc, plan, seq, chunk, headers)
        return protobuf_rows.snapshot_rows(self._origin, entry, rc, plan, seq, chunk, headers)

    def _ddl(self, entry: Entry, rc: RowChange) -> list[Record]:
        h = entry.header
        seq = entry_sequence(entry)
        route = self.mapping.resolve(h.schema_name, h.table_name) if h.schema_name and h.table_name else None
        # The table's definition changes here: build its plan (and check its key columns) afresh.
        self._plans.drop(h.schema_name, h.table_name)
        out: list[Record] = []
        if route is not None and route.codec == "debezium-json":
            out.extend(self._debezium_statement(entry, rc, route, seq))
        elif route is not None:
            out.extend(self._statements.barrier(entry, rc, route, seq, self.mapping))
            self._topics.add(route.topic)
        out.extend(self._audit(entry, rc, route, seq))
        return out

    def _debezium_statement(self, entry: Entry, rc: RowChange, route: Route, seq: int) -> list[Record]:
        """A debezium-json table's DDL: the schema change topic, or a truncate event (``debezium_rows``)."""
        headers = self._statements.headers(entry, rc, route, seq)
        mapping = self.mapping
        records = debezium_rows.statement(
            self._origin,
            entry,
            rc,
            route,
            compacted(mapping),
            mapping.debezium,
            self._statements.partitions,
            headers,
            lambda db, table: mapping.resolve(db, table) is not None,
        )
        self._topics.update(r.topic for r in records)
        return records

    def _audit(self, entry: Entry, rc: RowChange, route: Route | None, seq: int) -> list[Record]:
        records = self._statements.audit(entry, rc, route, seq)
        if records:
            self._topics.add(records[0].topic)
        return records


def _read_at(entry: Entry, read_ms: int) -> Entry:
    """A snapshot chunk as its records show it: with the time its rows were read as the execute time
    (canal-json ``es``/``ts``, canal-protobuf ``executeTime``). A copy for encoding only: the entry itself
    keeps execute time 0, which is what the resume point after it saves (``relay.positions.store``)."""
    h = entry.header
    header = Header(
        h.logfile_name, h.logfile_offset, h.server_id, read_ms, h.event_length, h.event_type,
        h.schema_name, h.table_name, h.gtid, h.props, h.version, h.serveren_code, h.source_type,
    )  # fmt: skip
    return Entry(
        header,
        entry.entry_type,
        entry.store_value,
        entry.txn,
        entry.txn_index,
        entry.closes_txn,
        entry.generation,
        entry.payload_index,
        entry.inner_size,
        entry.xa_hold,
    )
