"""Applying one DDL statement to the schema catalog: which statements matter, and which room reads each.

Owns ``apply_ddl`` — classify the statement (``relay.canal.ddl.classify``), leave alone what changes no
column or key and the system schemas, hand the statement to ``relay.schema.ddl.tables`` (parsed by sqlglot)
or ``relay.schema.ddl.commands`` (kept as a raw command), apply the changes to the catalog — and turns any
failure into ``UnappliedDdlError`` naming the tables. Runs on the binlog reader thread
(``relay.schema.tracker``).
"""

from __future__ import annotations

import logging
import re

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from relay.canal.ddl import classify
from relay.canal.entry import EventType
from relay.errors import UnappliedDdlError
from relay.schema.ddl.commands import alter_database, command_words, partitions_only, rename_tables
from relay.schema.ddl.dialect import DIALECT
from relay.schema.ddl.tables import Changes, alter_table, create_table, database, drop
from relay.schema.model import Catalog

# sqlglot logs a warning for every statement it keeps as a raw Command; we report those ourselves.
logging.getLogger("sqlglot").setLevel(logging.ERROR)

SYSTEM_SCHEMAS = frozenset({"mysql", "information_schema", "performance_schema", "sys"})
SCHEMA_CHANGING = frozenset({EventType.CREATE, EventType.ALTER, EventType.ERASE, EventType.RENAME})


def apply_ddl(catalog: Catalog, sql: str, default_schema: str) -> Changes:
    """Apply one statement to ``catalog`` (in place) and return the tables it changed.

    Raises ``UnappliedDdlError`` for a statement that changes a table the history cannot follow.
    """
    info = classify(sql, default_schema)
    if info.event_type not in SCHEMA_CHANGING:
        return {}
    tables = tuple((s, t) for s, t in ((info.schema, info.table), (info.old_schema, info.old_table)) if t)
    if info.schema in SYSTEM_SCHEMAS and (not info.old_schema or info.old_schema in SYSTEM_SCHEMAS):
        return {}
    try:
        changes = _apply(catalog, sql, default_schema)
    except (SqlglotError, ValueError, KeyError, AttributeError, IndexError) as exc:
        raise UnappliedDdlError(str(exc) or type(exc).__name__, tables) from exc
    for key, table in changes.items():
        if table is None:
            catalog.tables.pop(key, None)
        else:
            catalog.tables[key] = table
    return changes


# A quoted string or name (kept as written), or MySQL's "ZEROFILL UNSIGNED", which sqlglot parses only in the
# other order ("UNSIGNED ZEROFILL"; the server takes both): the schema history stopped on such a CREATE TABLE.
_QUOTED_OR_ZEROFILL = re.compile(
    r"""'(?:[^'\\]|\\.|'')*'|"(?:[^"\\]|\\.|"")*"|`(?:[^`]|``)*`|\bzerofill(\s+)unsigned\b""",
    re.IGNORECASE,
)


def _attribute_order(sql: str) -> str:
    """``sql`` with every ZEROFILL UNSIGNED outside quotes written UNSIGNED ZEROFILL (same meaning)."""
    return _QUOTED_OR_ZEROFILL.sub(
        lambda m: f"unsigned{m.group(1)}zerofill" if m.group(1) is not None else m.group(0), sql
    )


def _apply(catalog: Catalog, sql: str, default_schema: str) -> Changes:
    if partitions_only(sql):
        return {}
    statements = [s for s in sqlglot.parse(_attribute_order(sql), dialect=DIALECT) if s is not None]
    if len(statements) != 1:
        raise ValueError(f"expected one statement, found {len(statements)}")
    node = statements[0]
    if isinstance(node, exp.Command):
        command = str(node.this).upper()
        if command == "RENAME":
            return rename_tables(catalog, sql, default_schema)
        words = [w.upper() for w in command_words(sql)[:2]]
        if command == "ALTER" and len(words) == 2 and words[1] in ("DATABASE", "SCHEMA"):
            return alter_database(catalog, sql, default_schema)
        raise ValueError("the SQL parser does not understand this statement")
    kind = str(node.args.get("kind") or "").upper()
    if isinstance(node, exp.Create):
        if kind == "TABLE":
            props = node.args.get("properties")
            options = props.expressions if props is not None else []
            if node.args.get("temporary") or any(isinstance(p, exp.TemporaryProperty) for p in options):
                return {}
            return create_table(catalog, node, default_schema)
        if kind in ("DATABASE", "SCHEMA"):
            return database(catalog, node, default_schema)
        return {}  # INDEX, VIEW, routines: no column changes
    if isinstance(node, exp.Alter):
        if kind == "TABLE":
            return alter_table(catalog, node, default_schema)
        if kind in ("DATABASE", "SCHEMA"):
            return database(catalog, node, default_schema)
        return {}
    if isinstance(node, exp.Drop):
        return drop(catalog, node, default_schema)
    raise ValueError(f"statement {type(node).__name__} is not understood")
