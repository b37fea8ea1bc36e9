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
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.tokens import TokenType  # type: ignore[attr-defined]

from relay.canal.ddl import classify
from relay.canal.entry import EventType
from relay.errors import UnappliedDdlError
from relay.schema.model import BINARY, CHARACTER, KNOWN, NUMERIC, Catalog, ColumnDef, TableDef

# sqlglot logs a warning for every statement it keeps as a raw Command; we report those ourselves.
logging.getLogger("sqlglot").setLevel(logging.ERROR)

SYSTEM_SCHEMAS = frozenset({"mysql", "information_schema", "performance_schema", "sys"})
_MYSQL = sqlglot.Dialect.get_or_raise("mysql")
_DB_OPTION_WORDS = frozenset({"DEFAULT", "CHARACTER", "CHARSET", "COLLATE", "ENCRYPTION", "READ", "COMMENT"})
SCHEMA_CHANGING = frozenset({EventType.CREATE, EventType.ALTER, EventType.ERASE, EventType.RENAME})

Changes = dict[tuple[str, str], TableDef | None]


# --- types -------------------------------------------------------------------------------------------

_DTYPE_NAMES = {
    "TINYINT": "tinyint", "UTINYINT": "tinyint", "SMALLINT": "smallint", "USMALLINT": "smallint",
    "MEDIUMINT": "mediumint", "UMEDIUMINT": "mediumint", "INT": "int", "UINT": "int", "BIGINT": "bigint",
    "UBIGINT": "bigint", "BOOLEAN": "tinyint", "DECIMAL": "decimal", "UDECIMAL": "decimal",
    "FLOAT": "float", "UFLOAT": "float", "DOUBLE": "double", "UDOUBLE": "double", "DATE": "date",
    "DATETIME": "datetime", "TIMESTAMP": "timestamp", "TIMESTAMPTZ": "timestamp",
    "TIMESTAMPLTZ": "timestamp", "TIME": "time", "YEAR": "year", "CHAR": "char", "NCHAR": "char",
    "VARCHAR": "varchar", "NVARCHAR": "varchar", "BINARY": "binary", "VARBINARY": "varbinary",
    "TINYTEXT": "tinytext", "TEXT": "text", "MEDIUMTEXT": "mediumtext", "LONGTEXT": "longtext",
    "TINYBLOB": "tinyblob", "BLOB": "blob", "MEDIUMBLOB": "mediumblob", "LONGBLOB": "longblob",
    "ENUM": "enum", "SET": "set", "BIT": "bit", "JSON": "json", "GEOMETRY": "geometry",
}  # fmt: skip
# Types whose numbers are not part of what the binlog stores (display widths).
_NO_PARAMS = frozenset({"tinyint", "smallint", "mediumint", "int", "bigint", "year", "float", "double"})


def _literal_int(node: exp.Expression) -> int:
    inner = node.this if isinstance(node, exp.DataTypeParam) else node
    if isinstance(inner, exp.Literal) and not inner.is_string:
        return int(inner.this)
    raise ValueError(f"not a number: {node.sql('mysql')}")


def _column_type(dtype: exp.DataType, name: str) -> ColumnDef:
    """A sqlglot DataType → ColumnDef without a collation (the caller resolves it)."""
    tname = dtype.this.name
    kind = _DTYPE_NAMES.get(tname)
    if kind is None:
        raise ValueError(f"column {name}: type {dtype.sql('mysql')} is not supported by the schema history")
    unsigned = tname.startswith("U") and kind in NUMERIC
    members: tuple[str, ...] | None = None
    params: tuple[int, ...] = ()
    if kind in ("enum", "set"):
        members = tuple(str(m.this) for m in dtype.expressions if isinstance(m, exp.Literal))
    elif kind not in _NO_PARAMS:
        params = tuple(_literal_int(p) for p in dtype.expressions)
    if kind == "float" and len(params) == 1 and params[0] > 24:
        kind = "double"  # FLOAT(p) with p > 24 is a DOUBLE
    if tname == "BOOLEAN":
        params = ()
    return ColumnDef(name, kind, params, unsigned, None, members)


def column_from_type(name: str, type_text: str, collation: str | None) -> ColumnDef:
    """A column from its type text as information_schema.COLUMNS.COLUMN_TYPE says it."""
    text = type_text.replace(" zerofill", "")
    try:
        dtype = exp.DataType.build(text, dialect="mysql")
    except (SqlglotError, ValueError) as exc:
        raise ValueError(f"column {name}: cannot parse type {type_text!r}: {exc}") from exc
    col = _column_type(dtype, name)
    if col.kind in BINARY:
        return replace(col, collation="binary")
    return replace(col, collation=collation if col.kind in CHARACTER else None)


