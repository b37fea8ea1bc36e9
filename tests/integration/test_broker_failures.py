"""Broker failures under the relay, on a three-broker Apache Kafka cluster (the longer suite).

Three KRaft nodes (``relay.dev.services.start_kafka(brokers=3)``: replication factor 3,
``min.insync.replicas`` 2). A writer changes 16 sharded tables the whole time; one relay (idempotent mode, as
users run by default) publishes them to a 6-partition topic. One after the other:

1. SIGKILL of the broker leading most of the topic's partitions, then its restart;
2. SIGSTOP of a broker until the cluster fenced it (its 9 s session ran out: it leads nothing), then SIGCONT;
3. a rolling restart of all three brokers (SIGTERM, start, in-sync again, next);
4. the topic's ``min.insync.replicas`` raised to 3 and a broker killed: the in-sync replicas (2) are below it,
   so no ``acks=all`` write completes — the relay waits, acknowledges nothing, its position stays, and its
   log and ``relay status`` say why (``kafka_waiting``: the partition, its in-sync replicas, the setting);
   then the broker returns and the relay goes on.

During every fault the relay's saved position is read, then the topic: afterwards every change before that
position must have been in Kafka at that moment (the position never ahead of what Kafka holds). At the end an
independent consumer reads the topic: every change the writer committed is there (0 lost), per key in binlog
order along each partition's offsets, repeats only byte-identical copies, and the state equals SELECT.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from relay.dev import services
from tests.integration.eos_proof import read_partitions
from tests.integration.relay_harness import (
    Rec,
    RelayProcess,
    Writer,
    apply_records,
    check_exact_repeats,
    create_shards,
    drop_shards,
    master_position,
    row_sequences,
    select_orders,
    single_table_mapping,
    wait_for,
    write_configs,
)

pytestmark = [pytest.mark.long, pytest.mark.timeout(2400)]

SHARDS, TABLES, PARTITIONS = 4, 4, 6


@pytest.fixture(scope="module")
def kafka3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[services.KafkaCluster]:
    with services.start_kafka(services.StartOptions(tmp_path_factory.mktemp("kafka3")), brokers=3) as cluster:
        assert isinstance(cluster, services.KafkaCluster)
        yield cluster


@dataclass
class Seen:
    """What one look during a fault saw: the relay's saved position, then what the topic held."""

    phase: str
    position: dict[str, Any]
    records: list[Rec]


class Topic:
    """The relay's topic on the cluster: its partitions' leaders and in-sync replicas."""

    def __init__(self, cluster: services.KafkaCluster, name: str) -> None:
        self.cluster, self.name = cluster, name
        self.admin = AdminClient({"bootstrap.servers": cluster.service.bootstrap_servers})

    def partitions(self) -> dict[int, Any]:
        meta = self.admin.list_topics(self.name, timeout=10).topics[self.name]
        return dict(meta.partitions)

    def leaders(self) -> dict[int, int]:
        return {p: info.leader for p, info in self.partitions().items()}

    def leads_nothing(self, node: int) -> bool:
        """Whether ``node`` leads none of the topic's partitions, asked of the other brokers by a fresh client
        (a client that knows the cluster sends requests to a frozen broker too, and they time out); False
        while the metadata cannot be read."""
        others = ",".join(n.address for n in self.cluster.nodes if n.node_id != node)
        try:
            meta = AdminClient({"bootstrap.servers": others}).list_topics(self.name, timeout=10)
            return node not in {info.leader for info in meta.topics[self.name].partitions.values()}
        except KafkaException:
            return False

    def busiest_leader(self) -> int:
        counts: dict[int, int] = {}
        for leader in self.leaders().values():
            counts[leader] = counts.get(leader, 0) + 1
        return max(counts, key=lambda node: counts[node])

    def in_sync(self, want: int) -> bool:
        try:
            return all(len(info.isrs) >= want and info.leader >= 0 for info in self.partitions().values())
        except Exception:
            return False

    def min_isr(self, value: int) -> None:
        resource = ConfigResource(ConfigResource.Type.TOPIC, self.name)
        entry = ConfigEntry("min.insync.replicas", str(value), incremental_operation=AlterConfigOpType.SET)
        resource.add_incremental_config(entry)
        for future in self.admin.incremental_alter_configs([resource]).values():
            future.result(30)


