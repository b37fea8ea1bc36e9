"""A mirror table stored as an Iceberg table, committed with ``pyiceberg`` through any of its catalogs.

Owns every ``pyiceberg`` call of the mirror: loading the catalog (a SQL catalog on SQLite beside the
tables by default; SQL on PostgreSQL, REST, Glue, Hive… by settings), creating the table (format v2,
identity-partitioned by ``relay_bucket``), listing the current files of buckets, and committing a batch
as ONE catalog transaction: the schema change (Iceberg's schema evolution: add a column, promote a
type, or replace a column whose type cannot be promoted), then an overwrite snapshot that deletes the
files of the replaced buckets and adds the files the tasks wrote (with the field ids of the evolved
schema), with the write id, micro-batch, offsets and (consistent cuts) the source transactions it holds
(``relay.cut``) as snapshot properties, and the relay's state
(``relay.state``) as a table property. Runs on the Spark driver (or any process reading a mirror); no
pyspark import.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa

from relay.errors import SparkSourceError
from relay.spark.layout import BUCKET, MirrorState, Written
from relay.spark.storage import Storage

TABLE_PROPERTIES = {
    "format-version": "2",
    "write.parquet.compression-codec": "zstd",
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "50",
}


def catalog_settings(storage: Storage, settings: Mapping[str, str]) -> dict[str, str]:
    """The catalog's properties: ``settings`` over the defaults (a SQL catalog on SQLite in the mirror's
    local root, the root as warehouse) and the storage's FileIO settings."""
    out = {"type": "sql", "warehouse": storage.file_uri(), **storage.iceberg_io()}
    if settings.get("type", "sql") == "sql" and "uri" not in settings:
        if not storage.is_local:
            raise SparkSourceError(
                f"an Iceberg mirror on {storage.root} needs a catalog: give its uri "
                "(--catalog-uri, e.g. postgresql+psycopg2://… or sqlite:////local/path/catalog.db) "
                "or another catalog type (--catalog-type rest|glue|hive …)"
            )
        out["uri"] = f"sqlite:///{storage.uri('_relay_catalog.sqlite')}"
    out.update(settings)
    return out


def load(storage: Storage, settings: Mapping[str, str]) -> Any:
    from pyiceberg.catalog import load_catalog

    props = catalog_settings(storage, settings)
    if storage.is_local:
        Path(storage.root).mkdir(parents=True, exist_ok=True)  # the SQLite catalog's file lives there
    return load_catalog(props.pop("name", "relay"), **props)


