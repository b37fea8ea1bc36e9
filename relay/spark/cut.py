"""Consistent cuts of a mirror: the latest source transaction every table has applied whole, and per table
the Delta version / Iceberg snapshot that holds exactly the source's changes up to it.

Owns finding cuts from the tables' own commit metadata (no other file is read), without Spark:

    from relay.spark.cut import find_cut, read_cut
    cut = find_cut("/data/mirror")                        # Delta; format="iceberg", catalog={…} for Iceberg
    cut = find_cut(target, source="bank", at="2026-01-02T03:04:05Z")   # the newest cut at or before
    tables = read_cut(cut)                                # {"bank.checking": pyarrow.Table, …}

What the mirror records (``relay.spark.holdback``, ``MirrorState.cut``): every commit of a micro-batch run
with ``--transaction-topic`` names the query (app id), the micro-batch, the batch's tables (every one of
them commits, a change or not) and, per source, the last transaction applied whole (``Frontier``; the batch
applies a source's transactions in order, none in part). Delta: in the commit info's ``relay.state``;
Iceberg: the snapshot summary's ``relay.cut`` (and the table property ``relay.state``, for a batch that
changed nothing in a table: no snapshot).

The rules: a micro-batch is *complete* when every table it names has it (its state's last micro-batch of
that query is at least it); a query runs its micro-batches one after another and re-runs an incomplete one
before the next, so only the newest can be incomplete (a kill between two tables' commits). A cut of source
S = a complete micro-batch and its frontier of S; a table's version in it = its newest commit of that
micro-batch or an earlier one (of an earlier query: whose frontier of S is not past the cut's). A table
with no such commit did not exist yet at the cut. A cut is per source: the transactions of two sources
(two binlogs) have no common order, so a cut across sources is refused, as are cuts of a source that
publishes no boundaries and of a mirror whose newest commit of some table was written without them.
Runs in any process (the CLI's ``relay spark cut``, a reader's own program); no pyspark import.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from relay.errors import CutError
from relay.spark.layout import MirrorState
from relay.spark.tables import TOMBSTONES, MirrorTarget, iceberg_identifier, read_table, target_of
from relay.spark.txn import Frontier

_GTID_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F-]{27}:\d+$")
_POSITION = re.compile(r"^(?P<file>.+\.(?P<n>\d+)):(?P<offset>\d+)$")


@dataclass(frozen=True)
class Commit:
    """One commit of a mirror table that says what it holds (a cut commit)."""

    version: int  # Delta version / Iceberg snapshot id
    time_ms: int
    cut: dict[str, Any]

    @property
    def app(self) -> str:
        return str(self.cut.get("app", ""))

    @property
    def batch(self) -> int:
        return int(self.cut.get("batch", -1))

    def frontier(self, source: str) -> Frontier | None:
        found = self.cut.get("sources", {}).get(source)
        return None if found is None else Frontier.from_json(found)

    def sequence(self, source: str) -> int:
        found = self.frontier(source)
        return -1 if found is None else found.sequence


@dataclass
class TableLog:
    """A table's state (its last micro-batch per query) and its cut commits, newest first."""

    table: str
    batches: dict[str, int]
    commits: list[Commit]
    uncut: int | None = None  # the version of a newest data commit written without boundaries


@dataclass(frozen=True)
class TableAt:
    """One table of a cut: where it is and which version holds the cut."""

    table: str
    version: int
    location: str  # Delta: the table's URI; Iceberg: its identifier in the catalog


@dataclass(frozen=True)
class Cut:
    """A consistent cut of source ``source``: its transaction and the tables' versions."""

    target: MirrorTarget
    source: str
    transaction: Frontier
    app: str
    batch: int
    tables: dict[str, TableAt] = field(default_factory=dict)

    @property
    def time(self) -> str:
        """The transaction's commit time at the source (ISO 8601, UTC)."""
        stamp = dt.datetime.fromtimestamp(self.transaction.ts_ms / 1000, dt.UTC)
        return stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z")


