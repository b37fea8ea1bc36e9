"""Mirror tables read back by engines that are not our code: what a user of the mirror would run.

Delta tables (``ROOT/db.table``, ``ROOT/db.table.history``) are read by ``deltalake``, by ``polars``
(``read_delta``), by Spark's own Delta connector (delta-spark, in the test session's SparkSession), and by
pyarrow — DuckDB too for a local table — over exactly the data files the log's version lists (their bucket
taken from the log's partition values: Delta data files do not hold it).
Iceberg tables (``db.table`` in the catalog; ``db.table__history``) are read by ``pyiceberg`` through the
catalog a user would configure (the SQL catalog on SQLite the mirror keeps in its root unless told
otherwise), and by pyarrow/DuckDB over exactly the files the snapshot's scan plans (no Spark connector of
Iceberg loads on Spark 4.2: README, "Spark's connectors"). ``read_all`` runs
every reader of the format, checks that they see the same rows, and returns them; ``version`` is a Delta
version or an Iceberg snapshot id (time travel); ``current_version`` names the table's current one.
Only the location conventions the README documents are shared with the mirror's code.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from relay.spark.tables import MirrorTarget

BUCKET = "relay_bucket"


def _delta_uri(target: MirrorTarget, table: str, kind: str) -> str:
    root = target.storage.root
    root = "s3://" + root[len("s3a://") :] if root.startswith("s3a://") else root
    return f"{root}/{table}{'' if kind == 'latest' else '.history'}"


def _delta_options(target: MirrorTarget) -> dict[str, str]:
    return dict(target.storage.options) if not target.storage.is_local else {}


def _catalog(target: MirrorTarget) -> Any:
    """The Iceberg catalog as a user configures it: the given settings, else SQLite in the root."""
    from pyiceberg.catalog import load_catalog

    storage, props = target.storage, dict(target.catalog)
    props.setdefault("type", "sql")
    if props["type"] == "sql":
        props.setdefault("uri", f"sqlite:///{storage.root}/_relay_catalog.sqlite")
    s3 = storage.options
    names = {
        "AWS_ENDPOINT_URL": "s3.endpoint",
        "AWS_ACCESS_KEY_ID": "s3.access-key-id",
        "AWS_SECRET_ACCESS_KEY": "s3.secret-access-key",
        "AWS_REGION": "s3.region",
    }
    props.update({names[k]: v for k, v in s3.items() if k in names})
    return load_catalog(props.pop("name", "relay"), **props)


def _iceberg_ident(table: str, kind: str) -> str:
    return table if kind == "latest" else f"{table}__history"


def current_version(target: MirrorTarget, table: str, kind: str = "latest") -> int:
    """The table's current Delta version / Iceberg snapshot id, as its library reports it."""
    if target.format == "delta":
        from deltalake import DeltaTable

        return int(
            DeltaTable(_delta_uri(target, table, kind), storage_options=_delta_options(target)).version()
        )
    snapshot = _catalog(target).load_table(_iceberg_ident(table, kind)).current_snapshot()
    return int(snapshot.snapshot_id)


def _logical(kind: pa.DataType) -> pa.DataType:
    """The logical type of an Arrow type: a reader's choice of offsets or views (pyiceberg maps an Iceberg
    ``string`` to ``large_string``, deltalake may give ``string_view``) is not a different type."""
    if pa.types.is_large_string(kind) or pa.types.is_string_view(kind):
        return pa.string()
    if pa.types.is_large_binary(kind) or pa.types.is_binary_view(kind):
        return pa.binary()
    return kind


def schema_of(target: MirrorTarget, table: str, kind: str = "latest") -> dict[str, pa.DataType]:
    """Column → logical Arrow type (``_logical``) of the table's current schema, as its library reports it."""
    if target.format == "delta":
        from deltalake import DeltaTable

        delta = DeltaTable(_delta_uri(target, table, kind), storage_options=_delta_options(target))
        fields = list(pa.schema(delta.schema().to_arrow()))
    else:
        from pyiceberg.io.pyarrow import schema_to_pyarrow

        iceberg = _catalog(target).load_table(_iceberg_ident(table, kind))
        fields = list(schema_to_pyarrow(iceberg.schema(), include_field_ids=False))
    return {f.name: _logical(f.type) for f in fields}


def _files_table(target: MirrorTarget, files: list[tuple[str, str | None]], empty: pa.Table) -> pa.Table:
    """pyarrow over exactly ``files`` ((URI, bucket from the log or None when the file holds it)); ``empty``
    when there are none (a version whose rows were all deleted has no data file: its columns come from
    the table's schema in the log/metadata, as for any reader of the files)."""
    fs = target.storage.filesystem()
    parts = []
    for uri, bucket in files:
        path = uri[len("file://") :] if uri.startswith("file://") else uri
        path = path.split("://", 1)[1] if "://" in path else path
        part = pq.read_table(path, filesystem=fs)
        if bucket is not None:
            # The log's partition value is the bucket; a file may hold the column too (Spark's Delta writer
            # writes it into its files; the driver's files do not).
            if BUCKET in part.column_names:
                part = part.drop_columns([BUCKET])
            part = part.append_column(BUCKET, pa.array([bucket] * part.num_rows, pa.string()))
        parts.append(part)
    return pa.concat_tables(parts, promote_options="permissive") if parts else empty


