"""The ``debezium-json`` record: Debezium's MySQL change event (key struct and envelope) as Kafka Connect's
JsonConverter writes it, with or without the ``schema`` part.

Owned here: the bytes of a debezium-json key and value, built from fragments like canal-json's
(``relay.kafka.canal_json``). What every row of one (route, columns) shares — the fields' encoders
(``relay.kafka.debezium_types``), the key and value schemas, the logical and physical names of the
source block — is made once into a ``DebeziumTable``; what every row of one entry shares (event time,
binlog file and offset, GTID, server id) once per entry (``source_head``); per row only the before and
after images, the row index and the op. ``relay.kafka.debezium_rows`` calls this on the publisher thread.

The value (Debezium's envelope, its field order)::

    {"before":{…}|null,"after":{…}|null,"source":{…},"op":"c|u|d|r|t","ts_ms":…,"transaction":null}

- ``source``: ``version`` (the relay's), ``connector`` "mysql", ``name`` the relay's source id, ``ts_ms``
  the binlog event time, ``snapshot`` "true" on snapshot reads else "false", ``db`` / ``table`` the
  LOGICAL names, ``sequence`` null, ``server_id``, ``gtid`` (null without one), ``file``, ``pos`` (the
  event's start offset), ``row`` (the row's index in its event), ``thread`` and ``query`` null, then ours:
  ``physical_db`` and ``physical_table``.
- ``ts_ms`` is the binlog event time, like canal-json's ``ts``: a re-published change is byte-identical
  (Debezium writes its processing time there; the Kafka record timestamp is ours).
- ``transaction`` is null: transaction metadata is off (Debezium's default, ``provide.transaction.metadata``
  false). ``envelope(..., transaction=...)`` takes the JSON text of the block
  ``{"id":…,"total_order":…,"data_collection_order":…}`` for when it is on.
- The key is Debezium's key struct of the LOGICAL key (``relay.kafka.keys``): the key columns' fields in
  key order, encoded like the value's, with ``_shard`` (string) first under a ``key_shard`` setting. A
  table with no key is keyed ``{"_table":"<physical db.table>"}`` (Debezium leaves such keys null; one
  constant key keeps the table's changes in one partition, in order).
- With ``schemas_enable`` (the mapping's ``debezium`` section), key and value are
  ``{"schema":…,"payload":…}``: struct schemas named ``<logical db>.<logical table>.Key``, ``….Value``
  (before/after) and ``….Envelope`` (Debezium's ``<prefix>.<db>.<table>``: the same on every topic the
  table's records are in, e.g. after a table move), the source ``io.debezium.connector.mysql.Source``, the
  transaction block ``event.block``; fields carry Debezium's semantic names and parameters.

A DDL (``schema_change``) becomes Debezium's schema-change event for the schema change topic: key
``{"databaseName":…}``, value ``{"source":…,"ts_ms":…,"databaseName":…,"schemaName":null,"ddl":…,
"tableChanges":[…]}``: the captured tables the DDL created, altered or dropped, with their definitions
from the schema history (``relay.kafka.debezium_ddl``; ``[]`` when the history is off or did not
understand the DDL). A TRUNCATE becomes an ``op`` "t" event.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mapping.key_shard import SHARD_FIELD
from mapping.model import Route
from relay import __version__
from relay.binlog.events import ColumnMeta
from relay.canal.entry import Entry
from relay.kafka.debezium_ddl import CHANGE_SCHEMA
from relay.kafka.debezium_types import DebeziumField, field_of, zero_value
from relay.kafka.keys import KeyShape

_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
_dumps_ascii = json.JSONEncoder(ensure_ascii=True, separators=(",", ":")).encode
_quote = json.encoder.encode_basestring
TABLE_FIELD = "_table"  # the key field of a table without key columns

Image = Sequence[str | None]


def _optional(schema: dict[str, Any], name: str, optional: bool) -> dict[str, Any]:
    """A field schema in Kafka Connect's order: type first, then ``optional``, the rest, ``field``."""
    return {
        "type": schema["type"],
        "optional": optional,
        **{k: v for k, v in schema.items() if k != "type"},
        "field": name,
    }


def _string_field(name: str, optional: bool = False) -> dict[str, Any]:
    return {"type": "string", "optional": optional, "field": name}


SOURCE_SCHEMA: dict[str, Any] = {
    "type": "struct",
    "fields": [
        _string_field("version"),
        _string_field("connector"),
        _string_field("name"),
        {"type": "int64", "optional": False, "field": "ts_ms"},
        {
            "type": "string",
            "optional": True,
            "name": "io.debezium.data.Enum",
            "version": 1,
            "parameters": {"allowed": "true,last,false,incremental"},
            "default": "false",
            "field": "snapshot",
        },
        _string_field("db"),
        _string_field("sequence", True),
        _string_field("table", True),
        {"type": "int64", "optional": False, "field": "server_id"},
        _string_field("gtid", True),
        _string_field("file"),
        {"type": "int64", "optional": False, "field": "pos"},
        {"type": "int32", "optional": False, "field": "row"},
        {"type": "int64", "optional": True, "field": "thread"},
        _string_field("query", True),
        _string_field("physical_db"),
        _string_field("physical_table", True),
    ],
    "optional": False,
    "name": "io.debezium.connector.mysql.Source",
    "field": "source",
}

