"""DDL barriers and the DDL audit topic: a statement entry as records.

A DDL becomes the same message on EVERY partition of its table's topic (explicit partition, no key; on a
compacted topic, which refuses unkeyed records, the key ``{"_ddl":"<physical db.table>"}``) — a barrier
every consumer sees in order with the rows around it — plus one canal-json record to the DDL audit topic
(when configured) whatever the mapping says, keyed by the physical ``db.table`` (or db). A DDL without a
table (CREATE DATABASE …) goes to the audit topic only: a mapping resolves tables, not databases. Other
statements (QUERY, XA COMMIT …) go to the audit topic only.

``StatementRecords`` is the record encoder's (``relay.kafka.codec``) part for these, on the publisher
thread; it learns partition counts through the publisher's ``partitions`` (a topic is checked, or
created, on first use).
"""

from __future__ import annotations

from collections.abc import Callable

from mapping.model import Mapping, Route
from relay.canal.entry import Entry, RowChange
from relay.errors import CodecError
from relay.kafka import canal_json as codec_json
from relay.kafka import canal_protobuf as codec_protobuf
from relay.kafka.headers import (
    H_DB,
    H_PHYSICAL_DB,
    H_PHYSICAL_TABLE,
    H_SEQUENCE,
    H_TABLE,
    H_TYPE,
    Headers,
    Origin,
    route_headers,
    text,
)
from relay.kafka.plans import compacted
from relay.kafka.records import Record


class StatementRecords:
    """DDL barriers and audit records of one encoder; ``ddl_topic`` None: no audit topic."""

    def __init__(self, origin: Origin, ddl_topic: str | None, partitions: Callable[[str], int]) -> None:
        self.origin = origin
        self.ddl_topic = ddl_topic
        self.partitions = partitions

    def barrier(self, entry: Entry, rc: RowChange, route: Route, seq: int, mapping: Mapping) -> list[Record]:
        """The DDL to every partition of its table's topic."""
        count = self.partitions(route.topic)
        if count < 1:
            raise CodecError(f"topic {route.topic!r} reports {count} partitions; cannot place a DDL barrier")
        if route.codec == "canal-json":
            value = self._statement_json(entry, rc, route, seq)
        else:
            source = self.origin.source
            value = codec_protobuf.statement_value(
                entry, rc, route, seq, source.address, self.origin.source_id
            )
        headers = self.headers(entry, rc, route, seq)
        # A compacted topic refuses records without a key (Kafka: "Compacted topic cannot accept message
        # without key"): there the barrier gets one of its own shape, which no row key has.
        key = None
        if compacted(mapping):
            h = entry.header
            key = b'{"_ddl":%s}' % codec_json.dumps(f"{h.schema_name}.{h.table_name}").encode()
        return [Record(route.topic, p, key, value, headers) for p in range(count)]

    def audit(self, entry: Entry, rc: RowChange, route: Route | None, seq: int) -> list[Record]:
        """One canal-json record to the DDL audit topic, keyed by the physical ``db.table`` (or db)."""
        if self.ddl_topic is None:
            return []
        h = entry.header
        db = h.schema_name or rc.ddl_schema_name
        key = f"{db}.{h.table_name}" if h.table_name else db
        value = self._statement_json(entry, rc, route, seq)
        headers = self.headers(entry, rc, route, seq)
        return [Record(self.ddl_topic, None, text(key), value, headers)]

    def _statement_json(self, entry: Entry, rc: RowChange, route: Route | None, seq: int) -> bytes:
        h = entry.header
        physical = (h.schema_name, h.table_name)
        names = (route.logical_db, route.logical_table) if route is not None else physical
        source = self.origin.source
        server = {
            "id": self.origin.source_id,
            "server": source.address,
            "serverId": source.server_id or h.server_id,
            "serverUuid": source.server_uuid,
        }
        return codec_json.statement_value(
            entry, rc, sequence=seq, names=names, physical=physical, server=server
        )

    def headers(self, entry: Entry, rc: RowChange, route: Route | None, seq: int) -> Headers:
        """A statement record's headers: names (logical and physical), type, tag, source id, sequence."""
        h = entry.header
        if route is not None:
            headers, tag = route_headers(route)
        else:
            physical = ((H_PHYSICAL_DB, text(h.schema_name)), (H_PHYSICAL_TABLE, text(h.table_name)))
            headers = ((H_DB, text(h.schema_name)), (H_TABLE, text(h.table_name)), *physical)
            tag = ()
        return (
            *headers,
            (H_TYPE, rc.event_type.name.encode()),
            *tag,
            self.origin.header,
            (H_SEQUENCE, str(seq).encode()),
        )
