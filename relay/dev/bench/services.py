"""The bench's services: MariaDB and the embedded broker it measures on, its topics, and the machine's line.

``bench_services(options, work, progress, peers)`` starts MariaDB and Apache Kafka (one KRaft broker;
``--broker tansu``: the Tansu broker) in ``work`` — or uses the addresses given — creates the bench's topics
and stops what it started on the way out (``EmbeddedBroker.renew`` empties the broker before each measured
run); ``machine_info`` is the run's machine and versions for the report. Runs on the bench's main thread.
"""

from __future__ import annotations

import contextlib
import os
import platform
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from relay import _native
from relay.dev.bench import workloads as wl
from relay.dev.bench.common import BenchOptions, Progress, create_topics, empty_topics
from relay.dev.bench.peer_session import PeerSession
from relay.dev.bench.sidebyside import CEILING_SUFFIX
from relay.errors import RelayError


class EmbeddedBroker:
    """The bench's own broker, emptied before each measured run with the bench's topics there.

    Apache Kafka keeps its records on disk and does not slow as it holds more: it runs for the whole bench,
    and ``renew`` deletes every record of the bench's topics (DeleteRecords), so the disk holds one run's
    records at a time. Tansu keeps them in memory and slows as it holds more (one full run took W4's
    produce-only ceiling from 55k to 22k rows/s): ``renew`` restarts it empty."""

    def __init__(self, work: Path, topics: list[str], broker: str) -> None:
        self.work = work
        self.topics = topics
        self.broker = broker
        self.running: Any = None
        self.starts = 0

    def start(self) -> str:
        from relay.dev.services import StartOptions, start_kafka, start_tansu

        self.stop()
        self.starts += 1
        opts = StartOptions(self.work / f"{self.broker}-{self.starts}")
        self.running = start_tansu(opts) if self.broker == "tansu" else start_kafka(opts)
        bootstrap = str(self.running.service.bootstrap_servers)
        create_topics(bootstrap, self.topics)
        return bootstrap

    def renew(self) -> str:
        if self.broker == "tansu" or self.running is None:
            return self.start()
        bootstrap = str(self.running.service.bootstrap_servers)
        empty_topics(bootstrap, self.topics)
        return bootstrap

    def stop(self) -> None:
        if self.running is not None:
            running, self.running = self.running, None
            with contextlib.suppress(RelayError):
                running.stop(remove_dir=True)


def bench_topics(options: BenchOptions, peers: PeerSession | None = None) -> list[str]:
    tables = [wl.WORKLOADS[n].table for n in options.workloads]
    topics = [f"bench.{t}" for t in tables] + [f"naive.{t}" for t in tables] + ["bench.ddl", "bench.warmup"]
    if peers is not None:
        snap = ["snap"] if options.snapshot_rows > 0 else []
        ceilings = [f"bench.{t}{CEILING_SUFFIX}" for t in [*tables, *snap]]
        topics += ["bench.snap", *ceilings, *peers.topics([*tables, *snap])]
    return topics


@contextlib.contextmanager
def bench_services(
    options: BenchOptions, work: Path, progress: Progress, peers: PeerSession | None
) -> Iterator[tuple[Any, str, EmbeddedBroker | None]]:
    started: list[Any] = []
    broker: EmbeddedBroker | None = None
    try:
        mysql = bench_mysql(options.mysql, work, progress, started)
        if options.kafka:
            kafka = options.kafka
            create_topics(kafka, bench_topics(options, peers))
        else:
            progress(
                "starting the Tansu broker …" if options.broker == "tansu" else "starting Apache Kafka …"
            )
            broker = EmbeddedBroker(work, bench_topics(options, peers), options.broker)
            kafka = broker.start()
        yield mysql, kafka, broker
    finally:
        if broker is not None:
            broker.stop()
        for running in reversed(started):
            with contextlib.suppress(RelayError):
                running.stop(remove_dir=True)


def bench_mysql(address: str | None, work: Path, progress: Progress, started: list[Any]) -> Any:
    """The source a bench measures: ``address`` (``--mysql``), or a MariaDB started in ``work`` (appended to
    ``started``, which the caller stops)."""
    from relay.dev.services import MySQLService, StartOptions, start_mysql

    if address:
        return MySQLService.parse(address).with_server_info()
    progress("starting MariaDB …")
    started.append(start_mysql(StartOptions(work / "mysql")))
    return started[-1].service


def machine_info(mysql_version: str, kafka: str) -> dict[str, Any]:
    cpu = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpus": os.cpu_count(),
        "cpu": cpu,
        "python": platform.python_version(),
        "build": _native.describe(),  # the workers inherit the environment: the same build runs there
        "mysql": mysql_version,
        "kafka": kafka,
        "command": " ".join(["relay", *sys.argv[1:]])
        if sys.argv[0].endswith("relay")
        else " ".join(sys.argv),
    }