TRANSACTION_SCHEMA: dict[str, Any] = {
    "type": "struct",
    "fields": [
        _string_field("id"),
        {"type": "int64", "optional": False, "field": "total_order"},
        {"type": "int64", "optional": False, "field": "data_collection_order"},
    ],
    "optional": True,
    "name": "event.block",
    "version": 1,
    "field": "transaction",
}


@dataclass(frozen=True, slots=True)
class DebeziumTable:
    """What every debezium-json record of one (route, columns) shares."""

    fields: tuple[DebeziumField, ...]
    names: tuple[str, ...]  # the ``"name":`` fragment of each column
    zeros: tuple[str, ...]  # a zero temporal value's JSON in each column (null, or the epoch's value)
    key_fields: tuple[tuple[str, int], ...]  # (``"name":`` fragment, column index) of the key columns
    key_head: str  # the key object's constant leading fields: ``"_shard":…,`` or ``"_table":…``
    shard: int | None  # the index of a ``column:`` shard column (its text goes first in the key)
    key_open: str  # what precedes the key payload: ``{"schema":…,"payload":`` or ""
    value_open: str  # what precedes the envelope: ``{"schema":…,"payload":`` or ""
    close: str  # "}" with schemas, else ""
    source_tail: str  # the source block after ``"row":N``: thread, query, physical names
    logical: str  # ``"db":…,"sequence":null,"table":…`` (inside the source block)


def debezium_table(
    route: Route, columns: Sequence[ColumnMeta], key: KeyShape, schemas: bool, decimal: str
) -> DebeziumTable:
    """The shared parts of ``route``'s records with ``columns`` (``CodecError`` for a type Debezium's
    MySQL connector documents no encoding of)."""
    fields = tuple(field_of(c, decimal) for c in columns)
    names = tuple(f"{_quote(c.name)}:" for c in columns)
    zeros = tuple("null" if f.nullable else zero_value(f.schema) for f in fields)
    key_fields: tuple[tuple[str, int], ...] = ()
    key_schema: list[dict[str, Any]] = []
    head, shard = "", None
    if key.key_columns is None:
        head = f'"{TABLE_FIELD}":{_quote(f"{route.physical_db}.{route.physical_table}")}'
        key_schema.append(_string_field(TABLE_FIELD))
    else:
        if key.shard is not None:
            key_schema.append(_string_field(SHARD_FIELD))
            if isinstance(key.shard, int):
                shard = key.shard
            else:
                head = f'"{SHARD_FIELD}":{_quote(key.shard)}'
        seen: dict[str, int] = {}
        for name, index in key.key_columns:  # a repeated name: the last one stays, as in the dict form
            seen[name] = index
        key_fields = tuple((f"{_quote(n)}:", i) for n, i in seen.items())
        key_schema.extend(_optional(fields[i].schema, n, fields[i].nullable) for n, i in seen.items())
    name = f"{route.logical_db}.{route.logical_table}"  # the table's schema names, whichever topic holds it
    if schemas:
        key_struct = {"type": "struct", "fields": key_schema, "optional": False, "name": f"{name}.Key"}
        key_open = f'{{"schema":{_dumps(key_struct)},"payload":'
        value_open = f'{{"schema":{_dumps(_envelope_schema(name, fields))},"payload":'
        close = "}"
    else:
        key_open = value_open = close = ""
    logical = f'"db":{_quote(route.logical_db)},"sequence":null,"table":{_quote(route.logical_table)}'
    tail = source_tail(route.physical_db, route.physical_table)
    return DebeziumTable(
        fields, names, zeros, key_fields, head, shard, key_open, value_open, close, tail, logical
    )


def empty_table(route: Route, schemas: bool) -> DebeziumTable:
    """The shared parts of a record without row images (a truncate event): no columns, no key."""
    shape = KeyShape(key_columns=None, fallback_key=b"")
    return debezium_table(route, (), shape, schemas, "precise")


def quote_bytes(text: str) -> bytes:
    """A JSON string as UTF-8 (a name's undecodable bytes as they came)."""
    return _encode(_quote(text))


def _envelope_schema(name: str, fields: Sequence[DebeziumField]) -> dict[str, Any]:
    row = {
        "type": "struct",
        "fields": [_optional(f.schema, f.name, f.nullable) for f in fields],
        "optional": True,
        "name": f"{name}.Value",
    }
    return {
        "type": "struct",
        "fields": [
            {**row, "field": "before"},
            {**row, "field": "after"},
            SOURCE_SCHEMA,
            _string_field("op"),
            {"type": "int64", "optional": True, "field": "ts_ms"},
            TRANSACTION_SCHEMA,
        ],
        "optional": False,
        "name": f"{name}.Envelope",
        "version": 1,
    }


