"""The embedded Apache Kafka: KRaft nodes (each a broker and a controller) from ``relay.common.jars``' jars.

Owns a node's ``server.properties`` (``broker_properties``: tuned for a 2-core test machine), formatting its
storage (``kafka.tools.StorageTool``), ``start_kafka`` (one broker, or a cluster of ``brokers`` nodes with
replication factor 3 and ``min.insync.replicas`` 2) and ``KafkaCluster``, the handle it returns: the service,
each node's process, and what the failure tests do to a node (kill, freeze, thaw, stop, start it again on the
same ports and data). Runs on the caller's thread; nodes start in parallel as processes, never threads.

The tuning, and why (measured: README, "Development"): a small heap; few network, I/O and background
threads (2 cores); 4 partitions, not 50, for the group and transaction state topics (each is created on its
first use, and 50 partitions took seconds); no initial rebalance delay (a consumer group's first join is
immediate); retention checked every second and the log cleaner backing off one second, so a topic with a
small ``retention.ms`` or ``cleanup.policy=compact`` really loses or compacts segments within a test (only
topics that set a small ``retention.ms`` / ``segment.ms`` are touched; the defaults stay Kafka's).
"""

from __future__ import annotations

import base64
import contextlib
import logging
import os
import shutil
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from relay.common import jars
from relay.dev.services import launch
from relay.dev.services.endpoints import KafkaService
from relay.dev.services.launch import LOOPBACK, Running, StartOptions, find_binary, fresh_dir
from relay.dev.services.processes import ServiceProcess, log_tail, spawn
from relay.dev.services.readiness import kafka_brokers, wait_until
from relay.errors import JarsError, PortInUseError, ServiceError

log = logging.getLogger(__name__)

# The JVM of every node: a heap that holds a test session's topics (512 MiB; 1 GiB is Kafka's own default),
# the serial collector (one core's worth of GC threads on a 2-core machine; the broker's pauses stay short at
# this heap size). The JIT is left alone: C1 alone started no faster and halved the bench's ceiling.
JVM_OPTIONS = (
    "-Xms128m",
    "-Xmx512m",
    "-XX:+UseSerialGC",
    "-XX:MaxMetaspaceSize=128m",
    "-Djava.awt.headless=true",
)
# A short-lived tool (StorageTool): interpreter plus C1 only, which starts it about twice as fast.
TOOL_JVM_OPTIONS = ("-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto")

_LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.out.ref = out
# The start and stop lines, and why a node left or joined the ISR (the failure tests read them).
logger.server.name = kafka.server.KafkaRaftServer
logger.server.level = INFO
logger.isr.name = kafka.cluster.Partition
logger.isr.level = INFO
"""


@dataclass(frozen=True)
class Tuning:
    """The settings that differ between one broker and a cluster (every node of a cluster has the same)."""

    brokers: int

    @property
    def replication(self) -> int:
        return min(self.brokers, 3)

    @property
    def min_isr(self) -> int:
        return 2 if self.brokers >= 3 else 1


@dataclass
class KafkaNode:
    """One node of a cluster: its id, ports and directory (``server.properties``, data, log)."""

    node_id: int
    port: int
    controller_port: int
    directory: Path
    process: ServiceProcess | None = None

    @property
    def address(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    @property
    def config(self) -> Path:
        return self.directory / "server.properties"

    @property
    def log_path(self) -> Path:
        return self.directory / "broker.log"


def broker_properties(node: KafkaNode, voters: str, tune: Tuning) -> str:
    """One node's ``server.properties``: a broker and a KRaft controller on loopback ports."""
    settings: dict[str, str | int] = {
        "process.roles": "broker,controller",
        "node.id": node.node_id,
        "controller.quorum.voters": voters,
        "listeners": f"PLAINTEXT://{node.address},CONTROLLER://{LOOPBACK}:{node.controller_port}",
        "advertised.listeners": f"PLAINTEXT://{node.address}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(node.directory / "data"),
        # replication: the cluster's defaults for topics created without a replication factor
        "default.replication.factor": tune.replication,
        "min.insync.replicas": tune.min_isr,
        "offsets.topic.replication.factor": tune.replication,
        "transaction.state.log.replication.factor": tune.replication,
        "transaction.state.log.min.isr": tune.min_isr,
        "share.coordinator.state.topic.replication.factor": tune.replication,
        "share.coordinator.state.topic.min.isr": tune.min_isr,
        "unclean.leader.election.enable": "false",
        # 2 cores: fewer threads than Kafka's defaults (3 network, 8 I/O, 10 background)
        "num.network.threads": 2,
        "num.io.threads": 2,
        "background.threads": 2,
        "num.replica.fetchers": 1,
        "num.recovery.threads.per.data.dir": 1,
        "log.cleaner.threads": 1,
        # state topics made on first use: 4 partitions each, not 50
        "offsets.topic.num.partitions": 4,
        "transaction.state.log.num.partitions": 4,
        "group.initial.rebalance.delay.ms": 0,
        # small retention and compaction really happen within a test
        "log.retention.check.interval.ms": 1000,
        "log.cleaner.backoff.ms": 1000,
        "log.segment.delete.delay.ms": 1000,
        "log.cleaner.dedupe.buffer.size": 8 * 1024 * 1024,
        # a replica (a node frozen or killed) leaves the ISR after 10 s, not 30
        "replica.lag.time.max.ms": 10000,
        "auto.create.topics.enable": "true",
    }
    return "".join(f"{key}={value}\n" for key, value in settings.items())