# --- the tables' logs ---------------------------------------------------------------------------------


_COMMIT_FILE = re.compile(r"^(\d{20})\.json$")


def _delta_commits(target: MirrorTarget, table: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """(version, commit info) of the table's commits, newest first, read from its ``_delta_log`` files:
    the version is the file's name. (deltalake's ``history()`` numbers its entries down from a latest
    version it reads apart from them: a commit landing in between shifts every number by one.)"""
    from pyarrow import fs as pafs

    storage = target.storage
    fs = storage.filesystem()
    where = storage.fs_path(storage.uri(table, "_delta_log"))
    names = [i.base_name for i in fs.get_file_info(pafs.FileSelector(where, allow_not_found=True))]
    versions = sorted((int(m[1]) for n in names if (m := _COMMIT_FILE.match(n))), reverse=True)
    for version in versions:
        try:
            with fs.open_input_stream(f"{where}/{version:020d}.json") as src:
                lines = src.read().decode().splitlines()
        except FileNotFoundError:
            continue  # removed by the log's own clean-up since the listing
        for line in lines:
            if line.startswith('{"commitInfo"'):
                yield version, json.loads(line)["commitInfo"]
                break


def _delta_log(target: MirrorTarget, table: str) -> TableLog:
    from relay.spark.delta import _relay_state

    log = TableLog(table, {}, [])
    state_seen = False
    for version, info in _delta_commits(target, table):
        text = _relay_state(info)
        if text is None:
            continue  # maintenance, table properties: no data
        state = MirrorState.from_json(text)
        if not state_seen:
            log.batches, state_seen = dict(state.batches), True
        if state.cut.get("schema_only"):
            continue
        if not state.cut:
            if not log.commits and log.uncut is None:
                log.uncut = version
            continue
        log.commits.append(Commit(version, int(info.get("timestamp", 0)), state.cut))
    return log


def _iceberg_log(table: Any, name: str) -> TableLog:
    text = table.properties.get("relay.state")
    batches = {} if text is None else dict(MirrorState.from_json(text).batches)
    log = TableLog(name, batches, [])
    for snapshot in sorted(
        table.snapshots(), key=lambda s: (s.timestamp_ms, s.sequence_number), reverse=True
    ):
        props = snapshot.summary.additional_properties if snapshot.summary is not None else {}
        cut = props.get("relay.cut")
        if cut is None:
            if "relay.write-id" in props and not log.commits and log.uncut is None:
                log.uncut = int(snapshot.snapshot_id)
            continue
        log.commits.append(Commit(int(snapshot.snapshot_id), int(snapshot.timestamp_ms), json.loads(cut)))
    return log


def _delta_tables(target: MirrorTarget) -> list[str]:
    from pyarrow import fs as pafs

    storage = target.storage
    fs = storage.filesystem()
    root = storage.fs_path(storage.uri())
    if fs.get_file_info(root).type == pafs.FileType.NotFound:
        return []
    names = []
    for info in fs.get_file_info(pafs.FileSelector(root, recursive=False)):
        name = info.base_name
        if info.type != pafs.FileType.Directory or name.startswith("_") or name.endswith(".history"):
            continue
        if fs.get_file_info(f"{info.path}/_delta_log").type == pafs.FileType.Directory:
            names.append(name)
    return sorted(names)


def table_logs(target: MirrorTarget) -> dict[str, TableLog]:
    """Every latest-state table of the mirror (histories and tombstones aside) with its log."""
    if target.format == "delta":
        return {t: _delta_log(target, t) for t in _delta_tables(target)}
    from relay.spark import iceberg

    catalog = iceberg.load(target.storage, target.catalog)
    logs = {}
    for namespace in catalog.list_namespaces():
        if namespace[0] == "relay_tombstones":
            continue
        for ident in catalog.list_tables(namespace):
            name = f"{ident[0]}.{ident[1]}"
            if ident[1].endswith("__history"):
                continue
            logs[name] = _iceberg_log(catalog.load_table(ident), name)
    return logs


# --- finding a cut ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Batch:
    app: str
    batch: int
    frontier: Frontier | None
    tables: tuple[str, ...]
    time_ms: int


def _batches(logs: dict[str, TableLog], source: str) -> list[_Batch]:
    """The complete micro-batches the tables' commits name, oldest first (by the source's frontier)."""
    found: dict[tuple[str, int], _Batch] = {}
    for log in logs.values():
        for c in log.commits:
            key = (c.app, c.batch)
            seen = found.get(key)
            stamp = max(c.time_ms, seen.time_ms if seen else 0)
            found[key] = _Batch(c.app, c.batch, c.frontier(source), tuple(c.cut.get("tables", ())), stamp)

    def complete(b: _Batch) -> bool:
        return all(t in logs and logs[t].batches.get(b.app, -1) >= b.batch for t in b.tables)

    done = [b for b in found.values() if complete(b)]
    return sorted(done, key=lambda b: (-1 if b.frontier is None else b.frontier.sequence, b.time_ms, b.batch))


def _sources(logs: dict[str, TableLog]) -> tuple[set[str], set[str]]:
    bounded: set[str] = set()
    unbounded: set[str] = set()
    for log in logs.values():
        if log.commits:
            newest = log.commits[0].cut
            bounded |= set(newest.get("sources", {}))
            unbounded |= set(newest.get("unbounded", ()))
    return bounded, unbounded - bounded


def _choose_source(where: str, logs: dict[str, TableLog], source: str | None) -> str:
    bounded, unbounded = _sources(logs)
    if not bounded and not unbounded:
        raise CutError(
            f"no commit of the mirror at {where} records a source transaction: run relay spark mirror with "
            "--transaction-topic (the relays' kafka.transaction_topic), and let it apply a micro-batch"
        )
    if source is not None:
        if source in unbounded:
            raise CutError(
                f"source {source!r} publishes no transaction boundaries (its relay runs without "
                "kafka.transaction_topic): its changes are applied as they come, so no cut of it exists"
            )
        if source not in bounded:
            raise CutError(f"--source {source!r}: the mirror at {where} knows {', '.join(sorted(bounded))}")
        return source
    every = bounded | unbounded
    if len(every) > 1:
        raise CutError(
            f"the mirror at {where} holds the changes of {len(every)} sources ({', '.join(sorted(every))}): "
            "a cut is per source — give --source NAME (transactions of separate binlogs have no common "
            "order, so a cut across sources would be made up)"
        )
    (only,) = every
    return _choose_source(where, logs, only)


def _at_filter(at: str) -> Any:
    """A predicate on a frontier from ``--at``: a time (ISO 8601), a position ``file:offset``, or a
    transaction id (GTID)."""
    text = at.strip()
    if re.match(r"^\d{4}-\d{2}-\d{2}", text):
        try:
            stamp = dt.datetime.fromisoformat(text.replace(" ", "T"))
        except ValueError as exc:
            raise CutError(f"--at {at!r}: not an ISO time ({exc})") from None
        if stamp.tzinfo is None:
            stamp = stamp.replace(tzinfo=dt.UTC)
        limit = int(stamp.timestamp() * 1000)
        return lambda f: f.ts_ms <= limit
    match = _POSITION.match(text)
    if match and not _GTID_UUID.match(text):
        want = (int(match["n"]), int(match["offset"]))

        def before(f: Frontier) -> bool:
            got = _POSITION.match(f.position)
            return got is not None and (int(got["n"]), int(got["offset"])) <= want

        return before
    return lambda f: f.id == text


def _version(log: TableLog, chosen: _Batch, source: str) -> int | None:
    """The table's version in the cut: its newest commit of the chosen micro-batch or an earlier one."""
    limit = -1 if chosen.frontier is None else chosen.frontier.sequence
    for c in log.commits:
        if c.app == chosen.app:
            if c.batch <= chosen.batch:
                return c.version
        elif c.sequence(source) <= limit and c.time_ms <= chosen.time_ms:
            return c.version
    return None


def _location(target: MirrorTarget, table: str) -> str:
    return target.storage.delta_uri(table) if target.format == "delta" else iceberg_identifier(table)


def find_cut(
    location: str | Path | MirrorTarget,
    *,
    format: str = "delta",
    source: str | None = None,
    at: str | None = None,
    storage_options: dict[str, str] | None = None,
    catalog: dict[str, str] | None = None,
) -> Cut:
    """The latest consistent cut of the mirror at ``location`` (``at``: the newest at or before a time,
    a position ``file:offset`` or a transaction id); ``CutError`` says why there is none."""
    target = target_of(location, format, storage_options, catalog)
    where = target.storage.root
    logs = table_logs(target)
    if not logs:
        raise CutError(f"no mirror table at {where} ({target.format})")
    for log in logs.values():
        if log.uncut is not None:
            raise CutError(
                f"{log.table}: its newest commit (version {log.uncut}) was written without transaction "
                "boundaries (relay spark mirror without --transaction-topic): no cut holds it; run the "
                "mirror with --transaction-topic"
            )
    chosen_source = _choose_source(where, logs, source)
    candidates = [b for b in _batches(logs, chosen_source) if b.frontier is not None]
    if at is not None:
        keep = _at_filter(at)
        candidates = [b for b in candidates if b.frontier is not None and keep(b.frontier)]
    if not candidates:
        when = f" at or before {at!r}" if at is not None else ""
        raise CutError(f"no complete cut of source {chosen_source!r}{when} in the mirror at {where}")
    chosen = candidates[-1]
    assert chosen.frontier is not None
    tables = {}
    for name, log in sorted(logs.items()):
        version = _version(log, chosen, chosen_source)
        if version is not None:
            tables[name] = TableAt(name, version, _location(target, name))
    return Cut(target, chosen_source, chosen.frontier, chosen.app, chosen.batch, tables)


# --- reading a cut ------------------------------------------------------------------------------------


def read_cut(cut: Cut) -> dict[str, Any]:
    """Every table of ``cut`` as a pyarrow Table, read at its version (deltalake / pyiceberg; no Spark)."""
    target = cut.target
    return {
        name: read_table(target, name, format=target.format, version=at.version)
        for name, at in cut.tables.items()
    }


def cut_frames(spark: Any, cut: Cut) -> dict[str, Any]:
    """Every table of ``cut`` as a Spark DataFrame: Delta through Spark's Delta connector
    (``versionAsOf``); Iceberg read by pyiceberg into Spark (no Iceberg runtime exists for Spark 4.2)."""
    out = {}
    for name, at in cut.tables.items():
        if cut.target.format == "delta":
            from relay.spark.spark_delta import spark_path

            reader = spark.read.format("delta").option("versionAsOf", at.version)
            out[name] = reader.load(spark_path(at.location))
        else:
            out[name] = spark.createDataFrame(
                read_table(cut.target, name, format="iceberg", version=at.version)
            )
    return out


def data_files(cut: Cut) -> dict[str, list[str]]:
    """The data files of each table's version: what a reader without the format (DuckDB's
    ``read_parquet``) reads to see exactly the cut."""
    out: dict[str, list[str]] = {}
    for name, at in cut.tables.items():
        out[name] = list(_files(cut.target, name, at.version))
    return out


def _files(target: MirrorTarget, table: str, version: int) -> Iterator[str]:
    if target.format == "delta":
        from deltalake import DeltaTable

        delta = DeltaTable(
            target.storage.delta_uri(table), version=version, storage_options=target.storage.delta_options()
        )
        yield from delta.file_uris()
        return
    from relay.spark import iceberg

    catalog = iceberg.load(target.storage, target.catalog)
    table_ = catalog.load_table(iceberg_identifier(table))
    for task in table_.scan(snapshot_id=version).plan_files():
        yield str(task.file.file_path)


assert TOMBSTONES.startswith("_")  # _delta_tables skips the tombstone tables by their leading "_"
