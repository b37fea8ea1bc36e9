"""The schema model: what the relay knows about a table's columns, and what a TABLE_MAP must say of it.

Owned here: ``ColumnDef`` / ``TableDef`` (frozen values that round-trip through JSON, as the history
stores them), ``Catalog`` (every known table plus the charset facts needed to resolve a column's
collation: database defaults, the server default, the server's collation ids), and the two things the
binlog side needs from a definition:

* ``signature`` — the (real type, size) a TABLE_MAP must carry for the column (MySQL ``Field::
  binlog_type`` and ``save_field_metadata``): what the history is verified against at every TABLE_MAP;
* ``column_meta`` — the ``relay.binlog.events.ColumnMeta`` that binlog_row_metadata=FULL would have
  given: the name, the key flag, the signedness, the collation id (text decoding, ``varchar(16)`` in
  characters), the ENUM/SET members.

Pure values, no I/O; used on the binlog reader thread by ``relay.schema.tracker``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from relay.binlog import charsets, types
from relay.binlog.column_types import INT_CODES, table_map_type
from relay.binlog.events import ColumnMeta

_BLOB_SIZES = {"tiny": 1, "": 2, "medium": 3, "long": 4}
_TEXTS = {f"{p}text": n for p, n in _BLOB_SIZES.items()}
_BLOBS = {f"{p}blob": n for p, n in _BLOB_SIZES.items()}
# Types whose values are characters (a collation applies); binary strings have the binary collation.
CHARACTER = frozenset({"char", "varchar", "enum", "set", *_TEXTS})
BINARY = frozenset({"binary", "varbinary", *_BLOBS})
NUMERIC = frozenset({*INT_CODES, "decimal", "float", "double"})
# MariaDB's fixed-size binary plugin types: BINARY(4) / BINARY(16) with the binary collation in the
# binlog (``Binlog_type_info_fixed_string``); their text (an address, a UUID) is not what the binlog holds.
FIXED_BINARY = frozenset({"inet4", "inet6", "uuid"})
# The spatial subtypes: every one is GEOMETRY in the binlog (kept as kind ``geometry``).
SPATIAL = frozenset({
    "point", "linestring", "polygon", "multipoint", "multilinestring", "multipolygon", "geometrycollection",
    "geomcollection",
})  # fmt: skip
KNOWN = CHARACTER | BINARY | NUMERIC | FIXED_BINARY | {"date", "datetime", "timestamp", "time", "year",
                                                       "bit", "json", "geometry"}  # fmt: skip


@dataclass(frozen=True, slots=True)
class ColumnDef:
    """One column as declared: ``kind`` is MySQL's type name (``varchar``, ``decimal``, ``mediumtext``),
    ``params`` its numbers (length, precision and scale, fsp, bits), ``collation`` the resolved collation
    of a character column (``binary`` for binary strings, None for the rest)."""

    name: str
    kind: str
    params: tuple[int, ...] = ()
    unsigned: bool = False
    collation: str | None = None
    members: tuple[str, ...] | None = None  # ENUM / SET

    def type_text(self) -> str:
        """The declared type as SQL (for messages and ``relay schema show``)."""
        text = self.kind
        if self.members is not None:
            text += "(" + ",".join("'" + m.replace("'", "''") + "'" for m in self.members) + ")"
        elif self.params:
            text += "(" + ",".join(str(p) for p in self.params) + ")"
        if self.unsigned:
            text += " unsigned"
        if self.collation is not None and self.kind in CHARACTER:
            text += f" collate {self.collation}"
        return text

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "kind": self.kind}
        if self.params:
            out["params"] = list(self.params)
        if self.unsigned:
            out["unsigned"] = True
        if self.collation is not None:
            out["collation"] = self.collation
        if self.members is not None:
            out["members"] = list(self.members)
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ColumnDef:
        members = data.get("members")
        return cls(
            name=str(data["name"]),
            kind=str(data["kind"]),
            params=tuple(int(p) for p in data.get("params", ())),
            unsigned=bool(data.get("unsigned", False)),
            collation=data.get("collation"),
            members=tuple(str(m) for m in members) if members is not None else None,
        )


@dataclass(frozen=True, slots=True)
class TableDef:
    """A table: its columns in order, its primary key (column names, in key order), its default
    collation (for columns added later without one). ``broken`` is set, with the reason, when a DDL
    on the table could not be applied: the definition is unknown until ``relay schema resync``."""

    schema: str
    name: str
    columns: tuple[ColumnDef, ...] = ()
    primary_key: tuple[str, ...] = ()
    collation: str | None = None
    broken: str = ""
    # Columns whose signedness the record this definition came from may hold wrongly (a record an earlier
    # version wrote: ``relay.schema.history.doubted``). Never stored: derived when the record is applied,
    # settled at the table's next TABLE_MAP (``relay.schema.tracker``).
    doubt: tuple[str, ...] = ()

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.name}"

    def index_of(self, column: str) -> int | None:
        """The position of ``column`` (MySQL column names are case-insensitive)."""
        lower = column.lower()
        for i, c in enumerate(self.columns):
            if c.name.lower() == lower:
                return i
        return None

    def renamed(self, schema: str, name: str) -> TableDef:
        return replace(self, schema=schema, name=name)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "schema": self.schema,
            "name": self.name,
            "columns": [c.to_json() for c in self.columns],
            "primary_key": list(self.primary_key),
        }
        if self.collation is not None:
            out["collation"] = self.collation
        if self.broken:
            out["broken"] = self.broken
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TableDef:
        return cls(
            schema=str(data["schema"]),
            name=str(data["name"]),
            columns=tuple(ColumnDef.from_json(c) for c in data.get("columns", ())),
            primary_key=tuple(str(k) for k in data.get("primary_key", ())),
            collation=data.get("collation"),
            broken=str(data.get("broken", "")),
        )

    def describe(self) -> str:
        """A readable, multi-line description (``relay schema show``)."""
        lines = [f"{self.qualified}" + (f"  BROKEN: {self.broken}" if self.broken else "")]
        keys = {k.lower() for k in self.primary_key}
        for i, c in enumerate(self.columns):
            mark = "  PRI" if c.name.lower() in keys else ""
            lines.append(f"  {i + 1:>3} {c.name:<24} {c.type_text()}{mark}")
        lines.append(
            f"  primary key: ({', '.join(self.primary_key)})" if self.primary_key else "  no primary key"
        )
        if self.collation:
            lines.append(f"  default collation: {self.collation}")
        return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class TableChange:
    """A table one DDL created, altered or dropped (``kind`` CREATE, ALTER or DROP), with its definition
    after the DDL (before it, for a DROP): what a debezium-json schema-change event's ``tableChanges``
    shows (``relay.kafka.debezium_ddl``). A RENAME is a DROP of the old name and a CREATE of the new."""

    kind: str
    table: TableDef


def table_changes(
    before: Catalog, changes: Iterable[tuple[tuple[str, str], TableDef | None]]
) -> tuple[TableChange, ...]:
    """The ``TableChange``s of a DDL's ``changes`` (table -> definition after it, None if gone), against
    the catalog ``before`` it; tables whose definition is unknown (broken) are left out."""
    out = []
    for key, after in changes:
        old = before.tables.get(key)
        if after is None:
            if old is not None and not old.broken:
                out.append(TableChange("DROP", old))
        elif not after.broken:
            out.append(TableChange("CREATE" if old is None else "ALTER", after))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Collation:
    name: str
    charset: str
    id: int
    default: bool  # the charset's default collation


@dataclass
class Catalog:
    """Every table known at one binlog position, and the charset facts to resolve collations.

    ``tables`` is keyed by (schema, table) as the server spells them (lower_case_table_names=0);
    ``databases`` maps a schema to its default collation; ``server_collation`` is collation_server.
    """

    mariadb: bool = False
    tables: dict[tuple[str, str], TableDef] = field(default_factory=dict)
    databases: dict[str, str] = field(default_factory=dict)
    server_collation: str = "utf8mb4_general_ci"
    collations: dict[str, Collation] = field(default_factory=dict)

    def copy(self) -> Catalog:
        return Catalog(self.mariadb, dict(self.tables), dict(self.databases), self.server_collation,
                       self.collations)  # fmt: skip

    def table(self, schema: str, name: str) -> TableDef | None:
        return self.tables.get((schema, name))

    def default_collation(self, charset: str) -> str | None:
        for c in self.collations.values():
            if c.charset == charset and c.default:
                return c.name
        return None

    def collation_id(self, name: str | None) -> int | None:
        if name is None:
            return None
        if name == "binary":
            return charsets.BINARY_COLLATION
        found = self.collations.get(name)
        return found.id if found is not None else None

    def facts_json(self) -> dict[str, Any]:
        """The charset facts (not the tables), as the history's snapshot record stores them."""
        return {
            "mariadb": self.mariadb,
            "databases": dict(self.databases),
            "server_collation": self.server_collation,
            "collations": [[c.name, c.charset, c.id, c.default] for c in self.collations.values()],
        }

    @classmethod
    def from_facts(cls, data: dict[str, Any]) -> Catalog:
        collations = {
            str(n): Collation(str(n), str(cs), int(i), bool(d)) for n, cs, i, d in data["collations"]
        }
        return cls(
            mariadb=bool(data.get("mariadb", False)),
            databases={str(k): str(v) for k, v in data.get("databases", {}).items()},
            server_collation=str(data.get("server_collation", "utf8mb4_general_ci")),
            collations=collations,
        )


