"""A topic's records as the record browser shows them: canal-json, canal-protobuf and debezium-json decoded.

Owns ``decode`` — one record value into a ``Shown``: its format (told by the value itself: canal's protobuf
``Packet`` is binary, canal-json has ``isDdl``, a debezium-json envelope has ``op``, inside ``payload``
when schemas are on), the change type, the logical table, a one-line summary and the whole value as
pretty JSON for the detail view — and nothing else: the pages escape every string they show. canal-
protobuf goes through ``relay.canal.proto.convert.decode_messages_packet``, the conversion canal's own
Kafka client reads. Pure functions; no I/O.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from relay.canal.entry import EntryType, RowChange
from relay.canal.proto.convert import decode_messages_packet
from relay.errors import ProtoDecodeError

__all__ = ["Shown", "decode"]

_DEBEZIUM_OPS = {"c": "INSERT", "u": "UPDATE", "d": "DELETE", "r": "READ (snapshot)", "t": "TRUNCATE"}


@dataclass(frozen=True)
class Shown:
    format: str  # canal-json, canal-protobuf, debezium-json, tombstone, json, bytes
    type: str
    table: str
    summary: str
    detail: str  # pretty JSON (or the text/hex of a value that is none of the formats)


def decode(value: bytes | None) -> Shown:
    if value is None:
        return Shown("tombstone", "-", "", "(tombstone: a null value; compaction drops the key)", "null")
    if value[:1] in (b"{", b"["):
        try:
            data = json.loads(value)
        except ValueError:
            return _raw(value)
        return _json(data)
    try:
        batch_id, entries = decode_messages_packet(value)
    except ProtoDecodeError:
        return _raw(value)
    return _protobuf(batch_id, entries)


def _json(data: Any) -> Shown:
    detail = json.dumps(data, indent=2, ensure_ascii=False, sort_keys=False)
    if not isinstance(data, dict):
        return Shown("json", "-", "", _cut(json.dumps(data, ensure_ascii=False)), detail)
    if "isDdl" in data and "type" in data:
        table = ".".join(str(p) for p in (data.get("database"), data.get("table")) if p)
        if data.get("isDdl"):
            return Shown("canal-json", str(data.get("type")), table, _cut(str(data.get("sql", ""))), detail)
        rows = data.get("data") or [{}]
        return Shown("canal-json", str(data.get("type")), table, _row(rows[0]), detail)
    envelope = data.get("payload") if isinstance(data.get("payload"), dict) else data
    if isinstance(envelope, dict) and "op" in envelope and "source" in envelope:
        source = envelope.get("source") or {}
        table = ".".join(str(p) for p in (source.get("db"), source.get("table")) if p)
        kind = _DEBEZIUM_OPS.get(str(envelope.get("op")), str(envelope.get("op")))
        image = envelope.get("after") if envelope.get("after") is not None else envelope.get("before")
        return Shown("debezium-json", kind, table, _row(image or {}), detail)
    if isinstance(envelope, dict) and "ddl" in envelope:  # a debezium schema-change event
        return Shown(
            "debezium-json",
            "SCHEMA CHANGE",
            str(envelope.get("databaseName", "")),
            _cut(str(envelope["ddl"])),
            detail,
        )
    return Shown("json", "-", "", _cut(json.dumps(data, ensure_ascii=False)), detail)


def _protobuf(batch_id: int, entries: list[Any]) -> Shown:
    shown: list[dict[str, Any]] = []
    kind, table, summary = "-", "", ""
    for entry in entries:
        h = entry.header
        item: dict[str, Any] = {
            "entryType": EntryType(entry.entry_type).name,
            "logfile": f"{h.logfile_name}:{h.logfile_offset}",
            "executeTime": h.execute_time,
            "schemaName": h.schema_name,
            "tableName": h.table_name,
            "props": dict(h.props) if h.props else {},
        }
        value = entry.store_value
        if isinstance(value, RowChange):
            kind = value.event_type.name
            table = ".".join(p for p in (h.schema_name, h.table_name) if p)
            names = [c.name for c in value.columns]
            item["eventType"] = kind
            item["isDdl"] = value.is_ddl
            if value.is_ddl:
                item["sql"] = value.sql
                summary = _cut(value.sql)
            rows = []
            for row in value.rows:
                before = dict(zip(names, row.before, strict=False)) if row.before is not None else None
                after = dict(zip(names, row.after, strict=False)) if row.after is not None else None
                rows.append({"before": before, "after": after})
                summary = summary or _row(after if after is not None else before or {})
            item["rows"] = rows
        shown.append(item)
    detail = json.dumps({"batchId": batch_id, "entries": shown}, indent=2, ensure_ascii=False)
    return Shown("canal-protobuf", kind, table, summary, detail)


def _row(row: Any) -> str:
    if not isinstance(row, dict):
        return _cut(str(row))
    return _cut(", ".join(f"{k}={'NULL' if v is None else v}" for k, v in row.items()))


def _raw(value: bytes) -> Shown:
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError:
        return Shown("bytes", "-", "", f"{len(value)} bytes", value[:4096].hex(" "))
    return Shown("text", "-", "", _cut(text), text[:65536])


def _cut(text: str, limit: int = 160) -> str:
    one = " ".join(text.split())
    return one if len(one) <= limit else one[: limit - 1] + "…"
