"""A mirror table stored as a Delta Lake table, committed with ``deltalake`` (delta-rs: no JVM).

Owns every ``deltalake`` call of the mirror: creating the table (partitioned by ``relay_bucket``),
listing the current files of buckets from the log, adding columns (``alter.add_columns``: Delta's
schema evolution; a changed type overwrites the table with its new schema in the same commit as the
rewritten files), and committing a batch as ONE transaction: ``AddAction``s for the files the tasks
wrote, ``RemoveAction``s for the files they replace. Each commit carries the relay's state
(``relay.state``: columns, watermarks, offsets) and the write id in its commit info, and the
micro-batch as Delta's application transaction (``txn``: app id + batch id, as Spark's Delta sink
does), so ``transaction_version`` tells whether a batch is already in. Data files go to
``relay-<write id>/`` under the table; the log holds partition values (files carry no bucket column).
Runs on the Spark driver (or any process reading a mirror); no pyspark import.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa

from relay.errors import SparkSourceError
from relay.spark.layout import BUCKET, MirrorState, Written
from relay.spark.storage import Storage

_RECENT = 4
_HISTORY_DEPTH = 200  # commits searched back for the relay's state (others' commits may come between)


class DeltaPart:
    """One Delta table of a mirror (its rows, or its tombstones)."""

    format = "delta"
    bucket_in_file = False

    def __init__(self, storage: Storage, location: str) -> None:
        self.storage = storage
        self.uri = storage.delta_uri(location)
        self.location = location
        self._table: Any = None

    def __repr__(self) -> str:
        return f"Delta table {self.uri}"

    def _open(self) -> Any:
        from deltalake import DeltaTable

        if self._table is None:
            if not DeltaTable.is_deltatable(self.uri, storage_options=self.storage.delta_options()):
                return None
            self._table = DeltaTable(self.uri, storage_options=self.storage.delta_options())
        return self._table

    def refresh(self) -> None:
        self._table = None

    def exists(self) -> bool:
        return self._open() is not None

    def create(self, schema: pa.Schema, state: MirrorState | None) -> None:
        from deltalake import DeltaTable
        from deltalake.transaction import CommitProperties

        if self.storage.is_local:
            path = Path(self.uri)
            if path.is_symlink() or (path.is_dir() and any(path.iterdir())):
                raise SparkSourceError(
                    f"{path} holds a mirror of the former layout (parquet versions behind a symlink) or "
                    "other files, not a Delta table: replay the topics into a new --out (or move it away)"
                )
        DeltaTable.create(
            self.uri,
            schema=schema,
            partition_by=[BUCKET],
            storage_options=self.storage.delta_options(),
            commit_properties=CommitProperties(custom_metadata=_meta(state, None)),
        )
        self.refresh()

    def files(self, buckets: Iterable[str] | None = None) -> dict[str, tuple[str, ...]]:
        """bucket → URIs of its current data files."""
        table = self._open()
        if table is None:
            return {}
        actions = pa.table(table.get_add_actions(flatten=True))
        wanted = None if buckets is None else set(buckets)
        out: dict[str, list[str]] = {}
        column = f"partition.{BUCKET}"
        for path, bucket in zip(
            actions.column("path").to_pylist(), actions.column(column).to_pylist(), strict=True
        ):
            if wanted is None or bucket in wanted:
                out.setdefault(bucket, []).append(path if "://" in path else f"{self.uri}/{path}")
        return {b: tuple(p) for b, p in out.items()}

    def state(self) -> MirrorState | None:
        table = self._open()
        if table is None:
            return None
        for depth in (_RECENT, _HISTORY_DEPTH):  # the last commit, unless maintenance committed after it
            for commit in table.history(depth):
                text = _relay_state(commit)
                if text is not None:
                    return MirrorState.from_json(text)
        return None

    def committed(self, write_id: str) -> bool:
        table = self._open()
        return table is not None and any(
            c.get("relay.write_id") == write_id for c in table.history(_HISTORY_DEPTH)
        )

    def version(self) -> int:
        table = self._open()
        return -1 if table is None else int(table.version())

    def schema(self) -> pa.Schema:
        return pa.schema(self._open().schema().to_arrow())

    def write_directory(self, write_id: str) -> str:
        return self.storage.uri(self.location, f"relay-{write_id}")

    def add_columns(self, fields: list[pa.Field], state: MirrorState) -> None:
        """Delta's schema evolution: new nullable columns, no data rewritten."""
        from deltalake import Field
        from deltalake.transaction import CommitProperties

        table = self._open()
        table.alter.add_columns(
            [Field.from_arrow(f) for f in fields],
            commit_properties=CommitProperties(custom_metadata=_meta(state, None)),
        )
        self.refresh()

    def file_schema(self, schema: pa.Schema) -> pa.Schema | None:
        return None

    def begin(self, schema: pa.Schema) -> None:
        """Nothing to prepare: Delta's schema changes are commits of their own (``add_columns``) or part
        of the overwrite that rewrites every file."""

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
        """One transaction: add ``written``, remove the current files of the ``replaced`` buckets (or,
        with ``overwrite``, every file, and the table's schema becomes ``schema``)."""
        from deltalake.transaction import AddAction, CommitProperties, RemoveAction, Transaction

        table = self._open()
        now = int(time.time() * 1000)
        actions: list[Any] = [
            AddAction(self._relative(w.path), w.size, {BUCKET: w.bucket}, now, True, w.stats)
            for w in written
            if w.path
        ]
        if not overwrite:
            for bucket, uris in self.files(replaced).items():
                actions += [RemoveAction(self._relative(u), True, now, None, {BUCKET: bucket}) for u in uris]
        props = CommitProperties(
            custom_metadata=_meta(state, write_id),
            app_transactions=[Transaction(app[0], app[1])] if app else None,
        )
        table.create_write_transaction(
            actions,
            "overwrite" if overwrite else "append",
            schema,
            partition_by=[BUCKET],
            commit_properties=props,
        )
        self.refresh()

    def applied(self, app_id: str) -> int | None:
        table = self._open()
        return None if table is None else table.transaction_version(app_id)

    def _relative(self, uri: str | None) -> str:
        text = str(uri)
        prefix = self.uri + "/"
        if not text.startswith(prefix):
            raise SparkSourceError(f"{text} is not under the Delta table {self.uri}")
        return text[len(prefix) :]

    def read(self, version: int | None = None) -> pa.Table:
        from deltalake import DeltaTable

        table = DeltaTable(self.uri, version=version, storage_options=self.storage.delta_options())
        return pa.table(table.to_pyarrow_table())

    def maintain(self, retention_hours: float) -> None:
        """Remove the data files no version younger than ``retention_hours`` needs (``vacuum``) and the
        log entries older than that before the last checkpoint (``cleanup_metadata``; the table's
        ``delta.logRetentionDuration`` is set to the retention once, by a commit of its own). On the
        table's latest version: one opened earlier (before Spark's MERGE committed, ``writer="spark"``)
        made the property's commit conflict with the files the MERGE removed."""
        self.refresh()
        table = self._open()
        if table is None:
            return
        hours = math.ceil(retention_hours)  # whole hours (deltalake's unit), never less than asked
        wanted = f"interval {hours} hours"
        if table.metadata().configuration.get("delta.logRetentionDuration") != wanted:
            table.alter.set_table_properties({"delta.logRetentionDuration": wanted})
        table.vacuum(retention_hours=hours, dry_run=False, enforce_retention_duration=False)
        table.cleanup_metadata()
        self.refresh()


def _relay_state(commit: dict[str, Any]) -> str | None:
    """The relay's state of a commit: in its commit info (deltalake's commits) or in its ``userMetadata``
    (Spark's MERGE, ``relay.spark.spark_delta``)."""
    if "relay.state" in commit:
        return str(commit["relay.state"])
    text = commit.get("userMetadata")
    if isinstance(text, str) and text.startswith("{"):
        found = json.loads(text).get("relay.state")
        return None if found is None else str(found)
    return None


def _meta(state: MirrorState | None, write_id: str | None) -> dict[str, str]:
    meta: dict[str, str] = {}
    if state is not None:
        meta["relay.state"] = state.to_json()
    if write_id is not None:
        meta["relay.write_id"] = write_id
    return meta
