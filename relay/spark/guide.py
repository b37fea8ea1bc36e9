"""Where a mirror table is and how other engines read it: the lines ``relay spark mirror`` prints.

Owns the text only (no I/O): for a Delta table its URI and the calls of delta-spark, deltalake, polars and
DuckDB; for an Iceberg table its identifier, the catalog's settings as pyiceberg and Spark's Iceberg
runtime take them (pyiceberg's SQL catalog and Iceberg's JDBC catalog share their tables, and both find a
table under the catalog's NAME), and the Trino/DuckDB forms; then ``relay.spark.tables.read_table``. For a
consistent cut (``relay spark cut``): each table's version and how every engine reads that version.
Secrets among the storage settings are never printed. Pure; any thread (the CLI calls it from Spark's
stream thread as each table gets its first commit).
"""

from __future__ import annotations

from typing import Any

from relay.spark.cut import Cut
from relay.spark.iceberg import catalog_settings
from relay.spark.storage import Storage
from relay.spark.tables import MirrorTarget, iceberg_identifier

_SHOWN = (
    "AWS_ENDPOINT_URL", "AWS_REGION", "AWS_ALLOW_HTTP", "AWS_S3_ALLOW_UNSAFE_RENAME",
    "s3.endpoint", "s3.region", "warehouse", "type",
)  # fmt: skip


def _shown(key: str, value: str) -> str:
    public = key in _SHOWN or (key == "uri" and "@" not in value)  # a URI with a user may hold a password
    return value if public else "…"


def _settings(options: dict[str, str]) -> str:
    """``options`` as Python keywords text, secrets as ``…`` (take them from your environment)."""
    return ", ".join(f'{k}="{_shown(k, v)}"' for k, v in options.items())


def _read_table(target: MirrorTarget, table: str, kind: str) -> str:
    args = [f'"{target.storage.root}"', f'"{table}"']
    if target.format != "delta":
        args.append(f'format="{target.format}"')
    if kind != "latest":
        args.append(f'kind="{kind}"')
    if target.storage.options:
        args.append("storage_options={…}")
    if target.catalog:
        args.append("catalog={…}")
    return f"  Python (no Spark): relay.spark.tables.read_table({', '.join(args)})"


def _delta(target: MirrorTarget, table: str, kind: str) -> list[str]:
    storage: Storage = target.storage
    uri = storage.delta_uri(table if kind == "latest" else f"{table}.history")
    spark_uri = "s3a://" + uri[len("s3://") :] if uri.startswith("s3://") else uri
    options = "" if storage.is_local else f", storage_options=dict({_settings(storage.delta_options())})"
    return [
        f"{table}{'' if kind == 'latest' else ' (SCD2 history)'}: Delta table {uri}",
        f'  Spark (delta-spark): spark.read.format("delta").load("{spark_uri}")  (time travel: versionAsOf)',
        f'  deltalake: DeltaTable("{uri}"{options}).to_pyarrow_table()',
        f'  polars: pl.read_delta("{uri}"{options})',
        f"  DuckDB (delta extension): SELECT * FROM delta_scan('{uri}')",
    ]


def _iceberg(target: MirrorTarget, table: str, kind: str) -> list[str]:
    ident = iceberg_identifier(table, kind)
    props = catalog_settings(target.storage, target.catalog)
    name = props.pop("name", "relay")
    spark = [f"spark.sql.catalog.{name}=org.apache.iceberg.spark.SparkCatalog"]
    if props.get("type") == "sql" and props.get("uri", "").startswith("sqlite:///"):
        jdbc = "jdbc:sqlite:" + props["uri"][len("sqlite:///") :]
        spark += [f"spark.sql.catalog.{name}.type=jdbc", f"spark.sql.catalog.{name}.uri={jdbc}"]
        spark += [f"spark.sql.catalog.{name}.warehouse={props.get('warehouse')}"]
    else:
        spark += [f"spark.sql.catalog.{name}.<the same settings>"]
    return [
        f"{table}{'' if kind == 'latest' else ' (SCD2 history)'}: Iceberg table {ident} in catalog {name!r} "
        f"({props.get('type')}: {_shown('uri', props.get('uri', props.get('warehouse', '')))})",
        f'  pyiceberg: load_catalog("{name}", {_settings(props)}).load_table("{ident}").scan().to_arrow()',
        f'  Spark (iceberg-spark-runtime): {" ".join(spark)}; spark.table("{name}.{ident}")',
        f"  Trino: SELECT * FROM iceberg.{ident}   DuckDB (iceberg extension): iceberg_scan(<metadata.json>)",
    ]


