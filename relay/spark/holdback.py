"""The mirror's hold-back in Spark: a micro-batch applies whole source transactions only; the rest waits.

Owns, per micro-batch of ``relay spark mirror --transaction-topic`` (on the driver, Spark's stream thread):

1. the records that waited from earlier batches (``HeldStore``: a parquet file of raw Kafka rows and the
   ``Ledger``, per micro-batch, under ``ROOT/_relay_txn/<app id>/``) are put back beside the batch's own;
2. ONE Spark job counts what the batch holds (``facts``): the END records of the transaction topic, each
   transaction's distinct change identities per topic (from the ``relay.source.id``, ``relay.sequence``,
   ``relay.part`` and ``relay.txn.id`` headers: no value is parsed), the partitions each DDL barrier was read
   from (their topics' partition counts asked of the broker, only when there are some), and the sources
   whose live row changes carry no transaction id;
3. ``relay.spark.txn.release`` decides (one bound per source); the records below their source's bound go on
   to ``apply_changes``, the others (and the ENDs of the transactions that wait) are collected to the driver
   and written for the next batch once every table committed this one (``HeldStore.save``).

Exactly once: a micro-batch reads the held records of the newest batch before it and writes its own under
its number, so a micro-batch that Spark runs again (after a crash) reads the same input, decides the same and
writes the same; files of batches older than the one read are removed. The held records are raw Kafka rows
(the source's schema, headers included): they go through ``changes`` like any other when their time comes.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F  # noqa: N812 (pyspark's convention)

from relay.spark.schema import KAFKA_HEADERS_SCHEMA, arrow_schema
from relay.spark.storage import Storage
from relay.spark.txn import Barrier, Boundary, Ledger, Release, Seen, release

log = logging.getLogger(__name__)

HELD_DIR = "_relay_txn"
_ROW_TYPES = ("INSERT", "UPDATE", "DELETE")
_NO_BOUND = 2**63 - 1


def header(name: str) -> Column:
    """The text of a record's header ``name`` (null when it has none)."""
    found = F.get(F.filter(F.col("headers"), lambda h: h["key"] == name), 0)
    return found["value"].cast("string")


def _kinds(txn_topic: str) -> Column:
    topic = F.col("topic")
    txn = header("relay.txn.id")
    live = header("relay.type").isin(*_ROW_TYPES) & header("relay.snapshot").isNull()
    end = (topic == txn_topic) & (header("relay.txn.status") == "END")
    kind = header("relay.type")
    ddl = kind.isNotNull() & ~kind.isin(*_ROW_TYPES) & header("relay.snapshot").isNull()
    data = topic != txn_topic
    return (
        F.when(end, F.lit("end"))
        .when(data & txn.isNotNull(), F.lit("txn"))
        .when(data & txn.isNull() & live, F.lit("bare"))
        .when(data & txn.isNull() & ddl, F.lit("ddl"))
    )


@dataclass(frozen=True)
class Facts:
    ends: list[Boundary]
    seen: list[Seen]
    bare: list[str]  # sources of live row changes without a transaction id
    barriers: list[Barrier]


def facts(rows: DataFrame, txn_topic: str) -> Facts:
    """What the batch (held records included) holds, in one Spark job over ``rows`` (cache it first)."""
    seq = header("relay.sequence").cast("long")
    ident = F.struct(seq.alias("s"), F.coalesce(header("relay.part").cast("long"), F.lit(0)).alias("p"))
    found = (
        rows.where(F.col("value").isNotNull())
        .select(
            _kinds(txn_topic).alias("k"),
            header("relay.source.id").alias("src"),
            header("relay.txn.id").alias("txn"),
            F.col("topic"),
            F.col("partition"),
            ident.alias("ident"),
            F.col("value").cast("string").alias("v"),
        )
        .where(F.col("k").isNotNull())
        .groupBy(
            "k",
            "src",
            "txn",
            F.when(F.col("k").isin("txn", "ddl"), F.col("topic")).alias("t"),
            F.when(F.col("k") == "ddl", F.col("ident.s")).alias("ddl"),
        )
        .agg(
            F.count_distinct(F.when(F.col("k") == "txn", F.col("ident"))).alias("n"),
            F.count_distinct(F.when(F.col("k") == "ddl", F.col("partition"))).alias("copies"),
            F.min("ident.s").alias("low"),
            F.max("ident.s").alias("high"),
            F.max(F.when(F.col("k") == "end", F.col("v"))).alias("end"),
        )
        .collect()
    )
    ends, seen, bare, barriers = [], [], [], []
    for r in found:
        if r["k"] == "end" and r["end"] is not None:
            ends.append(boundary(json.loads(r["end"])))
        elif r["k"] == "txn" and r["src"] is not None and r["low"] is not None:
            seen.append(Seen(r["src"], r["txn"], r["t"], int(r["n"]), int(r["low"]), int(r["high"])))
        elif r["k"] == "bare" and r["src"] is not None:
            bare.append(str(r["src"]))
        elif r["k"] == "ddl" and r["src"] is not None and r["ddl"] is not None:
            barriers.append(Barrier(r["src"], int(r["ddl"]), r["t"], int(r["copies"])))
    return Facts(ends, seen, bare, barriers)


