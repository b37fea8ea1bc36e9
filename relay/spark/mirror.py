"""The mirror job: relay topics → latest-state Delta Lake or Iceberg tables (and, with ``history``, SCD
type 2 histories), as a Spark structured streaming query.

Owns the wiring of source → ``changes`` → ``apply_changes`` in ``foreachBatch`` (with
``transaction_topic``: source → ``relay.spark.holdback`` → ``changes`` → ``apply_changes``, whole source
transactions only, each commit recording them for consistent cuts), the session set-up for
``relay spark mirror`` and the query's lifecycle. Runs on the driver: the caller's thread starts the
query; Spark's stream-execution thread calls ``apply_batch`` once per micro-batch. Exactly once: the
source offsets of every micro-batch are in the checkpoint, and each table's commit records the
micro-batch (application id: the checkpoint's location; Delta ``txn``, Iceberg snapshot properties), so a
batch re-run after a crash is skipped where it was committed and applied where it was not.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from relay.errors import OptionError
from relay.spark.tables import MirrorTarget, target_of

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MirrorConfig:
    """What to mirror, from where, to where."""

    bootstrap_servers: str
    topics: tuple[str, ...]
    out: str | Path  # the mirror's root: a local path or a URI (s3://, gs://, abfss://, hdfs://)
    checkpoint: str | Path
    source: str = "kafka"  # Spark's kafka source; "relay-kafka": the relay's Python source (no connector jar)
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int | None = None
    available_now: bool = False
    trigger_seconds: float = 5.0
    codec: str = "auto"
    tables: tuple[str, ...] | None = None
    kafka_options: dict[str, str] = field(default_factory=dict)
    history: bool = False  # also keep each table's SCD type 2 history (``apply_history``)
    format: str = "delta"  # or "iceberg"
    storage_options: dict[str, str] = field(default_factory=dict)
    catalog: dict[str, str] = field(default_factory=dict)  # Iceberg catalog settings
    retention_hours: float = 168.0  # versions younger than this stay readable (time travel)
    maintain_every: int = 100  # commits of a table between two maintenance runs (0: never)
    writer: str = "driver"  # or "spark": Spark's Delta connector MERGEs each batch (MirrorTarget.writer)
    # The relays' kafka.transaction_topic: micro-batches apply whole source transactions only and every
    # commit records them (consistent cuts: relay.spark.holdback, relay.spark.cut); None: table by table
    transaction_topic: str | None = None

    def target(self) -> MirrorTarget:
        plain = target_of(self.out, self.format, self.storage_options, self.catalog)
        return replace(
            plain,
            retention_hours=self.retention_hours,
            maintain_every=self.maintain_every,
            writer=self.writer,
        )

    def connectors(self) -> tuple[str, ...]:
        """The connector sets (``relay.spark.session``) the query needs on its session."""
        sets = ["spark-kafka"] if self.source == "kafka" else []
        if self.writer == "spark":
            sets.append("spark-delta")
            if str(self.out).startswith(("s3://", "s3a://")):
                sets.append("spark-s3")
        return tuple(sets)

    @property
    def app_id(self) -> str:
        """The query's application id in the tables' commits: stable for one checkpoint."""
        text = str(self.checkpoint)
        return "relay-mirror-" + hashlib.sha256(text.encode()).hexdigest()[:16]


def local_session(
    master: str | None = "local[2]",
    app: str = "relay-mirror",
    driver_memory: str | None = None,
    connectors: tuple[str, ...] | None = None,
    storage_options: dict[str, str] | None = None,
) -> Any:
    """A SparkSession for the mirror (or tests): ``relay.spark.session.session`` with the ``connectors``
    (default: every set of ``relay.spark.session.CONNECTORS``) from the local jars, workers running this
    interpreter, few shuffle partitions. ``driver_memory`` (e.g. "4g"): the driver's heap, which in local
    mode also holds the cached micro-batch (Spark's default is 1g); only effective when this call starts
    the JVM. ``storage_options``: the mirror's object-store settings, for s3a (``spark-s3``)."""
    from relay.spark.session import CONNECTORS, Connectors, session

    sets = CONNECTORS if connectors is None else connectors
    chosen = Connectors(sets, storage_options or {})
    return session(master, app, connectors=chosen, driver_memory=driver_memory)


def source_stream(spark: Any, config: MirrorConfig) -> Any:
    """The streaming DataFrame of the topics (Spark's kafka schema)."""
    from relay.spark.source import NAME, register

    if config.source not in (NAME, "kafka"):
        raise OptionError(f"source: expected {NAME} or kafka, got {config.source!r}")
    if config.source == NAME:
        register(spark)
    topics = list(config.topics)
    if config.transaction_topic and config.transaction_topic not in topics:
        topics.append(config.transaction_topic)
    reader = (
        spark.readStream.format(config.source)
        .option("kafka.bootstrap.servers", config.bootstrap_servers)
        .option("subscribe", ",".join(topics))
        .option("startingOffsets", config.starting_offsets)
    )
    if config.transaction_topic:
        reader = reader.option("includeHeaders", "true")  # relay.txn.*, relay.source.id, relay.sequence
    if config.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(config.max_offsets_per_trigger))
    for key, value in config.kafka_options.items():
        reader = reader.option(f"kafka.{key}", value)
    return reader.load()


def start(spark: Any, config: MirrorConfig, on_table: Callable[[str], None] | None = None) -> Any:
    """Start the mirror query; returns the ``StreamingQuery``. ``on_table`` is called (on Spark's stream
    thread) with each logical table the query applies a micro-batch to, the first time it does."""
    from relay.spark.apply import BatchId, apply_changes
    from relay.spark.decode import changes

    out, codec, tables = config.target(), config.codec, list(config.tables) if config.tables else None
    history, app_id = config.history, config.app_id
    seen: set[str] = set()
    hold = None
    if config.transaction_topic:
        from relay.spark.holdback import HoldBack

        kafka = {"kafka.bootstrap.servers": config.bootstrap_servers}
        kafka.update({f"kafka.{k}": v for k, v in config.kafka_options.items()})
        hold = HoldBack(out.storage, app_id, config.transaction_topic, config.topics, kafka)

    def apply_batch(batch: Any, batch_id: int) -> None:
        done = BatchId(app_id, batch_id)
        if hold is None:
            applied = apply_changes(changes(batch, codec), out, tables, history=history, batch=done)
        else:
            step = hold.split(batch, batch_id)
            rows = changes(step.released, codec, headers=True)
            applied = apply_changes(rows, out, tables, history=history, batch=done, cut=step.cut())
            hold.finish(step)
        log.info("micro-batch %d applied to %s", batch_id, applied or "no table")
        for table in applied:
            if on_table is not None and table not in seen:
                on_table(table)
            seen.add(table)

    writer = (
        source_stream(spark, config)
        .writeStream.foreachBatch(apply_batch)
        .option("checkpointLocation", str(config.checkpoint))
        .queryName("relay-mirror")
    )
    if config.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{config.trigger_seconds} seconds")
    return writer.start()
