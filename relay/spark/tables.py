"""Mirror tables by location and format: where each one lives, how a write is guarded, how to read one.

Owns the mapping of a logical table ("shop.orders") to its tables in a format, the recovery of a write
that crashed before its commit, and the public way to read a mirror without Spark:

    from relay.spark.tables import read_table
    rows = read_table("/data/mirror", "shop.orders")                      # Delta (default) → pyarrow.Table
    rows = read_table("s3://bucket/mirror", "shop.orders", format="iceberg",
                      catalog={"uri": "postgresql+psycopg2://…"}, version=None)

A logical table is two tables of the format: its rows, and its tombstones (the keys deleted and the
sequence of their delete, so a replayed older change cannot bring a row back). Delta: ``ROOT/shop.orders``
and ``ROOT/_relay_tombstones/shop.orders``; Iceberg: ``shop.orders`` and ``relay_tombstones.shop__orders``
in the catalog. SCD type 2 histories: ``shop.orders.history`` (Delta) / ``shop.orders__history``
(Iceberg), with their deletion markers beside them the same way.

Crash safety: before tasks write, ``begin_write`` records a marker (``ROOT/_relay_pending/<table>.json``:
the write id and its directory); the commit carries the write id; ``finish_write`` removes the marker.
A kill in between leaves the marker: ``recover`` (called before every write) deletes the directory of a
write the table never committed (orphan files only) and keeps one it did. Runs on the Spark driver or
in any process; no pyspark import.
"""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa

from relay.errors import OptionError, SparkSourceError
from relay.spark.layout import MirrorState, Written
from relay.spark.storage import Storage

log = logging.getLogger(__name__)

FORMATS = ("delta", "iceberg")
WRITERS = ("driver", "spark")
TOMBSTONES = "_relay_tombstones"
PENDING = "_relay_pending"


class Part(Protocol):
    """One table of a format (``DeltaPart``, ``IcebergPart``)."""

    format: str
    bucket_in_file: bool

    def exists(self) -> bool: ...
    def create(self, schema: pa.Schema, state: MirrorState | None) -> None: ...
    def files(self, buckets: Any = None) -> dict[str, tuple[str, ...]]: ...
    def state(self) -> MirrorState | None: ...
    def committed(self, write_id: str) -> bool: ...
    def version(self) -> int: ...
    def schema(self) -> pa.Schema: ...
    def write_directory(self, write_id: str) -> str: ...
    def add_columns(self, fields: list[pa.Field], state: MirrorState) -> None: ...
    def begin(self, schema: pa.Schema) -> None: ...
    def file_schema(self, schema: pa.Schema) -> pa.Schema | None: ...
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
    ) -> None: ...
    def applied(self, app_id: str) -> int | None: ...
    def read(self, version: int | None = None) -> pa.Table: ...
    def maintain(self, retention_hours: float) -> None: ...


@dataclass(frozen=True)
class MirrorTarget:
    """Where mirror tables go: storage, format and (Iceberg) catalog settings; how they are kept."""

    storage: Storage
    format: str = "delta"
    catalog: dict[str, str] = field(default_factory=dict, hash=False)
    retention_hours: float = 168.0  # versions younger than this stay readable (time travel)
    maintain_every: int = 100  # commits of a table between two maintenance runs (0: never)
    # "driver": Spark tasks write a batch's buckets, the driver commits them (deltalake / pyiceberg);
    # "spark": Spark's Delta connector MERGEs the batch (relay.spark.spark_delta; Delta latest state only)
    writer: str = "driver"

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise OptionError(f"format: expected one of {', '.join(FORMATS)}, got {self.format!r}")
        if self.writer not in WRITERS:
            raise OptionError(f"writer: expected one of {', '.join(WRITERS)}, got {self.writer!r}")
        if self.writer == "spark" and self.format != "delta":
            raise OptionError(
                "writer spark: Spark's connector writes Delta tables only (no Iceberg runtime exists for the "
                "pinned Spark); use --writer driver for Iceberg"
            )


def target_of(
    location: str | Path | MirrorTarget,
    format: str = "delta",
    storage_options: dict[str, str] | None = None,
    catalog: dict[str, str] | None = None,
) -> MirrorTarget:
    """``location`` as a ``MirrorTarget`` (a path or URI gets ``format`` and the settings)."""
    if isinstance(location, MirrorTarget):
        return location
    return MirrorTarget(Storage(str(location), dict(storage_options or {})), format, dict(catalog or {}))


