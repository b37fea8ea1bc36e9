"""Applying a DDL statement to the schema model, with a real SQL parser (sqlglot, MySQL dialect).

Owned here: ``apply_ddl(catalog, sql, default_schema)`` → the tables it changed (a definition, or None
for a table that no longer exists), and ``column_from_type`` (a type text, as information_schema's
COLUMN_TYPE or a DDL says it, → ``ColumnDef``). Runs on the binlog reader thread
(``relay.schema.tracker``) and in ``relay.schema.server`` for definitions read from the server.

Which statements change what: CREATE TABLE (columns, PRIMARY KEY inline or as a constraint, LIKE),
DROP TABLE, RENAME TABLE, ALTER TABLE (ADD / DROP / MODIFY / CHANGE / RENAME COLUMN with FIRST /
AFTER, DROP / ADD PRIMARY KEY, RENAME TO, DEFAULT CHARSET), CREATE / ALTER / DROP DATABASE (the
default collation of later tables). Statements that change no column or key (indexes, TRUNCATE,
views, routines, grants) are recognised by ``relay.canal.ddl.classify`` and left alone, as are ALTER
TABLE actions that change none (ADD / DROP / RENAME INDEX, ENGINE and other table options, FORCE,
partition maintenance, DISCARD / IMPORT TABLESPACE).

Anything else that names a table — a statement sqlglot only keeps as a raw ``Command``, an ALTER
action this module does not know, a type it cannot size — raises ``UnappliedDdlError``: the caller marks
the tables broken and stops; a statement is never skipped on a guess. MySQL's implicit rules that
matter for a TABLE_MAP are applied: a column without a collation takes the table's, a table's comes
from its CHARSET/COLLATE or the database's default; on MariaDB JSON is LONGTEXT COLLATE utf8mb4_bin.

One room per job: ``apply`` (which statement goes where), ``columns`` (types and column definitions),
``tables`` (the statements sqlglot parses: CREATE / ALTER / DROP TABLE, CREATE / ALTER DATABASE) and
``commands`` (those it keeps as raw commands, read token by token: RENAME TABLE, ALTER DATABASE, partition
and tablespace maintenance). Callers import from ``relay.schema.ddl``.
"""

from __future__ import annotations

from relay.schema.ddl.apply import SCHEMA_CHANGING, SYSTEM_SCHEMAS, apply_ddl
from relay.schema.ddl.columns import column_from_type
from relay.schema.ddl.tables import Changes

__all__ = ["SCHEMA_CHANGING", "SYSTEM_SCHEMAS", "Changes", "apply_ddl", "column_from_type"]