# --- what a TABLE_MAP says of a column -------------------------------------------------------------


def _maxlen(catalog: Catalog, collation: str | None) -> int:
    cs = charsets.charset_of(catalog.collation_id(collation))
    return cs.maxlen if cs is not None else 1


def signature(catalog: Catalog, col: ColumnDef) -> tuple[int, int]:
    """The (real type, size) the column's TABLE_MAP entry carries (``relay.binlog.column_types``, the
    one mapping the snapshot uses too); ``event_signature`` reads the same from an event. Size: the
    metadata, except for the STRING family, where it is the length in bytes (ENUM/SET: the pack length),
    as ``relay.binlog.types.string_type`` gives it."""
    k, p = col.kind, col.params
    if k not in KNOWN:  # the types the history models
        raise ValueError(f"no binlog type for {k}")
    length = 0
    if k in ("char", "binary", "varchar", "varbinary"):
        characters = p[0] if p else (1 if k in ("char", "binary") else 0)
        length = characters * (_maxlen(catalog, col.collation) if k in ("char", "varchar") else 1)
    return table_map_type(
        k,
        length=length,
        precision=p[0] if k == "decimal" and p else 10,
        scale=p[1] if k == "decimal" and len(p) > 1 else 0,
        fsp=p[0] if p else 0,
        bits=p[0] if p else 1,
        members=len(col.members or ()),
        mariadb=catalog.mariadb,
    )


