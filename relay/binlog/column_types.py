"""MySQL's declared column types as a TABLE_MAP event describes them: the one mapping from a type name
(``varchar``, ``decimal``, ``mediumtext`` …) and its numbers to the binlog's type code and metadata.

Two readers describe a column without an event: the schema history (``relay.schema.model.signature``:
from a column declared in a DDL, compared with what the event carries) and the snapshot
(``relay.source.snapshot_tables.column_meta``: from ``information_schema.COLUMNS``, to decode its
SELECTs like rows events). Both ask ``table_map_type``; the snapshot then packs it as the server writes
the metadata (``table_map_meta``). Pure functions, any thread; not compiled (per table, not per row).
"""

from __future__ import annotations

from relay.binlog import types

INT_CODES = {
    "tinyint": types.TINY, "smallint": types.SHORT, "mediumint": types.INT24, "int": types.LONG,
    "bigint": types.LONGLONG,
}  # fmt: skip
# TEXT and BLOB types: the pack length of their length prefix, their TABLE_MAP metadata.
BLOB_SIZES = {
    "tinytext": 1, "tinyblob": 1, "text": 2, "blob": 2, "mediumtext": 3, "mediumblob": 3,
    "longtext": 4, "longblob": 4,
}  # fmt: skip
TEMPORAL_CODES = {"datetime": types.DATETIME2, "timestamp": types.TIMESTAMP2, "time": types.TIME2}
# Spatial types: the binlog writes every one as GEOMETRY (the server's internal value, SRID + WKB).
SPATIAL = frozenset({
    "geometry", "point", "linestring", "polygon", "multipoint", "multilinestring", "multipolygon",
    "geometrycollection", "geomcollection",
})  # fmt: skip


# MariaDB's fixed-size binary plugin types and the bytes the binlog holds of each (sql_type_inet.h,
# sql_type_uuid.h: ``Binlog_type_info_fixed_string`` of ``binary_length()``).
FIXED_BINARY = {"inet4": 4, "inet6": 16, "uuid": 16}


def set_bytes(members: int) -> int:
    """The pack length of a SET of ``members`` members: 1-4 bytes, or 8."""
    size = (members + 7) // 8
    return 8 if size > 4 else size


def table_map_type(
    kind: str,
    *,
    length: int = 0,
    precision: int = 10,
    scale: int = 0,
    fsp: int = 0,
    bits: int = 1,
    members: int = 0,
    mariadb: bool = False,
) -> tuple[int, int]:
    """The (real type, size) a TABLE_MAP carries for a column of type ``kind`` (lower case).

    ``length``: the most bytes a CHAR/BINARY/VARCHAR/VARBINARY value takes (characters × the charset's
    bytes a character); ``precision``/``scale``: DECIMAL's; ``fsp``: fractional seconds; ``bits``: BIT's
    width; ``members``: an ENUM's or SET's. Size is the metadata, except for the STRING family, where it
    is the length in bytes (ENUM/SET: the pack length), as ``relay.binlog.types.string_type`` reads it.
    ``mariadb``: JSON is a LONGTEXT there. ``ValueError`` for a type the binlog has no code for here.
    """
    if kind in INT_CODES:
        return INT_CODES[kind], 0
    if kind == "decimal":
        return types.NEWDECIMAL, precision << 8 | scale
    if kind == "float":
        return types.FLOAT, 4
    if kind == "double":
        return types.DOUBLE, 8
    if kind in TEMPORAL_CODES:
        return TEMPORAL_CODES[kind], fsp
    if kind == "date":
        return types.DATE, 0
    if kind == "year":
        return types.YEAR, 0
    if kind == "bit":
        return types.BIT, (bits // 8) << 8 | bits % 8
    if kind in ("char", "binary"):
        return types.STRING, length
    if kind in FIXED_BINARY:  # MariaDB INET4 / INET6 / UUID: BINARY(4) / BINARY(16) in the binlog
        return types.STRING, FIXED_BINARY[kind]
    if kind == "enum":
        return types.ENUM, 1 if members < 256 else 2
    if kind == "set":
        return types.SET, set_bytes(members)
    if kind in ("varchar", "varbinary"):
        return types.VARCHAR, length
    if kind in BLOB_SIZES:
        return types.BLOB, BLOB_SIZES[kind]
    if kind == "json":
        return (types.BLOB, 4) if mariadb else (types.JSON, 4)
    if kind in SPATIAL:
        return types.GEOMETRY, 4
    raise ValueError(f"no binlog type for {kind}")


def table_map_meta(real: int, size: int) -> tuple[int, int]:
    """(type code, metadata) as the server writes them in a TABLE_MAP, from ``table_map_type``'s (real
    type, size): the STRING family (CHAR, BINARY, ENUM, SET) is written as STRING with the real type and
    the length packed into the metadata (``relay.binlog.types.string_type`` reads it back)."""
    if real not in (types.STRING, types.ENUM, types.SET):
        return real, size
    high = (real & ~0x30) | (0x30 ^ ((size >> 4) & 0x30))
    return types.STRING, high << 8 | (size & 0xFF)