def boundary(value: dict[str, Any]) -> Boundary:
    """An END record's value (``relay.kafka.txn_meta.boundary_value``) as a ``Boundary``."""
    topics = value.get("topics")
    return Boundary(
        str(value.get("source_id") or ""),
        str(value["id"]),
        str(value.get("position") or ""),
        int(value.get("ts_ms") or 0),
        int(value["first_sequence"]),
        int(value["last_sequence"]),
        int(value.get("event_count") or 0),
        None if topics is None else {str(t["topic"]): int(t["event_count"]) for t in topics},
    )


def _waits(verdict: Release, txn_topic: str) -> Column:
    """Whether a record waits: a data record at or above its source's bound; an END of a transaction
    not applied yet. BEGIN records are never kept (the hold-back does not need them)."""
    source = header("relay.source.id")
    seq = header("relay.sequence").cast("long")
    bounds = verdict.bounds
    bound = F.lit(_NO_BOUND)
    if bounds:
        pairs = [F.lit(x) for s, b in sorted(bounds.items()) for x in (s, b)]
        bound = F.coalesce(F.create_map(*pairs)[source], F.lit(_NO_BOUND))
    done = verdict.ledger.frontiers
    applied = F.lit(-1)
    if done:
        pairs = [F.lit(x) for s, f in sorted(done.items()) for x in (s, f.sequence)]
        applied = F.coalesce(F.create_map(*pairs)[source], F.lit(-1))
    last = F.get_json_object(F.col("value").cast("string"), "$.last_sequence").cast("long")
    is_end = header("relay.txn.status") == "END"
    data = (F.col("topic") != txn_topic) & F.col("value").isNotNull() & seq.isNotNull() & (seq >= bound)
    return F.coalesce(data | ((F.col("topic") == txn_topic) & is_end & (last > applied)), F.lit(False))


@dataclass
class Step:
    """One micro-batch's hold-back: what goes on, what waits, what is recorded."""

    batch_id: int
    verdict: Release
    released: DataFrame  # raw Kafka rows of the data topics to apply now
    held: DataFrame  # raw Kafka rows kept for the next batch
    cached: DataFrame

    def cut(self) -> dict[str, Any]:
        """The frontier as each table's commit records it (``MirrorState.cut``; the caller adds the app id,
        the micro-batch and the tables)."""
        ledger = self.verdict.ledger
        return {
            "sources": {s: f.to_json() for s, f in sorted(ledger.frontiers.items())},
            "unbounded": sorted(ledger.unbounded),
        }