# --- columns of a statement ---------------------------------------------------------------------------


def _constraint_kinds(cdef: exp.ColumnDef) -> list[Any]:
    kinds: list[Any] = []
    for c in cdef.args.get("constraints") or []:
        if isinstance(c, exp.ColumnConstraint):
            kinds.append(c.kind)
    return kinds


def _column(catalog: Catalog, cdef: exp.ColumnDef, table_collation: str | None) -> tuple[ColumnDef, bool]:
    """A column definition of a statement → (ColumnDef, declared PRIMARY KEY inline)."""
    name = cdef.name
    dtype = cdef.args.get("kind")
    if not isinstance(dtype, exp.DataType):
        raise ValueError(f"column {name}: no type")
    col = _column_type(dtype, name)
    charset = collate = None
    inline_key = False
    for kind in _constraint_kinds(cdef):
        if isinstance(kind, exp.CharacterSetColumnConstraint):
            charset = kind.this.name.lower()
        elif isinstance(kind, exp.CollateColumnConstraint):
            collate = kind.this.name.lower()
        elif isinstance(kind, exp.PrimaryKeyColumnConstraint):
            inline_key = True
    if col.kind == "json" and catalog.mariadb:
        col, collate = replace(col, kind="longtext"), "utf8mb4_bin"
    if col.kind in BINARY:
        return replace(col, collation="binary"), inline_key
    if col.kind not in CHARACTER:
        return col, inline_key
    if charset == "binary":  # CHAR(4) CHARACTER SET binary is BINARY(4)
        binary_kind = {"char": "binary", "varchar": "varbinary"}.get(
            col.kind, col.kind.replace("text", "blob")
        )
        return replace(col, kind=binary_kind, collation="binary"), inline_key
    collation = collate or (catalog.default_collation(charset) if charset else None) or table_collation
    if collation is None:
        raise ValueError(f"column {name}: no collation known")
    return replace(col, collation=collation), inline_key


def _key_names(node: exp.Expression) -> tuple[str, ...]:
    names = []
    for part in node.expressions:
        target = part.this if isinstance(part, exp.Ordered) else part
        names.append(target.name)
    return tuple(names)


def _primary_key(node: exp.Expression) -> tuple[str, ...] | None:
    """The key columns when ``node`` (a constraint of CREATE / ALTER ADD) is a PRIMARY KEY."""
    if isinstance(node, exp.PrimaryKey):
        return _key_names(node)
    if isinstance(node, exp.Constraint | exp.AddConstraint):
        for inner in node.expressions:
            found = _primary_key(inner)
            if found is not None:
                return found
    return None


# --- statements --------------------------------------------------------------------------------------


def _qualified(table: exp.Table, default_schema: str) -> tuple[str, str]:
    return (table.db or default_schema, table.name)


def _table_collation(catalog: Catalog, props: exp.Expression | None, schema: str) -> str | None:
    charset = collate = None
    for prop in props.expressions if props is not None else []:
        if isinstance(prop, exp.CharacterSetProperty):
            charset = prop.this.name.lower()
        elif isinstance(prop, exp.CollateProperty):
            collate = prop.this.name.lower()
    if collate:
        return str(collate)
    if charset:
        return catalog.default_collation(str(charset))
    return None


def _create_table(catalog: Catalog, node: exp.Create, default_schema: str) -> Changes:
    target = node.this
    table = target.this if isinstance(target, exp.Schema) else target
    if not isinstance(table, exp.Table):
        raise ValueError("CREATE TABLE without a table name")
    key = _qualified(table, default_schema)
    if node.args.get("exists") and key in catalog.tables:
        return {}  # CREATE TABLE IF NOT EXISTS on an existing table changes nothing
    props = node.args.get("properties")
    for prop in props.expressions if props is not None else []:
        if isinstance(prop, exp.LikeProperty):
            source = catalog.table(*_qualified(prop.this, default_schema))
            if source is None:
                raise ValueError(f"CREATE TABLE … LIKE {prop.this.sql('mysql')}: the source table is unknown")
            return {key: source.renamed(*key)}
    if not isinstance(target, exp.Schema):
        raise ValueError("CREATE TABLE without columns")
    collation = _table_collation(catalog, props, key[0])
    collation = collation or catalog.databases.get(key[0]) or catalog.server_collation
    columns: list[ColumnDef] = []
    pk: tuple[str, ...] = ()
    for item in target.expressions:
        if isinstance(item, exp.ColumnDef):
            col, inline_key = _column(catalog, item, collation)
            columns.append(col)
            if inline_key:
                pk = (col.name,)
        else:
            pk = _primary_key(item) or pk
    return {key: TableDef(key[0], key[1], tuple(columns), _canonical_key(columns, pk), collation)}


