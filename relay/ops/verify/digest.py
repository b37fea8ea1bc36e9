"""Row digests: one canonical text per row, hashed the same way by MySQL and by Python.

A row's canonical text is a header — per column, in table order, ``N`` for NULL or the length in
characters of the column's text, joined by commas — a ``|``, then the columns' texts one after the
other. The header makes it unambiguous; the texts are the column's canal text (what the binlog and
snapshot readers publish, ``relay.binlog.values`` / ``relay.source.snapshot_rows``) as MySQL renders it:

- integers, DECIMAL, date and time types (TIMESTAMP in the session zone the snapshot readers set),
  YEAR, CHAR/VARCHAR/TEXT, ENUM, SET, JSON: ``CAST(c AS CHAR CHARACTER SET utf8mb4)`` — canal's text, as
  the type tests prove (``tests/integration/test_type_table.py``);
- BINARY/VARBINARY/BLOB/GEOMETRY: ``HEX(c)`` (canal's text is one ISO-8859-1 character per byte: its hex);
- BIT, and ZEROFILL integers and DECIMALs: ``c+0`` (canal's text is the number, without padding);
- DOUBLE, FLOAT: canal's text is Java's ``Double.toString`` / ``Float.toString``, which SQL cannot write.
  MySQL writes the value's shortest round-trip digits in a layout of its own (``1e15``, ``0.000015``):
  that text is hashed, and the target side writes the same text from the value (``mysql_double_text``;
  FLOAT through ``CAST(c AS DOUBLE)``, the stored float32 exactly). ``double_probes`` checks the layout
  against the server before it is trusted.

The row hash is the first 8 bytes of the MD5 of the UTF-8 of that text, as an unsigned integer; MySQL
computes it per row (``row_hash_sql``) and sums it per chunk, Python computes it from canal text
(``canal_row_hash``) in a handful of C-level operations per row. A digest is only ever a filter: rows whose
digests differ are read in full and compared as canal text (``relay.ops.verify.judge``), so a rendering
that MySQL and Python do not share costs a read, never a false report. Pure functions, any thread.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable, Sequence
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
    """The SQL of a column's digest text (NULL stays NULL)."""
    c = quote_name(name)
    if kind == HashKind.BINARY:
        return f"HEX({c})"
    if kind == HashKind.BIT:
        return f"CAST({c}+0 AS CHAR CHARACTER SET utf8mb4)"
    if kind == HashKind.FLOAT:
        return f"CAST(CAST({c} AS DOUBLE) AS CHAR CHARACTER SET utf8mb4)"
    return f"CAST({c} AS CHAR CHARACTER SET utf8mb4)"


def row_hash_sql(names: Sequence[str], kinds: Sequence[HashKind]) -> str:
    """The SQL expression of a row's hash (an unsigned 64-bit integer)."""
    values = [value_sql(n, k) for n, k in zip(names, kinds, strict=True)]
    header = ", ".join(f"IFNULL(CHAR_LENGTH({v}), 'N')" for v in values)
    body = ", ".join(f"IFNULL({v}, '')" for v in values)
    text = f"CONCAT(CONCAT_WS(',', {header}), '|', {body})"
    return f"CAST(CONV(LEFT(MD5({text}), 16), 16, 10) AS UNSIGNED)"


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
    if 1e-4 <= abs(x) < 1e15:  # Python's repr is positional here, with the same shortest digits
        text = repr(x)
        return text[:-2] if text.endswith(".0") else text
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


def _binary_text(text: str) -> str:
    try:
        return text.encode("latin-1").hex().upper()
    except UnicodeEncodeError:
        return text  # not one byte per character: no digest can agree, the row is compared in full


def _number_text(text: str, single: bool) -> str:
    try:
        value = float(text)
        return mysql_double_text(float32(value) if single else value)
    except (ValueError, OverflowError):  # not a number, or beyond FLOAT's range: no server text is this
        return text


def column_text(kind: HashKind, text: object) -> str | None:
    """A canal text value as its column's digest text (None: NULL; ``ABSENT``: never equal to a value)."""
    if text is None:
        return None
    if text is ABSENT or not isinstance(text, str):
        return "\x00absent"  # a NUL byte: not in any text MySQL renders here
    if kind == HashKind.BINARY:
        return _binary_text(text)
    if kind == HashKind.DOUBLE:
        return _number_text(text, False)
    if kind == HashKind.FLOAT:
        return _number_text(text, True)
    return str(text)


def _double_text(text: str) -> str:
    return _number_text(text, False)


def _float_text(text: str) -> str:
    return _number_text(text, True)


# A kind's conversion of a str value (what ``column_text`` does after its NULL and type checks).
STR_CONVERTERS: dict[HashKind, Callable[[str], str]] = {
    HashKind.BINARY: _binary_text,
    HashKind.DOUBLE: _double_text,
    HashKind.FLOAT: _float_text,
}

_HEADERS: dict[int, str] = {}


def _utf8(text: str) -> bytes:
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a lone surrogate no server text holds (a forged record): any bytes differ
        return text.encode("utf-8", "surrogatepass")


def digest_text(texts: Sequence[str | None]) -> bytes:
    """The canonical bytes of a row from its columns' digest texts."""
    if None in texts:
        header = ",".join(["N" if t is None else str(len(t)) for t in texts])
        body = "".join([t for t in texts if t is not None])
    else:
        form = _HEADERS.get(len(texts))
        if form is None:
            form = _HEADERS[len(texts)] = ",".join(["%d"] * len(texts)) + "|"
        header, body = form % tuple(map(len, texts)), "".join(texts)  # type: ignore[arg-type]
        return _utf8(header + body)
    return _utf8(header + "|" + body)


def digest_of(data: bytes) -> int:
    return int.from_bytes(hashlib.md5(data, usedforsecurity=False).digest()[:8], "big")


def canal_row_hash(kinds: Sequence[HashKind], values: Sequence[object]) -> int:
    """A row's hash from its canal text values (in table order), equal to ``row_hash_sql`` on the same row."""
    texts = [
        v if k == 0 and v.__class__ is str else column_text(k, v) for k, v in zip(kinds, values, strict=True)
    ]
    return digest_of(digest_text(texts))


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
