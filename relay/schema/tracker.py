"""The schema at the current binlog position: follows DDL, fills and verifies every TABLE_MAP.

Owned here: ``SchemaTracker``. It starts from the history's catalog at the start position, and then,
on the binlog reader thread, in binlog order:

* ``on_query(event)`` — a DDL moves the catalog on (``relay.schema.ddl.apply_ddl``), and the tables it
  changed are appended to the history at the END of the event before the event is handed on, and set
  on the event (``QueryEvent.table_changes``: created, altered, dropped tables with their definitions,
  for debezium-json's ``tableChanges``). A DDL read again (a restart, a replay) finds its record and is
  applied from it, with the same table changes. A DDL that cannot be
  applied is recorded as broken and stops the relay (``SchemaError``) naming the place and statement
  — unless the server writes full row metadata and the mode is ``auto``: the binlog then describes
  the table itself, so the relay goes on and the table is learned at its next TABLE_MAP;
* ``resolve(table_map)`` — called by the binlog parser for every TABLE_MAP, before the rows that
  follow are decoded. The history's columns are checked against the event: the column count, each
  column's binlog type and size, and what the event itself says (signedness and charset under
  MINIMAL; names, key flags and members under FULL). Where the event has no names, the columns are
  rebuilt as FULL metadata would give them (``relay.schema.model.column_meta``), and a difference
  stops the relay with the table, the place and the difference. Where it has them (FULL), the
  event's own columns are used: a difference stops the relay in mode ``always``; in mode ``auto``
  the table is learned from the event (``relay.schema.model.table_from_event``), appended as a
  ``learned`` record at the TABLE_MAP's place and logged, so a later replay or failover to a server
  without FULL metadata finds it.

Signedness: where the event carries SIGNEDNESS (MINIMAL, FULL) it is the server's word for every
numeric column, signed ones included, and the history must agree. A definition an earlier version
wrote (``relay.schema.history.doubted``) may hold a wrong signedness: the first TABLE_MAP with
SIGNEDNESS settles it — differences are taken from the event, appended as a ``learned`` record and
logged. Without SIGNEDNESS (NO_LOG) a doubted integer or DECIMAL stops the relay naming
``relay schema resync``; a doubted FLOAT (only its ``mysqlType`` at stake) is logged.

MariaDB's INET4 / INET6 / UUID columns are BINARY(4) / BINARY(16) in the binlog and text in SELECT:
a captured table with one stops the relay with one line (``relay.source.snapshot_tables.unsupported``).

Captured tables only: ``captures`` (``relay.canal.captures``; None: every table) names the tables the
relay publishes. Whatever the history cannot follow in any other table — a DDL it cannot apply, a
TABLE_MAP that does not match, a type it does not model — is logged once and the event used as it is:
a table the relay does not publish is never a reason to stop.

Each table's verified columns are cached by the identity of the event's columns (the parser reuses
them for an unchanged TABLE_MAP body) and of the table's definition: an unchanged TABLE_MAP costs a
dictionary look-up.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

from relay.binlog.events import ColumnMeta, QueryEvent, TableMapEvent
from relay.errors import SchemaError, TableMapMismatchError, UnappliedDdlError
from relay.schema.ddl import SYSTEM_SCHEMAS, apply_ddl
from relay.schema.doubts import refuse_fixed_binary, settle_doubt
from relay.schema.history import Place, Record, SchemaHistory, apply_record
from relay.schema.model import (
    Catalog,
    TableChange,
    TableDef,
    column_meta,
    event_signature,
    signature,
    table_changes,
    table_from_event,
)

log = logging.getLogger(__name__)

RESYNC_HINT = (
    "check the table on the server, then run `relay schema resync -c CONFIG --table {table}` to take its "
    "live definition for this place (the relay must be stopped)"
)


class SchemaTracker:
    """Follows the schema along one binlog stream (module docstring). One reader thread owns it.

    ``mode``: ``auto`` or ``always`` (``schema.history``); ``full``: the server writes
    binlog_row_metadata=FULL (a DDL the parser cannot apply then does not stop the relay in ``auto``);
    ``server``: whose binlog the places are in (``relay.schema.history.server_key``).
    """

    def __init__(
        self, history: SchemaHistory, start: Place, mode: str = "always", full: bool = False, server: str = ""
    ) -> None:
        self.history = history
        self.mode = mode
        self.full = full
        self.server = server
        self.catalog: Catalog = history.catalog_at(start, server)
        # (schema, table) -> (the event's columns, the table's definition, the columns to use)
        self._resolved: dict[tuple[str, str], tuple[object, object, tuple[ColumnMeta, ...]]] = {}
        # The tables the relay publishes (None: all): problems elsewhere are logged, never a stop.
        self.captures: Callable[[str, str], bool] | None = None
        self._noted: set[tuple[str, str]] = set()  # uncaptured tables whose problem was logged

    def captured(self, schema: str, table: str) -> bool:
        return self.captures is None or self.captures(schema, table)

    def _note(self, key: tuple[str, str], problem: str) -> None:
        """A problem in a table the relay does not publish: logged once, not a stop."""
        if key not in self._noted:
            self._noted.add(key)
            log.info("schema history: %s.%s is not captured; not followed exactly: %s", *key, problem)

    @property
    def lenient(self) -> bool:
        """A DDL the parser cannot apply does not stop the relay (module docstring)."""
        return self.mode == "auto" and self.full

    # -- DDL ---------------------------------------------------------------------------------------
    def on_query(self, event: QueryEvent) -> None:
        at: Place = (event.header.log_file, event.header.log_pos)
        stored = self.history.records_at(at, self.server)
        if stored:
            found: list[TableChange] = []
            for record in stored:
                if record.kind == "ddl" and not record.broken:
                    found.extend(table_changes(self.catalog, record.changes))
                apply_record(self.catalog, record)
            if not any(r.broken for r in stored):
                event.table_changes = tuple(found)
            self._resolved.clear()
            if not self.lenient:
                self._stop_if_broken(stored, at)
            return
        work = self.catalog.copy()
        try:
            changes = apply_ddl(work, event.sql, event.schema)
        except UnappliedDdlError as exc:
            broken = {key: self._broken(key, at, exc.reason, event.sql) for key in exc.tables}
            record = Record(
                "ddl",
                at,
                tuple(broken.items()),
                {"databases": dict(self.catalog.databases)},
                event.sql,
                exc.reason,
                self.server,
                event.header.timestamp,
            )
            self.history.append(record)
            apply_record(self.catalog, record)
            self._resolved.clear()
            message = self._ddl_message(at, event.sql, exc.reason, exc.tables)
            if not self.lenient and any(self.captured(*key) for key in exc.tables):
                raise SchemaError(message) from exc
            log.warning("%s — the binlog has full row metadata: going on; the table is learned at its next "
                        "TABLE_MAP", message.split(" The relay stops")[0])  # fmt: skip
            return
        if not changes and work.databases == self.catalog.databases:
            event.table_changes = ()
            return
        event.table_changes = table_changes(self.catalog, changes.items())
        facts = {"databases": dict(work.databases)}
        record = Record(
            "ddl",
            at,
            tuple(changes.items()),
            facts,
            event.sql,
            server=self.server,
            when=event.header.timestamp,
        )
        self.history.append(record)
        self.catalog = work
        self._resolved.clear()
        log.info("schema history: %s:%d %s", at[0], at[1], ", ".join(f"{s}.{t}" for s, t in changes) or "-")

    def _broken(self, key: tuple[str, str], at: Place, reason: str, sql: str) -> TableDef:
        old = self.catalog.tables.get(key) or TableDef(key[0], key[1])
        return replace(old, broken=f"DDL at {at[0]}:{at[1]} not applied ({reason}): {sql[:200]}")

    def _stop_if_broken(self, stored: list[Record], at: Place) -> None:
        last = stored[-1]
        if last.kind == "ddl" and last.broken:
            tables = tuple(k for k, t in last.changes if t is not None and t.broken)
            if any(self.captured(*key) for key in tables):
                raise SchemaError(self._ddl_message(at, last.sql, last.broken, tables))

    @staticmethod
    def _ddl_message(at: Place, sql: str, reason: str, tables: tuple[tuple[str, str], ...]) -> str:
        names = ", ".join(f"{s}.{t}" for s, t in tables) or "(no table named)"
        hint = (
            RESYNC_HINT.format(table=names.split(", ")[0]) if tables else "fix the statement's effect by hand"
        )
        return (
            f"schema history: the DDL at {at[0]}:{at[1]} on {names} cannot be applied: {reason}. "
            f"Statement: {sql[:300]!r}. The relay stops before publishing anything of it; {hint}"
        )

    # -- TABLE_MAP -----------------------------------------------------------------------------------
    def resolve(self, event: TableMapEvent) -> TableMapEvent:
        """The TABLE_MAP with the history's names, keys and types (verified; module docstring)."""
        if event.schema in SYSTEM_SCHEMAS:
            return event
        key = (event.schema, event.table)
        table = self.catalog.tables.get(key)
        cached = self._resolved.get(key)
        if cached is None or cached[0] is not event.columns or cached[1] is not table:
            columns = self._columns(event, table)
            cached = (event.columns, self.catalog.tables.get(key), columns)
            self._resolved[key] = cached
        if cached[2] is event.columns:
            return event
        return TableMapEvent(
            event.header,
            event.table_id,
            event.schema,
            event.table,
            cached[2],
            True,
            event.signedness_from_binlog,
        )

    def check(self, event: TableMapEvent) -> TableMapEvent:
        """``resolve`` without its effects, for a transaction read ahead on a second connection
        (``relay.source.read_ahead``): the same columns and the same refusal (``SchemaError``), but
        nothing is learned, appended or cached — ``resolve`` does that when the parser's own stream
        reaches the event. No DDL lies inside a transaction, so the catalog now is the one it will use."""
        if event.schema in SYSTEM_SCHEMAS:
            return event
        table = self.catalog.tables.get((event.schema, event.table))
        try:
            columns = self._verify(event, table, settle=False)
        except TableMapMismatchError as exc:
            if not self._learns(event) and self.captured(event.schema, event.table):
                raise self._mismatch(event, str(exc)) from None
            columns = event.columns
        except SchemaError:
            if self.captured(event.schema, event.table):
                raise
            columns = event.columns
        if columns is event.columns:
            return event
        return TableMapEvent(
            event.header,
            event.table_id,
            event.schema,
            event.table,
            columns,
            True,
            event.signedness_from_binlog,
        )

    def _learns(self, event: TableMapEvent) -> bool:
        """A mismatch is learned from the event (full metadata, mode auto), not a refusal."""
        return event.names_from_binlog and self.mode == "auto"

    @staticmethod
    def _mismatch(event: TableMapEvent, difference: str) -> SchemaError:
        where = f"{event.header.log_file}:{event.header.start}"
        name = f"{event.schema}.{event.table}"
        return SchemaError(
            f"schema history: the TABLE_MAP of {name} at {where} does not match the history: "
            f"{difference}. A DDL was not applied, or the table changed outside the binlog; "
            + RESYNC_HINT.format(table=name)
        )

    def _columns(self, event: TableMapEvent, table: TableDef | None) -> tuple[ColumnMeta, ...]:
        try:
            return self._checked_columns(event, table)
        except SchemaError as exc:
            key = (event.schema, event.table)
            if self.captured(*key):
                raise
            self._note(key, str(exc))
            return event.columns

    def _checked_columns(self, event: TableMapEvent, table: TableDef | None) -> tuple[ColumnMeta, ...]:
        try:
            return self._verify(event, table)
        except TableMapMismatchError as exc:
            difference = str(exc)
        if not self._learns(event):
            raise self._mismatch(event, difference)
        self._learn(event, table, difference)
        return event.columns

    def _learn(self, event: TableMapEvent, table: TableDef | None, difference: str) -> None:
        """Take the table from a TABLE_MAP with full metadata (mode ``auto``) into the history."""
        at: Place = (event.header.log_file, event.header.start)
        key = (event.schema, event.table)
        try:
            learned = table_from_event(self.catalog, event.schema, event.table, event.columns, table)
        except ValueError as exc:
            log.warning("schema history: %s.%s at %s:%d cannot be modelled (%s); its binlog metadata is used",
                        *key, *at, exc)  # fmt: skip
            return
        stored = [
            r
            for r in self.history.records_at(at, self.server)
            if r.kind == "learned" and dict(r.changes).get(key)
        ]
        record = stored[-1] if stored else Record("learned", at, ((key, learned),), server=self.server)
        if not stored:
            self.history.append(record)
            # A table the history never had (no SELECT on it at the first read) is news, not a problem.
            level = logging.INFO if table is None else logging.WARNING
            log.log(level, "schema history: %s.%s learned from the binlog's full metadata at %s:%d (%s)",
                    *key, *at, difference)  # fmt: skip
        apply_record(self.catalog, record)

    def _verify(
        self, event: TableMapEvent, table: TableDef | None, *, settle: bool = True
    ) -> tuple[ColumnMeta, ...]:
        if table is None:
            raise TableMapMismatchError("the history has no such table")
        if table.broken:
            raise TableMapMismatchError(f"its definition is unknown since {table.broken}")
        if len(table.columns) != len(event.columns):
            counts = f"{len(event.columns)} columns in the event, {len(table.columns)} in the history"
            raise TableMapMismatchError(counts)
        refuse_fixed_binary(event, table)
        if table.doubt:
            table = settle_doubt(self.catalog, self.history, self.server, event, table, write=settle)
        out = []
        for i, ev in enumerate(event.columns):
            col = table.columns[i]
            try:
                expected = signature(self.catalog, col)
            except ValueError as exc:
                raise TableMapMismatchError(f"column {i + 1} ({col.name}): {exc}") from exc
            if expected != event_signature(ev):
                raise TableMapMismatchError(
                    f"column {i + 1} ({col.name} {col.type_text()}): binlog type/size {expected} expected, "
                    f"the event has {event_signature(ev)} ({ev.mysql_type})"
                )
            mine = column_meta(self.catalog, table, i, ev)
            self._compare(ev, mine, event, i)
            out.append(mine)
        return event.columns if event.names_from_binlog else tuple(out)

    @staticmethod
    def _compare(ev: ColumnMeta, mine: ColumnMeta, event: TableMapEvent, i: int) -> None:
        full = event.names_from_binlog
        # With SIGNEDNESS the event's word holds both ways (a signed column the history calls unsigned
        # would publish 255 for -1); without it (NO_LOG) every column reads as signed: nothing to compare.
        signedness = event.signedness_from_binlog or ev.unsigned
        checks: list[tuple[str, object, object]] = (
            [("unsigned", ev.unsigned, mine.unsigned)] if signedness else []
        )
        if ev.charset is not None:
            checks.append(("collation id", ev.charset, mine.charset))
        if full:
            checks += [("name", ev.name, mine.name), ("key", ev.is_key, mine.is_key)]
            checks.append(("type", ev.mysql_type, mine.mysql_type))
        for what, theirs, ours in checks:
            if theirs != ours:
                column = f"column {i + 1} ({mine.name})"
                raise TableMapMismatchError(
                    f"{column}: {what} is {theirs!r} in the event, {ours!r} in the history"
                )