def _canonical_key(columns: list[ColumnDef] | tuple[ColumnDef, ...], pk: tuple[str, ...]) -> tuple[str, ...]:
    """Key columns spelled as the columns are (the server's spelling)."""
    by_lower = {c.name.lower(): c.name for c in columns}
    missing = [k for k in pk if k.lower() not in by_lower]
    if missing:
        raise ValueError(f"primary key column(s) {', '.join(missing)} not in the table")
    return tuple(by_lower[k.lower()] for k in pk)


def _place(columns: list[ColumnDef], col: ColumnDef, position: exp.Expression | None) -> None:
    if position is None:
        columns.append(col)
        return
    where = str(position.args.get("position") or "").upper()
    if where == "FIRST":
        columns.insert(0, col)
        return
    after = position.this.name if position.this is not None else ""
    index = next((i for i, c in enumerate(columns) if c.name.lower() == after.lower()), None)
    if where != "AFTER" or index is None:
        raise ValueError(f"cannot place column {col.name} ({position.sql('mysql')})")
    columns.insert(index + 1, col)


def _find(columns: list[ColumnDef], name: str) -> int:
    for i, c in enumerate(columns):
        if c.name.lower() == name.lower():
            return i
    raise ValueError(f"column {name} is not in the table")


def _alter_action(
    catalog: Catalog, t: TableDef, columns: list[ColumnDef], pk: list[str], action: exp.Expression
) -> None:
    collation = t.collation or catalog.server_collation
    if isinstance(action, exp.ColumnDef):  # ADD [COLUMN] [IF NOT EXISTS] (MariaDB)
        if action.args.get("exists") and any(c.name.lower() == action.name.lower() for c in columns):
            return
        col, inline_key = _column(catalog, action, collation)
        _place(columns, col, action.args.get("position"))
        if inline_key:
            pk[:] = [col.name]
    elif isinstance(action, exp.Drop) and str(action.args.get("kind") or "").upper() == "COLUMN":
        for target in action.args.get("tables") or []:
            if action.args.get("exists") and not any(c.name.lower() == target.name.lower() for c in columns):
                continue  # DROP COLUMN IF EXISTS (MariaDB) of a column that is not there
            columns.pop(_find(columns, target.name))
            pk[:] = [k for k in pk if k.lower() != target.name.lower()]
    elif isinstance(action, exp.Drop) and str(action.args.get("kind") or "").upper() in (
        "INDEX",
        "KEY",
        "FOREIGN KEY",
        "CONSTRAINT",
        "CHECK",
    ):
        return
    elif isinstance(action, exp.ModifyColumn):  # MODIFY, or CHANGE old new
        cdef = action.this
        old = action.args.get("rename_from")
        old_name = old.name if old is not None else cdef.name
        index = _find(columns, old_name)
        col, inline_key = _column(catalog, cdef, collation)
        position = cdef.args.get("position") or action.args.get("position")
        if position is None:
            columns[index] = col
        else:
            columns.pop(index)
            _place(columns, col, position)
        pk[:] = [col.name if k.lower() == old_name.lower() else k for k in pk]
        if inline_key:
            pk[:] = [col.name]
    elif isinstance(action, exp.RenameColumn):
        old_name, new_name = action.this.name, action.args["to"].name
        index = _find(columns, old_name)
        columns[index] = replace(columns[index], name=new_name)
        pk[:] = [new_name if k.lower() == old_name.lower() else k for k in pk]
    elif isinstance(action, exp.DropPrimaryKey):
        pk.clear()
    elif isinstance(action, exp.AddConstraint):
        found = _primary_key(action)
        if found is not None:
            pk[:] = list(found)
    elif isinstance(action, exp.AlterColumn | exp.RenameIndex | exp.ForceProperty):
        return  # SET / DROP DEFAULT, VISIBLE, RENAME INDEX, FORCE (a rebuild): no binlog difference
    else:
        raise ValueError(f"ALTER action {action.sql('mysql')!r} is not understood")


