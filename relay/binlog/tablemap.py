"""TABLE_MAP event bodies: schema, table, column types and metadata, and the optional metadata block.

Owned here: decoding one TABLE_MAP body into the parts of a ``TableMapEvent`` (everything but the
header). Runs on the binlog reader thread, called by ``relay.binlog.parse.BinlogParser``, which
caches the result by body bytes so an unchanged table map is decoded once per connection.

Layouts (MySQL ``Table_map_event`` documentation, MariaDB's "TABLE_MAP_EVENT" page): post-header
table id (6 bytes) + flags (2); body: schema and table (length byte, name, NUL), column count
(length-encoded), one type byte per column, metadata block (length-encoded size), null bitmap, then
optional metadata as TLV fields (type byte, length-encoded length, value).

Which columns each optional-metadata field counts — the rules, per flavour, as the servers write them.
A list field has one entry per column of its class, in column order, so a wrong class shifts every
later column's entry onto its neighbour (a signed TINYINT after a YEAR read as unsigned: 255 for -1).

* Which fields are written: MINIMAL writes SIGNEDNESS, DEFAULT_CHARSET / COLUMN_CHARSET and
  GEOMETRY_TYPE; FULL adds COLUMN_NAME, ENUM_AND_SET_DEFAULT_CHARSET / ENUM_AND_SET_COLUMN_CHARSET,
  SET_STR_VALUE, ENUM_STR_VALUE and the primary key; NO_LOG (MariaDB's default) and MySQL 5.7 write
  none (MySQL 8.0 sql/log_event.cc and MariaDB sql/log_event_server.cc
  ``Table_map_log_event::init_metadata_fields``). MySQL 8.0.23+ adds COLUMN_VISIBILITY (FULL: one bit
  per column) and 9.0+ VECTOR_DIMENSIONALITY; MariaDB writes neither.
* SIGNEDNESS — one bit per numeric column, most significant bit first; written only when the table
  has one. MySQL (5.7-9.x: ``init_signedness_field`` → ``is_numeric_field`` = sql/field.h
  ``is_numeric_type(field->binlog_type())``): TINYINT, SMALLINT, MEDIUMINT, INT, BIGINT, FLOAT,
  DOUBLE, DECIMAL (old and new) — not YEAR, whose binlog type is YEAR. MariaDB (10.5-11.x:
  ``init_signedness_field`` counts every column whose ``Binlog_type_info`` has a signedness, i.e. every
  ``Field_num``, sql/field.h): the same types **and YEAR** (``Field_year`` is a ``Field_tiny`` built
  unsigned, so its bit is 1). ``_NUMERIC`` / ``_NUMERIC_MARIADB`` below.
* DEFAULT_CHARSET / COLUMN_CHARSET — one collation per character column. MySQL
  (``is_character_type(field->real_type())``): CHAR/BINARY, VARCHAR/VARBINARY, the TEXT/BLOB family,
  and (9.0+) VECTOR — not JSON, GEOMETRY, ENUM or SET. MariaDB (``is_character_field``: a collation
  and no ENUM/SET type library): the same plus GEOMETRY ("Base class is blob for geom type",
  sql_type_geom.cc ``Field_geom::binlog_type_info`` passes its charset), JSON (a LONGTEXT there) and
  the fixed binary plugin types INET4, INET6, UUID (``Binlog_type_info_fixed_string`` with the binary
  collation: they are BINARY(4) / BINARY(16) in the binlog).
* ENUM_AND_SET_*_CHARSET — one collation per ENUM or SET column (both flavours); SET_STR_VALUE /
  ENUM_STR_VALUE — the member names of each SET / ENUM column, in column order. Member names are bytes
  in the column's character set: decoded with it once the charsets are known, never as UTF-8 (a latin1
  'café' is not valid UTF-8).
* GEOMETRY_TYPE — one geometry type per GEOMETRY column (both flavours); COLUMN_NAME — one per
  column; SIMPLE_PRIMARY_KEY / PRIMARY_KEY_WITH_PREFIX — column indexes; COLUMN_VISIBILITY — one bit
  per column; VECTOR_DIMENSIONALITY — one per VECTOR column. Of these canal reports only names, keys
  and (ours) dimensions; the rest is skipped by its length.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from relay.binlog import charsets, types
from relay.binlog.events import ColumnMeta
from relay.errors import DecodeError

# Optional metadata field types (MySQL ``Table_map_event::Optional_metadata_field_type``).
SIGNEDNESS = 1
DEFAULT_CHARSET = 2
COLUMN_CHARSET = 3
COLUMN_NAME = 4
SET_STR_VALUE = 5
ENUM_STR_VALUE = 6
GEOMETRY_TYPE = 7
SIMPLE_PRIMARY_KEY = 8
PRIMARY_KEY_WITH_PREFIX = 9
ENUM_AND_SET_DEFAULT_CHARSET = 10
ENUM_AND_SET_COLUMN_CHARSET = 11
COLUMN_VISIBILITY = 12
VECTOR_DIMENSIONALITY = 13  # MySQL 9.0: dimensions of each VECTOR column, in column order

# Column classes as each flavour counts them when it writes optional metadata (the module docstring
# has the rules and where each is in the servers' sources), applied to the real type (a STRING
# column's real type is in its metadata).
# SIGNEDNESS, MySQL: DECIMAL TINY SHORT LONG FLOAT DOUBLE LONGLONG INT24 NEWDECIMAL (sql/field.h
# ``is_numeric_type`` of the binlog type).
_NUMERIC = frozenset({0, 1, 2, 3, 4, 5, 8, 9, 246})
# SIGNEDNESS, MariaDB: every Field_num, YEAR included (sql/field.h: Field_year is a Field_tiny).
_NUMERIC_MARIADB = _NUMERIC | {types.YEAR}
# Charsets: VARCHAR, the BLOBs, VAR_STRING, STRING (CHAR/BINARY), VECTOR; MariaDB adds GEOMETRY (its JSON
# is a BLOB, its INET4/INET6/UUID a STRING).
_CHARACTER_MYSQL = frozenset({15, 249, 250, 251, 252, 253, 254, types.VECTOR})
_CHARACTER_MARIADB = frozenset({15, 249, 250, 251, 252, 253, 254, types.GEOMETRY})
_ENUM, _SET = 247, 248


def read_lenenc(data: bytes, pos: int) -> tuple[int, int]:
    """A length-encoded integer at ``pos`` → (value, new_pos)."""
    first = data[pos]
    if first < 0xFB:
        return first, pos + 1
    if first == 0xFC:
        return data[pos + 1] | data[pos + 2] << 8, pos + 3
    if first == 0xFD:
        return data[pos + 1] | data[pos + 2] << 8 | data[pos + 3] << 16, pos + 4
    if first == 0xFE:
        return int.from_bytes(data[pos + 1 : pos + 9], "little"), pos + 9
    raise DecodeError(f"bad length-encoded integer prefix 0x{first:02x}")


@dataclass(slots=True)
class _Optional:
    """What the optional metadata block said, per column class."""

    unsigned: list[bool] | None = None  # None: no SIGNEDNESS field
    default_charset: tuple[int, dict[int, int]] | None = None
    column_charsets: list[int] | None = None
    enum_set_default: tuple[int, dict[int, int]] | None = None
    enum_set_charsets: list[int] | None = None
    names: list[str] | None = None
    # Member names as raw bytes: their charset is only known once every field has been read.
    set_values: list[tuple[bytes, ...]] = field(default_factory=list)
    enum_values: list[tuple[bytes, ...]] = field(default_factory=list)
    keys: set[int] = field(default_factory=set)
    dimensions: list[int] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class TableMapBody:
    """A decoded TABLE_MAP body: everything of ``TableMapEvent`` except its header."""

    table_id: int
    schema: str
    table: str
    columns: tuple[ColumnMeta, ...]
    names_from_binlog: bool
    # The event carried SIGNEDNESS (binlog_row_metadata MINIMAL or FULL, a table with a numeric column):
    # then every column's ``unsigned`` is the server's word, signed columns included.
    signedness_from_binlog: bool = False


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


def parse_table_map(data: bytes, pos: int, end: int, id_len: int, mariadb: bool = False) -> TableMapBody:
    """Decode the TABLE_MAP body at ``data[pos:end]`` (post-header included, checksum excluded).

    ``mariadb``: the server flavour, which decides how numeric and character columns are counted
    (module doc).
    """
    table_id = int.from_bytes(data[pos : pos + id_len], "little")
    p = pos + id_len + 2
    n = data[p]
    schema = _text(data[p + 1 : p + 1 + n])
    p += n + 2
    n = data[p]
    table = _text(data[p + 1 : p + 1 + n])
    p += n + 2
    count, p = read_lenenc(data, p)
    type_codes = data[p : p + count]
    p += count
    meta_len, p = read_lenenc(data, p)
    meta_end = p + meta_len
    metas = []
    for code in type_codes:
        meta, p = types.read_column_metadata(code, data, p)
        metas.append(meta)
    if p != meta_end:
        raise DecodeError(
            f"TABLE_MAP {schema}.{table}: metadata block is {meta_len} bytes, read {p - meta_end + meta_len}"
        )
    null_bytes = data[p : p + (count + 7) // 8]
    p += (count + 7) // 8
    if p > end:
        raise DecodeError(f"TABLE_MAP {schema}.{table}: truncated before the optional metadata")
    opt = _parse_optional(data, p, end)
    columns = _build_columns(type_codes, metas, null_bytes, opt, mariadb)
    return TableMapBody(table_id, schema, table, columns, opt.names is not None, opt.unsigned is not None)


def _parse_optional(data: bytes, p: int, end: int) -> _Optional:
    opt = _Optional()
    while p < end:
        kind = data[p]
        length, p = read_lenenc(data, p + 1)
        value_end = p + length
        if value_end > end:
            raise DecodeError(f"TABLE_MAP optional metadata field {kind} runs past the event end")
        _read_optional_field(opt, kind, data, p, value_end)
        p = value_end
    return opt


def _read_optional_field(opt: _Optional, kind: int, data: bytes, p: int, end: int) -> None:
    if kind == SIGNEDNESS:
        opt.unsigned = [bool(byte & (0x80 >> bit)) for byte in data[p:end] for bit in range(8)]
    elif kind == DEFAULT_CHARSET:
        opt.default_charset = _default_charset(data, p, end)
    elif kind == COLUMN_CHARSET:
        opt.column_charsets = _lenenc_list(data, p, end)
    elif kind == ENUM_AND_SET_DEFAULT_CHARSET:
        opt.enum_set_default = _default_charset(data, p, end)
    elif kind == ENUM_AND_SET_COLUMN_CHARSET:
        opt.enum_set_charsets = _lenenc_list(data, p, end)
    elif kind == COLUMN_NAME:
        opt.names = _str_list(data, p, end)
    elif kind in (SET_STR_VALUE, ENUM_STR_VALUE):
        values: list[tuple[bytes, ...]] = []
        while p < end:
            n, p = read_lenenc(data, p)
            one: list[bytes] = []
            for _ in range(n):
                size, p = read_lenenc(data, p)
                one.append(data[p : p + size])
                p += size
            values.append(tuple(one))
        if kind == SET_STR_VALUE:
            opt.set_values = values
        else:
            opt.enum_values = values
    elif kind == SIMPLE_PRIMARY_KEY:
        opt.keys = set(_lenenc_list(data, p, end))
    elif kind == PRIMARY_KEY_WITH_PREFIX:
        pairs = _lenenc_list(data, p, end)
        opt.keys = set(pairs[0::2])
    elif kind == VECTOR_DIMENSIONALITY:
        opt.dimensions = _lenenc_list(data, p, end)
    # GEOMETRY_TYPE, COLUMN_VISIBILITY and future fields: nothing canal reports; skipped by length.


def _lenenc_list(data: bytes, p: int, end: int) -> list[int]:
    out = []
    while p < end:
        value, p = read_lenenc(data, p)
        out.append(value)
    return out


def _str_list(data: bytes, p: int, end: int) -> list[str]:
    out = []
    while p < end:
        size, p = read_lenenc(data, p)
        out.append(_text(data[p : p + size]))
        p += size
    return out


def _default_charset(data: bytes, p: int, end: int) -> tuple[int, dict[int, int]]:
    values = _lenenc_list(data, p, end)
    if not values:
        raise DecodeError("TABLE_MAP DEFAULT_CHARSET field is empty")
    # (index among the character columns, collation) pairs for the columns that differ.
    return values[0], dict(zip(values[1::2], values[2::2], strict=True))


def _charset_at(
    index: int, default: tuple[int, dict[int, int]] | None, per_column: list[int] | None
) -> int | None:
    if default is not None:
        return default[1].get(index, default[0])
    if per_column is not None and index < len(per_column):
        return per_column[index]
    return None


def _members(raw: tuple[bytes, ...] | None, collation: int | None) -> tuple[str, ...] | None:
    """ENUM/SET member names decoded with the column's charset (UTF-8 when the event did not say)."""
    if raw is None:
        return None
    charset = charsets.charset_of(collation) or charsets.UTF8MB4
    return tuple(charset.decode(name) for name in raw)