class IcebergPart:
    """One Iceberg table of a mirror (its rows, or its tombstones)."""

    format = "iceberg"
    bucket_in_file = True

    def __init__(self, storage: Storage, catalog: Any, identifier: tuple[str, str]) -> None:
        self.storage = storage
        self.catalog = catalog
        self.identifier = identifier
        self._table: Any = None
        self._tx: Any = None

    def __repr__(self) -> str:
        return f"Iceberg table {'.'.join(self.identifier)}"

    def _open(self) -> Any:
        from pyiceberg.exceptions import NoSuchTableError

        if self._table is None:
            try:
                self._table = self.catalog.load_table(self.identifier)
            except NoSuchTableError:
                return None
        return self._table

    def refresh(self) -> None:
        self._table = None

    def exists(self) -> bool:
        return self._open() is not None

    def create(self, schema: pa.Schema, state: MirrorState | None) -> None:
        self.catalog.create_namespace_if_not_exists(self.identifier[0])
        table = self.catalog.create_table(self.identifier, schema=schema, properties=TABLE_PROPERTIES)
        with table.transaction() as tx:
            with tx.update_spec() as update:
                update.add_identity(BUCKET)
            if state is not None:
                tx.set_properties({"relay.state": state.to_json()})
        self.refresh()

    def files(self, buckets: Iterable[str] | None = None) -> dict[str, tuple[str, ...]]:
        return {b: tuple(f.file_path for f in fs) for b, fs in self._data_files(buckets).items()}

    def _data_files(self, buckets: Iterable[str] | None) -> dict[str, list[Any]]:
        from pyiceberg.expressions import AlwaysTrue, In

        table = self._open()
        if table is None or table.current_snapshot() is None:
            return {}
        wanted = None if buckets is None else sorted(set(buckets))
        if wanted == []:
            return {}
        out: dict[str, list[Any]] = {}
        where = In(BUCKET, wanted) if wanted else AlwaysTrue()  # type: ignore[call-arg, arg-type]
        for task in table.scan(row_filter=where).plan_files():
            if task.delete_files:
                raise SparkSourceError(
                    f"{self}: {task.file.file_path} has delete files (written by another engine): the "
                    "mirror rewrites whole files and cannot keep them; compact the table first"
                )
            out.setdefault(str(task.file.partition[0]), []).append(task.file)
        return out

    def state(self) -> MirrorState | None:
        table = self._open()
        text = None if table is None else table.properties.get("relay.state")
        return None if text is None else MirrorState.from_json(text)

    def committed(self, write_id: str) -> bool:
        table = self._open()
        if table is None:
            return False
        return any(
            s.summary.additional_properties.get("relay.write-id") == write_id for s in table.snapshots()
        )

    def version(self) -> int:
        table = self._open()
        snapshot = None if table is None else table.current_snapshot()
        return -1 if snapshot is None else int(snapshot.snapshot_id)

    def schema(self) -> pa.Schema:
        from pyiceberg.io.pyarrow import schema_to_pyarrow

        return schema_to_pyarrow(self._open().schema(), include_field_ids=False)

    def write_directory(self, write_id: str) -> str:
        location = str(self._open().location()).rstrip("/")
        return f"{location}/data/relay-{write_id}"

    def add_columns(self, fields: list[pa.Field], state: MirrorState) -> None:
        """Added columns go into the batch's transaction (``begin``): nothing to commit on their own."""

    def begin(self, schema: pa.Schema) -> None:
        """Open the batch's transaction and evolve the table's schema to ``schema`` in it (a column it lacks
        is deleted: only a schema change's rewrite, which writes every file again, leaves one out)."""
        from pyiceberg.schema import promote

        table = self._open()
        self._tx = table.transaction()
        current = {f.name: f for f in table.schema().fields}
        wanted = set(schema.names)
        with self._tx.update_schema() as update:
            for gone in [name for name in current if name not in wanted]:
                update.delete_column(gone)  # dropped or renamed (the batch rewrites every file)
            for field in _fresh_ids(schema).fields:
                have = current.get(field.name)
                if have is None:
                    update.add_column(field.name, field.field_type)
                elif have.field_type != field.field_type:
                    try:
                        promote(have.field_type, field.field_type)
                        update.update_column(field.name, field.field_type)
                    except Exception:
                        update.delete_column(field.name)
                        update.add_column(field.name, field.field_type)

    def file_schema(self, schema: pa.Schema) -> pa.Schema:
        from pyiceberg.io.pyarrow import schema_to_pyarrow

        return schema_to_pyarrow(self._tx.table_metadata.schema())

    def commit(
        self,
        written: list[Written],
        replaced: set[str],
        schema: pa.Schema,
        *,
        state: MirrorState | None,
        write_id: str,
        overwrite: bool = False,
        app: tuple[str, int] | None = None,
    ) -> None:
        from pyiceberg.io.pyarrow import parquet_file_to_data_file

        table = self._open()
        tx = self._tx if self._tx is not None else table.transaction()
        io = table.io
        removed = self._data_files(None if overwrite else replaced)
        added = [w for w in written if w.path]
        props = {"relay.write-id": write_id}
        if app is not None:
            props.update({"relay.app-id": app[0], "relay.batch": str(app[1])})
        if state is not None:
            props["relay.offsets"] = json.dumps(state.offsets, separators=(",", ":"))
            if state.max_sequence is not None:
                props["relay.max-sequence"] = str(state.max_sequence)
            if state.cut:  # consistent cuts (relay.spark.cut): the snapshot summary says what it holds
                props["relay.cut"] = json.dumps(state.cut, separators=(",", ":"), sort_keys=True)
        if added or any(removed.values()):
            with tx.update_snapshot(snapshot_properties=props).overwrite() as snapshot:
                for files in removed.values():
                    for data_file in files:
                        snapshot.delete_data_file(data_file)
                for w in added:
                    snapshot.append_data_file(parquet_file_to_data_file(io, tx.table_metadata, str(w.path)))
        if state is not None:
            tx.set_properties({"relay.state": state.to_json()})
        tx.commit_transaction()
        self._tx = None
        self.refresh()

    def applied(self, app_id: str) -> int | None:
        state = self.state()
        return None if state is None else state.batches.get(app_id)

    def read(self, version: int | None = None) -> pa.Table:
        table = self._open()
        if table is None:
            raise SparkSourceError(f"{self} does not exist")
        return table.scan(snapshot_id=version).to_arrow()

    def maintain(self, retention_hours: float) -> None:
        """Expire the snapshots older than ``retention_hours`` (the current one stays) and delete the files
        only they referenced: data files, manifests and manifest lists (pyiceberg's expiry only edits
        the metadata; old metadata files go by ``write.metadata.delete-after-commit.enabled``)."""
        table = self._open()
        if table is None or table.current_snapshot() is None:
            return
        before = _referenced(table)
        limit = dt.datetime.now(dt.UTC) - dt.timedelta(hours=retention_hours)
        table.maintenance.expire_snapshots().older_than(limit).commit()
        self.refresh()
        fs = self.storage.filesystem()
        for uri in sorted(before - _referenced(self._open())):
            fs.delete_file(self.storage.fs_path(uri))


def _referenced(table: Any) -> set[str]:
    """Every file the table's snapshots reference: data files, manifests, manifest lists."""
    files = {str(p) for p in table.inspect.all_files().column("file_path").to_pylist()}
    files |= {str(p) for p in table.inspect.all_manifests().column("path").to_pylist()}
    return files | {str(s.manifest_list) for s in table.snapshots() if s.manifest_list}


def _fresh_ids(schema: pa.Schema) -> Any:
    """A throw-away Iceberg schema with ids 1..n for ``schema``: only to convert Arrow types."""
    from pyiceberg.io.pyarrow import _ConvertToIcebergWithoutIDs, visit_pyarrow
    from pyiceberg.schema import assign_fresh_schema_ids

    return assign_fresh_schema_ids(visit_pyarrow(schema, _ConvertToIcebergWithoutIDs()))
