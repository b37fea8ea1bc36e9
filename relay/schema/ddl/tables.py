"""The statements sqlglot parses that change tables: CREATE / ALTER / DROP TABLE, CREATE / ALTER DATABASE.

Owns ``create_table`` (columns, PRIMARY KEY inline or as a constraint, LIKE), ``alter_table`` (ADD / DROP /
MODIFY / CHANGE / RENAME COLUMN with FIRST / AFTER, DROP / ADD PRIMARY KEY, RENAME TO, DEFAULT CHARSET;
actions that change no column left alone), ``drop`` and ``database`` (a database's default collation).
Each returns ``Changes`` (table → its new definition, None when it is gone) and raises ``ValueError`` for
what it cannot follow. Pure functions over the catalog, run on the thread applying the statement
(``relay.schema.ddl.apply``).
"""

from __future__ import annotations

from dataclasses import replace

from sqlglot import exp

from relay.schema.ddl.columns import column_def, primary_key
from relay.schema.model import Catalog, ColumnDef, TableDef

Changes = dict[tuple[str, str], TableDef | None]


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


def create_table(catalog: Catalog, node: exp.Create, default_schema: str) -> Changes:
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
            col, inline_key = column_def(catalog, item, collation)
            columns.append(col)
            if inline_key:
                pk = (col.name,)
        else:
            pk = primary_key(item) or pk
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
        col, inline_key = column_def(catalog, action, collation)
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
        col, inline_key = column_def(catalog, cdef, collation)
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
        found = primary_key(action)
        if found is not None:
            pk[:] = list(found)
    elif isinstance(action, exp.AlterColumn | exp.RenameIndex | exp.ForceProperty):
        return  # SET / DROP DEFAULT, VISIBLE, RENAME INDEX, FORCE (a rebuild): no binlog difference
    else:
        raise ValueError(f"ALTER action {action.sql('mysql')!r} is not understood")


def alter_table(catalog: Catalog, node: exp.Alter, default_schema: str) -> Changes:
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


def drop(catalog: Catalog, node: exp.Drop, default_schema: str) -> Changes:
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


def database(catalog: Catalog, node: exp.Expression, default_schema: str) -> Changes:
    """CREATE DATABASE [IF NOT EXISTS] name [CHARACTER SET cs] [COLLATE co]: its default collation."""
    target = node.this
    schema = target.name if isinstance(target, exp.Table | exp.Identifier) and target.name else default_schema
    collation = _table_collation(catalog, node.args.get("properties"), schema)
    catalog.databases[schema] = collation or catalog.databases.get(schema) or catalog.server_collation
    return {}