class HeldStore:
    """The records that wait, per micro-batch, under ``ROOT/_relay_txn/<app id>/``."""

    def __init__(self, storage: Storage, app_id: str) -> None:
        self.storage = storage
        self.directory = storage.uri(HELD_DIR, app_id)

    def _name(self, batch_id: int, suffix: str) -> str:
        return f"{self.directory}/{batch_id:020d}.{suffix}"

    def _batches(self) -> list[int]:
        from pyarrow import fs as pafs

        fs = self.storage.filesystem()
        where = self.storage.fs_path(self.directory)
        if fs.get_file_info(where).type == pafs.FileType.NotFound:
            return []
        infos = fs.get_file_info(pafs.FileSelector(where, recursive=False))
        names = [i.base_name for i in infos if i.base_name.endswith(".json")]
        return sorted(int(n.split(".", 1)[0]) for n in names if n.split(".", 1)[0].isdigit())

    def load(self, batch_id: int) -> tuple[int | None, Ledger, pa.Table | None]:
        """(the batch read, its ledger, its held rows) of the newest batch before ``batch_id``."""
        earlier = [b for b in self._batches() if b < batch_id]
        if not earlier:
            return None, Ledger(), None
        last = earlier[-1]
        fs = self.storage.filesystem()
        with fs.open_input_stream(self.storage.fs_path(self._name(last, "json"))) as src:
            meta = json.loads(src.read())
        ledger = Ledger.from_json(json.dumps(meta["ledger"]))
        held = None
        if meta.get("held"):
            held = pq.read_table(self.storage.fs_path(self._name(last, "parquet")), filesystem=fs)
        return last, ledger, held

    def save(self, batch_id: int, ledger: Ledger, held: pa.Table, read: int | None) -> None:
        """Write ``batch_id``'s held rows, then its ledger (the file that makes it count); remove the files
        of batches older than ``read`` (the one this batch started from, kept for a re-run of this one)."""
        fs = self.storage.filesystem()
        fs.create_dir(self.storage.fs_path(self.directory), recursive=True)
        if held.num_rows:
            with fs.open_output_stream(self.storage.fs_path(self._name(batch_id, "parquet"))) as out:
                pq.write_table(held, out, compression="zstd")
        meta = {"ledger": json.loads(ledger.to_json()), "held": held.num_rows}
        with fs.open_output_stream(self.storage.fs_path(self._name(batch_id, "json"))) as out:
            out.write(json.dumps(meta, separators=(",", ":")).encode())
        for old in self._batches():
            if read is not None and old < read:
                for suffix in ("json", "parquet"):
                    path = self.storage.fs_path(self._name(old, suffix))
                    if fs.get_file_info(path).size is not None:
                        fs.delete_file(path)


class HoldBack:
    """The hold-back of one mirror query (see the module docstring)."""

    def __init__(
        self,
        storage: Storage,
        app_id: str,
        txn_topic: str,
        topics: tuple[str, ...],
        kafka: dict[str, str] | None = None,
    ) -> None:
        self.store = HeldStore(storage, app_id)
        self.txn_topic = txn_topic
        self.topics = tuple(t for t in topics if t != txn_topic)
        self.kafka = dict(kafka or {})  # kafka.* options: where to ask for partition counts
        self._read: int | None = None

    def _partitions(self, barriers: list[Barrier]) -> dict[str, int]:
        """The partition count of the DDLs' topics, asked of the broker (only when a batch holds DDLs)."""
        if not barriers or not self.kafka:
            return {}
        from relay.spark.kafka import Broker

        broker = Broker(self.kafka)
        try:
            wanted = ",".join(sorted({b.topic for b in barriers}))
            counts: dict[str, int] = {}
            for topic, _ in broker.partitions({"subscribe": wanted}):
                counts[topic] = counts.get(topic, 0) + 1
            return counts
        finally:
            broker.close()

    def split(self, batch: DataFrame, batch_id: int) -> Step:
        """The micro-batch (Spark's kafka rows, headers included) with the records that waited: what
        goes on now and what waits (``Step``). Call ``finish`` after the tables are committed."""
        read, ledger, held = self.store.load(batch_id)
        self._read = read
        rows = batch.select(*KAFKA_HEADERS_SCHEMA.fieldNames())
        if held is not None and held.num_rows:
            earlier = batch.sparkSession.createDataFrame(held, schema=KAFKA_HEADERS_SCHEMA)
            rows = rows.unionByName(earlier)
        cached = rows.persist()
        found = facts(cached, self.txn_topic)
        counts = self._partitions(found.barriers)
        verdict = release(ledger, found.ends, found.seen, self.topics, found.bare, found.barriers, counts)
        waits = _waits(verdict, self.txn_topic)
        released = cached.where(~waits & (F.col("topic") != self.txn_topic))
        kept = cached.where(waits)
        log.info(
            "micro-batch %d: transactions applied whole %s, waiting %s (bounds %s)",
            batch_id,
            verdict.applied,
            verdict.waiting,
            verdict.bounds,
        )
        return Step(batch_id, verdict, released, kept, cached)

    def finish(self, step: Step) -> None:
        """Record what waits, for the next micro-batch (after every table committed this one)."""
        # Something waits only below a bound (an END that waits has one: its transaction is incomplete).
        held = step.held.toArrow() if step.verdict.bounds else arrow_schema(True).empty_table()
        self.store.save(step.batch_id, step.verdict.ledger, held, self._read)
        step.cached.unpersist()
