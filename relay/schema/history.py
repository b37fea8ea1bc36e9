"""The schema history's durable stores: definitions versioned by binlog position.

Owned here: ``Record`` and ``SchemaHistory`` (the records in the order written, and the schema at any
place), and the file store ``FileSchemaHistory`` — one JSON object per line, appended and fsynced,
next to the position file (``schema.path``). The ZooKeeper store (``relay.schema.zookeeper``) and the
Kafka store (``relay.kafka.schema_history``) keep the same records as parts (``encode_parts``,
``PartAssembler``). Every store returns from ``append`` only once the record is durable: the relay
appends before it goes past the event the record describes. Four kinds of record, each stamped with
the binlog place ``at`` = [file, offset] from which it holds:

* ``snapshot`` — every table as read from the server, with the charset facts (collation ids,
  database defaults, collation_server); ``at`` is the start position it was read for;
* ``ddl`` — one binlog DDL: ``at`` is the END of its QUERY event, ``changes`` the tables it created,
  changed or dropped (None), ``broken`` set when it could not be applied;
* ``learned`` — a table as a TABLE_MAP with full metadata (binlog_row_metadata=FULL) described it,
  where the history did not know it or disagreed: ``at`` is the START of that TABLE_MAP;
* ``resync`` — an operator's ``relay schema resync``: a table re-read from the live server.

Each record also names the server whose binlog its place is in (``server_key``): places of two
servers (a master and its failover standby) are not comparable, so the schema is looked up among one
server's records. ``catalog_at(place, server)`` is the schema as of a place: the newest snapshot at or
before it, then every later record at or before it, in place order (ties in the order written). So
a restart, a replay from an older position or a takeover that reads the same store gets the
definitions of that place. Records at one place are never rewritten: a DDL read again finds its own
record (``records_at``) and does not parse again, and a resync appended later wins over a broken DDL
at the same place.

Thread: the binlog reader thread appends; ``relay schema`` commands read and append while no relay runs.
"""

from __future__ import annotations

import hashlib
import json
import os
import zlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from relay.common.binlog_names import file_order
from relay.errors import SchemaError
from relay.schema.model import NUMERIC, Catalog, TableDef

Place = tuple[str, int]
PART_BYTES = 400_000  # compressed bytes per part: well below ZooKeeper's 1 MB node and Kafka's 1 MB record


def place_key(place: Place) -> tuple[tuple[str, int], int]:
    return file_order(place[0]), place[1]


# The version of the records this relay writes. 2: numeric signedness read by each flavour's rules
# (MariaDB's TABLE_MAP counts YEAR among the numeric columns) and FLOAT UNSIGNED kept. Records without
# a version were written by an earlier relay: ``doubted`` says which of their columns to check again.
RECORD_VERSION = 2


@dataclass(frozen=True)
class Record:
    kind: str  # snapshot, ddl, learned, resync
    at: Place
    changes: tuple[tuple[tuple[str, str], TableDef | None], ...]
    facts: dict[str, Any] | None = None  # snapshot: the charset facts; ddl: the database defaults after it
    sql: str = ""
    broken: str = ""
    server: str = ""  # whose binlog ``at`` is a place in (``server_key``); "" in records written before
    when: int = 0  # ddl: the binlog time of its event (epoch seconds); 0 in records written before
    version: int = RECORD_VERSION  # 1: written by a relay before ``RECORD_VERSION`` existed

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "at": list(self.at)}
        if self.version >= RECORD_VERSION:
            out["v"] = self.version
        if self.server:
            out["server"] = self.server
        out["changes"] = [[s, t, d.to_json() if d is not None else None] for (s, t), d in self.changes]
        if self.facts is not None:
            out["facts"] = self.facts
        if self.sql:
            out["sql"] = self.sql
        if self.broken:
            out["broken"] = self.broken
        if self.when:
            out["when"] = self.when
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
            str(data.get("server", "")),
            int(data.get("when", 0)),
            int(data.get("v", 1)),
        )


