"""What consistent cuts cost: the mirror's throughput with and without holding back incomplete
transactions.

One backlog — the bank workload (``tests.spark.bank``: transfers across two sharded databases, orders with
their items, cancellations), published by a real relay with ``kafka.transaction_topic`` — is mirrored from
the start with ``available_now`` and the same micro-batch size, alternately without the transaction topic
(table by table) and with it (whole transactions only, the rest held back), each into a fresh table root and
checkpoint, in the test session's Spark. Both must end equal to ``SELECT`` (read with the format's own
library); the rows/s of each run and their medians are printed: a measurement, not a timed assertion
(``RELAY_CUT_COST_TXNS`` sets the backlog, ``RELAY_CUT_COST_RUNS`` the runs per mode). In the longer suite
(``scripts/test-long``).
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from relay.spark.mirror import MirrorConfig, start
from relay.spark.storage import Storage
from relay.spark.tables import MirrorTarget
from tests.integration.relay_harness import RelayThread, wait_for
from tests.spark import bank
from tests.spark.test_cut import COLUMNS, Reader, _as_set, bank_relay


@pytest.fixture
def cost_prefix(mysql_service: Any) -> Iterator[str]:
    prefix = f"bc{time.monotonic_ns() % 10**8}"
    with contextlib.closing(mysql_service.connect()) as conn:
        bank.create(conn, prefix)
    yield prefix
    with contextlib.closing(mysql_service.connect()) as conn:
        bank.drop(conn, prefix)


def _published(bootstrap: str, topics: tuple[str, ...]) -> int:
    """Records in ``topics`` (the high watermarks: nothing is deleted from them during the test)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "cut-cost", "enable.auto.commit": False})
    try:
        total = 0
        for topic in topics:
            meta = consumer.list_topics(topic, timeout=30).topics[topic]
            for p in meta.partitions:
                total += consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
        return total
    finally:
        consumer.close()


def _mirror_once(spark: Any, config: MirrorConfig) -> float:
    began = time.monotonic()
    query = start(spark, config)
    query.awaitTermination(1800)
    took = time.monotonic() - began
    assert not query.isActive, "the available-now query did not finish"
    assert query.exception() is None, query.exception()
    return took


@pytest.mark.long
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("fmt", ["delta"])
def test_what_holding_back_incomplete_transactions_costs(
    spark: Any, mysql_service: Any, kafka_service: Any, cost_prefix: str, tmp_path: Path, fmt: str
) -> None:
    prefix, bootstrap = cost_prefix, kafka_service.bootstrap_servers
    txns = int(os.environ.get("RELAY_CUT_COST_TXNS", "1500"))
    runs = int(os.environ.get("RELAY_CUT_COST_RUNS", "3"))
    conn = mysql_service.connect()
    cfg = bank_relay(tmp_path / "relay", mysql_service, bootstrap, prefix, conn)
    with RelayThread(cfg):
        bank.open_accounts(conn, prefix)
        with bank.Writers(mysql_service.connect, prefix, seed=11, budget=txns, pace=0.0) as writers:
            wait_for(lambda: sum(writers.committed.values()) >= txns, 1800, f"{txns} transactions committed")
        expected = bank.select(conn, prefix)
        txn_records = 2 * (len(writers.log) + 1)  # a BEGIN and an END each, the opening one too
        txn_topic = (f"{prefix}.txn",)
        wait_for(lambda: _published(bootstrap, txn_topic) >= txn_records, 600, "every transaction published")
    conn.close()
    records = _published(bootstrap, bank.topics(prefix))
    modes = ("table by table", "whole transactions")
    timings: dict[str, list[float]] = {mode: [] for mode in modes}
    for run in range(runs):
        for mode in modes:  # alternated: both modes see the machine's load alike
            target = MirrorTarget(Storage(str(tmp_path / f"out-{mode[:5]}-{run}")), fmt)
            config = MirrorConfig(
                bootstrap,
                bank.topics(prefix),
                target.storage.root,
                str(tmp_path / f"ck-{mode[:5]}-{run}"),
                format=fmt,
                available_now=True,
                max_offsets_per_trigger=2000,
                transaction_topic=f"{prefix}.txn" if mode == "whole transactions" else None,
            )
            timings[mode].append(_mirror_once(spark, config))
            got = Reader(target, prefix).latest()
            for name in bank.TABLES:
                rows = [{c: r[c] for c in COLUMNS[name]} for r in expected[name]]
                assert _as_set(got[name]) == _as_set(rows), f"{mode} run {run}: {name} differs from SELECT"
    medians = {mode: statistics.median(t) for mode, t in timings.items()}
    for mode, t in timings.items():
        print(
            f"cut cost, {fmt}: {mode}: {records:,} records, runs "
            + ", ".join(f"{s:.1f} s" for s in t)
            + f"; median {medians[mode]:.1f} s = {records / medians[mode]:,.0f} records/s"
        )
    ratio = medians["table by table"] / medians["whole transactions"]
    print(f"cut cost, {fmt}: whole transactions at {ratio:.2f}x the table-by-table rate ({txns} txns)")
