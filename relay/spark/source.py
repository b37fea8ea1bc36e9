"""The ``relay-kafka`` data source: Spark's ``kafka`` source, in Python, for machines without its jar.

Owns the Spark side of reading the relay topics (Spark 4 Python Data Source API): the options and their
validation, batch plans (one Spark task per topic-partition range) and the streaming reader (offsets as
Spark's kafka source writes them to the checkpoint, ``maxOffsetsPerTrigger`` admission control,
``Trigger.AvailableNow``, data-loss checks). Planning runs in the driver's Python process — the stream
reader lives there for the whole query and keeps one metadata consumer (``relay.spark.kafka.Broker``);
``read`` runs in Spark tasks on executor Python workers, which receive the reader pickled (without that
consumer) and open their own. Hands Spark rows in the ``kafka`` schema (``relay.spark.schema``), which
``relay.spark.decode.changes`` turns into change rows.

Options (names as Spark's, case-insensitive): ``kafka.bootstrap.servers`` and any ``kafka.*`` (passed to
the consumer), exactly one of ``subscribe`` / ``subscribePattern`` / ``assign``, ``startingOffsets``
(earliest | latest | JSON; default latest for streams, earliest for batches), ``endingOffsets`` (batch:
latest | JSON), ``startingTimestamp``, ``startingOffsetsByTimestamp``,
``startingOffsetsByTimestampStrategy`` (error | latest), ``maxOffsetsPerTrigger``, ``failOnDataLoss``,
``includeHeaders``, ``kafkaConsumer.pollTimeoutMs`` (default 120000).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from relay.errors import OptionError, SparkSourceError
from relay.spark import offsets as off
from relay.spark.kafka import Broker, read_range
from relay.spark.offsets import StartSpec, TopicPartition
from relay.spark.schema import spark_schema

log = logging.getLogger(__name__)

NAME = "relay-kafka"
_SUBSCRIBE = ("assign", "subscribe", "subscribepattern")


class KafkaRange(InputPartition):
    """One Spark task: the records of one topic-partition in [start, until)."""

    def __init__(self, topic: str, partition: int, start: int, until: int) -> None:
        super().__init__((topic, partition, start, until))
        self.topic, self.partition, self.start, self.until = topic, partition, start, until


def normalize(options: Mapping[str, str]) -> dict[str, str]:
    """Options with lower-case names (Spark's are case-insensitive), checked for what must be there."""
    opts = {str(k).lower(): str(v) for k, v in options.items()}
    named = [k for k in _SUBSCRIBE if k in opts]
    if len(named) != 1:
        raise OptionError(
            f"exactly one of assign, subscribe, subscribePattern must be set (got {named or 'none'})"
        )
    if "kafka.bootstrap.servers" not in opts:
        raise OptionError("kafka.bootstrap.servers: required")
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").lower()
    if strategy not in ("error", "latest"):
        raise OptionError(f"startingOffsetsByTimestampStrategy: expected error or latest, got {strategy!r}")
    off.fail_on_data_loss(opts)
    off.positive_int(opts, "maxoffsetspertrigger", "maxOffsetsPerTrigger")
    off.positive_int(opts, "kafkaconsumer.polltimeoutms", "kafkaConsumer.pollTimeoutMs")
    return opts


def resolve_start(
    broker: Broker,
    spec: StartSpec,
    tps: Sequence[TopicPartition],
    lows: Mapping[TopicPartition, int],
    ends: Mapping[TopicPartition, int],
    strategy: str,
) -> off.Offsets:
    """A start spec as literal offsets for ``tps`` (partitions a JSON spec omits start at earliest)."""
    if spec.kind == "earliest":
        return {tp: lows[tp] for tp in tps}
    if spec.kind == "latest":
        return {tp: ends[tp] for tp in tps}
    given = dict(spec.offsets or {})
    unknown = sorted(set(given) - set(tps))
    if unknown:
        raise OptionError(
            f"starting offsets name partitions that are not subscribed or do not exist: {unknown}"
        )
    if spec.kind == "offsets":
        return {tp: off.bounded(given.get(tp, off.EARLIEST), lows[tp], ends[tp]) for tp in tps}
    out: off.Offsets = {}
    for tp in tps:
        stamp = spec.timestamp if spec.kind == "timestamp" else given.get(tp)
        if stamp is None:
            out[tp] = lows[tp]
            continue
        found = broker.offset_for_time(tp, stamp, ends[tp])
        if found is None and strategy == "error":
            raise SparkSourceError(
                f"no record at or after timestamp {stamp} in {tp[0]}-{tp[1]}; "
                "set startingOffsetsByTimestampStrategy=latest to start at the end instead"
            )
        out[tp] = ends[tp] if found is None else max(found, lows[tp])
    return out


class _Reading:
    """What the batch and stream readers share: options, the driver-side broker, the task read."""

    def __init__(self, options: dict[str, str]) -> None:
        self.options = options
        self.fail = off.fail_on_data_loss(options)
        self.timeout = (off.positive_int(options, "kafkaconsumer.polltimeoutms", "") or 120_000) / 1000
        self._broker: Broker | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Pickled to executors for read(): the driver's consumer stays behind.
        state = dict(self.__dict__)
        state["_broker"] = None
        return state

    @property
    def broker(self) -> Broker:
        if self._broker is None:
            self._broker = Broker(self.options)
        return self._broker

    def close(self) -> None:
        if self._broker is not None:
            self._broker.close()
            self._broker = None

    def topic_partitions(self) -> list[TopicPartition]:
        return self.broker.partitions({k: self.options[k] for k in _SUBSCRIBE if k in self.options})

    def start_of(self, default: str, tps: Sequence[TopicPartition], lows: Any, ends: Any) -> off.Offsets:
        spec = off.parse_start(self.options, default)
        strategy = self.options.get("startingoffsetsbytimestampstrategy", "error").lower()
        return resolve_start(self.broker, spec, tps, lows, ends, strategy)

    def read_task(self, partition: InputPartition) -> Iterator[Any]:
        if not isinstance(partition, KafkaRange):
            return  # Spark plans one empty task when there is nothing to read
        tp = (partition.topic, partition.partition)
        yield from read_range(
            self.options, tp, partition.start, partition.until, fail_on_loss=self.fail, timeout=self.timeout
        )


def ranges(start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int]) -> list[KafkaRange]:
    return [KafkaRange(t, p, start[(t, p)], u) for (t, p), u in sorted(end.items()) if u > start[(t, p)]]


