"""The shape of a mirror table, shared by the Spark driver, the Spark tasks and the table formats.

Owns the column names of the mirror's bookkeeping, the key buckets, the Arrow types the data files are
written with (from the Spark SQL types ``relay.spark.types`` gives), what a Spark task reports about a
file it wrote (``Written``), and the relay's own state kept in every commit (``MirrorState``: the
table's columns, the TRUNCATE/DROP watermarks, the last applied micro-batch and offsets, and the source
transactions a cut batch applied whole). Pure: no
pyspark, no table format; imported on the driver and on executors.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from relay.errors import SparkSourceError

BUCKET = "relay_bucket"
RANGE_SPAN = 100_000
HASH_BUCKETS = 64
MAX_FILE_ROWS = 1_000_000  # a bucket larger than this is written as several files
META_LIVE = ("_key", "_sequence", "_part", "_source_id", "_es", "_source")
META_HISTORY = ("_key", "_start_sequence", "_end_sequence", "_part", "_source_id", "_es", "_source")
META_TOMB = META_LIVE
KINDS = ("latest", "history")


@dataclass(frozen=True)
class Written:
    """A data file a task wrote (or, with ``path`` None, a bucket that is now empty)."""

    part: str  # "rows" (the table) or "tombs" (its tombstones / deletion markers)
    bucket: str
    path: str | None  # the file's URI
    size: int
    rows: int
    stats: str  # Delta's per-file statistics JSON ("" where not computed)


@dataclass(frozen=True)
class RowAction:
    """What a schema change does to stored rows (``relay.spark.ddl``): rows of physical table ``source``
    last changed before ``sequence`` get ``column`` = ``value`` (typed for Spark type ``spark_type``; None:
    null), or the value of column ``copy_from`` when it is set (a rename)."""

    source: str
    sequence: int
    column: str
    spark_type: str
    value: Any = None
    copy_from: str | None = None


@dataclass
class MirrorState:
    """What the relay records in each commit of a mirror table, beside the data."""

    columns: list[list[str]]  # [name, Spark SQL type] of the table columns, in order
    cleared: dict[str, int] = field(default_factory=dict)  # physical "db.table" → TRUNCATE/DROP sequence
    batches: dict[str, int] = field(default_factory=dict)  # application id → last applied micro-batch
    offsets: dict[str, dict[str, int]] = field(default_factory=dict)  # topic → partition → last offset
    max_sequence: int | None = None  # the highest change sequence applied so far
    commits: int = 0  # commits of the table's rows by the relay (maintenance runs every N of them)
    # Consistent cuts (``relay.spark.cut``), THIS commit only (never carried to the next): {} — written
    # without transaction boundaries; {"schema_only": true} — a schema change of a cut batch (no data);
    # else {"app", "batch", "sources": {source id: frontier}, "unbounded": [source ids], "tables": [...]}
    cut: dict[str, Any] = field(default_factory=dict)
    # Schema changes (``relay.spark.ddl``): each column's MySQL type, the physical tables the table has
    # rows of, per column the physical tables that dropped it (others still have it), and per physical
    # table the sequence of the last ALTER TABLE applied (a replayed older one is not applied again)
    types: dict[str, str] = field(default_factory=dict)
    sources: list[str] = field(default_factory=list)
    dropped: dict[str, list[str]] = field(default_factory=dict)
    altered: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> MirrorState:
        data = json.loads(text)
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


_DECIMAL = re.compile(r"decimal\((\d+),\s*(\d+)\)")


def arrow_type(spark_sql: str, *, narrow_ints: bool = True) -> Any:
    """The Arrow type a column of Spark SQL type ``spark_sql`` is written as.

    ``narrow_ints`` False widens tinyint/smallint to int (Iceberg has no 8/16-bit integers)."""
    import pyarrow as pa

    simple = {
        "boolean": pa.bool_(),
        "tinyint": pa.int8() if narrow_ints else pa.int32(),
        "smallint": pa.int16() if narrow_ints else pa.int32(),
        "int": pa.int32(),
        "bigint": pa.int64(),
        "float": pa.float32(),
        "double": pa.float64(),
        "string": pa.string(),
        "binary": pa.binary(),
        "date": pa.date32(),
        "timestamp": pa.timestamp("us", tz="UTC"),
        "timestamp_ntz": pa.timestamp("us"),
    }
    if spark_sql in simple:
        return simple[spark_sql]
    match = _DECIMAL.fullmatch(spark_sql)
    if match:
        return pa.decimal128(int(match.group(1)), int(match.group(2)))
    raise SparkSourceError(f"the mirror cannot store a column of Spark type {spark_sql!r}")


def meta_fields(kind: str, part: str) -> list[tuple[str, Any]]:
    """(name, Arrow type) of the bookkeeping columns of a ``kind`` table's ``part``."""
    import pyarrow as pa

    if part == "tombs":
        names: tuple[str, ...] = META_TOMB
    else:
        names = META_HISTORY if kind == "history" else META_LIVE
    strings = ("_key", "_source_id", "_source")
    return [(n, pa.string() if n in strings else pa.int64()) for n in names]


def file_schema(columns: list[list[str]], kind: str, part: str, *, narrow_ints: bool = True) -> Any:
    """The Arrow schema of a data file: the table columns (``rows`` only), the bookkeeping, the bucket."""
    import pyarrow as pa

    data = [] if part == "tombs" else [(c, arrow_type(t, narrow_ints=narrow_ints)) for c, t in columns]
    return pa.schema([*data, *meta_fields(kind, part), (BUCKET, pa.string())])


def sequence_order(kind: str) -> str:
    return "_start_sequence" if kind == "history" else "_sequence"