def kafka_classpath() -> str:
    try:
        return jars.classpath("kafka")
    except JarsError as exc:
        raise ServiceError(str(exc)) from exc


def new_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes in URL-safe base64, unpadded (``kafka-storage random-uuid``'s).

    Never one starting with "-", as Kafka's own ``Uuid.randomUuid`` ensures: a command line would take it
    for an option (StorageTool failed on one, once in 64 starts)."""
    while True:
        made = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not made.startswith("-"):
            return made


@dataclass(frozen=True)
class Launcher:
    """How every node of one cluster is started: the JVM, the class path, attached or detached."""

    java: str
    classpath: str
    detached: bool
    timeout: float

    def spawn(self, node: KafkaNode) -> ServiceProcess:
        argv = [self.java, *JVM_OPTIONS, _log_option(node), "-cp", self.classpath, "kafka.Kafka"]
        argv.append(str(node.config))
        node.process = spawn(
            f"kafka-{node.node_id}", argv, node.log_path, detached=self.detached, cwd=node.directory
        )
        return node.process


@dataclass
class KafkaCluster(Running[KafkaService]):
    """A running embedded Kafka: ``service`` lists every node; ``process`` is the first node's.

    ``kill``, ``freeze``, ``thaw``, ``stop_node`` and ``start_node`` act on one node by id (1..n); a node
    started again keeps its ports and data, so clients see the same cluster come back.
    """

    nodes: list[KafkaNode] = field(default_factory=list)
    launcher: Launcher | None = None

    def node(self, node_id: int) -> KafkaNode:
        for node in self.nodes:
            if node.node_id == node_id:
                return node
        known = ", ".join(str(n.node_id) for n in self.nodes)
        raise ServiceError(f"no Kafka node {node_id} (nodes: {known})")

    def stop(self, remove_dir: bool = False, timeout: float = 15.0) -> None:
        for node in self.nodes:
            self.stop_node(node.node_id, timeout)
        if remove_dir:
            shutil.rmtree(self.directory, ignore_errors=True)

    def stop_node(self, node_id: int, timeout: float = 15.0) -> None:
        """A clean stop (SIGTERM: the node hands its leaderships over), SIGKILL after ``timeout``."""
        node = self.node(node_id)
        if node.process is not None:
            self.thaw(node_id)  # a frozen JVM cannot act on SIGTERM
            node.process.stop(timeout)

    def kill(self, node_id: int) -> None:
        """SIGKILL: the node dies mid-flight (what it wrote to the page cache survives, as after a crash)."""
        node = self.node(node_id)
        if node.process is not None:
            node.process.kill()

    def freeze(self, node_id: int) -> None:
        """SIGSTOP: the node stops answering and heartbeating; its connections stay open."""
        self._signal(self.node(node_id), signal.SIGSTOP)

    def thaw(self, node_id: int) -> None:
        self._signal(self.node(node_id), signal.SIGCONT)

    def start_node(self, node_id: int) -> None:
        """Start a stopped or killed node again (same ports and data); returns once the cluster lists it."""
        node = self.node(node_id)
        if node.process is not None and node.process.alive():
            raise ServiceError(f"Kafka node {node_id} is running (pid {node.process.pid})")
        if self.launcher is None:
            raise ServiceError("this Kafka cluster was not started here: its nodes cannot be started again")
        process = self.launcher.spawn(node)
        _wait_nodes([node], len(self.nodes), self.launcher.timeout)
        if node is self.nodes[0]:
            self.process = process

    def _signal(self, node: KafkaNode, sig: signal.Signals) -> None:
        if node.process is not None and node.process.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(node.process.pid, sig)


def start_kafka(opts: StartOptions, brokers: int = 1) -> KafkaCluster:
    """An Apache Kafka in KRaft mode on free loopback ports: ``brokers`` nodes (1, or 3 for a replicated
    cluster), each a broker and a controller. ``opts.extra_args`` are broker settings (``key=value``) that
    override the tuned ones on every node."""
    if brokers < 1:
        raise ServiceError(f"a Kafka cluster needs at least one broker, not {brokers}")
    launcher = Launcher(find_binary("java"), kafka_classpath(), opts.detached, opts.timeout)
    opts.directory.mkdir(parents=True, exist_ok=True)
    try:
        return _start_cluster(launcher, opts, [launch.free_port() for _ in range(brokers)])
    except PortInUseError as exc:
        log.warning("port taken during start-up, retrying on other ones: %s", exc)
        return _start_cluster(launcher, opts, [launch.free_port() for _ in range(brokers)])


def _start_cluster(launcher: Launcher, opts: StartOptions, ports: list[int]) -> KafkaCluster:
    tune = Tuning(len(ports))
    nodes = [
        KafkaNode(i + 1, port, launch.free_port(), fresh_dir(opts.directory / f"node-{i + 1}"))
        for i, port in enumerate(ports)
    ]
    voters = ",".join(f"{n.node_id}@{LOOPBACK}:{n.controller_port}" for n in nodes)
    for node in nodes:
        text = broker_properties(node, voters, tune) + "".join(f"{arg}\n" for arg in opts.extra_args)
        node.config.write_text(text)
        (node.directory / "log4j2.properties").write_text(_LOG4J2)
    began = time.monotonic()
    _format_storage(launcher, nodes, new_cluster_id())
    formatted = time.monotonic()
    try:
        processes = [launcher.spawn(node) for node in nodes]
        _wait_nodes(nodes, len(nodes), opts.timeout)
    except BaseException:
        for node in nodes:
            if node.process is not None:
                node.process.stop(timeout=5.0)
        raise
    service = KafkaService(",".join(n.address for n in nodes))
    log.info(
        "Apache Kafka %s: %d node(s) at %s, storage formatted in %.1f s, answering %.1f s later",
        jars.KAFKA_VERSION,
        len(nodes),
        service,
        formatted - began,
        time.monotonic() - formatted,
    )
    return KafkaCluster(service, processes[0], opts.directory, nodes, launcher)


def _format_storage(launcher: Launcher, nodes: list[KafkaNode], cluster_id: str) -> None:
    """``kafka.tools.StorageTool format`` for every node at once (one short JVM each, in parallel)."""
    running: list[tuple[KafkaNode, subprocess.Popen[bytes]]] = []
    for node in nodes:
        argv = [launcher.java, *TOOL_JVM_OPTIONS, _log_option(node), "-cp", launcher.classpath]
        argv += ["kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}", "-c", str(node.config)]
        with open(node.directory / "format.log", "wb") as out:
            running.append((node, subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)))
    failed = []
    for node, proc in running:
        code = proc.wait()
        if code != 0:
            tail = log_tail(node.directory / "format.log", 10)
            failed.append(f"node {node.node_id} (exit status {code}):\n{tail}")
    if failed:
        raise ServiceError("kafka.tools.StorageTool format failed: " + "\n".join(failed))


def _log_option(node: KafkaNode) -> str:
    return f"-Dlog4j2.configurationFile={node.directory / 'log4j2.properties'}"


def _wait_nodes(nodes: list[KafkaNode], total: int, timeout: float) -> None:
    """Until each node answers on its own port and lists all ``total`` brokers in its metadata."""
    for node in nodes:
        assert node.process is not None
        own = KafkaService(node.address)
        what = f"Kafka node {node.node_id} on port {node.port}"
        wait_until(lambda own=own: kafka_brokers(own) >= total, timeout, what, node.process)  # type: ignore[misc]
