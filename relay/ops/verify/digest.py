"""Row digests: one canonical byte string per row, hashed the same way by MySQL and by Python.

A row's canonical bytes are, column by column in table order, ``N`` for NULL or ``<length>:<bytes>``
for a value, where the bytes are the column's canal text (what the binlog and snapshot readers publish,
``relay.binlog.values`` / ``relay.source.snapshot_rows``) as MySQL can render it in SQL:

- integers, DECIMAL, date and time types (TIMESTAMP in the session zone the snapshot readers set),
  YEAR, CHAR/VARCHAR/TEXT, ENUM, SET, JSON: ``CAST(c AS CHAR CHARACTER SET utf8mb4)`` — canal's text in
  UTF-8, as the type tests prove (``tests/integration/test_type_table.py``);
- BINARY/VARBINARY/BLOB/GEOMETRY: the bytes (canal's text is one ISO-8859-1 character per byte);
- BIT: ``c+0`` (canal's text is the unsigned number);
- DOUBLE, FLOAT: canal's text is Java's ``Double.toString`` / ``Float.toString``, which SQL cannot write.
  MySQL writes the value's shortest round-trip digits in a layout of its own (``1e15``, ``0.000015``):
  that text is hashed, and the target side writes the same text from the value (``mysql_double_text``;
  FLOAT through ``CAST(c AS DOUBLE)``, the stored float32 exactly). ``double_probes`` checks the layout
  against the server before it is trusted.

The row hash is the first 8 bytes of the MD5 of those bytes, as an unsigned integer; MySQL computes it
per row (``row_hash_sql``) and sums it per chunk, Python computes it from canal text (``canal_row_hash``).
A digest is only ever a filter: rows whose digests differ are read in full and compared as canal text
(``relay.ops.verify.compare``), so a rendering that MySQL and Python do not share costs a read, never a
false report. Pure functions, any thread.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from enum import IntEnum
from typing import Final

from relay.binlog import types as t
from relay.binlog.events import ColumnMeta
from relay.source.snapshot_rows import K_BINARY, K_BIT, K_DOUBLE, K_FLOAT


class HashKind(IntEnum):
    """How a column's canal text becomes the bytes of the row digest."""

    TEXT = 0
    BINARY = 1
    BIT = 2
    DOUBLE = 3
    FLOAT = 4


class _Absent:
    """The value of a column the target's row does not have (its record predates the column)."""

    def __repr__(self) -> str:
        return "<absent>"


ABSENT: Final = _Absent()
NULL_ITEM = b"N"
ABSENT_ITEM = b"A"  # never produced by SQL: a row missing a column never matches
_F32 = struct.Struct("<f")


def hash_kind(column: ColumnMeta, value_kind: int) -> HashKind:
    """The digest rule of a column, from its metadata and the snapshot reader's value kind."""
    if value_kind == K_BINARY or column.type_code == t.GEOMETRY:
        return HashKind.BINARY
    if value_kind == K_BIT:
        return HashKind.BIT
    if value_kind == K_DOUBLE:
        return HashKind.DOUBLE
    if value_kind == K_FLOAT:
        return HashKind.FLOAT
    return HashKind.TEXT


