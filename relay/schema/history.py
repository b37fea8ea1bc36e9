"""The schema history's durable store: definitions versioned by binlog position, in an append-only file.

Owned here: ``FileSchemaHistory`` — one JSON object per line, appended and fsynced before the relay
goes past the event it describes, kept next to the position file (``schema.path``). Three kinds of
record, each stamped with the binlog place ``at`` = [file, offset] from which it holds:

* ``snapshot`` — every captured table as read from the server, with the charset facts (collation
  ids, database defaults, collation_server); ``at`` is the start position it was read for;
* ``ddl`` — one binlog DDL: ``at`` is the END of its QUERY event, ``changes`` the tables it created,
  changed or dropped (None), ``broken`` set when it could not be applied;
* ``resync`` — an operator's ``relay schema resync``: a table re-read from the live server.

``catalog_at(place)`` is the schema as of a place: the newest snapshot at or before it, then every
later record at or before it, in place order (ties in the order written). So a restart, a replay from
an older position or a takeover that reads the same file gets the definitions of that place. Records
at one place are never rewritten: a DDL read again finds its own record (``records_at``) and does not
parse again, and a resync appended later wins over a broken DDL at the same place.

Why a file: it lives beside the file position store and is written by the one relay that holds the
instance lock. With ``positions.backend: zookeeper`` or ``kafka`` (HA takeover on another host) the
file is not shared — that backend is not done yet (docs/architecture.md).
Thread: the binlog reader thread appends; ``relay schema`` commands read and append while no relay runs.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from relay.common.binlog_names import file_order
from relay.errors import SchemaError
from relay.schema.model import Catalog, TableDef

Place = tuple[str, int]


def place_key(place: Place) -> tuple[tuple[str, int], int]:
    return file_order(place[0]), place[1]


@dataclass(frozen=True)
class Record:
    kind: str  # snapshot, ddl, resync
    at: Place
    changes: tuple[tuple[tuple[str, str], TableDef | None], ...]
    facts: dict[str, Any] | None = None  # snapshot: the charset facts; ddl: the database defaults after it
    sql: str = ""
    broken: str = ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "at": list(self.at)}
        out["changes"] = [[s, t, d.to_json() if d is not None else None] for (s, t), d in self.changes]
        if self.facts is not None:
            out["facts"] = self.facts
        if self.sql:
            out["sql"] = self.sql
        if self.broken:
            out["broken"] = self.broken
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Record:
        changes = tuple(
            ((str(s), str(t)), TableDef.from_json(d) if d is not None else None)
            for s, t, d in data["changes"]
        )
        at = data["at"]
        return cls(
            str(data["kind"]),
            (str(at[0]), int(at[1])),
            changes,
            data.get("facts"),
            data.get("sql", ""),
            data.get("broken", ""),
        )


def apply_record(catalog: Catalog, record: Record) -> None:
    for key, table in record.changes:
        if table is None:
            catalog.tables.pop(key, None)
        else:
            catalog.tables[key] = table
    if record.kind == "ddl" and record.facts is not None:
        catalog.databases = {str(k): str(v) for k, v in record.facts.get("databases", {}).items()}


class FileSchemaHistory:
    """The history in one JSON-lines file (module docstring)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.records: list[Record] = []
        if self.path.exists():
            for n, line in enumerate(self.path.read_text(encoding="utf-8").splitlines(), 1):
                if not line.strip():
                    continue
                try:
                    self.records.append(Record.from_json(json.loads(line)))
                except (ValueError, KeyError, TypeError, IndexError) as exc:
                    if n == len(self.path.read_text(encoding="utf-8").splitlines()):
                        break  # a torn last line (a crash while appending): the record was never used
                    raise SchemaError(f"{self.path}:{n}: unreadable schema history record: {exc}") from exc

    @property
    def empty(self) -> bool:
        return not any(r.kind == "snapshot" for r in self.records)

    def append(self, record: Record) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = json.dumps(record.to_json(), separators=(",", ":"), ensure_ascii=False) + "\n"
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())
        self.records.append(record)

    def records_at(self, at: Place) -> list[Record]:
        return [r for r in self.records if r.at == at and r.kind != "snapshot"]

    def catalog_at(self, at: Place) -> Catalog:
        """The schema as of ``at`` (module docstring); SchemaError when no snapshot is that old."""
        limit = place_key(at)
        snapshots = [
            (i, r) for i, r in enumerate(self.records) if r.kind == "snapshot" and place_key(r.at) <= limit
        ]
        if not snapshots:
            first = next((r.at for r in self.records if r.kind == "snapshot"), None)
            raise SchemaError(
                f"the schema history {self.path} has no definitions as old as {at[0]}:{at[1]}"
                + (f" (its first snapshot is at {first[0]}:{first[1]})" if first else "")
            )
        index, snap = max(snapshots, key=lambda p: (place_key(p[1].at), p[0]))
        assert snap.facts is not None
        catalog = Catalog.from_facts(snap.facts)
        apply_record(catalog, snap)
        later = [
            (place_key(r.at), i, r)
            for i, r in enumerate(self.records)
            if r.kind != "snapshot"
            and (place_key(r.at), i) > (place_key(snap.at), index)
            and place_key(r.at) <= limit
        ]
        for _, _, record in sorted(later, key=lambda t: (t[0], t[1])):
            apply_record(catalog, record)
        return catalog


def resync(
    history: FileSchemaHistory, table: TableDef | None, key: tuple[str, str], at: Place | None
) -> Record:
    """Append the live definition of ``key`` (None: the table is gone) as an operator's resync.

    ``at`` None: at the place of the table's broken DDL record (which it then replaces when the DDL is
    read again); otherwise at ``at`` (the saved position, for a table changed outside the binlog).
    """
    if at is None:
        broken = [
            r for r in history.records if any(k == key and t is not None and t.broken for k, t in r.changes)
        ]
        if not broken:
            raise SchemaError(
                f"{key[0]}.{key[1]} has no broken DDL in the history; give the place to resync at (--at)"
            )
        at = broken[-1].at
    record = Record("resync", at, ((key, table),))
    history.append(record)
    return record