def iceberg_identifier(table: str, kind: str = "latest") -> str:
    """The Iceberg identifier of logical ``table``'s mirror (``kind`` "history": its SCD2 history)."""
    db, name = _split(table)
    return f"{db}.{name}" if kind == "latest" else f"{db}.{name}__history"


def _split(table: str) -> tuple[str, str]:
    db, _, name = table.partition(".")
    if not db or not name:
        raise OptionError(f"table: expected 'database.table', got {table!r}")
    return db, name


class MirrorTable:
    """A logical table's rows and tombstones in one format (``kind``: latest state or history)."""

    def __init__(self, target: MirrorTarget, table: str, kind: str = "latest") -> None:
        self.target, self.table, self.kind = target, table, kind
        db, name = _split(table)
        suffix = "" if kind == "latest" else ".history"
        storage = target.storage
        self.rows: Part
        self.tombs: Part
        if target.format == "delta":
            from relay.spark.delta import DeltaPart

            self.rows = DeltaPart(storage, f"{table}{suffix}")
            self.tombs = DeltaPart(storage, f"{TOMBSTONES}/{table}{suffix}")
        else:
            from relay.spark import iceberg

            catalog = iceberg.load(storage, target.catalog)
            tail = "" if kind == "latest" else "__history"
            self.rows = iceberg.IcebergPart(storage, catalog, (db, f"{name}{tail}"))
            self.tombs = iceberg.IcebergPart(storage, catalog, ("relay_tombstones", f"{db}__{name}{tail}"))

    @property
    def where(self) -> str:
        return repr(self.rows)

    def _marker(self, part: Part) -> str:
        name = repr(part).split(" ", 2)[-1].replace("/", "_").replace(":", "_")
        return self.target.storage.uri(PENDING, f"{name}.json")

    def begin_write(self) -> tuple[str, str, str]:
        """A new write id and the directories of its rows and tombstone files; records the markers."""
        write_id = f"{uuid.uuid4().hex[:16]}"
        fs = self.target.storage.filesystem()
        dirs = []
        for part in (self.rows, self.tombs):
            directory = part.write_directory(write_id)
            path = self.target.storage.fs_path(self._marker(part))
            fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
            with fs.open_output_stream(path) as out:
                out.write(json.dumps({"write_id": write_id, "directory": directory}).encode())
            dirs.append(directory)
        return write_id, dirs[0], dirs[1]

    def finish_write(self) -> None:
        fs = self.target.storage.filesystem()
        for part in (self.rows, self.tombs):
            _delete(fs, self.target.storage.fs_path(self._marker(part)))

    def recover(self) -> None:
        """Undo what a write killed before its commit left: its files, never a committed one's."""
        storage = self.target.storage
        fs = storage.filesystem()
        from pyarrow import fs as pafs

        for part in (self.rows, self.tombs):
            path = storage.fs_path(self._marker(part))
            if fs.get_file_info(path).type == pafs.FileType.NotFound:
                continue
            with fs.open_input_stream(path) as src:
                marker = json.loads(src.read())
            if part.exists() and part.committed(marker["write_id"]):
                log.info("%s: write %s was committed; its marker is removed", part, marker["write_id"])
            else:
                log.warning(
                    "%s: write %s was not committed (killed before its commit): deleting its files %s",
                    part,
                    marker["write_id"],
                    marker["directory"],
                )
                directory = storage.fs_path(marker["directory"])
                if fs.get_file_info(directory).type != pafs.FileType.NotFound:
                    fs.delete_dir(directory)
            _delete(fs, path)

    def read(self, version: int | None = None) -> pa.Table:
        return self.rows.read(version)


def _delete(fs: Any, path: str) -> None:
    from pyarrow import fs as pafs

    if fs.get_file_info(path).type != pafs.FileType.NotFound:
        fs.delete_file(path)


def read_table(
    location: str | Path | MirrorTarget,
    table: str,
    *,
    format: str = "delta",
    kind: str = "latest",
    version: int | None = None,
    storage_options: dict[str, str] | None = None,
    catalog: dict[str, str] | None = None,
) -> pa.Table:
    """Every row of the mirrored logical ``table`` ("db.table") as a pyarrow Table, without Spark.

    ``version``: a Delta version or an Iceberg snapshot id (time travel); None for the current one.
    ``kind="history"`` reads the SCD type 2 history. The table's own columns, then the bookkeeping
    (``_key``, ``_sequence`` …) and ``relay_bucket``."""
    mirror = MirrorTable(target_of(location, format, storage_options, catalog), table, kind)
    if not mirror.rows.exists():
        raise SparkSourceError(f"no mirror of {table} at {mirror.where}")
    return mirror.read(version)
