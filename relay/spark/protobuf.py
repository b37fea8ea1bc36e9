"""canal-protobuf record values → change dicts (the ``CHANGE_TYPE`` of ``relay.spark.decode``).

Runs inside the Python UDF of ``relay.spark.decode.changes`` on executor workers, one value at a time.
Decodes with ``relay.canal.proto.convert`` (canal's ``Packet(MESSAGES)`` holding one Entry narrowed to one
row)
and reads our extensions from the header props: ``relay.physical.db``/``.table``, ``relay.sequence``,
``relay.server``, ``relay.source.id``, and the column prop ``utcMicros`` (a TIMESTAMP value's instant).
Pure function; a value that is not a canal packet raises ``ProtoDecodeError``.
"""

from __future__ import annotations

from typing import Any

from relay.canal.entry import Column, RowChange
from relay.canal.proto.convert import decode_messages_packet
from relay.errors import ProtoDecodeError


def _image(columns: list[Column]) -> dict[str, str | None] | None:
    return {c.name: None if c.is_null else c.value for c in columns} if columns else None


def change_of_packet(value: bytes) -> dict[str, Any]:
    _, entries = decode_messages_packet(value)
    if len(entries) != 1:
        raise ProtoDecodeError(f"expected one entry per record, got {len(entries)}")
    entry = entries[0]
    h = entry.header
    rc = entry.store_value
    if not isinstance(rc, RowChange):
        raise ProtoDecodeError(f"expected a ROWDATA entry, got {entry.entry_type!r}")
    props = dict(h.props)
    rows = rc.row_datas()
    before = _image(rows[0].before_columns) if rows else None
    after = _image(rows[0].after_columns) if rows else None
    columns = (rows[0].after_columns or rows[0].before_columns) if rows else []
    sequence = props.get("relay.sequence")
    return {
        "database": h.schema_name,
        "table": h.table_name,
        "type": rc.event_type.name,
        "is_ddl": bool(rc.is_ddl),
        "sql": rc.sql,
        "sequence": int(sequence) if sequence else None,
        "part": int(props.get("relay.part", "0")),
        "source_id": props.get("relay.source.id", ""),
        "es": h.execute_time,
        "ts": h.execute_time,
        "gtid": h.gtid,
        "pk_names": [c.name for c in columns if c.is_key] or None,
        "sql_type": {c.name: c.sql_type for c in columns} if columns else None,
        "mysql_type": {c.name: c.mysql_type for c in columns} if columns else None,
        "before": before,
        "after": after,
        "source": {
            "id": props.get("relay.source.id"),
            "server": props.get("relay.server"),
            "serverId": h.server_id,
            "serverUuid": None,
            "database": props.get("relay.physical.db"),
            "table": props.get("relay.physical.table"),
            "file": h.logfile_name,
            "offset": h.logfile_offset,
            "gtid": h.gtid,
            "rowIndex": None,
        },
        "snapshot": ("relay.snapshot", "true") in [*h.props, *rc.props],
        "instants": {c.name: int(v) for c in columns for k, v in c.props if k == "utcMicros"} or None,
    }