def doubted(table: TableDef, record: Record, mariadb: bool) -> TableDef:
    """``table`` as a record an earlier version wrote gives it, with the columns whose signedness that
    version may have recorded wrongly in ``doubt`` (CHANGELOG, "schema history records of earlier
    versions"): on MariaDB, a table learned from a TABLE_MAP with full metadata gave every numeric
    column after a YEAR column its neighbour's signedness bit (MariaDB counts YEAR in SIGNEDNESS); a
    definition read from information_schema lost FLOAT UNSIGNED."""
    if record.version >= RECORD_VERSION:
        return table
    names: list[str] = []
    after_year = False
    for col in table.columns:
        if record.kind == "learned" and mariadb:
            after_year = after_year or col.kind == "year"
            if after_year and col.kind in NUMERIC:
                names.append(col.name)
                continue
        if record.kind in ("snapshot", "resync") and col.kind == "float" and not col.unsigned:
            names.append(col.name)
    return replace(table, doubt=tuple(names)) if names else table


def apply_record(catalog: Catalog, record: Record) -> None:
    for key, table in record.changes:
        if table is None:
            catalog.tables.pop(key, None)
        else:
            catalog.tables[key] = doubted(table, record, catalog.mariadb)
    if record.kind == "ddl" and record.facts is not None:
        catalog.databases = {str(k): str(v) for k, v in record.facts.get("databases", {}).items()}


class SchemaHistory:
    """The history's records in memory, in the order written, and the schema at any place.

    A store (file, ZooKeeper, Kafka) loads its records into ``records`` and implements ``_write``:
    ``append`` returns only once the record is durable, so the relay never goes past an event whose
    record could be lost."""

    def __init__(self) -> None:
        self.records: list[Record] = []
        self.part_bytes = PART_BYTES  # stores that keep parts: the most compressed bytes per part

    def describe(self) -> str:
        return "memory"

    def load(self) -> None:
        """(Re)read the records from the store. The relay calls it when it starts reading (after it
        won the leadership), so a takeover finds what the previous leader appended."""

    def _write(self, record: Record) -> None:
        """Make ``record`` durable (a store's own medium); the base class keeps it in memory only."""

    def append(self, record: Record) -> None:
        self._write(record)
        self.records.append(record)

    def close(self) -> None:
        """Release the store's clients (nothing for a file)."""

    @property
    def empty(self) -> bool:
        return not any(r.kind == "snapshot" for r in self.records)

    def of_server(self, server: str) -> list[tuple[int, Record]]:
        """The records whose places are in ``server``'s binlog, with their write order ("" : all)."""
        return [(i, r) for i, r in enumerate(self.records) if not server or r.server in ("", server)]

    def covers(self, at: Place, server: str = "") -> bool:
        """Whether a snapshot at or before ``at`` exists (``catalog_at`` can answer for it)."""
        limit = place_key(at)
        return any(r.kind == "snapshot" and place_key(r.at) <= limit for _, r in self.of_server(server))

    def records_at(self, at: Place, server: str = "") -> list[Record]:
        return [r for _, r in self.of_server(server) if r.at == at and r.kind != "snapshot"]

    def catalog_at(self, at: Place, server: str = "") -> Catalog:
        """The schema as of ``at`` in ``server``'s binlog (module docstring); SchemaError when no
        snapshot is that old."""
        limit = place_key(at)
        mine = self.of_server(server)
        snapshots = [(i, r) for i, r in mine if r.kind == "snapshot" and place_key(r.at) <= limit]
        if not snapshots:
            first = next((r.at for _, r in mine if r.kind == "snapshot"), None)
            of = f" of server {server}" if server else ""
            raise SchemaError(
                f"the schema history ({self.describe()}) has no definitions{of} as old as {at[0]}:{at[1]}"
                + (f" (its first snapshot is at {first[0]}:{first[1]})" if first else "")
            )
        index, snap = max(snapshots, key=lambda p: (place_key(p[1].at), p[0]))
        assert snap.facts is not None
        catalog = Catalog.from_facts(snap.facts)
        apply_record(catalog, snap)
        later = [
            (place_key(r.at), i, r)
            for i, r in mine
            if r.kind != "snapshot"
            and (place_key(r.at), i) > (place_key(snap.at), index)
            and place_key(r.at) <= limit
        ]
        for _, _, record in sorted(later, key=lambda t: (t[0], t[1])):
            apply_record(catalog, record)
        return catalog


def server_key(server_id: int, server_uuid: str) -> str:
    """Whose binlog a place is in: the server's UUID (MySQL), else its server id (MariaDB). A failover
    to a standby continues in another binlog, whose places say nothing about the master's."""
    return server_uuid or f"id:{server_id}"