def read_to_marks(bootstrap: str, topic: str, timeout: float = 120.0) -> list[Rec]:
    """What ``topic`` held when this was called: each partition read from 0 up to the high watermark taken
    first (while the writer goes on, an end-of-partition on every partition at once may never come)."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"marks-{uuid.uuid4().hex}", "enable.auto.commit": False}
    )
    try:
        n = len(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        marks = {
            p: int(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]) for p in range(n)
        }
        consumer.assign([TopicPartition(topic, p, 0) for p, mark in marks.items() if mark > 0])
        left = {p for p, mark in marks.items() if mark > 0}
        out: list[Rec] = []
        deadline = time.monotonic() + timeout
        while left:
            assert time.monotonic() < deadline, f"{topic}: partitions {left} not read up to {marks}"
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                raise KafkaException(msg.error())
            part, offset = int(msg.partition() or 0), int(msg.offset() or 0)
            if offset >= marks[part]:
                left.discard(part)
                continue
            headers = dict(msg.headers() or [])
            ts_type, ts = msg.timestamp()
            out.append(Rec(msg.topic(), part, offset, msg.key(), msg.value(), headers, ts, ts_type))
            if offset >= marks[part] - 1:
                left.discard(part)
    finally:
        consumer.close()
    return sorted(out, key=lambda r: (r.partition, r.offset))


@dataclass
class Run:
    tmp: Path
    conn: Any
    prefix: str
    cluster: services.KafkaCluster
    relay: RelayProcess
    topic: Topic
    writer: Writer

    def look(self, phase: str) -> Seen:
        position = dict(self.relay.status().get("position") or {})
        deadline = time.monotonic() + 180
        while True:  # read after the position: a request that met a frozen or dead broker is sent again
            try:
                records = read_to_marks(self.cluster.service.bootstrap_servers, self.topic.name)
                return Seen(phase, position, records)
            except KafkaException:
                if time.monotonic() > deadline:
                    raise

    def progressing(self, more: int, timeout: float, what: str) -> None:
        start = int(self.relay.status().get("batches_acked", 0))
        wait_for(lambda: int(self.relay.status().get("batches_acked", 0)) >= start + more, timeout, what)

    def healthy(self) -> None:
        wait_for(lambda: self.topic.in_sync(3), 120, "every partition in sync on three brokers")


@pytest.fixture
def run(mysql_service: Any, kafka3: services.KafkaCluster, tmp_path: Path) -> Iterator[Run]:
    prefix = f"bf{time.monotonic_ns() % 10**8}"
    conn = mysql_service.connect()
    create_shards(conn, prefix, SHARDS, TABLES)
    cfg = write_configs(
        tmp_path,
        mysql=mysql_service,
        bootstrap=kafka3.service.bootstrap_servers,
        mapping=single_table_mapping(prefix, partitions=PARTITIONS),
        start=master_position(conn),
        instance=prefix,
        include=f"{prefix}_\\d+\\..*",
        extra={
            "publish": {"batch_size": 64, "retry": {"initial": 0.2, "maximum": 2.0}},
            "logging": {"level": "INFO"},
        },
    )
    relay = RelayProcess(cfg, tmp_path / "relay.log").start()
    writer = Writer(mysql_service, prefix, SHARDS, TABLES, rate=200.0, seed=17)
    made = Run(tmp_path, conn, prefix, kafka3, relay, Topic(kafka3, f"{prefix}.orders"), writer)
    try:
        yield made
    finally:
        writer.halt.set()
        relay.stop()
        for node in kafka3.nodes:  # whatever a failed test left: every node back, thawed
            kafka3.thaw(node.node_id)
            if node.process is None or not node.process.alive():
                kafka3.start_node(node.node_id)
        drop_shards(conn, prefix, SHARDS)
        conn.close()


def before(position: dict[str, Any], rec: Rec) -> bool:
    """Whether ``rec``'s change lies before a saved position with nothing to skip (published up to there)."""
    source = rec.json["source"]
    return (str(source["file"]), int(source["offset"])) < (str(position["journal"]), int(position["offset"]))


