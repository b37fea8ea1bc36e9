"""Definitions the schema history cannot vouch for, settled at a table's TABLE_MAP.

Owns two checks ``relay.schema.tracker`` makes before it compares a TABLE_MAP with the history:

* ``settle_doubt`` — a definition from a record an earlier version wrote may hold a wrong signedness
  (``relay.schema.history.doubted`` lists the columns). Where the event carries SIGNEDNESS
  (binlog_row_metadata MINIMAL or FULL) the server's word settles it: the columns that differ are taken
  from the event, the corrected table is appended as a ``learned`` record at the TABLE_MAP's place and
  logged, so a restart or a replay finds it. Without SIGNEDNESS (NO_LOG) nothing can settle it: a doubted
  integer or DECIMAL (its values are at stake: -1 or 255) stops the relay naming
  ``relay schema resync``; a doubted FLOAT (only ``mysqlType``'s ``unsigned`` is at stake: a FLOAT's
  value reads the same either way) is logged and kept;
* ``refuse_fixed_binary`` — MariaDB's INET4 / INET6 / UUID are BINARY(4) / BINARY(16) in the binlog and
  an address or a UUID in SELECT: no one value can be published for both, so a table with one stops the
  relay with one line (the tracker applies it to captured tables only).

Pure functions over the values they are given, on the binlog reader thread.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from relay.binlog.events import TableMapEvent
from relay.errors import SchemaError
from relay.schema.history import RECORD_VERSION, Place, Record, SchemaHistory
from relay.schema.model import FIXED_BINARY, Catalog, TableDef

log = logging.getLogger(__name__)


def refuse_fixed_binary(event: TableMapEvent, table: TableDef) -> None:
    """SchemaError for a table with an INET4, INET6 or UUID column (module docstring)."""
    for col in table.columns:
        if col.kind in FIXED_BINARY:
            raise SchemaError(
                f"{table.qualified}: column {col.name!r} is {col.kind.upper()} (MariaDB), which the relay "
                "does not capture (the binlog holds its binary storage, SELECT its text); leave the table "
                "out (filter.exclude, or the mapping), or store the value in a BINARY or VARCHAR column"
            )


def settle_doubt(
    catalog: Catalog,
    history: SchemaHistory,
    server: str,
    event: TableMapEvent,
    table: TableDef,
    *,
    write: bool = True,
) -> TableDef:
    """The table with its doubted columns' signedness settled (module docstring); the catalog holds the
    result. ``write`` False (a read-ahead check): nothing appended or logged, the catalog unchanged."""
    doubt = {name.lower() for name in table.doubt}
    key = (table.schema, table.name)
    if not event.signedness_from_binlog:
        return _undecidable(catalog, table, doubt, event, write)
    columns = list(table.columns)
    changed = []
    for i, (col, ev) in enumerate(zip(table.columns, event.columns, strict=True)):
        if col.name.lower() in doubt and col.unsigned != ev.unsigned:
            columns[i] = replace(col, unsigned=ev.unsigned)
            changed.append(f"{col.name} {'unsigned' if ev.unsigned else 'signed'}")
    settled = replace(table, columns=tuple(columns), doubt=())
    if not write:
        return settled
    at: Place = (event.header.log_file, event.header.start)
    again = any(r.kind == "learned" and r.version >= RECORD_VERSION and dict(r.changes).get(key) == settled
                for r in history.records_at(at, server))  # fmt: skip
    if changed and not again:  # a replay of the same TABLE_MAP finds its record: not appended twice
        history.append(Record("learned", at, ((key, settled),), server=server))
        log.warning(
            "schema history: %s: the signedness an earlier version recorded is corrected from the binlog's "
            "SIGNEDNESS at %s:%d (%s)",
            table.qualified,
            *at,
            ", ".join(changed),
        )
    catalog.tables[key] = settled
    return settled


def _undecidable(
    catalog: Catalog, table: TableDef, doubt: set[str], event: TableMapEvent, write: bool
) -> TableDef:
    values = [c.name for c in table.columns if c.name.lower() in doubt and c.kind not in ("float", "double")]
    where = f"{event.header.log_file}:{event.header.start}"
    if values:
        raise SchemaError(
            f"schema history: {table.qualified} was recorded by an earlier version that could misread the "
            f"signedness of {', '.join(values)} (a column after a YEAR), and the binlog at {where} has no "
            "SIGNEDNESS to check it (binlog_row_metadata=NO_LOG): with the relay stopped, run `relay schema "
            f"resync -c CONFIG --table {table.qualified} --yes`, or set binlog_row_metadata=MINIMAL or FULL"
        )
    settled = replace(table, doubt=())
    if write:
        log.warning(
            "schema history: %s: FLOAT column(s) %s read by an earlier version may be UNSIGNED, which the "
            "binlog at %s cannot say (binlog_row_metadata=NO_LOG): mysqlType may lack 'unsigned' (values are "
            "unaffected) until `relay schema resync -c CONFIG --table %s --yes`",
            table.qualified,
            ", ".join(table.doubt),
            where,
            table.qualified,
        )
        catalog.tables[(table.schema, table.name)] = settled
    return settled