class RelayKafkaBatchReader(_Reading, DataSourceReader):
    """A batch read: [startingOffsets, endingOffsets) of every subscribed partition."""

    def partitions(self) -> Sequence[InputPartition]:
        try:
            tps = self.topic_partitions()
            lows, ends = self.broker.ranges(tps)
            start = off.check_retained(self.start_of("earliest", tps, lows, ends), lows, ends, fail=self.fail)
            end_spec = off.parse_end(self.options)
            given = dict(end_spec.offsets or {})
            end = {tp: off.bounded(given.get(tp, off.LATEST), lows[tp], ends[tp]) for tp in tps}
            return ranges(start, {tp: max(u, start[tp]) for tp, u in end.items()})
        finally:
            self.close()

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return self.read_task(partition)


class RelayKafkaStreamReader(_Reading, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """A streaming read; offsets are ``{"topic": {"partition": next offset}}`` as Spark's kafka source."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.max_rows = off.positive_int(options, "maxoffsetspertrigger", "maxOffsetsPerTrigger")
        self._target: off.Offsets | None = None  # Trigger.AvailableNow: the ends when the query began

    def initialOffset(self) -> dict[str, Any]:  # noqa: N802 (Spark API name)
        tps = self.topic_partitions()
        lows, ends = self.broker.ranges(tps)
        return off.to_json(self.start_of("latest", tps, lows, ends))

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802 (Spark API name)
        return ReadMaxRows(self.max_rows) if self.max_rows else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 (Spark API name)
        _, self._target = self.broker.ranges(self.topic_partitions())
        log.info("availableNow: reading up to %s", off.to_json(self._target))

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:  # noqa: N802 (Spark API name)
        tps = self.topic_partitions()
        if self._target is not None:
            tps = [tp for tp in tps if tp in self._target]
        lows, ends = self.broker.ranges(tps)
        if self._target is not None:
            ends = {tp: min(e, self._target[tp]) for tp, e in ends.items()}
        begun = off.from_json(start)
        # A partition that appeared since the last batch is read from its earliest offset (as Spark).
        current = off.check_retained({tp: begun.get(tp, lows[tp]) for tp in tps}, lows, ends, fail=self.fail)
        if isinstance(limit, ReadMaxRows):
            ends = off.limit_offsets(current, ends, limit.max_rows)
        return off.to_json(ends)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        until = off.from_json(end)
        tps = sorted(until)
        lows, highs = self.broker.ranges(tps)
        begun = off.from_json(start)
        wanted = {tp: begun.get(tp, lows[tp]) for tp in tps}
        checked = off.check_retained(
            wanted, lows, {tp: max(until[tp], highs[tp]) for tp in tps}, fail=self.fail
        )
        return ranges(checked, {tp: max(u, checked[tp]) for tp, u in until.items()})

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return self.read_task(partition)

    def commit(self, end: dict[str, Any]) -> None:
        pass  # offsets live in Spark's checkpoint; nothing to commit to Kafka

    def stop(self) -> None:
        self.close()


class RelayKafkaDataSource(DataSource):
    """``spark.read/readStream.format("relay-kafka")``: the relay topics with Spark's kafka schema."""

    def __init__(self, options: Any) -> None:
        super().__init__(options)
        self.opts = normalize(options)

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        return spark_schema(self.opts.get("includeheaders", "false").lower() == "true")

    def reader(self, schema: StructType) -> DataSourceReader:
        if "endingoffsets" not in self.opts and "maxoffsetspertrigger" in self.opts:
            log.debug("maxOffsetsPerTrigger is ignored by batch reads (as Spark's kafka source)")
        return RelayKafkaBatchReader(self.opts)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802 (Spark API name)
        if "endingoffsets" in self.opts:
            raise OptionError("endingOffsets: not allowed in streaming queries (as Spark's kafka source)")
        return RelayKafkaStreamReader(self.opts)


def register(spark: Any) -> None:
    """Make ``format("relay-kafka")`` available in ``spark`` (idempotent)."""
    spark.dataSource.register(RelayKafkaDataSource)
