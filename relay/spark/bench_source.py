"""Benchmark: Spark's ``kafka`` source against the relay's Python source ``relay-kafka``, into ``changes``.

``relay spark bench --bootstrap-servers HOST:PORT`` (or ``python -m relay.spark.bench … --bootstrap-servers``)
publishes ``--source-records`` canal-json INSERTs of ``bench.orders``
(``relay.spark.bench_load.load_records``) to a new topic of 4 partitions on that broker, then reads the
same topic with each source, ``--runs`` times after a warm-up, as a batch read decoded by
``changes(df, codec="canal-json")`` into Spark's ``noop`` sink: the figure is the read plus the decode, the
work a mirror's micro-batch starts with. Medians, rows/s, the ratio kafka / relay-kafka, all from one run.
A measurement tool for people, not a test.
"""

from __future__ import annotations

import statistics
import time
import uuid
from typing import Any

PARTITIONS = 4


def publish(records: Any, bootstrap: str) -> str:
    """A new topic holding ``records`` (a DataFrame in Spark's kafka schema, built in Spark), written by
    Spark's kafka sink; its name."""
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    topic = f"bench-source-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values():
        future.result(60)
    (
        records.selectExpr("key", "value", f"cast(pmod(offset, {PARTITIONS}) as int) as partition")
        .write.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("kafka.linger.ms", "20")
        .option("topic", topic)
        .save()
    )
    return topic


def _read(spark: Any, source: str, bootstrap: str, topic: str) -> None:
    from relay.spark.decode import changes

    df = (
        spark.read.format(source)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
    )
    changes(df, codec="canal-json").write.format("noop").mode("overwrite").save()


def compare(spark: Any, bootstrap: str, records: Any, count: int, runs: int) -> dict[str, Any]:
    """Median seconds and rows/s of each source over the same topic of the ``count`` ``records``."""
    from relay.spark import register

    register(spark)
    topic = publish(records, bootstrap)
    figures: dict[str, Any] = {"source_records": count, "source_topic_partitions": PARTITIONS}
    for source in ("kafka", "relay-kafka"):
        _read(spark, source, bootstrap, topic)  # warm-up: consumers, code generation, Python workers
        took = []
        for _ in range(runs):
            begin = time.perf_counter()
            _read(spark, source, bootstrap, topic)
            took.append(time.perf_counter() - begin)
        seconds = statistics.median(took)
        name = source.replace("-", "_")
        figures[f"source_{name}_seconds"] = round(seconds, 3)
        figures[f"source_{name}_rows_per_second"] = round(count / seconds)
    figures["source_kafka_vs_relay_kafka"] = round(
        figures["source_kafka_rows_per_second"] / figures["source_relay_kafka_rows_per_second"], 2
    )
    return figures


def show(figures: dict[str, Any], runs: int) -> None:
    print(
        f"sources: {figures['source_records']:,} canal-json records, {PARTITIONS} partitions, read + "
        f"changes() into noop, median of {runs} runs:"
    )
    for name in ("kafka", "relay_kafka"):
        seconds, rate = figures[f"source_{name}_seconds"], figures[f"source_{name}_rows_per_second"]
        print(f"  {name.replace('_', '-'):<12} {seconds:7.3f} s  {rate:>10,} rows/s")
    print(f"  kafka / relay-kafka: {figures['source_kafka_vs_relay_kafka']:.2f}x", flush=True)