def resync(
    history: SchemaHistory, table: TableDef | None, key: tuple[str, str], at: Place | None, server: str = ""
) -> Record:
    """Append the live definition of ``key`` (None: the table is gone) as an operator's resync, in
    ``server``'s binlog.

    ``at`` None: at the place of the table's broken DDL record (which it then replaces when the DDL is
    read again); otherwise at ``at`` (the saved position, for a table changed outside the binlog).
    """
    if at is None:
        broken = [
            r
            for _, r in history.of_server(server)
            if any(k == key and t is not None and t.broken for k, t in r.changes)
        ]
        if not broken:
            raise SchemaError(
                f"{key[0]}.{key[1]} has no broken DDL in the history; give the place to resync at (--at)"
            )
        at = broken[-1].at
    record = Record("resync", at, ((key, table),), server=server)
    history.append(record)
    return record


class FileSchemaHistory(SchemaHistory):
    """The history in one JSON-lines file, next to the file position store (module docstring)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__()
        self.path = Path(path)
        self.load()

    def load(self) -> None:
        self.records = []
        if not self.path.exists():
            return
        lines = self.path.read_text(encoding="utf-8").splitlines()
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                self.records.append(Record.from_json(json.loads(line)))
            except (ValueError, KeyError, TypeError, IndexError) as exc:
                if n == len(lines):
                    break  # a torn last line (a crash while appending): the record was never used
                raise SchemaError(f"{self.path}:{n}: unreadable schema history record: {exc}") from exc

    def describe(self) -> str:
        return f"file {self.path}"

    def _write(self, record: Record) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = json.dumps(record.to_json(), separators=(",", ":"), ensure_ascii=False) + "\n"
        try:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(line)
                f.flush()
                os.fsync(f.fileno())
        except OSError as exc:
            raise SchemaError(f"cannot append to the schema history {self.path}: {exc}") from exc


# --- stores that keep a record as one or more parts (ZooKeeper nodes, Kafka records) ----------------


def record_id(record: Record) -> str:
    """A record's identity, derived from its content: writing the same record twice (a zombie relay, a
    retried write) names it the same, so a reader keeps one of them."""
    text = json.dumps(record.to_json(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def encode_parts(record: Record, limit: int = PART_BYTES) -> list[bytes]:
    """``record`` as parts: each a JSON header line (id, part, parts) and a slice of the zlib-compressed
    record. A snapshot of thousands of tables compresses about tenfold and still fits one part."""
    body = zlib.compress(json.dumps(record.to_json(), separators=(",", ":")).encode("utf-8"), 6)
    slices = [body[i : i + limit] for i in range(0, len(body), limit)] or [b""]
    rid = record_id(record)
    return [
        json.dumps({"id": rid, "part": i, "parts": len(slices)}).encode() + b"\n" + piece
        for i, piece in enumerate(slices)
    ]


class PartAssembler:
    """Records from parts read in the order written; a record whose parts are not all there (a crash
    while writing it) is left out: it was never used, since ``append`` returns after its last part. A
    record id seen again (a repeated write) is kept once, at its first complete place."""

    def __init__(self, where: str) -> None:
        self.where = where
        self._pending: dict[str, dict[int, bytes]] = {}
        self._done: set[str] = set()
        self.records: list[Record] = []

    def add(self, data: bytes) -> None:
        head, newline, piece = data.partition(b"\n")
        try:
            header = json.loads(head)
            rid, part, parts = str(header["id"]), int(header["part"]), int(header["parts"])
        except (ValueError, KeyError, TypeError) as exc:
            raise SchemaError(f"{self.where}: not a schema history part ({exc!r})") from exc
        if not newline or rid in self._done:
            return
        got = self._pending.setdefault(rid, {})
        got[part] = piece
        if len(got) < parts:
            return
        del self._pending[rid]
        self._done.add(rid)
        try:
            data = zlib.decompress(b"".join(got[i] for i in range(parts)))
            self.records.append(Record.from_json(json.loads(data)))
        except (zlib.error, ValueError, KeyError, TypeError, IndexError) as exc:
            raise SchemaError(f"{self.where}: unreadable schema history record {rid}: {exc!r}") from exc