def quote_name(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def value_sql(name: str, kind: HashKind) -> str:
    """The SQL of a column's digest bytes (NULL stays NULL)."""
    c = quote_name(name)
    if kind == HashKind.BINARY:
        return f"CAST({c} AS BINARY)"
    if kind == HashKind.BIT:
        text = f"CAST({c}+0 AS CHAR)"
    elif kind == HashKind.FLOAT:
        text = f"CAST(CAST({c} AS DOUBLE) AS CHAR)"
    elif kind == HashKind.DOUBLE:
        text = f"CAST({c} AS CHAR)"
    else:
        text = f"CAST({c} AS CHAR CHARACTER SET utf8mb4)"
    return f"CAST({text} AS BINARY)"


def item_sql(name: str, kind: HashKind) -> str:
    value = value_sql(name, kind)
    return f"IF({quote_name(name)} IS NULL, 'N', CONCAT(LENGTH({value}), ':', {value}))"


def row_hash_sql(names: Sequence[str], kinds: Sequence[HashKind]) -> str:
    """The SQL expression of a row's hash (an unsigned 64-bit integer)."""
    items = ", ".join(item_sql(n, k) for n, k in zip(names, kinds, strict=True))
    return f"CAST(CONV(LEFT(MD5(CONCAT({items})), 16), 16, 10) AS UNSIGNED)"


def _digits(x: float) -> tuple[str, int]:
    """The shortest round-trip digits of ``abs(x)`` (no leading or trailing zeros) and the place of the
    decimal point relative to them (``0.0015`` → ``("15", -2)``)."""
    mantissa, _, exp = repr(abs(x)).partition("e")
    whole, _, frac = mantissa.partition(".")
    digits = (whole + frac).lstrip("0")
    leading_zeros = len(frac) - len(frac.lstrip("0"))
    point = len(whole.lstrip("0")) if whole.strip("0") else -leading_zeros
    return digits.rstrip("0") or "0", point + int(exp or 0)


def mysql_double_text(x: float) -> str:
    """The text MySQL/MariaDB give a DOUBLE value: its shortest round-trip digits, in positional form
    where the value has a fraction or at most 15 integer digits and is not below 1e-15, else as
    ``<d>[.<ddd>]e<exp>``. Checked against the server (``double_probes``) before digests rely on it."""
    if x == 0.0:
        return "0"
    digits, point = _digits(x)
    sign = "-" if x < 0 else ""
    n = len(digits)
    if 0 < point < n:
        return f"{sign}{digits[:point]}.{digits[point:]}"
    if n <= point <= 15:
        return sign + digits + "0" * (point - n)
    if -14 <= point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    tail = f".{digits[1:]}" if n > 1 else ""
    return f"{sign}{digits[0]}{tail}e{point - 1}"


def float32(x: float) -> float:
    value: float = _F32.unpack(_F32.pack(x))[0]
    return value


def canal_item(kind: HashKind, text: object) -> bytes:
    """The digest bytes of one canal text value (None: NULL; ``ABSENT``: a column the row lacks)."""
    if text is None:
        return NULL_ITEM
    if text is ABSENT or not isinstance(text, str):
        return ABSENT_ITEM
    if kind == HashKind.BINARY:
        try:
            raw = text.encode("latin-1")
        except UnicodeEncodeError:
            raw = text.encode("utf-8", "surrogateescape")
    elif kind in (HashKind.DOUBLE, HashKind.FLOAT):
        try:
            value = float(text)
        except ValueError:
            raw = text.encode("utf-8", "surrogateescape")
        else:
            raw = mysql_double_text(float32(value) if kind == HashKind.FLOAT else value).encode()
    else:
        raw = text.encode("utf-8", "surrogateescape")
    return b"%d:%b" % (len(raw), raw)


def digest_of(data: bytes) -> int:
    return int.from_bytes(hashlib.md5(data, usedforsecurity=False).digest()[:8], "big")


def canal_row_hash(kinds: Sequence[HashKind], values: Sequence[object]) -> int:
    """A row's hash from its canal text values (in table order), equal to ``row_hash_sql`` on the same row."""
    return digest_of(b"".join([canal_item(k, v) for k, v in zip(kinds, values, strict=True)]))


# Values whose server text the Python layout must reproduce before DOUBLE/FLOAT digests are trusted.
DOUBLE_PROBES: tuple[float, ...] = (
    0.1 + 0.2, 1e15, 1e14, 1e16, 123456789012345.6, 1234567890123456.7, 999999999999999.9, 1.5e-5, 1e-15,
    1.2345e-15, 1e-16, 2e-323, 5e-324, -1.7976931348623157e308, 1 / 3, 100.0, 12345678.0, 0.125, 1e21,
    -4.35e-10, 16777216.0, 3.4028234663852886e38, -0.5, 2.5e-7,
)  # fmt: skip


def double_probe_sql() -> str:
    """One SELECT giving the server's text of every ``DOUBLE_PROBES`` value, in order."""
    parts = [f"SELECT {i} AS n, CAST({v!r} AS DOUBLE) AS d" for i, v in enumerate(DOUBLE_PROBES)]
    return "SELECT n, CAST(d AS CHAR) FROM (" + " UNION ALL ".join(parts) + ") p ORDER BY n"


def double_layout_matches(texts: Sequence[str]) -> bool:
    """Whether the server wrote every probe as ``mysql_double_text`` does."""
    return len(texts) == len(DOUBLE_PROBES) and all(
        mysql_double_text(v) == s for v, s in zip(DOUBLE_PROBES, texts, strict=True)
    )