def _alter_table(catalog: Catalog, node: exp.Alter, default_schema: str) -> Changes:
    key = _qualified(node.this, default_schema)
    t = catalog.tables.get(key)
    if t is None:
        raise ValueError(f"ALTER TABLE on {key[0]}.{key[1]}, which the history does not know")
    if t.broken:
        raise ValueError(f"ALTER TABLE on {key[0]}.{key[1]}, whose definition is already broken")
    columns, pk = list(t.columns), list(t.primary_key)
    new_key = key
    for action in node.args.get("actions") or []:
        if isinstance(action, exp.AlterRename):
            new_key = _qualified(action.this, key[0])
            continue
        _alter_action(catalog, t, columns, pk, action)
    collation = t.collation
    for option in node.args.get("options") or []:
        if isinstance(option, exp.CharacterSetProperty | exp.CollateProperty):
            collation = _table_collation(catalog, exp.Properties(expressions=[option]), key[0]) or collation
    new = TableDef(new_key[0], new_key[1], tuple(columns), _canonical_key(columns, tuple(pk)), collation)
    changes: Changes = {new_key: new}
    if new_key != key:
        changes[key] = None
    return changes


def _drop(catalog: Catalog, node: exp.Drop, default_schema: str) -> Changes:
    kind = str(node.args.get("kind") or "").upper()
    changes: Changes = {}
    if kind == "TABLE":
        if node.args.get("temporary"):
            return {}
        for table in node.args.get("tables") or []:
            key = _qualified(table, default_schema)
            if key in catalog.tables:
                changes[key] = None
    elif kind in ("DATABASE", "SCHEMA"):
        for table in node.args.get("tables") or []:
            schema = table.name
            changes.update({k: None for k in catalog.tables if k[0] == schema})
            catalog.databases.pop(schema, None)
    return changes


def _words(sql: str) -> list[str]:
    """The statement's tokens as sqlglot's MySQL tokenizer reads them (quotes removed); a statement the
    tokenizer keeps as one command string (RENAME …) is read again from that string."""
    tokens = _MYSQL.tokenize(sql)
    if len(tokens) == 2 and tokens[1].token_type == TokenType.STRING:
        tokens = [tokens[0], *_MYSQL.tokenize(tokens[1].text)]
    return [t.text for t in tokens if t.token_type != TokenType.SEMICOLON]


def _rename_tables(catalog: Catalog, sql: str, default_schema: str) -> Changes:
    """RENAME TABLE a TO b [, c TO d …] (sqlglot keeps it as a Command): read with sqlglot's tokenizer.
    Renames apply in order, so ``a TO tmp, b TO a, tmp TO b`` swaps."""
    words = _words(sql)
    if len(words) < 2 or words[0].upper() != "RENAME" or words[1].upper() not in ("TABLE", "TABLES"):
        raise ValueError("not a RENAME TABLE statement")
    i = 2
    if i + 1 < len(words) and words[i].upper() == "IF" and words[i + 1].upper() == "EXISTS":
        i += 2

    def name() -> tuple[str, str]:
        nonlocal i
        first = words[i]
        i += 1
        if i < len(words) and words[i] == ".":
            second = words[i + 1]
            i += 2
            return first, second
        return default_schema, first

    work = dict(catalog.tables)
    changes: Changes = {}
    while i < len(words):
        old = name()
        if i >= len(words) or words[i].upper() != "TO":
            raise ValueError("RENAME TABLE: expected TO")
        i += 1
        new = name()
        t = work.pop(old, None)
        if t is None:
            raise ValueError(f"RENAME TABLE of {old[0]}.{old[1]}, which the history does not know")
        work[new] = t.renamed(*new)
        changes[old], changes[new] = None, work[new]
        if i < len(words):
            if words[i] != ",":
                raise ValueError(f"RENAME TABLE: unexpected {words[i]!r}")
            i += 1
    return changes


_PARTITION_WORDS = frozenset({"PARTITION", "PARTITIONING", "PARTITIONS"})
_TABLESPACE_ACTIONS = frozenset({"DISCARD", "IMPORT"})