def image_text(table: DebeziumTable, image: Image | None) -> str:
    """A row image as the envelope's ``before`` / ``after`` object (``null`` for no image)."""
    if image is None:
        return "null"
    parts = []
    for i, value in enumerate(image):
        parts.append(table.names[i] + _value(table, i, value))
    return "{" + ",".join(parts) + "}"


def _value(table: DebeziumTable, i: int, value: str | None) -> str:
    if value is None:
        return "null"
    out = table.fields[i].encode(value)
    return table.zeros[i] if out is None else out


def key_bytes(table: DebeziumTable, image: Image) -> bytes:
    """The record key of a row image: Debezium's key struct of the logical key."""
    parts = [table.key_head] if table.key_head else []
    if table.shard is not None:
        shard = image[table.shard]
        parts.append(f'"{SHARD_FIELD}":' + ("null" if shard is None else _quote(shard)))
    parts.extend(name + _value(table, i, image[i]) for name, i in table.key_fields)
    return f"{table.key_open}{{{','.join(parts)}}}{table.close}".encode()


def source_head(source_id: str, server_id: int, entry: Entry, snapshot: bool, logical: str) -> str:
    """The source block up to ``"row":`` for the rows of one entry."""
    h = entry.header
    gtid = _quote(h.gtid) if h.gtid else "null"
    return (
        f'{{"version":{_quote(__version__)},"connector":"mysql","name":{_quote(source_id)},'
        f'"ts_ms":{h.execute_time},"snapshot":"{"true" if snapshot else "false"}",{logical},'
        f'"server_id":{server_id},"gtid":{gtid},"file":{_quote(h.logfile_name)},"pos":{h.logfile_offset},"row":'
    )


def source_tail(physical_db: str, physical_table: str) -> str:
    """The source block after ``"row":N``: ``thread``, ``query``, and our physical names."""
    return (
        f',"thread":null,"query":null,"physical_db":{_quote(physical_db)},'
        f'"physical_table":{_quote(physical_table)}}}'
    )


def envelope(
    table: DebeziumTable,
    head: str,
    row: int,
    op: str,
    ts_ms: int,
    before: str,
    after: str,
    transaction: str = "null",
) -> bytes:
    """One change event's value from its images' texts (``image_text``) and the entry's ``source_head``."""
    return (
        f'{table.value_open}{{"before":{before},"after":{after},"source":{head}{row}{table.source_tail},'
        f'"op":"{op}","ts_ms":{ts_ms},"transaction":{transaction}}}{table.close}'
    ).encode()


# ---- schema changes ---------------------------------------------------------------------------------

_SCHEMA_CHANGE_KEY_SCHEMA = {
    "type": "struct",
    "fields": [_string_field("databaseName")],
    "optional": False,
    "name": "io.debezium.connector.mysql.SchemaChangeKey",
}
_SCHEMA_CHANGE_VALUE_SCHEMA = {
    "type": "struct",
    "fields": [
        SOURCE_SCHEMA,
        {"type": "int64", "optional": False, "field": "ts_ms"},
        _string_field("databaseName", True),
        _string_field("schemaName", True),
        _string_field("ddl", True),
        {
            "type": "array",
            "items": CHANGE_SCHEMA,
            "optional": False,
            "field": "tableChanges",
        },
    ],
    "optional": False,
    "name": "io.debezium.connector.mysql.SchemaChangeValue",
}


@dataclass(frozen=True, slots=True)
class SchemaChange:
    """Where a DDL happened, in the names a schema-change event shows."""

    source_id: str
    server_id: int
    logical_db: str
    logical_table: str
    physical_db: str
    physical_table: str


def schema_change(
    change: SchemaChange, entry: Entry, ddl: str, schemas: bool, tables: str = "[]"
) -> tuple[bytes, bytes]:
    """(key, value) of Debezium's schema-change event for ``ddl``; ``tables``: the JSON text of its
    ``tableChanges`` (``relay.kafka.debezium_ddl``)."""
    logical = f'"db":{_quote(change.logical_db)},"sequence":null,"table":{_quote(change.logical_table)}'
    head = source_head(change.source_id, change.server_id, entry, False, logical)
    tail = source_tail(change.physical_db, change.physical_table)
    payload = (
        f'{{"source":{head}0{tail},"ts_ms":{entry.header.execute_time},'
        f'"databaseName":{_quote(change.logical_db)},"schemaName":null,"ddl":{_text(ddl)},"tableChanges":{tables}}}'
    )
    key = f'{{"databaseName":{_quote(change.logical_db)}}}'
    if schemas:
        key = f'{{"schema":{_dumps(_SCHEMA_CHANGE_KEY_SCHEMA)},"payload":{key}}}'
        payload = f'{{"schema":{_dumps(_SCHEMA_CHANGE_VALUE_SCHEMA)},"payload":{payload}}}'
    return key.encode(), _encode(payload)


def _text(value: str) -> str:
    """A statement's text as JSON; bytes the binlog parser kept as lone surrogates (not UTF-8) as escapes."""
    try:
        value.encode()
    except UnicodeEncodeError:
        return _dumps_ascii(value)
    return _quote(value)


def _encode(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")
