"""The schema at the current binlog position: follows DDL, fills and verifies every TABLE_MAP.

Owned here: ``SchemaTracker``. It starts from the history's catalog at the start position, and then,
on the binlog reader thread, in binlog order:

* ``on_query(event)`` — a DDL moves the catalog on (``relay.schema.ddl.apply_ddl``), and the tables it
  changed are appended to the history at the END of the event before the event is handed on. A DDL
  read again (a restart, a replay) finds its record and is applied from it. A DDL that cannot be
  applied is recorded as broken and stops the relay (``SchemaError``) naming the place and statement;
* ``resolve(table_map)`` — called by the binlog parser for every TABLE_MAP, before the rows that
  follow are decoded. The history's columns are checked against the event: the column count, each
  column's binlog type and size, and what the event itself says (signedness and charset under
  MINIMAL; names, key flags and members under FULL, where the event's own values are kept). A
  difference stops the relay with the table, the place and the difference. Where the event has no
  names, the columns are rebuilt as FULL metadata would give them (``relay.schema.model.column_meta``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

from relay.binlog.events import ColumnMeta, QueryEvent, TableMapEvent
from relay.errors import SchemaError
from relay.schema.ddl import SYSTEM_SCHEMAS, UnappliedDdlError, apply_ddl
from relay.schema.history import FileSchemaHistory, Place, Record, apply_record
from relay.schema.model import Catalog, TableDef, column_meta, event_signature, signature

log = logging.getLogger(__name__)

RESYNC_HINT = (
    "check the table on the server, then run `relay schema resync --table {table}` to take its live "
    "definition for this place (the relay must be stopped)"
)


class SchemaTracker:
    """Follows the schema along one binlog stream (module docstring). One reader thread owns it."""

    def __init__(self, history: FileSchemaHistory, start: Place) -> None:
        self.history = history
        self.catalog: Catalog = history.catalog_at(start)
        self._resolved: dict[tuple[int, tuple[ColumnMeta, ...]], tuple[ColumnMeta, ...]] = {}

    # -- DDL ---------------------------------------------------------------------------------------
    def on_query(self, event: QueryEvent) -> None:
        at: Place = (event.header.log_file, event.header.log_pos)
        stored = self.history.records_at(at)
        if stored:
            for record in stored:
                apply_record(self.catalog, record)
            self._resolved.clear()
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
            )
            self.history.append(record)
            apply_record(self.catalog, record)
            self._resolved.clear()
            raise SchemaError(self._ddl_message(at, event.sql, exc.reason, exc.tables)) from exc
        if not changes and work.databases == self.catalog.databases:
            return
        record = Record("ddl", at, tuple(changes.items()), {"databases": dict(work.databases)}, event.sql)
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
            if tables:
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
        cache_key = (id(self.catalog.tables.get((event.schema, event.table))), event.columns)
        cached = self._resolved.get(cache_key)
        if cached is None:
            cached = self._verify(event)
            self._resolved[cache_key] = cached
        return replace(event, columns=cached, names_from_binlog=True)

    def _verify(self, event: TableMapEvent) -> tuple[ColumnMeta, ...]:
        where = f"{event.header.log_file}:{event.header.start}"
        name = f"{event.schema}.{event.table}"
        table = self.catalog.table(event.schema, event.table)

        def stop(difference: str) -> SchemaError:
            return SchemaError(
                f"schema history: the TABLE_MAP of {name} at {where} does not match the history: "
                f"{difference}. "
                "A DDL was not applied, or the table changed outside the binlog; "
                + RESYNC_HINT.format(table=name)
            )

        if table is None:
            raise stop("the history has no such table")
        if table.broken:
            raise stop(f"its definition is unknown since {table.broken}")
        if len(table.columns) != len(event.columns):
            raise stop(f"{len(event.columns)} columns in the event, {len(table.columns)} in the history")
        out = []
        for i, ev in enumerate(event.columns):
            col = table.columns[i]
            try:
                expected = signature(self.catalog, col)
            except ValueError as exc:
                raise stop(f"column {i + 1} ({col.name}): {exc}") from exc
            if expected != event_signature(ev):
                raise stop(
                    f"column {i + 1} ({col.name} {col.type_text()}): binlog type/size {expected} expected, "
                    f"the event has {event_signature(ev)} ({ev.mysql_type})"
                )
            mine = column_meta(self.catalog, table, i, ev)
            self._compare(ev, mine, event.names_from_binlog, i, stop)
            out.append(ev if event.names_from_binlog else mine)
        return tuple(out)

    @staticmethod
    def _compare(
        ev: ColumnMeta, mine: ColumnMeta, full: bool, i: int, stop: Callable[[str], SchemaError]
    ) -> None:
        checks: list[tuple[str, object, object]] = (
            [("unsigned", ev.unsigned, mine.unsigned)] if ev.unsigned else []
        )
        if ev.charset is not None:
            checks.append(("collation id", ev.charset, mine.charset))
        if full:
            checks += [("name", ev.name, mine.name), ("key", ev.is_key, mine.is_key)]
            checks.append(("type", ev.mysql_type, mine.mysql_type))
        for what, theirs, ours in checks:
            if theirs != ours:
                column = f"column {i + 1} ({mine.name})"
                raise stop(f"{column}: {what} is {theirs!r} in the event, {ours!r} in the history")
