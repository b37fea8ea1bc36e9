"""The ``tableChanges`` of a debezium-json schema-change event: the tables a DDL created, altered or
dropped, with their definitions, as Debezium's MySQL connector writes them on its schema change topic.

Owned here: the JSON text of the ``tableChanges`` array and its Kafka Connect schema. The definitions come
from the schema history (``relay.schema.tracker`` applies each DDL to its catalog on the binlog reader
thread and sets the changed tables on the event; ``relay.canal.entry_builder`` carries them on the DDL's
``RowChange.table_changes``); ``relay.kafka.debezium_rows`` calls this on the publisher thread.

The shape follows Debezium's MySQL connector documentation, "Schema change topic" (the ``tableChanges``
array and its ``table`` / ``columns`` fields): per changed table ::

    {"type":"CREATE|ALTER|DROP","id":"\\"db\\".\\"table\\"","table":{"defaultCharsetName":…,
     "primaryKeyColumnNames":[…],"columns":[{"name","jdbcType","nativeType","typeName","typeExpression",
     "charsetName","length","scale","position","optional","autoIncremented","generated","comment",
     "hasDefaultValue","enumValues"},…],"comment":null}}

- ``id`` is Debezium's quoting of the PHYSICAL table (``"db"."table"``), the table whose definition it is
  (shards of one logical table may differ while an ALTER rolls through them); the event's ``source``
  block names the logical and the physical table beside each other.
- A DROP shows the definition the table had; a RENAME is a DROP of the old name and a CREATE of the new.
- ``jdbcType`` is the ``java.sql.Types`` code Debezium's MySQL DDL parser gives the type; ``typeName`` and
  ``typeExpression`` the type's name in capitals (``INT UNSIGNED``); ``length`` the type's first number
  (a string's length, DECIMAL's precision, a time's fraction digits, BIT's width) and ``scale`` DECIMAL's
  scale; ``charsetName`` a character column's charset (null for others); ``position`` 1-based;
  ``enumValues`` an ENUM's or SET's members.
- What the history does not keep is null: ``nativeType`` (null in Debezium's MySQL events too),
  ``autoIncremented``, ``generated``, ``comment``, ``hasDefaultValue``, and ``optional`` of a column outside
  the primary key (a key column is NOT NULL: ``optional`` false).
- Only tables the mapping captures are listed. ``tableChanges`` is ``[]`` when the schema history is off
  (``schema.history``), when the DDL was not understood (the history could not apply it), and for a DDL
  that changes no table (CREATE DATABASE, a no-op).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from relay.schema.model import CHARACTER, ColumnDef, TableChange, TableDef

_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode

# java.sql.Types codes, as Debezium's MySQL DDL parser assigns them to MySQL's types.
_JDBC = {
    "bit": -7, "tinyint": -6, "smallint": 5, "mediumint": 4, "int": 4, "integer": 4, "bigint": -5,
    "decimal": 3, "float": 6, "double": 8, "char": 1, "varchar": 12, "tinytext": 12, "text": 12,
    "mediumtext": 12, "longtext": 12, "binary": -2, "varbinary": -3, "tinyblob": 2004, "blob": 2004,
    "mediumblob": 2004, "longblob": 2004, "date": 91, "time": 92, "datetime": 93, "timestamp": 2014,
    "year": 4, "enum": 1, "set": 1, "json": 1111, "geometry": 1111,
}  # fmt: skip
_OTHER = 1111


def _string(name: str, optional: bool = True) -> dict[str, Any]:
    return {"type": "string", "optional": optional, "field": name}


def _typed(kind: str, name: str, optional: bool = True) -> dict[str, Any]:
    return {"type": kind, "optional": optional, "field": name}


def _strings(name: str) -> dict[str, Any]:
    return {"type": "array", "items": {"type": "string", "optional": False}, "optional": True, "field": name}


_COLUMN_SCHEMA = {
    "type": "struct",
    "fields": [
        _string("name", False), _typed("int32", "jdbcType", False), _typed("int32", "nativeType"),
        _string("typeName", False), _string("typeExpression"), _string("charsetName"),
        _typed("int32", "length"), _typed("int32", "scale"), _typed("int32", "position", False),
        _typed("boolean", "optional"), _typed("boolean", "autoIncremented"), _typed("boolean", "generated"),
        _string("comment"), _typed("boolean", "hasDefaultValue"), _strings("enumValues"),
    ],
    "optional": False,
    "name": "io.debezium.connector.schema.Column",
}  # fmt: skip
_TABLE_SCHEMA = {
    "type": "struct",
    "fields": [
        _string("defaultCharsetName"),
        _strings("primaryKeyColumnNames"),
        {"type": "array", "items": _COLUMN_SCHEMA, "optional": False, "field": "columns"},
        _string("comment"),
    ],
    "optional": True,
    "name": "io.debezium.connector.schema.Table",
}
CHANGE_SCHEMA = {
    "type": "struct",
    "fields": [_string("type", False), _string("id", False), {**_TABLE_SCHEMA, "field": "table"}],
    "optional": False,
    "name": "io.debezium.connector.schema.Change",
}


def table_changes_text(changes: Sequence[object] | None, captured: Callable[[str, str], bool]) -> str:
    """The ``tableChanges`` array as JSON text: the captured tables among a DDL's ``changes``
    (``relay.schema.model.TableChange``s; None: not known, ``[]``)."""
    if not changes:
        return "[]"
    out = [
        change_json(c)
        for c in changes
        if isinstance(c, TableChange) and captured(c.table.schema, c.table.name)
    ]
    return _dumps(out)


def change_json(change: TableChange) -> dict[str, Any]:
    """One element of ``tableChanges``."""
    table = change.table
    return {"type": change.kind, "id": _table_id(table), "table": table_json(table)}


def _table_id(table: TableDef) -> str:
    """Debezium's ``TableId`` in double quotes: ``"db"."table"`` (a quote inside a name doubled)."""
    return ".".join('"' + part.replace('"', '""') + '"' for part in (table.schema, table.name))


def table_json(table: TableDef) -> dict[str, Any]:
    keys = {k.lower() for k in table.primary_key}
    return {
        "defaultCharsetName": _charset(table.collation),
        "primaryKeyColumnNames": list(table.primary_key),
        "columns": [column_json(c, i + 1, c.name.lower() in keys) for i, c in enumerate(table.columns)],
        "comment": None,
    }


def column_json(column: ColumnDef, position: int, key: bool) -> dict[str, Any]:
    """One column of a ``table`` (module docstring: which fields are null and why)."""
    type_name = column.kind.upper() + (" UNSIGNED" if column.unsigned else "")
    params = column.params if column.members is None else ()
    return {
        "name": column.name,
        "jdbcType": _JDBC.get(column.kind, _OTHER),
        "nativeType": None,
        "typeName": type_name,
        "typeExpression": type_name,
        "charsetName": _charset(column.collation) if column.kind in CHARACTER else None,
        "length": params[0] if params else None,
        "scale": params[1] if len(params) > 1 else None,
        "position": position,
        "optional": False if key else None,
        "autoIncremented": None,
        "generated": None,
        "comment": None,
        "hasDefaultValue": None,
        "enumValues": list(column.members) if column.members is not None else None,
    }


def _charset(collation: str | None) -> str | None:
    """A collation's charset: MySQL's and MariaDB's collation names begin with it (``utf8mb4_bin``)."""
    if collation is None or collation == "binary":
        return None
    return collation.split("_", 1)[0]
