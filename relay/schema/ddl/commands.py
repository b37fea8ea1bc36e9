"""The statements sqlglot keeps as raw commands, read with its MySQL tokenizer: RENAME TABLE, ALTER DATABASE.

Owns ``rename_tables`` (renames applied in order, so a swap through a temporary name works),
``alter_database`` (a database's default collation) and ``partitions_only`` (ALTER TABLE partition or
tablespace maintenance, which changes no column). Pure functions, run on the thread applying the
statement (``relay.schema.ddl.apply``).
"""

from __future__ import annotations

import sqlglot
from sqlglot.tokens import TokenType  # type: ignore[attr-defined]

from relay.schema.ddl.tables import Changes
from relay.schema.model import Catalog

_MYSQL = sqlglot.Dialect.get_or_raise("mysql")
_DB_OPTION_WORDS = frozenset({"DEFAULT", "CHARACTER", "CHARSET", "COLLATE", "ENCRYPTION", "READ", "COMMENT"})


def command_words(sql: str) -> list[str]:
    """The statement's tokens as sqlglot's MySQL tokenizer reads them (quotes removed); a statement the
    tokenizer keeps as one command string (RENAME …) is read again from that string."""
    tokens = _MYSQL.tokenize(sql)
    if len(tokens) == 2 and tokens[1].token_type == TokenType.STRING:
        tokens = [tokens[0], *_MYSQL.tokenize(tokens[1].text)]
    return [t.text for t in tokens if t.token_type != TokenType.SEMICOLON]


def rename_tables(catalog: Catalog, sql: str, default_schema: str) -> Changes:
    """RENAME TABLE a TO b [, c TO d …] (sqlglot keeps it as a Command): read with sqlglot's tokenizer.
    Renames apply in order, so ``a TO tmp, b TO a, tmp TO b`` swaps."""
    words = command_words(sql)
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


def partitions_only(sql: str) -> bool:
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


def alter_database(catalog: Catalog, sql: str, default_schema: str) -> Changes:
    """ALTER DATABASE [name] [DEFAULT] CHARACTER SET [=] cs [COLLATE [=] co] (a Command to sqlglot)."""
    words = [w for w in command_words(sql) if w != "="]
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
