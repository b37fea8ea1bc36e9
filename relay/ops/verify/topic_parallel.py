"""A first read of a large topic spread over processes: one pure-Python reader per CPU, each over its share
of the partitions.

Reading a topic is parsing and hashing every record in Python (``relay.ops.verify.topic``): one core's
work, which a single process cannot spread. A first read (nothing read yet) of a topic with at least
``PARALLEL_RECORDS`` records in at least two partitions is split: each worker process (``spawn``: a fresh
interpreter, nothing of the caller's threads or connections) builds a ``TopicIndex`` over its partitions
and hands it back; the caller's index absorbs them. A key lives in one partition, so nothing is merged
that was not read apart. Later reads (small: what was published since) stay in the caller's process.
Runs on the caller's thread; the workers run ``_read``.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import time
from typing import Any

from confluent_kafka import KafkaException, TopicPartition

from relay.ops.verify.topic import TopicIndex

log = logging.getLogger(__name__)

PARALLEL_RECORDS = 50_000  # smaller topics are read in the caller's process (a worker takes ~0.5 s to start)
MAX_WORKERS = 8


def _size(index: TopicIndex, parts: list[tuple[str, int]]) -> int:
    """Records the partitions hold, from their watermarks (a lower bound on Tansu, enough to decide)."""
    consumer = index._consumer()
    try:
        total = 0
        for topic, partition in parts:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
            total += max(0, high - low)
        return total
    except KafkaException:
        return 0
    finally:
        consumer.close()


def _read(args: tuple[Any, ...]) -> TopicIndex:
    """A worker: the index of its partitions."""
    settings, topics, logical, source_id, shards, parse_values, parts = args
    index = TopicIndex(settings, topics, logical, source_id, shards, parse_values=parse_values)
    index.refresh(only=parts)
    return index


def first_read(index: TopicIndex) -> bool:
    """Read the whole topic into ``index`` with worker processes; False (nothing read) when it is too
    small, in one partition, or this machine has one CPU."""
    workers = min(os.cpu_count() or 1, MAX_WORKERS)
    parts = index.partitions()
    if workers < 2 or len(parts) < 2 or _size(index, parts) < PARALLEL_RECORDS:
        return False
    groups = [parts[i :: min(workers, len(parts))] for i in range(min(workers, len(parts)))]
    began = time.monotonic()
    shards = list(index._shards.values())
    jobs = [
        (index.settings, index.topics, index.logical, index.source_id, shards, index.parse_values, group)
        for group in groups
    ]
    with multiprocessing.get_context("spawn").Pool(len(groups)) as pool:
        for part in pool.map(_read, jobs):
            index.absorb(part)
    log.info(
        "topic %s: %d record(s) read by %d processes in %.2f s",
        ",".join(index.topics), index.records, len(groups), time.monotonic() - began,
    )  # fmt: skip
    return True
