"""TABLE_MAP event bodies: schema, table, column types and metadata, and the optional metadata block.

Owned here: decoding one TABLE_MAP body into the parts of a ``TableMapEvent`` (everything but the
header). Runs on the binlog reader thread, called by ``relay.binlog.parse.BinlogParser``, which
caches the result by body bytes so an unchanged table map is decoded once per connection.

Layouts (MySQL ``Table_map_event`` documentation, MariaDB's "TABLE_MAP_EVENT" page): post-header
table id (6 bytes) + flags (2); body: schema and table (length byte, name, NUL), column count
(length-encoded), one type byte per column, metadata block (length-encoded size), null bitmap, then
optional metadata as TLV fields (type byte, length-encoded length, value). Signedness bits are kept
for numeric columns only, charsets for character columns only (ENUM/SET have their own charset
fields), each in column order — so the column class decides which list entry belongs to a column.

Which columns are "character" columns differs by flavour, and a wrong count shifts every later
column's charset: MySQL counts CHAR, VARCHAR, the BLOB/TEXT family and (9.0+) VECTOR, not GEOMETRY
(sql/log_event.cc ``is_character_type``); MariaDB also counts GEOMETRY ("Base class is blob for geom
type", MariaDB log_event_server.cc / log_event_client.cc ``is_character_type``).

ENUM and SET member names are bytes in the column's character set (ENUM_AND_SET_DEFAULT_CHARSET /
ENUM_AND_SET_COLUMN_CHARSET give its collation): they are decoded with it once the charsets are
known, never as UTF-8 (a latin1 'café' is not valid UTF-8).
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

# Column classes as the server counts them when it writes optional metadata (MySQL/MariaDB
# log_event.cc ``is_numeric_type`` / ``is_character_type`` / ``is_enum_or_set_type``), applied to
# the real type (a STRING column's real type is in its metadata).
_NUMERIC = frozenset({1, 2, 3, 4, 5, 8, 9, 246})  # TINY SHORT LONG FLOAT DOUBLE LONGLONG INT24 NEWDECIMAL
# VARCHAR, the BLOBs, VAR_STRING, STRING (CHAR/BINARY), VECTOR; MariaDB adds GEOMETRY.
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

    unsigned: list[bool] = field(default_factory=list)
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


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


def parse_table_map(data: bytes, pos: int, end: int, id_len: int, mariadb: bool = False) -> TableMapBody:
    """Decode the TABLE_MAP body at ``data[pos:end]`` (post-header included, checksum excluded).

    ``mariadb``: the server flavour, which decides how character columns are counted (module doc).
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
    character = _CHARACTER_MARIADB if mariadb else _CHARACTER_MYSQL
    columns = _build_columns(type_codes, metas, null_bytes, opt, character)
    return TableMapBody(table_id, schema, table, columns, opt.names is not None)


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
    type_codes: bytes, metas: list[int], null_bytes: bytes, opt: _Optional, character_types: frozenset[int]
) -> tuple[ColumnMeta, ...]:
    numeric = character = enum_set = enums = sets = vectors = 0
    columns = []
    for i, code in enumerate(type_codes):
        meta = metas[i]
        real = types.real_type(code, meta)
        unsigned = False
        charset = dimensions = None
        enum_values = set_values = None
        if real in _NUMERIC:
            unsigned = numeric < len(opt.unsigned) and opt.unsigned[numeric]
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