def event_signature(col: ColumnMeta) -> tuple[int, int]:
    """(real type, size) of an event's column, comparable with ``signature``."""
    if col.type_code in (types.STRING, types.ENUM, types.SET):
        return col.type_code, types.string_type(col.meta)[1]
    if col.type_code in (types.BLOB, types.TINY_BLOB, types.MEDIUM_BLOB, types.LONG_BLOB):
        return types.BLOB, col.meta
    if col.type_code == types.VAR_STRING:
        return types.VARCHAR, col.meta
    return col.type_code, col.meta


def collation_of(catalog: Catalog, col: ColumnDef) -> int | None:
    """The collation id FULL metadata gives the column: character and binary strings (and on MariaDB
    GEOMETRY, which it counts as a character column); None for every other type."""
    if col.kind in CHARACTER or col.kind in BINARY or (col.kind == "json" and catalog.mariadb):
        return catalog.collation_id(col.collation)
    if col.kind in FIXED_BINARY:
        return charsets.BINARY_COLLATION
    if col.kind == "geometry" and catalog.mariadb:
        return charsets.BINARY_COLLATION
    return None


def column_meta(catalog: Catalog, table: TableDef, index: int, event: ColumnMeta) -> ColumnMeta:
    """The column as FULL metadata would describe it: the event's type, size and nullability, the
    history's name, key flag, signedness, collation and members."""
    col = table.columns[index]
    raw = types.STRING if event.type_code in (types.ENUM, types.SET) else event.type_code
    keys = {k.lower() for k in table.primary_key}
    return types.column_meta(
        index,
        raw,
        event.meta,
        event.nullable,
        name=col.name,
        unsigned=col.unsigned and col.kind in NUMERIC,
        charset=collation_of(catalog, col),
        is_key=col.name.lower() in keys,
        enum_values=col.members if col.kind == "enum" else None,
        set_values=col.members if col.kind == "set" else None,
    )