def _partitions_only(sql: str) -> bool:
    """ALTER TABLE t followed only by partition maintenance (PARTITION BY …, ADD / DROP / TRUNCATE /
    COALESCE / REORGANIZE / EXCHANGE / ANALYZE … PARTITION, REMOVE PARTITIONING) or DISCARD / IMPORT
    TABLESPACE, which change no column. MySQL's grammar puts such an operation right after the table
    name and allows no column change with it (partition options come last), so the first words decide;
    sqlglot keeps these statements as raw commands or cannot parse them at all."""
    # A quoted identifier (`partition`) is a name, never one of the words looked for.
    upper = [t.text.upper() if t.token_type != TokenType.IDENTIFIER else "" for t in _MYSQL.tokenize(sql)]
    i = 1
    while i < len(upper) and upper[i] in ("ONLINE", "IGNORE"):
        i += 1
    if upper[:1] != ["ALTER"] or i >= len(upper) or upper[i] != "TABLE":
        return False
    i += 2  # TABLE name
    if i < len(upper) and upper[i] == ".":
        i += 2  # schema.name
    head = [w.split()[0] if w.startswith("PARTITION") else w for w in upper[i : i + 2]]
    return bool(head) and (
        head[0] in _PARTITION_WORDS or head[-1] in _PARTITION_WORDS or head[0] in _TABLESPACE_ACTIONS
    )


def _alter_database(catalog: Catalog, sql: str, default_schema: str) -> Changes:
    """ALTER DATABASE [name] [DEFAULT] CHARACTER SET [=] cs [COLLATE [=] co] (a Command to sqlglot)."""
    words = [w for w in _words(sql) if w != "="]
    upper = [w.upper() for w in words]
    i = 2
    schema = default_schema
    if i < len(words) and upper[i] not in _DB_OPTION_WORDS:
        schema, i = words[i], i + 1
    charset = collate = None
    while i < len(words):
        if upper[i] in ("CHARSET", "CHARACTER"):
            i += 2 if upper[i] == "CHARACTER" else 1
            charset = words[i].lower()
        elif upper[i] == "COLLATE":
            i += 1
            collate = words[i].lower()
        elif upper[i] != "DEFAULT":
            raise ValueError(f"ALTER DATABASE option {words[i]!r} is not understood")
        i += 1
    collation = collate or (catalog.default_collation(charset) if charset else None)
    if collation:
        catalog.databases[schema] = collation
    return {}


def _database(catalog: Catalog, node: exp.Expression, default_schema: str) -> Changes:
    """CREATE DATABASE [IF NOT EXISTS] name [CHARACTER SET cs] [COLLATE co]: its default collation."""
    target = node.this
    schema = target.name if isinstance(target, exp.Table | exp.Identifier) and target.name else default_schema
    collation = _table_collation(catalog, node.args.get("properties"), schema)
    catalog.databases[schema] = collation or catalog.databases.get(schema) or catalog.server_collation
    return {}


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


def _apply(catalog: Catalog, sql: str, default_schema: str) -> Changes:
    if _partitions_only(sql):
        return {}
    statements = [s for s in sqlglot.parse(sql, dialect="mysql") if s is not None]
    if len(statements) != 1:
        raise ValueError(f"expected one statement, found {len(statements)}")
    node = statements[0]
    if isinstance(node, exp.Command):
        command = str(node.this).upper()
        if command == "RENAME":
            return _rename_tables(catalog, sql, default_schema)
        words = [w.upper() for w in _words(sql)[:2]]
        if command == "ALTER" and len(words) == 2 and words[1] in ("DATABASE", "SCHEMA"):
            return _alter_database(catalog, sql, default_schema)
        raise ValueError("the SQL parser does not understand this statement")
    kind = str(node.args.get("kind") or "").upper()
    if isinstance(node, exp.Create):
        if kind == "TABLE":
            props = node.args.get("properties")
            options = props.expressions if props is not None else []
            if node.args.get("temporary") or any(isinstance(p, exp.TemporaryProperty) for p in options):
                return {}
            return _create_table(catalog, node, default_schema)
        if kind in ("DATABASE", "SCHEMA"):
            return _database(catalog, node, default_schema)
        return {}  # INDEX, VIEW, routines: no column changes
    if isinstance(node, exp.Alter):
        if kind == "TABLE":
            return _alter_table(catalog, node, default_schema)
        if kind in ("DATABASE", "SCHEMA"):
            return _database(catalog, node, default_schema)
        return {}
    if isinstance(node, exp.Drop):
        return _drop(catalog, node, default_schema)
    raise ValueError(f"statement {type(node).__name__} is not understood")


def check_known(col: ColumnDef) -> None:
    if col.kind not in KNOWN:
        raise ValueError(f"column {col.name}: type {col.kind} is not supported")
