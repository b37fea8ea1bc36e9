"""Data changes logged as SQL statements: recognise them, name the tables they change, refuse or skip them.

With ``binlog_format=STATEMENT`` (or MIXED when the server picks a statement) an INSERT / UPDATE /
DELETE / REPLACE / LOAD DATA reaches the binlog as a QUERY event: the rows it changed are not in the
binlog, so the relay cannot publish them. ``statement_dml(sql, schema)`` says whether a logged
statement is such a change and which tables it writes; ``StatementDmlGuard`` (run by the canal
instance on the parser thread for every QUERY event, before its entries go anywhere) stops the relay
when one of those tables is captured by the sink's filters (``source.statement_dml: stop``, the
default), or logs a warning and lets the statement go on to the DDL audit topic as before (``skip``).

What counts as a data change: INSERT, REPLACE, UPDATE, DELETE, LOAD DATA / LOAD XML (MariaDB logs its
statement in an EXECUTE_LOAD_QUERY event, which the parser reads as a QUERY), a WITH … statement and
a logged SELECT (both only reach the binlog as statements when they change data, e.g. through a stored
function), and CREATE TABLE … SELECT (in ROW format the server logs the CREATE with an explicit column
list and the rows as row events; as a statement the rows are only in the SELECT). A CREATE TEMPORARY
TABLE … SELECT is not: temporary tables are never captured. BEGIN, COMMIT, ROLLBACK, XA …, SAVEPOINT,
SET and every DDL are not data changes. Comments before or inside the statement are skipped as the
server skips them (``relay.canal.ddl.tokens``).

Targets: the table after INSERT / REPLACE [INTO], UPDATE, DELETE FROM, LOAD DATA … INTO TABLE, CREATE
TABLE; for a multi-table UPDATE or DELETE every name in its table references (aliases and column
qualifiers included — a name too many can only make the guard more careful). ``targets`` is None when
they cannot be determined (WITH, SELECT, a statement we cannot parse): the guard then treats the
statement as captured.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from itertools import islice

from relay.binlog.events import QueryEvent
from relay.canal.ddl import Token, tokens
from relay.errors import ConfigError, StatementDmlError

log = logging.getLogger(__name__)

STATEMENT_DML_POLICIES = ("stop", "skip")
_MAX_TOKENS = 4096  # a multi-table statement's references end long before this
_SQL_SHOWN = 200  # characters of the statement quoted in messages

Name = tuple[str, str]  # (schema, table)

# The first word when the statement starts with one (no comment before it), and the words that may
# start a data change; anything else is answered without tokenizing.
_HEAD = re.compile(r"\s*([A-Za-z_]+)(?![\w$])")
_VERBS = frozenset({"INSERT", "REPLACE", "UPDATE", "DELETE", "LOAD", "WITH", "SELECT", "CREATE"})

_INSERT_MODIFIERS = frozenset({"LOW_PRIORITY", "DELAYED", "HIGH_PRIORITY", "IGNORE"})
_DELETE_MODIFIERS = frozenset({"LOW_PRIORITY", "QUICK", "IGNORE"})
_JOIN_WORDS = frozenset({"JOIN", "STRAIGHT_JOIN", "FROM", "USING"})
_DELETE_SINGLE_NEXT = frozenset({"WHERE", "ORDER", "LIMIT", "PARTITION", "AS", "RETURNING"})
_REFS_END = frozenset({"SET", "WHERE", "ORDER", "LIMIT", "RETURNING"})


@dataclass(frozen=True, slots=True)
class DmlStatement:
    verb: str  # INSERT, UPDATE, DELETE, REPLACE, LOAD, WITH, SELECT, CREATE TABLE ... SELECT
    targets: tuple[Name, ...] | None  # None: not determined


class _Toks:
    def __init__(self, sql: str) -> None:
        self.toks: list[Token] = list(islice(tokens(sql), _MAX_TOKENS))
        self.pos = 0

    def peek(self, ahead: int = 0) -> Token | None:
        k = self.pos + ahead
        return self.toks[k] if k < len(self.toks) else None

    def word(self, ahead: int = 0) -> str:
        """The upper-cased bare word at the cursor (+ ``ahead``), or '' for anything else."""
        tok = self.peek(ahead)
        return tok[1].upper() if tok is not None and tok[0] == "w" else ""

    def skip_words(self, words: frozenset[str]) -> None:
        while self.word() in words:
            self.pos += 1

    def name(self, schema: str) -> Name | None:
        """``[schema.]table`` at the cursor."""
        first = self.peek()
        if first is None or first[0] not in ("w", "i"):
            return None
        self.pos += 1
        if self.peek() == ("p", ".") and (second := self.peek(1)) is not None and second[0] in ("w", "i"):
            self.pos += 2
            return first[1], second[1]
        return schema, first[1]


def statement_dml(sql: str, schema: str) -> DmlStatement | None:
    """The data change a logged statement makes, or None when it is not one (see the module doc)."""
    head = _HEAD.match(sql)
    if head is not None and head.group(1).upper() not in _VERBS:
        return None  # BEGIN, COMMIT, XA …, DDL: one regex, no tokenizing (a BEGIN per MySQL transaction)
    cur = _Toks(sql)
    verb = cur.word()
    cur.pos = 1
    if verb in ("INSERT", "REPLACE"):
        cur.skip_words(_INSERT_MODIFIERS)
        if cur.word() == "INTO":
            cur.pos += 1
        return DmlStatement(verb, _one(cur.name(schema)))
    if verb == "UPDATE":
        cur.skip_words(frozenset({"LOW_PRIORITY", "IGNORE"}))
        return DmlStatement(verb, _references(cur, schema, _REFS_END))
    if verb == "DELETE":
        return DmlStatement(verb, _delete_targets(cur, schema))
    if verb == "LOAD":
        if cur.word() not in ("DATA", "XML"):
            return None  # LOAD INDEX INTO CACHE
        while cur.peek() is not None and not (cur.word() == "INTO" and cur.word(1) == "TABLE"):
            cur.pos += 1
        cur.pos += 2
        return DmlStatement(verb, _one(cur.name(schema)))
    if verb in ("WITH", "SELECT"):
        return DmlStatement(verb, None)
    if verb == "CREATE":
        return _create_select(cur, schema)
    return None


def _one(name: Name | None) -> tuple[Name, ...] | None:
    return None if name is None else (name,)


def _references(cur: _Toks, schema: str, end: frozenset[str]) -> tuple[Name, ...] | None:
    """Every table-like name in table references up to a top-level word of ``end``.

    A name right at the start, after a comma, a JOIN word or an opening parenthesis, and every
    qualified ``a.b`` (a column of a join condition becomes a name too many, never one too few)."""
    names: list[Name] = []
    depth = 0
    expect = True  # a table name may come next
    while (tok := cur.peek()) is not None:
        kind, text = tok
        word = text.upper() if kind == "w" else ""
        if depth == 0 and word in end:
            return tuple(dict.fromkeys(names)) or None
        if kind in ("w", "i") and (expect or cur.peek(1) == ("p", ".")):
            name = cur.name(schema)
            if name is not None:
                names.append(name)
            expect = False
            continue
        if kind == "p" and text == "(":
            depth += 1
        elif kind == "p" and text == ")":
            depth -= 1
        expect = (kind == "p" and text in ",(") or word in _JOIN_WORDS
        cur.pos += 1
    return tuple(dict.fromkeys(names)) or None


def _delete_targets(cur: _Toks, schema: str) -> tuple[Name, ...] | None:
    cur.skip_words(_DELETE_MODIFIERS)
    if cur.word() == "FROM":
        cur.pos += 1
        start = cur.pos
        single = cur.name(schema)
        tok = cur.peek()
        if single is not None and (tok is None or tok == ("p", ";") or cur.word() in _DELETE_SINGLE_NEXT):
            return (single,)
        cur.pos = start  # DELETE FROM t1, t2 USING …: the targets and the references after USING
    # DELETE t1, t2 FROM t1 JOIN t2 …: every name of both lists.
    return _references(cur, schema, frozenset({"WHERE", "ORDER", "LIMIT", "RETURNING"}))


def _create_select(cur: _Toks, schema: str) -> DmlStatement | None:
    if cur.word() == "OR" and cur.word(1) == "REPLACE":
        cur.pos += 2
    if cur.word() == "TEMPORARY" or cur.word() != "TABLE":
        return None
    cur.pos += 1
    if cur.word() == "IF" and cur.word(1) == "NOT" and cur.word(2) == "EXISTS":
        cur.pos += 3
    target = cur.name(schema)
    # SELECT is reserved: a column or option can only be named so in quotes (an "i" token).
    if any(kind == "w" and text.upper() == "SELECT" for kind, text in cur.toks[cur.pos :]):
        return DmlStatement("CREATE TABLE ... SELECT", _one(target))
    return None


class StatementDmlGuard:
    """Stops (or, with ``skip``, warns about) statement-logged data changes to captured tables.

    ``captured(schema, table)`` is the sink's filter decision. Runs on the parser thread.
    """

    def __init__(self, policy: str, captured: Callable[[str, str], bool]) -> None:
        if policy not in STATEMENT_DML_POLICIES:
            raise ConfigError("source.statement_dml", f"must be stop or skip, got {policy!r}")
        self.policy = policy
        self.captured = captured
        self.skipped = 0

    def check(self, event: QueryEvent) -> None:
        dml = statement_dml(event.sql, event.schema)
        if dml is None:
            return
        targets = dml.targets
        if targets is not None and not any(self.captured(s, t) for s, t in targets):
            return
        h = event.header
        what = ", ".join(f"{s}.{t}" for s, t in targets) if targets else "tables that cannot be determined"
        shown = event.sql if len(event.sql) <= _SQL_SHOWN else event.sql[:_SQL_SHOWN] + "…"
        if self.policy == "skip":
            self.skipped += 1
            log.warning(
                "%s:%d: %s logged as a statement changes %s; its rows are not in the binlog and are NOT "
                "published (source.statement_dml: skip): %s",
                h.log_file, h.start, dml.verb, what, shown,
            )  # fmt: skip
            return
        raise StatementDmlError(
            f"{h.log_file}:{h.start}: {dml.verb} logged as a statement (binlog_format STATEMENT or MIXED) "
            f"changes {what}, which the relay captures; its rows are not in the binlog, so they cannot be "
            f"published exactly. The relay stops here; nothing of this transaction was published and the "
            f"saved position stays before it. Statement: {shown!r}. Fix: set binlog_format=ROW for that "
            "session/user (and globally), re-snapshot the affected rows and move the position past this "
            "transaction with `relay positions set`; or set source.statement_dml: skip to let such "
            "statements through to the DDL audit topic only"
        )