def assert_never_ahead(looks: list[Seen], final: list[Rec]) -> int:
    """Every change before a position the relay had saved was in Kafka when that position was read."""
    checked = 0
    for seen in looks:
        if not seen.position or int(seen.position.get("skip", 0)):
            continue
        held = row_sequences(seen.records)
        wanted = {int(r.json["sequence"]) for r in final if not r.json["isDdl"] and before(seen.position, r)}
        missing = wanted - held
        assert not missing, (
            f"{seen.phase}: position {seen.position} saved with {len(missing)} changes not in Kafka"
        )
        checked += 1
    return checked


def test_broker_failures_lose_nothing_keep_order_and_never_ack_ahead_of_kafka(run: Run) -> None:
    cluster, topic, relay = run.cluster, run.topic, run.relay
    wait_for(lambda: relay.status().get("state") == "running", 120, "the relay running")
    run.writer.start()
    run.progressing(10, 120, "the relay publishing")
    run.healthy()
    looks: list[Seen] = []

    # 1. SIGKILL of the partition leaders' broker
    victim = topic.busiest_leader()
    cluster.kill(victim)
    wait_for(lambda: topic.leads_nothing(victim), 60, f"leadership moved off broker {victim}")
    run.progressing(10, 120, f"publishing with broker {victim} dead")
    looks.append(run.look(f"broker {victim} killed"))
    cluster.start_node(victim)
    run.healthy()

    # 2. SIGSTOP of a broker past its session
    frozen = topic.busiest_leader()
    cluster.freeze(frozen)
    try:
        wait_for(lambda: topic.leads_nothing(frozen), 60, f"broker {frozen} fenced by the cluster")
        run.progressing(10, 120, f"publishing with broker {frozen} frozen")
        looks.append(run.look(f"broker {frozen} frozen"))
    finally:
        cluster.thaw(frozen)
    run.healthy()

    # 3. a rolling restart of all three
    for node in (1, 2, 3):
        cluster.stop_node(node)
        looks.append(run.look(f"broker {node} stopped (rolling restart)"))
        cluster.start_node(node)
        run.healthy()
        run.progressing(3, 120, f"publishing after broker {node}'s restart")

    # 4. in-sync replicas below min.insync.replicas: the relay waits and acks nothing
    topic.min_isr(3)
    cut = 3
    cluster.kill(cut)
    try:
        wait_for(lambda: topic.in_sync(3) is False and topic.in_sync(2), 60, "the ISR down to two")
        held = relay.status().get("position")
        acked = relay.status().get("batches_acked")
        samples: list[Any] = []

        def waiting_reported() -> bool:
            status = relay.status()
            samples.append((status.get("position"), status.get("batches_acked")))
            waiting = status.get("kafka_waiting") or {}
            return float(waiting.get("seconds", 0)) >= 10 and "min.insync.replicas" in waiting.get("why", "")

        wait_for(waiting_reported, 90, "relay status saying why it waits")
        assert all(s == (held, acked) for s in samples), "the relay acked while no write could complete"
        why = relay.status()["kafka_waiting"]["why"]
        assert f"{topic.name} [" in why and "in sync" in why, why
        assert "min.insync.replicas" in relay.log(), relay.log()[-3000:]
        looks.append(run.look("in-sync replicas below min.insync.replicas"))
    finally:
        cluster.start_node(cut)
    run.healthy()
    run.progressing(5, 180, "publishing again once the ISR is back")
    wait_for(lambda: not relay.status().get("kafka_waiting"), 60, "relay status no longer waiting")
    topic.min_isr(2)

    changes = run.writer.stop()
    end = master_position(run.conn)
    wait_for(lambda: caught_up(relay, end), 180, "the relay caught up")
    relay.signal(15)
    assert relay.wait(90) == 0, relay.log()[-3000:]
    final = read_partitions(cluster.service.bootstrap_servers, topic.name, "read_uncommitted")
    assert len(row_sequences(final)) == changes, "a change the writer committed is not in Kafka"
    assert apply_records(final) == select_orders(run.conn, run.prefix, SHARDS, TABLES)
    repeats = check_exact_repeats(final)
    checked = assert_never_ahead(looks, final)
    print(
        f"broker failures: {changes} changes, {len(final)} records, {repeats} byte-identical repeats, "
        f"{checked} saved positions checked against Kafka: {json.dumps([s.phase for s in looks])}"
    )


def caught_up(relay: RelayProcess, end: tuple[str, int]) -> bool:
    position = relay.status().get("position") or {}
    return bool(position) and (str(position["journal"]), int(position["offset"])) >= end
