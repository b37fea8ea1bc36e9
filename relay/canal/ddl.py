"""Classify a binlog QUERY statement the way canal's DDL parser does: event type and the table it names.

``classify(sql, default_schema)`` returns a ``DdlInfo``: CREATE TABLE / CREATE DATABASE → CREATE,
ALTER TABLE / ALTER DATABASE → ALTER, DROP TABLE / DROP DATABASE → ERASE, RENAME TABLE → RENAME,
TRUNCATE → TRUNCATE, CREATE INDEX → CINDEX, DROP INDEX → DINDEX, anything else → QUERY. The schema and
table come from the statement (``db.table``, backquoted or plain, after ``TEMPORARY`` / ``IF [NOT]
EXISTS``); a statement that names several tables (multi-table DROP, RENAME) reports the first one —
for RENAME its target, with the source in ``old_schema`` / ``old_table``, as canal's ``DdlResult``.
A database statement reports the database as schema and no table; a statement that names none
reports the default schema (the QUERY event's current database).

Comments are skipped as the server skips them: ``/* ... */``, ``-- ``, ``#``; the content of
version comments ``/*!NNNNN ... */`` (and MariaDB's ``/*M!NNNNNN ... */``) is read, because the server
executes it (mysqldump writes ``CREATE DATABASE /*!32312 IF NOT EXISTS*/ `db```).

Only the statement's head is tokenized (``_MAX_TOKENS``): a CREATE TABLE body can be megabytes long.
Pure functions, run on the parser thread by the entry builder (and by the sink for RENAME filtering).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice

from relay.canal.entry import EventType

_MAX_TOKENS = 64
_WORD = re.compile(r"[0-9A-Za-z_$\u0080-\uffff]+")
_VERSION_COMMENT = re.compile(r"/\*M?!\d*")

# Token kinds: "w" a bare word (keyword or identifier), "i" a quoted identifier (backquotes, or double
# quotes as with ANSI_QUOTES), "s" a single-quoted string, "p" one punctuation character.
Token = tuple[str, str]

# Words that start a database option: ``ALTER DATABASE CHARACTER SET x`` names no database.
_DB_OPTIONS = frozenset(
    {"DEFAULT", "CHARACTER", "CHARSET", "COLLATE", "COMMENT", "READ", "ENCRYPTION", "UPGRADE"}
)


@dataclass(frozen=True, slots=True)
class DdlInfo:
    event_type: EventType
    schema: str
    table: str = ""
    old_schema: str = ""  # RENAME only: the source table
    old_table: str = ""

    @property
    def is_ddl(self) -> bool:
        """canal's rule: every type but QUERY (and DML, which a QUERY event classifies as QUERY here)."""
        return self.event_type not in (EventType.QUERY, EventType.INSERT, EventType.UPDATE, EventType.DELETE)


def _quoted(sql: str, i: int, quote: str) -> tuple[str, int]:
    """The text of a quoted token starting at ``sql[i]`` (doubled quotes unescaped), and the end index."""
    out: list[str] = []
    j = i + 1
    while j < len(sql):
        ch = sql[j]
        if ch == "\\" and quote == "'" and j + 1 < len(sql):
            out.append(sql[j + 1])
            j += 2
            continue
        if ch == quote:
            if sql.startswith(quote, j + 1):
                out.append(quote)
                j += 2
                continue
            return "".join(out), j + 1
        out.append(ch)
        j += 1
    return "".join(out), j


def _skip_comment(sql: str, i: int) -> int | None:
    """Index after a comment starting at ``i``, or None when there is no comment there.

    A version comment is not skipped: only its opening marker is, so its content is tokenized (its
    closing ``*/`` is then dropped as punctuation by the caller)."""
    if sql.startswith("/*", i):
        marker = _VERSION_COMMENT.match(sql, i)
        if marker:
            return marker.end()
        end = sql.find("*/", i + 2)
        return len(sql) if end < 0 else end + 2
    if sql.startswith("#", i) or (sql.startswith("--", i) and (i + 2 == len(sql) or sql[i + 2].isspace())):
        end = sql.find("\n", i)
        return len(sql) if end < 0 else end + 1
    return None


def tokens(sql: str) -> Iterator[Token]:
    i, n = 0, len(sql)
    while i < n:
        ch = sql[i]
        if ch.isspace():
            i += 1
            continue
        after = _skip_comment(sql, i)
        if after is not None:
            i = after
            continue
        if sql.startswith("*/", i):  # the end of a version comment whose content we read
            i += 2
            continue
        if ch in "`\"'":
            text, i = _quoted(sql, i, ch)
            yield ("s" if ch == "'" else "i", text)
            continue
        word = _WORD.match(sql, i)
        if word:
            yield ("w", word.group())
            i = word.end()
            continue
        yield ("p", ch)
        i += 1


