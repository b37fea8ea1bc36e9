"""What the benchmark's parts share: options, the run context, and the measurement child processes.

``run_worker`` runs one ``relay.dev.bench.worker`` measurement in a child process and returns its result;
``LiveWorker`` keeps a ``relay-live`` child running while the caller writes, reading its progress lines
on a reader thread. Everything else here runs on the bench's main thread.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from relay.common.kafka_log import quiet
from relay.dev.bench.stats import RSS_ALLOWANCE_MB
from relay.errors import BenchError

Progress = Callable[[str], None]
REPO_ROOT = Path(__file__).resolve().parents[2]
# W5: the rows of its one INSERT ... SELECT (its UPDATE changes 40 % of them again: 1.4x row changes).
DEFAULT_ROWS = {"W1": 20_000, "W2": 50_000, "W3": 50_000, "W4": 10_000, "W5": 1_000_000}
QUICK_ROWS = {"W1": 4_000, "W2": 10_000, "W3": 10_000, "W4": 2_000, "W5": 200_000}
W3_POPULATION = 10_000
LIVE_BASE_ID = 100_000_000  # ids of the latency phase, above every backlog id
STALL_CHUNK_ROWS = 2_000


@dataclass(frozen=True)
class BenchOptions:
    workloads: tuple[str, ...] = ("W1", "W2", "W3", "W4", "W5")
    repeat: int = 3
    rows: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_ROWS))
    baselines: bool = True
    latency_rate: float = 1000.0  # offered rows/s
    latency_seconds: float = 8.0
    stall_mb: int = 1024  # 0: no stall measurement
    snapshot_rows: int = 100_000  # the snapshot workload (relay.dev.bench.snapshot); 0: skipped
    stall_hold_seconds: float = 5.0
    mysql: str | None = None  # mysql://user:pass@host:port (a replication-capable account); None: embedded
    kafka: str | None = None  # host:port; None: embedded
    broker: str = "kafka"  # the embedded broker: kafka (Apache Kafka) or tansu
    settings: dict[str, Any] = field(
        default_factory=dict
    )  # relay config overrides: {"publish.batch_size": 512}
    profile: str | None = None  # a directory: each relay-drain run is sampled by py-spy (or cProfile) into it
    peers: tuple[str, ...] = ()  # relay.dev.bench.peers: run beside the relay on W1-W4 and S (--peers)

    @property
    def store_budget_mb(self) -> float:
        """The relay runs' store budget (buffer_size x memunit, as --set gives them; default 16 MiB)."""
        slots = int(self.settings.get("store.buffer_size", 16_384))
        memunit = int(self.settings.get("store.memunit", 1_024))
        return slots * memunit / 2**20

    @property
    def rss_bound_mb(self) -> float:
        """The memory bound the relay promises: its store's budget + a fixed allowance."""
        return self.store_budget_mb + RSS_ALLOWANCE_MB

    @classmethod
    def quick(cls, **kw: Any) -> BenchOptions:
        base = cls(
            repeat=1,
            rows=dict(QUICK_ROWS),
            latency_seconds=3.0,
            stall_mb=128,
            stall_hold_seconds=3.0,
            snapshot_rows=20_000,
        )
        return replace(base, **kw)


@dataclass
class Context:
    options: BenchOptions
    mysql: Any  # relay.dev.services.MySQLService
    kafka: str
    work: Path
    progress: Progress
    conn: Any
    next_server_id: int = 7100
    # Empties the embedded broker (and sets ``kafka``); None when the broker was given (--kafka).
    fresh_broker: Callable[[], str] | None = None

    def renew_broker(self) -> None:
        """An empty embedded broker for the next measured run (``services.EmbeddedBroker.renew``): each run
        is measured against empty topics, not what the runs before it left behind."""
        if self.fresh_broker is not None:
            self.kafka = self.fresh_broker()

    def server_id(self) -> int:
        self.next_server_id += 1
        return self.next_server_id

    def spec(self, mode: str, **kw: Any) -> dict[str, Any]:
        m = self.mysql
        mysql = {
            "host": m.host,
            "port": m.port,
            "user": m.replication_user,
            "password": m.replication_password,
        }
        spec = {"mode": mode, "mysql": mysql, "kafka": self.kafka, "server_id": self.server_id(), **kw}
        return {**spec, "settings": self.options.settings}


# The broker stamps every record with its append time: the side-by-side runs' rates and latencies are read
# from these timestamps, one clock for every system (relay.dev.bench.landed).
TOPIC_CONFIG = {"message.timestamp.type": "LogAppendTime"}


def broker_name(options: BenchOptions) -> str:
    """The broker the figures were measured on, for the report's machine line."""
    if options.kafka:
        return "given"
    if options.broker == "tansu":
        return "Tansu 0.6 (embedded)"
    from relay.common.jars import KAFKA_VERSION

    return f"Apache Kafka {KAFKA_VERSION} (embedded, one KRaft broker)"


