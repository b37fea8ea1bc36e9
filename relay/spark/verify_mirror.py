"""A mirror table as ``relay verify`` reads it: rows and tombstones with their change identities, and the
values of a source row as the mirror holds them. pyarrow only (no Spark, no JVM).

``MirrorReader.read`` reads a logical table's rows and tombstones (``relay.spark.tables``: Delta Lake or
Iceberg, local or on an object store) and the relay's state of its last commit (the topic offsets it has
applied). Per row it gives the bookkeeping (``_key``, ``_source``, ``_sequence``, ``_part``,
``_source_id``) and, on demand, the row's values — typed as the mirror stores them, or written back as
canal text (``canal``: exact for every type but TIMESTAMP, rendered in the source's zone where it is a
fixed offset or a named zone; only a digest depends on it: a row whose digest differs is compared typed).

``typed`` is the other direction: a source value (canal text, a TIMESTAMP's instant) as the mirror holds
it, the Python twin of ``relay.spark.decode._typed_value`` and Spark's ``try_cast``: a text Spark cannot
cast (a zero date, an out-of-range value) is null there too. ``relay.ops.verify.mirror`` uses this class
through a protocol of its own (``relay.ops`` and ``relay.spark`` do not import each other); the CLI hands
it over. Runs on the caller's thread.
"""

from __future__ import annotations

import datetime as dt
import math
import re
import struct
from collections.abc import Sequence
from decimal import Decimal, InvalidOperation
from typing import Any
from zoneinfo import ZoneInfo

from relay.errors import SparkSourceError
from relay.spark.tables import MirrorTable, target_of
from relay.spark.types import spark_type_sql

_INT_RANGES = {
    "tinyint": (-(2**7), 2**7 - 1),
    "smallint": (-(2**15), 2**15 - 1),
    "int": (-(2**31), 2**31 - 1),
    "bigint": (-(2**63), 2**63 - 1),
}
_DECIMAL = re.compile(r"decimal\((\d+),(\d+)\)")
_DATETIME = re.compile(r"(\d{4})-(\d{2})-(\d{2})(?: (\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,6}))?)?$")
_FSP = re.compile(r"\((\d)\)")
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_F32 = struct.Struct("<f")
META = ("_key", "_source", "_sequence", "_part", "_source_id")


def _kind(mysql_type: str) -> str:
    return mysql_type.split("(", 1)[0].strip().lower()


def _parse_temporal(text: str, with_time: bool) -> dt.date | dt.datetime | None:
    m = _DATETIME.match(text.strip())
    if m is None:
        return None
    try:
        year, month, day = int(m[1]), int(m[2]), int(m[3])
        if not with_time:
            return dt.date(year, month, day)
        frac = int((m[7] or "0").ljust(6, "0"))
        return dt.datetime(year, month, day, int(m[4] or 0), int(m[5] or 0), int(m[6] or 0), frac)
    except ValueError:
        return None  # a zero date, February 30th …: Spark's try_cast gives null


def typed(mysql_type: str, text: str | None, micros: int | None = None) -> Any:
    """A source value (canal text; a TIMESTAMP's instant in epoch µs) as the mirror stores it."""
    if text is None:
        return None
    target, kind = spark_type_sql(mysql_type), _kind(mysql_type)
    if target == "binary":
        return text.encode("latin-1")
    if target == "string":
        return str(text)
    if kind == "timestamp":
        if micros is not None:
            return _EPOCH + dt.timedelta(microseconds=micros)
        parsed = _parse_temporal(text, True)
        return None if not isinstance(parsed, dt.datetime) else parsed.replace(tzinfo=dt.UTC)
    if kind == "year":
        return 0 if text == "0000" else _int(text, "int")
    if target in _INT_RANGES:
        return _int(text, target)
    if target.startswith("decimal"):
        return _decimal(text, target)
    if target == "float":
        return _float32(text)
    if target == "double":
        try:
            return float(text)
        except ValueError:
            return None
    if target == "date":
        return _parse_temporal(text, False)
    if target == "timestamp_ntz":
        return _parse_temporal(text, True)
    return str(text)


def _int(text: str, target: str) -> int | None:
    try:
        value = int(text.strip())
    except ValueError:
        return None
    lo, hi = _INT_RANGES[target]
    return value if lo <= value <= hi else None


def _decimal(text: str, target: str) -> Decimal | None:
    m = _DECIMAL.match(target)
    try:
        value = Decimal(text.strip())
    except InvalidOperation:
        return None
    if m is None:
        return value
    precision, scale = int(m[1]), int(m[2])
    quantized = value.quantize(Decimal(1).scaleb(-scale))
    return quantized if len(quantized.as_tuple().digits) <= precision or quantized == 0 else None