def _duckdb_table(files: list[str], empty: pa.Table) -> pa.Table:
    import duckdb

    paths = [f[len("file://") :] if f.startswith("file://") else f for f in files]
    if not paths:
        return empty  # read_parquet of no file is an error, not an empty table
    got = duckdb.sql(
        "SELECT * FROM read_parquet($files, union_by_name = true)", params={"files": paths}
    ).arrow()
    return got.read_all() if isinstance(got, pa.RecordBatchReader) else got  # duckdb ≥ 1.4: a reader


def _delta_readers(target: MirrorTarget, table: str, kind: str, version: int | None) -> dict[str, pa.Table]:
    import polars as pl
    from deltalake import DeltaTable

    uri, options = _delta_uri(target, table, kind), _delta_options(target)
    delta = DeltaTable(uri, version=version, storage_options=options)
    actions = pa.table(delta.get_add_actions(flatten=True))
    files = [
        (p if "://" in p or p.startswith("/") else f"{uri}/{p}", b)
        for p, b in zip(
            actions.column("path").to_pylist(), actions.column(f"partition.{BUCKET}").to_pylist(), strict=True
        )
    ]
    lake = pa.table(delta.to_pyarrow_table())
    out = {
        "deltalake": lake,
        "polars": pl.read_delta(uri, version=version, storage_options=options or None).to_arrow(),
        "pyarrow over the version's files": _files_table(target, files, lake.schema.empty_table()),
    }
    if target.storage.is_local:
        plain = _duckdb_table([f for f, _ in files], lake.schema.empty_table())
        out["duckdb over the version's files"] = plain
    by_spark = _spark_delta(uri, options, version)
    if by_spark is not None:
        out["Spark's Delta connector (delta-spark)"] = by_spark
    return out


def _spark_delta(uri: str, options: dict[str, str], version: int | None) -> pa.Table | None:
    """The table as Spark's own Delta connector reads it, in the test session's SparkSession (None where no
    session runs in this process; every Spark test has one)."""
    from pyspark.sql import SparkSession

    from relay.spark.session import configure_s3a
    from relay.spark.spark_delta import spark_path

    spark = SparkSession.getActiveSession()
    if spark is None:
        return None
    if options:
        configure_s3a(spark, options)
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    return reader.load(spark_path(uri)).toArrow()


def _iceberg_readers(target: MirrorTarget, table: str, kind: str, version: int | None) -> dict[str, pa.Table]:
    iceberg = _catalog(target).load_table(_iceberg_ident(table, kind))
    scan = iceberg.scan(snapshot_id=version)
    files = [task.file.file_path for task in scan.plan_files()]
    seen = scan.to_arrow()
    empty = seen.schema.empty_table()
    out = {
        "pyiceberg": seen,
        "pyarrow over the snapshot's files": _files_table(target, [(f, None) for f in files], empty),
    }
    if target.storage.is_local:
        out["duckdb over the snapshot's files"] = _duckdb_table(files, empty)
    return out


def _canonical(value: Any) -> Any:
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.UTC).replace(tzinfo=None)
    if isinstance(value, bytes | bytearray):
        return bytes(value)
    return value


def _rows(table: pa.Table, columns: list[str]) -> list[dict[str, Any]]:
    rows = [{c: _canonical(r.get(c)) for c in columns} for r in table.to_pylist()]
    return sorted(rows, key=lambda r: (str(r.get("_key")), str(r.get("_start_sequence"))))


def read_all(
    target: MirrorTarget, table: str, kind: str = "latest", version: int | None = None
) -> list[dict[str, Any]]:
    """Every row of the mirror of ``table`` as each independent reader of the format sees it (they must
    agree); the table's columns and bookkeeping, without ``relay_bucket``. See the module docstring."""
    readers = (_delta_readers if target.format == "delta" else _iceberg_readers)(target, table, kind, version)
    first_name, first = next(iter(readers.items()))
    columns = [c for c in first.column_names if c != BUCKET]
    want = _rows(first, columns)
    for name, got in readers.items():
        missing = set(columns) - set(got.column_names)
        assert not missing, f"{name} lacks {missing}: it read {got.num_rows} rows of {got.column_names}"
        rows = _rows(got, columns)
        assert rows == want, f"{name} and {first_name} read {table} differently:\n{rows[:3]}\n{want[:3]}"
    return [{c: r[c] for c in columns} for r in want]
