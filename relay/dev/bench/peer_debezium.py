"""Debezium's MariaDB connector on Kafka Connect (standalone): a peer of ``relay bench --peers debezium``.

The jars are the ``debezium`` set of ``relay.common.jars`` (Debezium and Apache Kafka's Connect runtime,
resolved once into ``.jars/debezium``). A run writes the worker's and the connector's configuration into its
folder and starts one JVM (``org.apache.kafka.connect.cli.ConnectStandalone``, with the heap and JVM options
Apache Kafka's ``connect-standalone.sh`` gives it), then, through Connect's REST interface: creates the
connector STOPPED, sets its source offset to the run's binlog position (file, position and the MariaDB GTID
position there: the connector reads by GTID) and resumes it; with ``snapshot.mode: recovery`` it first reads
the captured table's schema (no rows) and then streams from that offset. For the snapshot workload it starts
with no offset and ``snapshot.mode: initial``. The settings are Debezium's and Kafka's documented ones for
throughput and for a safe producer (``SETTINGS``); the JSON converter without schemas. Runs on the bench's
main thread; the JVM is a child process that dies with the bench.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from relay.common import jars
from relay.dev.bench.common import Context, Progress
from relay.dev.bench.peers import (
    CONNECT_HEAP,
    KAFKA_JVM_OPTS,
    Capture,
    PeerProcess,
    http_json,
    java,
    wait_for_rest,
)
from relay.errors import BenchError, JarsError

PREFIX = "dbz"  # topic.prefix: row changes go to dbz.<database>.<table>, schema changes to dbz

# The Connect worker (standalone): JSON without schemas; the source task's producer as safe as the relay's
# (acks=all, idempotent; up to 5 requests in flight keep per-partition order under idempotence) and batched
# as Kafka's producer documentation says for throughput (larger batches, a short linger; librdkafka's
# defaults, which the relay runs with, are 1 MB batches and 5 ms); no compression, as the relay.
WORKER = {
    "key.converter": "org.apache.kafka.connect.json.JsonConverter",
    "value.converter": "org.apache.kafka.connect.json.JsonConverter",
    "key.converter.schemas.enable": "false",
    "value.converter.schemas.enable": "false",
    "offset.flush.interval.ms": "1000",
    "plugin.discovery": "only_scan",
    "producer.acks": "all",
    "producer.enable.idempotence": "true",
    "producer.max.in.flight.requests.per.connection": "5",
    "producer.batch.size": "1048576",
    "producer.linger.ms": "5",
    "producer.compression.type": "none",
    "topic.creation.enable": "false",  # the bench creates the topics (3 partitions, LogAppendTime)
}

# The connector, beyond what the run sets: Debezium's queue and batch raised 4x over the defaults (2,048 and
# 8,192; the documentation: the queue must stay larger than the batch) for a backlog; a short poll interval
# (default 500 ms: with few events a poll waits that long for a full batch) as the relay's 2 ms batch wait;
# no tombstone after a delete (a record of no row change); the schema history in a file of the run's folder.
SETTINGS = {
    "tasks.max": "1",
    "max.batch.size": "8192",
    "max.queue.size": "32768",
    "poll.interval.ms": "5",
    "tombstones.on.delete": "false",
    "schema.history.internal": "io.debezium.storage.file.history.FileSchemaHistory",
    "schema.history.internal.store.only.captured.tables.ddl": "true",
}

# Warnings and Debezium's own progress to the JVM's output (connect.out in the run's folder).
LOG4J = """rootLogger.level=WARN
rootLogger.appenderRef.out.ref=OUT
appender.out.type=Console
appender.out.name=OUT
appender.out.layout.type=PatternLayout
appender.out.layout.pattern=[%d] %p %m (%c)%n
logger.debezium.name=io.debezium
logger.debezium.level=INFO
"""


CONNECTOR = "bench"
STATUS_INTERVAL = 5.0  # seconds between two looks at the connector's status while it runs


class ConnectProcess:
    """The Connect JVM of one run; ``alive`` is False also once the connector's task has FAILED (Connect
    keeps running then), and ``log_tail`` has the task's trace."""

    def __init__(self, process: Any, rest: str) -> None:
        self.process = process
        self.rest = rest
        self.trace = ""
        self._next_status = 0.0

    @property
    def pid(self) -> int:
        return int(self.process.pid)

    def alive(self) -> bool:
        if not self.process.alive():
            return False
        now = time.monotonic()
        if now < self._next_status:  # its REST interface asked seldom: each call costs the measured JVM CPU
            return not self.trace
        self._next_status = now + STATUS_INTERVAL
        try:
            status = http_json("GET", f"{self.rest}/connectors/{CONNECTOR}/status", timeout=5.0)
        except (OSError, BenchError):
            return True  # not created yet, or busy: the process is what counts
        failed = [t for t in status.get("tasks", ()) if t.get("state") == "FAILED"]
        if failed:
            self.trace = str(failed[0].get("trace", ""))[:3000]
        return not failed

    def stop(self) -> None:
        self.process.stop(timeout=30.0)

    def log_tail(self) -> str:
        return (self.trace + "\n" if self.trace else "") + str(self.process.log_tail())