def how_to_read(target: MirrorTarget, table: str, kind: str = "latest") -> str:
    """A few lines saying where the mirror of ``table`` ("db.table"; ``kind`` "history": its SCD type 2
    history) is and how engines read it."""
    lines = (_delta if target.format == "delta" else _iceberg)(target, table, kind)
    return "\n".join([*lines, _read_table(target, table, kind)])


def cut_readers(
    target: MirrorTarget, table: str, version: int, metadata: str | None = None
) -> dict[str, str]:
    """How each engine reads ``table`` at ``version`` (a Delta version / an Iceberg snapshot id): what
    ``relay spark cut --json`` lists per table. ``metadata``: an Iceberg table's metadata file (DuckDB)."""
    storage: Storage = target.storage
    if target.format == "delta":
        uri = storage.delta_uri(table)
        spark_uri = "s3a://" + uri[len("s3://") :] if uri.startswith("s3://") else uri
        duck_uri = f"file://{uri}" if storage.is_local else uri
        options = "" if storage.is_local else ", storage_options={…}"
        return {
            "deltalake": f'DeltaTable("{uri}", version={version}{options}).to_pyarrow_table()',
            "polars": f'pl.read_delta("{uri}", version={version}{options})',
            "duckdb": f"SELECT * FROM delta_scan('{duck_uri}', version => {version})",
            "spark": f'spark.read.format("delta").option("versionAsOf", {version}).load("{spark_uri}")',
            "relay": f'read_table("{storage.root}", "{table}", version={version})',
        }
    ident = iceberg_identifier(table)
    props = catalog_settings(storage, target.catalog)
    name = props.pop("name", "relay")
    return {
        "pyiceberg": f'load_catalog("{name}", {_settings(props)}).load_table("{ident}")'
        f".scan(snapshot_id={version}).to_arrow()",
        "polars": f"pl.scan_iceberg(<that pyiceberg table>, snapshot_id={version})",
        "duckdb": f"SELECT * FROM iceberg_scan('{metadata or '<metadata.json>'}', "
        f"snapshot_from_id => {version})",
        "spark": f'spark.read.option("snapshot-id", {version}).table("{name}.{ident}")',
        "relay": f'read_table("{storage.root}", "{table}", format="iceberg", version={version}, '
        "catalog={…})",
    }


def _metadata_location(cut: Cut, table: str) -> str | None:
    if cut.target.format != "iceberg":
        return None
    from relay.spark import iceberg

    catalog = iceberg.load(cut.target.storage, cut.target.catalog)
    return str(catalog.load_table(iceberg_identifier(table)).metadata_location)


def cut_json(cut: Cut, files: dict[str, list[str]] | None = None) -> dict[str, Any]:
    """``relay spark cut --json``: the source transaction, and per table its version, location, how each
    engine reads that version (``cut_readers``) and, with ``files``, its data files (DuckDB's
    ``read_parquet`` over them reads exactly the version without the format's extension)."""
    tx = cut.transaction
    tables: dict[str, Any] = {}
    for name, at in cut.tables.items():
        entry: dict[str, Any] = {"version": at.version, "location": at.location}
        metadata = _metadata_location(cut, name)
        if metadata is not None:
            entry["metadata"] = metadata
        entry["read"] = cut_readers(cut.target, name, at.version, metadata)
        if files is not None:
            entry["files"] = files.get(name, [])
        tables[name] = entry
    return {
        "source": cut.source,
        "transaction": {
            "id": tx.id,
            "position": tx.position,
            "time": cut.time,
            "ts_ms": tx.ts_ms,
            "sequence": tx.sequence,
        },
        "format": cut.target.format,
        "out": cut.target.storage.root,
        "micro_batch": {"app": cut.app, "batch": cut.batch},
        "tables": tables,
    }


def cut_text(cut: Cut) -> str:
    """``relay spark cut``: the cut in a few lines, each table with its version and one way to read it."""
    tx = cut.transaction
    what = "snapshot id" if cut.target.format == "iceberg" else "version"
    lines = [
        f"source {cut.source}: transaction {tx.id} at {tx.position}, committed {cut.time} "
        f"(micro-batch {cut.batch} of {cut.app})"
    ]
    width = max((len(n) for n in cut.tables), default=0)
    for name, at in cut.tables.items():
        readers = cut_readers(cut.target, name, at.version)
        first = readers["deltalake" if cut.target.format == "delta" else "pyiceberg"]
        lines.append(f"  {name:<{width}}  {what} {at.version}   {first}")
    lines.append("(--json: the same with every engine's call and each version's data files)")
    return "\n".join(lines)
