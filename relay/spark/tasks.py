"""What a Spark task does for one key bucket: read its stored files, merge the batch, write new files.

Owns the I/O of the executors: a ``BucketJob`` (a small picklable value the driver builds once per
table and batch) says where the bucket's current files are, the table's schemas, the watermarks and
the directories to write into; ``BucketJob.run`` is the function Spark's ``applyInArrow`` calls with
the batch's changes of one bucket. Files are read and written through pyarrow's file systems
(``relay.spark.storage``), so the same code writes to a local disk, S3, GCS, ADLS or HDFS. A bucket
the batch does not change writes nothing. Returns one ``Written`` row per file (and one with no path
for a part that became empty), which the driver commits (``relay.spark.delta`` /
``relay.spark.iceberg``). Runs on executor Python workers; no pyspark import.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from relay.spark.layout import BUCKET, MAX_FILE_ROWS, RowAction, Written
from relay.spark.merge import Merged, act, conform, kept, merge_history, merge_latest
from relay.spark.storage import Storage

WRITTEN_DDL = "part string, bucket string, path string, size long, rows long, stats string"


@dataclass(frozen=True)
class PartSpec:
    """One stored part of the table (its rows, or its tombstones): schema, files, where to write."""

    schema: pa.Schema  # the full schema, bucket column included
    files: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # bucket → current file URIs
    directory: str = ""  # URI of the directory new files go to
    bucket_in_file: bool = True  # False for Delta: the partition value lives in the log only
    file_schema: pa.Schema | None = None  # what files are written as (Iceberg: with field ids)


@dataclass(frozen=True)
class BucketJob:
    storage: Storage
    kind: str  # "latest" | "history" | "load" (write the rows as they are)
    rows: PartSpec
    tombs: PartSpec
    cleared: Mapping[str, int] = field(default_factory=dict)
    clear_all: bool = False  # a new TRUNCATE/DROP watermark: filter the stored rows too
    rewrite: bool = False  # a column changed its type, or a schema change: write every bucket again
    actions: tuple[RowAction, ...] = ()  # what the batch's schema changes do to the stored rows

    def function(self) -> Callable[[pa.Table], pa.Table]:
        """``run`` as a one-argument function (what ``applyInArrow`` inspects and pickles)."""
        job = self

        def bucket(events: pa.Table) -> pa.Table:
            return job.run(events)

        return bucket

    def run(self, events: pa.Table) -> pa.Table:
        """The ``applyInArrow`` function: ``events`` are the batch's changes of one bucket."""
        bucket = str(events.column(BUCKET)[0].as_py()) if events.num_rows else ""
        fs = self.storage.filesystem()
        if self.kind == "load":
            merged = Merged(kept(events.filter(pc.is_valid(events.column("_key"))), self.cleared), None)
            merged = Merged(conform(merged.rows, self.rows.schema), None)
        else:
            rows = self._read(fs, self.rows, bucket, self.actions)
            tombs = self._read(fs, self.tombs, bucket)
            if self.kind == "history":
                merged = merge_history(events, rows, tombs)
            else:
                merged = merge_latest(events, rows, tombs, self.cleared, self.clear_all)
            if self.rewrite:
                merged = Merged(merged.rows if merged.rows is not None else rows, merged.tombs)
        written: list[Written] = []
        if merged.rows is not None:
            written += self._write(fs, self.rows, "rows", bucket, merged.rows)
        if merged.tombs is not None:
            written += self._write(fs, self.tombs, "tombs", bucket, merged.tombs)
        return pa.Table.from_pylist([asdict(w) for w in written], schema=_WRITTEN_SCHEMA)

    def _read(self, fs: Any, part: PartSpec, bucket: str, actions: tuple[RowAction, ...] = ()) -> pa.Table:
        tables = []
        for uri in part.files.get(bucket, ()):
            table = act(pq.read_table(self.storage.fs_path(uri), filesystem=fs), actions)
            if BUCKET not in table.column_names:
                table = table.append_column(BUCKET, pa.repeat(pa.scalar(bucket, pa.string()), table.num_rows))
            tables.append(conform(table, part.schema))
        return pa.concat_tables(tables) if tables else part.schema.empty_table()

    def _write(self, fs: Any, part: PartSpec, name: str, bucket: str, table: pa.Table) -> list[Written]:
        if table.num_rows == 0:
            return [Written(name, bucket, None, 0, 0, "")]
        if not part.bucket_in_file:
            table = table.drop_columns([BUCKET])
        if part.file_schema is not None:
            table = conform(table, part.file_schema)
        out = []
        for start in range(0, table.num_rows, MAX_FILE_ROWS):
            chunk = table.slice(start, MAX_FILE_ROWS)
            uri = f"{part.directory}/{bucket}-{name}-{uuid.uuid4().hex[:12]}.parquet"
            path = self.storage.fs_path(uri)
            fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
            with fs.open_output_stream(path) as sink:
                pq.write_table(chunk, sink, compression="zstd", use_dictionary=dictionary_columns(chunk))
            size = fs.get_file_info(path).size
            out.append(Written(name, bucket, uri, int(size), chunk.num_rows, delta_stats(chunk)))
        return out


_WRITTEN_SCHEMA = pa.schema(
    [
        ("part", pa.string()),
        ("bucket", pa.string()),
        ("path", pa.string()),
        ("size", pa.int64()),
        ("rows", pa.int64()),
        ("stats", pa.string()),
    ]
)


def dictionary_columns(table: pa.Table, sample: int = 10_000) -> list[str]:
    """The columns worth Parquet's dictionary encoding: those with at most half as many distinct values
    as rows among the first ``sample`` rows. pyarrow's default tries a dictionary on every column and
    falls back to plain values where it outgrows its page, a third of the time of writing a mirror's
    bucket of unique keys, ids and amounts (100,000 rows: 64 ms against 45 ms, and files twice the size)."""
    head = table.slice(0, sample)
    half = max(head.num_rows, 1) // 2
    return [name for name in head.column_names if pc.count_distinct(head.column(name)).as_py() <= half]


def delta_stats(table: pa.Table) -> str:
    """Delta's file statistics: record count, null counts, and min/max of the integer columns (enough
    for readers to skip files by id or sequence)."""
    nulls = {name: int(table.column(name).null_count) for name in table.column_names}
    low: dict[str, int] = {}
    high: dict[str, int] = {}
    for name in table.column_names:
        column = table.column(name)
        if pa.types.is_integer(column.type) and column.null_count < table.num_rows:
            bounds = pc.min_max(column)
            low[name], high[name] = bounds["min"].as_py(), bounds["max"].as_py()
    stats = {"numRecords": table.num_rows, "minValues": low, "maxValues": high, "nullCount": nulls}
    return json.dumps(stats, separators=(",", ":"))