# --- a table as a TABLE_MAP with full metadata describes it ----------------------------------------

_INT_KINDS = {code: kind for kind, code in INT_CODES.items()}
_BLOB_KINDS = {n: p for p, n in _BLOB_SIZES.items()}
_TIME_KINDS = {types.DATETIME2: "datetime", types.TIMESTAMP2: "timestamp", types.TIME2: "time"}


def _collation_name(catalog: Catalog, collation_id: int | None) -> str | None:
    if collation_id is None:
        return None
    if collation_id == charsets.BINARY_COLLATION:
        return "binary"
    return next((c.name for c in catalog.collations.values() if c.id == collation_id), None)


def _column_from_event(catalog: Catalog, ev: ColumnMeta) -> ColumnDef:
    """The declared column an event's column with full metadata stands for (ValueError: not modelled)."""
    code, meta, name = ev.type_code, ev.meta, ev.name
    collation = _collation_name(catalog, ev.charset)
    binary = collation == "binary"
    if code in _INT_KINDS:
        return ColumnDef(name, _INT_KINDS[code], (), ev.unsigned)
    simple = {types.FLOAT: "float", types.DOUBLE: "double", types.DATE: "date", types.YEAR: "year",
              types.JSON: "json", types.GEOMETRY: "geometry"}  # fmt: skip
    if code in simple:
        return ColumnDef(name, simple[code], (), ev.unsigned and code in (types.FLOAT, types.DOUBLE))
    if code == types.NEWDECIMAL:
        return ColumnDef(name, "decimal", (meta >> 8, meta & 0xFF), ev.unsigned)
    if code in _TIME_KINDS:
        return ColumnDef(name, _TIME_KINDS[code], (meta,) if meta else ())
    if code == types.BIT:
        return ColumnDef(name, "bit", ((meta >> 8) * 8 + (meta & 0xFF),))
    if collation is None:
        raise ValueError(f"column {name}: the event names no collation the history knows ({ev.charset})")
    if code in (types.ENUM, types.SET):
        members = ev.enum_values if code == types.ENUM else ev.set_values
        if members is None:
            raise ValueError(f"column {name}: the event lists no members")
        return ColumnDef(name, "enum" if code == types.ENUM else "set", (), False, collation, members)
    maxlen = 1 if binary else _maxlen(catalog, collation)
    if code == types.STRING:
        length = types.string_type(meta)[1]
        return ColumnDef(name, "binary" if binary else "char", (length // maxlen,), False, collation)
    if code in (types.VARCHAR, types.VAR_STRING):
        return ColumnDef(name, "varbinary" if binary else "varchar", (meta // maxlen,), False, collation)
    if code in (types.BLOB, types.TINY_BLOB, types.MEDIUM_BLOB, types.LONG_BLOB) and meta in _BLOB_KINDS:
        return ColumnDef(name, _BLOB_KINDS[meta] + ("blob" if binary else "text"), (), False, collation)
    raise ValueError(f"column {name}: type {ev.mysql_type} is not modelled by the schema history")


def table_from_event(
    catalog: Catalog, schema: str, name: str, columns: tuple[ColumnMeta, ...], old: TableDef | None
) -> TableDef:
    """The table as a TABLE_MAP with full metadata (names, key, signedness, collations, members)
    describes it; checked to give back the event's binlog types and sizes. The key is in column order
    (the event marks key columns); the default collation is kept from ``old``, else the database's."""
    defs = tuple(_column_from_event(catalog, c) for c in columns)
    for col, ev in zip(defs, columns, strict=True):
        if signature(catalog, col) != event_signature(ev):
            raise ValueError(f"column {col.name}: {col.type_text()} does not give the event's binlog type")
    key = tuple(c.name for c in columns if c.is_key)
    default = old.collation if old is not None else None
    default = default or catalog.databases.get(schema) or catalog.server_collation
    return TableDef(schema, name, defs, key, default)