def _properties(values: dict[str, str]) -> str:
    return "".join(f"{key}={value}\n" for key, value in values.items())


class DebeziumPeer:
    name = "debezium"
    format = "debezium"
    snapshots = True

    @property
    def label(self) -> str:
        return f"Debezium {jars.DEBEZIUM_VERSION} (MariaDB connector), Kafka Connect {jars.CONNECT_VERSION}"

    def install(self, progress: Progress) -> None:
        if jars.is_resolved("debezium"):
            return
        progress(f"resolving {self.label} from Maven Central into {jars.folder('debezium')} (once) …")
        try:
            jars.resolve("debezium")
        except JarsError as exc:
            raise BenchError(f"--peers debezium: {exc}") from exc

    def topics(self, table: str) -> list[str]:
        return [f"{PREFIX}.relay_bench.{table}"]

    def side_topics(self) -> list[str]:
        return [PREFIX]

    def connector(self, ctx: Context, capture: Capture, workdir: Path, server_id: int) -> dict[str, str]:
        m = ctx.mysql
        return {
            "connector.class": "io.debezium.connector.mariadb.MariaDbConnector",
            "database.hostname": m.host,
            "database.port": str(m.port),
            "database.user": m.user,
            "database.password": m.password,
            "database.server.id": str(server_id),
            "topic.prefix": PREFIX,
            "database.include.list": "relay_bench",
            "table.include.list": f"relay_bench.{capture.table}",
            "snapshot.mode": "initial" if capture.start is None else "recovery",
            "schema.history.internal.file.filename": str(workdir / "schema-history.dat"),
            **SETTINGS,
        }

    def start(self, ctx: Context, capture: Capture, workdir: Path) -> PeerProcess:
        from relay.dev.services import free_port, spawn

        workdir.mkdir(parents=True, exist_ok=True)
        port = free_port()
        worker = {
            "bootstrap.servers": ctx.kafka,
            "offset.storage.file.filename": str(workdir / "offsets.dat"),
            "listeners": f"http://127.0.0.1:{port}",
            **WORKER,
        }
        (workdir / "worker.properties").write_text(_properties(worker))
        (workdir / "log4j2.properties").write_text(LOG4J)
        argv = [
            java(),
            *CONNECT_HEAP,
            *KAFKA_JVM_OPTS,
            f"-Dlog4j2.configurationFile={workdir / 'log4j2.properties'}",
        ]
        argv += ["-cp", jars.classpath("debezium"), "org.apache.kafka.connect.cli.ConnectStandalone"]
        argv.append(str(workdir / "worker.properties"))
        proc = ConnectProcess(
            spawn("kafka-connect", argv, workdir / "connect.out", detached=False, cwd=workdir),
            f"http://127.0.0.1:{port}",
        )
        try:
            self._configure(ctx, capture, workdir, proc)
        except BaseException:
            proc.stop()
            raise
        return proc

    def _configure(self, ctx: Context, capture: Capture, workdir: Path, proc: ConnectProcess) -> None:
        rest, name = proc.rest, CONNECTOR
        wait_for_rest(f"{rest}/", proc, timeout=300)
        config = self.connector(ctx, capture, workdir, ctx.server_id())
        if capture.start is None:
            http_json("POST", f"{rest}/connectors", {"name": name, "config": config})
            return
        if not capture.gtid:
            raise BenchError(
                f"no MariaDB GTID position at {capture.start}: Debezium's connector reads by GTID"
            )
        http_json("POST", f"{rest}/connectors", {"name": name, "config": config, "initial_state": "STOPPED"})
        offset = {"file": capture.start[0], "pos": capture.start[1], "gtids": capture.gtid}
        body = {"offsets": [{"partition": {"server": PREFIX}, "offset": offset}]}
        http_json("PATCH", f"{rest}/connectors/{name}/offsets", body)
        http_json("PUT", f"{rest}/connectors/{name}/resume")