def _build_columns(
    type_codes: bytes, metas: list[int], null_bytes: bytes, opt: _Optional, mariadb: bool
) -> tuple[ColumnMeta, ...]:
    numeric_types = _NUMERIC_MARIADB if mariadb else _NUMERIC
    character_types = _CHARACTER_MARIADB if mariadb else _CHARACTER_MYSQL
    bits = opt.unsigned or []
    numeric = character = enum_set = enums = sets = vectors = 0
    columns = []
    for i, code in enumerate(type_codes):
        meta = metas[i]
        real = types.real_type(code, meta)
        unsigned = False
        charset = dimensions = None
        enum_values = set_values = None
        if real in numeric_types:
            # A YEAR takes its bit on MariaDB (always 1) but is no signed or unsigned number to us.
            unsigned = real != types.YEAR and numeric < len(bits) and bits[numeric]
            numeric += 1
        elif real in (_ENUM, _SET):
            charset = _charset_at(enum_set, opt.enum_set_default, opt.enum_set_charsets)
            enum_set += 1
            if real == _ENUM:
                raw = opt.enum_values[enums] if enums < len(opt.enum_values) else None
                enum_values = _members(raw, charset)
                enums += 1
            else:
                raw = opt.set_values[sets] if sets < len(opt.set_values) else None
                set_values = _members(raw, charset)
                sets += 1
        elif real in character_types:
            charset = _charset_at(character, opt.default_charset, opt.column_charsets)
            character += 1
        if real == types.VECTOR:
            dimensions = opt.dimensions[vectors] if vectors < len(opt.dimensions) else None
            vectors += 1
        columns.append(
            types.column_meta(
                i,
                code,
                meta,
                bool(null_bytes[i >> 3] & (1 << (i & 7))),
                name=opt.names[i] if opt.names is not None and i < len(opt.names) else None,
                unsigned=unsigned,
                charset=charset,
                is_key=i in opt.keys,
                enum_values=enum_values,
                set_values=set_values,
                dimensions=dimensions,
            )
        )
    return tuple(columns)