def _float32(text: str) -> float | None:
    try:
        value: float = _F32.unpack(_F32.pack(float(text)))[0]
    except (ValueError, OverflowError):
        return None
    return value


def same(mysql_type: str, expected: Any, actual: Any) -> bool:
    """Whether the mirror holds the expected value (floating point: exactly; NaN equals NaN)."""
    if expected is None or actual is None:
        return expected is None and actual is None
    if isinstance(expected, float) and isinstance(actual, float):
        return expected == actual or (math.isnan(expected) and math.isnan(actual))
    if isinstance(expected, dt.datetime) and isinstance(actual, dt.datetime):
        return (expected.tzinfo is None) == (actual.tzinfo is None) and expected == actual
    return bool(expected == actual)


def _zone(name: str) -> dt.tzinfo | None:
    if not name or name == "server":
        return None
    if name.upper() == "UTC":
        return dt.UTC
    m = re.fullmatch(r"([+-])(\d{1,2}):(\d{2})", name)
    if m:
        offset = dt.timedelta(hours=int(m[2]), minutes=int(m[3]))
        return dt.timezone(-offset if m[1] == "-" else offset)
    try:
        return ZoneInfo(name)
    except (KeyError, ValueError):
        return None


def canal(mysql_type: str, value: Any, zone: dt.tzinfo | None) -> str | None:
    """A mirror value written back as canal text (for digests; None where it cannot be)."""
    if value is None:
        return None
    kind = _kind(mysql_type)
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("latin-1")
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return f"{value:04d}" if kind == "year" and 0 <= value < 10000 else str(value)
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            if zone is None:
                return None
            value = value.astimezone(zone).replace(tzinfo=None)
        m = _FSP.search(mysql_type)
        fsp = int(m[1]) if m else 0
        v: dt.datetime = value
        text = f"{v.year:04d}-{v.month:02d}-{v.day:02d} {v.hour:02d}:{v.minute:02d}:{v.second:02d}"
        return text + (f".{v.microsecond:06d}"[: fsp + 1] if fsp else "")
    if isinstance(value, dt.date):
        return value.isoformat()
    return str(value)


class MirrorContents:
    """One read of a mirror table: its rows' bookkeeping, values on demand, tombstones, applied offsets."""

    def __init__(
        self, rows: Any, tombs: Any, columns: Sequence[tuple[str, str]], state: Any, zone: str
    ) -> None:
        self._table = rows
        self.columns = list(columns)
        have = set(rows.column_names)
        self.missing = [name for name, _ in columns if name not in have]
        self.rows = _meta(rows)
        self.tombstones = _meta(tombs) if tombs is not None else []
        self.offsets: dict[str, dict[str, int]] = dict(state.offsets) if state is not None else {}
        self._values = [rows.column(n).to_pylist() if n in have else None for n, _ in columns]
        self._zone = _zone(zone)

    def typed(self, index: int) -> tuple[Any, ...]:
        """Row ``index``'s values in the requested columns' order (None for a column the mirror lacks)."""
        return tuple(None if col is None else col[index] for col in self._values)

    def canal(self, index: int) -> tuple[str | None, ...]:
        return tuple(
            None if col is None else canal(mysql, col[index], self._zone)
            for col, (_, mysql) in zip(self._values, self.columns, strict=True)
        )


def _meta(table: Any) -> list[tuple[str, str, int, int, str]]:
    cols = [table.column(n).to_pylist() for n in META]
    return [
        (k or "", s or "", int(q or 0), int(p or 0), i or "") for k, s, q, p, i in zip(*cols, strict=True)
    ]


class MirrorReader:
    """Reads one mirror (a root location in a format) for ``relay verify``."""

    def __init__(
        self,
        location: str,
        *,
        format: str = "delta",
        storage_options: dict[str, str] | None = None,
        catalog: dict[str, str] | None = None,
    ) -> None:
        self.target = target_of(location, format, storage_options, catalog)
        self.description = f"mirror {location} ({format})"

    def read(self, table: str, columns: Sequence[tuple[str, str]], zone: str = "server") -> MirrorContents:
        mirror = MirrorTable(self.target, table)
        if not mirror.rows.exists():
            raise SparkSourceError(f"no mirror of {table} at {mirror.where}")
        rows = mirror.rows.read()
        tombs = mirror.tombs.read() if mirror.tombs.exists() else None
        return MirrorContents(rows, tombs, columns, mirror.rows.state(), zone)

    @staticmethod
    def typed(mysql_type: str, text: str | None, micros: int | None = None) -> Any:
        return typed(mysql_type, text, micros)

    @staticmethod
    def same(mysql_type: str, expected: Any, actual: Any) -> bool:
        return same(mysql_type, expected, actual)