def end_offsets(consumer: Any, tp: Any, timeout: float = 60.0) -> tuple[int, int]:
    """A partition's (low, high) watermarks from its leader, asked again while the broker gives a passing
    error — NOT_LEADER_FOR_PARTITION right after the topic was created (metadata names the new partition's
    leader before that broker serves it): the bench stopped with an internal error on it."""
    from confluent_kafka import KafkaError, KafkaException

    passing = (
        KafkaError.NOT_LEADER_FOR_PARTITION,  # librdkafka does not mark it retriable here
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._TIMED_OUT,
    )
    deadline = time.monotonic() + timeout
    while True:
        try:
            low, high = consumer.get_watermark_offsets(tp, timeout=min(30.0, timeout), cached=False)
            return int(low), int(high)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            again = err is not None and (err.retriable() or err.code() in passing)
            if not again or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def empty_topics(bootstrap: str, names: list[str]) -> None:
    """Delete every record of the topics (DeleteRecords up to each partition's end): the next run writes
    to empty topics, and the broker deletes the old segments from disk."""
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(quiet({"bootstrap.servers": bootstrap}))
    consumer = Consumer(quiet({"bootstrap.servers": bootstrap, "group.id": "relay-bench-empty"}))
    try:
        metadata = admin.list_topics(timeout=30).topics
        ends = []
        for name in names:
            for partition in metadata[name].partitions if name in metadata else {}:
                end = end_offsets(consumer, TopicPartition(name, partition))[1]
                if end > 0:
                    ends.append(TopicPartition(name, partition, end))
    finally:
        consumer.close()
    for future in admin.delete_records(ends, request_timeout=60).values() if ends else []:
        future.result(timeout=60)


def create_topics(bootstrap: str, names: list[str], partitions: int = 3) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient(quiet({"bootstrap.servers": bootstrap}))
    existing = admin.list_topics(timeout=30).topics
    new = [NewTopic(n, partitions, -1, config=TOPIC_CONFIG) for n in names if n not in existing]
    for future in admin.create_topics(new, request_timeout=30).values() if new else []:
        future.result(timeout=30)


# ---- workers ------------------------------------------------------------------------------------------


def _popen(spec: dict[str, Any], log: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-m", "relay.dev.bench.worker", json.dumps(spec)]
    if spec.get("profile_to"):
        spy = py_spy()
        if spy is None:
            command[-1] = json.dumps({**spec, "cprofile": True})
        else:
            Path(spec["profile_to"]).parent.mkdir(parents=True, exist_ok=True)
            sampler = [spy, "record", "--format", "raw", "--rate", "400", "--threads"]
            if compiled_build():
                sampler.append("--native")  # mypyc's functions are C: without it they vanish from stacks
            command = [*sampler, "-o", spec["profile_to"], "--", *command]
    with open(log, "a") as err:
        return subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=err,
            stdin=subprocess.DEVNULL,
            text=True,
            env=env,
            cwd=REPO_ROOT,
        )


def compiled_build() -> bool:
    """Whether the hot modules run compiled (``relay._native``)."""
    from relay import _native

    return _native.describe().startswith("compiled")


def py_spy() -> str | None:
    """py-spy beside this interpreter (the dev extra installs it into the virtualenv), else None.

    A profiled relay-drain run is sampled by py-spy into collapsed stacks of every thread; without it the
    worker profiles its own threads with cProfile (``spec["cprofile"]``), slower and deterministic.
    """
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else None


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def run_worker(
    ctx: Context,
    mode: str,
    timeout: float = 900.0,
    on_start: Callable[[int], None] | None = None,
    **kw: Any,
) -> dict[str, Any]:
    """One measurement in a child process; its ``result`` line. ``on_start`` gets the child's pid first."""
    log = ctx.work / "workers.log"
    # The worker's own deadline (a drain that does not finish) comes before the process is killed.
    proc = _popen(ctx.spec(mode, timeout=max(60.0, timeout - 30.0), **kw), log)
    if on_start is not None:
        on_start(proc.pid)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise BenchError(f"{mode} did not finish within {timeout:.0f}s") from None
    results = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    results = [r for r in results if r.get("event") == "result"]
    if proc.returncode != 0 or not results:
        raise BenchError(f"{mode} failed (exit {proc.returncode}):\n{_tail(log)}")
    return dict(results[-1])


class LiveWorker:
    """A ``relay-live`` child: its stdout lines collected by a reader thread."""

    def __init__(self, ctx: Context, kafka: str | None = None, **kw: Any) -> None:
        self.log = ctx.work / "workers.log"
        spec = ctx.spec("relay-live", **kw)
        if kafka is not None:
            spec["kafka"] = kafka
        self.proc = _popen(spec, self.log)
        self.lines: queue.Queue[dict[str, Any]] = queue.Queue()
        self.last: dict[str, Any] = {}
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                self.lines.put(json.loads(line))

    def next(self, timeout: float) -> dict[str, Any] | None:
        try:
            msg = self.lines.get(timeout=timeout)
        except queue.Empty:
            if self.proc.poll() is not None:
                raise BenchError(f"relay-live exited ({self.proc.returncode}):\n{_tail(self.log)}") from None
            return None
        self.last = msg
        return msg

    def wait_for(self, event: str, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = self.next(0.5)
            if msg is not None and msg["event"] == event:
                return msg
        raise BenchError(f"relay-live: no {event!r} within {timeout:.0f}s:\n{_tail(self.log)}")

    def stop(self, timeout: float = 90.0) -> dict[str, Any]:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        result = self.wait_for("result", timeout)
        self.proc.wait(timeout)
        return result

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