class _Cursor:
    """Walks the head tokens of one statement; keyword checks are case-insensitive."""

    def __init__(self, sql: str) -> None:
        self.toks = list(islice(tokens(sql), _MAX_TOKENS))
        self.pos = 0

    def peek(self, ahead: int = 0) -> Token | None:
        k = self.pos + ahead
        return self.toks[k] if k < len(self.toks) else None

    def keyword(self, *words: str) -> bool:
        """Consume the keyword sequence ``words`` if the tokens at the cursor spell it."""
        for k, word in enumerate(words):
            tok = self.peek(k)
            if tok is None or tok[0] != "w" or tok[1].upper() != word:
                return False
        self.pos += len(words)
        return True

    def any_keyword(self, *words: str) -> bool:
        return any(self.keyword(w) for w in words)

    def skip_until_keyword(self, word: str) -> bool:
        while (tok := self.peek()) is not None:
            self.pos += 1
            if tok[0] == "w" and tok[1].upper() == word:
                return True
        return False

    def _part(self) -> str | None:
        tok = self.peek()
        if tok is None or tok[0] not in ("w", "i"):
            return None
        self.pos += 1
        return tok[1]

    def name(self, default_schema: str) -> tuple[str, str] | None:
        """``[schema.]name`` at the cursor, as (schema, name)."""
        first = self._part()
        if first is None:
            return None
        if self.peek() == ("p", "."):
            self.pos += 1
            second = self._part()
            if second is not None:
                return first, second
        return default_schema, first


def _table(kind: EventType, cur: _Cursor, default_schema: str) -> DdlInfo:
    name = cur.name(default_schema)
    if name is None:
        return DdlInfo(EventType.QUERY, default_schema)
    return DdlInfo(kind, name[0], name[1])


def _database(kind: EventType, cur: _Cursor, default_schema: str, exists: tuple[str, ...]) -> DdlInfo:
    cur.keyword(*exists)
    tok = cur.peek()
    schema = tok[1] if tok is not None and tok[0] in ("w", "i") else default_schema
    if kind == EventType.ALTER and tok is not None and tok[0] == "w" and tok[1].upper() in _DB_OPTIONS:
        schema = default_schema  # ALTER DATABASE CHARACTER SET ...: the current database
    return DdlInfo(kind, schema)


def _index(kind: EventType, cur: _Cursor, default_schema: str) -> DdlInfo:
    if not cur.skip_until_keyword("ON"):
        return DdlInfo(EventType.QUERY, default_schema)
    return _table(kind, cur, default_schema)


def _create(cur: _Cursor, default_schema: str) -> DdlInfo:
    cur.keyword("OR", "REPLACE")
    cur.keyword("TEMPORARY")
    if cur.keyword("TABLE"):
        cur.keyword("IF", "NOT", "EXISTS")
        return _table(EventType.CREATE, cur, default_schema)
    if cur.any_keyword("DATABASE", "SCHEMA"):
        return _database(EventType.CREATE, cur, default_schema, ("IF", "NOT", "EXISTS"))
    cur.any_keyword("ONLINE", "OFFLINE")
    cur.any_keyword("UNIQUE", "FULLTEXT", "SPATIAL")
    if cur.keyword("INDEX"):
        return _index(EventType.CINDEX, cur, default_schema)
    return DdlInfo(EventType.QUERY, default_schema)


def _alter(cur: _Cursor, default_schema: str) -> DdlInfo:
    cur.any_keyword("ONLINE", "OFFLINE")
    cur.keyword("IGNORE")
    if cur.keyword("TABLE"):
        cur.keyword("IF", "EXISTS")
        return _table(EventType.ALTER, cur, default_schema)
    if cur.any_keyword("DATABASE", "SCHEMA"):
        return _database(EventType.ALTER, cur, default_schema, ())
    return DdlInfo(EventType.QUERY, default_schema)


def _drop(cur: _Cursor, default_schema: str) -> DdlInfo:
    cur.keyword("TEMPORARY")
    if cur.keyword("TABLE"):
        cur.keyword("IF", "EXISTS")
        return _table(EventType.ERASE, cur, default_schema)
    if cur.any_keyword("DATABASE", "SCHEMA"):
        return _database(EventType.ERASE, cur, default_schema, ("IF", "EXISTS"))
    cur.any_keyword("ONLINE", "OFFLINE")
    if cur.keyword("INDEX"):
        return _index(EventType.DINDEX, cur, default_schema)
    return DdlInfo(EventType.QUERY, default_schema)


def _rename(cur: _Cursor, default_schema: str) -> DdlInfo:
    if not cur.any_keyword("TABLE", "TABLES"):
        return DdlInfo(EventType.QUERY, default_schema)  # RENAME USER
    cur.keyword("IF", "EXISTS")
    old = cur.name(default_schema)
    if old is None or not cur.skip_until_keyword("TO"):
        return DdlInfo(EventType.QUERY, default_schema)
    new = cur.name(default_schema)
    if new is None:
        return DdlInfo(EventType.QUERY, default_schema)
    return DdlInfo(EventType.RENAME, new[0], new[1], old_schema=old[0], old_table=old[1])


def _truncate(cur: _Cursor, default_schema: str) -> DdlInfo:
    cur.keyword("TABLE")
    return _table(EventType.TRUNCATE, cur, default_schema)


_STATEMENTS = {
    "CREATE": _create,
    "ALTER": _alter,
    "DROP": _drop,
    "RENAME": _rename,
    "TRUNCATE": _truncate,
}


def classify(sql: str, default_schema: str = "") -> DdlInfo:
    """What a QUERY event's statement is, and which table (or database) it names."""
    cur = _Cursor(sql)
    first = cur.peek()
    if first is None or first[0] != "w":
        return DdlInfo(EventType.QUERY, default_schema)
    handler = _STATEMENTS.get(first[1].upper())
    if handler is None:
        return DdlInfo(EventType.QUERY, default_schema)
    cur.pos = 1
    return handler(cur, default_schema)
