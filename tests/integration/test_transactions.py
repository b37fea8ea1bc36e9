"""Transactional and exactly-once modes on real MariaDB and the real broker (``kafka_service``).

- The transactional publisher: batches complete only once their transaction commits; a second producer
  with the same ``transactional.id`` fences it (``ProducerFencedError``) and nothing of it completes after.
- The relay in transactional mode end to end: rows equal SELECT, per-key order by partition offsets, no
  repeats; ``relay status`` and the status file name the mode and the transactional id.
- A relay fenced by a second instance with its transactional id stops with exit status 3 and acks nothing
  after the fence.
- Exactly-once mode: on a broker that shows aborted records to read_committed consumers (a Tansu broker of
  the test's own) the relay refuses to start, naming the reason, publishes nothing and leaves the position
  alone. On Apache Kafka the start-up probe passes and records and position commit together across
  restarts (the crash proofs are in ``test_exactly_once.py``).
- Transactional mode's commit intent asks a read_committed consumer at one record's offset whether its
  transaction committed (``relay.kafka.commit_intent.probe_committed``): the answer for a committed, an
  aborted and a deleted record.

The HA zombie case (SIGSTOP of a transactional relay) is in ``test_ha.py``. Every wait has a deadline.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from relay.dev.services import KafkaService
from relay.errors import ConfigError, PositionError, ProducerFatalError, ProducerFencedError, PublishError
from relay.kafka.commit_intent import ABORTED, COMMITTED, Probe, probe_committed
from relay.kafka.positions import KafkaPositionConfig, KafkaPositionStore, prove_aborted_records_hidden
from relay.kafka.publisher import KafkaPublisher
from relay.kafka.records import Record
from relay.kafka.settings import PublisherConfig, TopicDefaults
from tests.integration.relay_harness import (
    REPO_ROOT,
    Rec,
    RelayProcess,
    RelayThread,
    Writer,
    master_position,
    read_topic,
    select_orders,
    sharded_schema,
    single_table_mapping,
    topic_exists,
    wait_for,
    write_configs,
)

SHARDS, TABLES = 2, 2


@pytest.fixture
def shards(mysql_service: Any) -> Iterator[str]:
    with sharded_schema(mysql_service, "tx", SHARDS, TABLES) as prefix:
        yield prefix


def relay_config(tmp: Path, mysql: Any, kafka: KafkaService, prefix: str, **kafka_extra: Any) -> Path:
    conn = mysql.connect()
    try:
        start = master_position(conn)
    finally:
        conn.close()
    return write_configs(
        tmp,
        mysql=mysql,
        bootstrap=kafka.bootstrap_servers,
        mapping=single_table_mapping(prefix),
        start=start,
        instance=prefix,
        include=f"{prefix}_\\d+\\..*",
        extra={
            "kafka": {"transactions": True, **kafka_extra},
            "store": {"buffer_size": 256, "batch_mode": "ITEMSIZE"},
            "publish": {"batch_size": 32, "drain_seconds": 5.0, "retry": {"initial": 0.2, "maximum": 2.0}},
            "positions": {"backend": "kafka" if kafka_extra.get("exactly_once") else "file"},
        },
    )


def run_cli(*args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "relay.cli", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def apply_in_log_order(records: list[Rec]) -> dict[str, dict[str, str | None]]:
    """Latest state by key, applying each partition's records in OFFSET order (never by sequence):
    what a consumer that trusts the log's per-key order ends up with."""
    state: dict[str, dict[str, str | None]] = {}
    for rec in sorted(records, key=lambda r: (r.partition, r.offset)):
        msg = rec.json
        if msg["isDdl"]:
            continue
        ident = json.loads(rec.key or b"{}")["id"]
        if msg["type"] == "DELETE":
            state.pop(ident, None)
        else:
            state[ident] = {k: msg["data"][0].get(k) for k in ("id", "status", "amount", "note")}
    return state


def assert_key_order(records: list[Rec]) -> None:
    """In each partition a key's sequences strictly increase with the offset (no regression, no repeat)."""
    last: dict[tuple[int, bytes], int] = {}
    for rec in sorted(records, key=lambda r: (r.partition, r.offset)):
        if rec.json["isDdl"]:
            continue
        ident = (rec.partition, rec.key or b"")
        seq = int(rec.json["sequence"])
        assert seq > last.get(ident, -1), f"key {rec.key!r} regresses at {rec.partition}@{rec.offset}"
        last[ident] = seq


def changes_at_least(wanted: int) -> Callable[[list[Rec]], bool]:
    seen: set[int] = set()
    done = 0

    def until(records: list[Rec]) -> bool:
        nonlocal done
        seen.update(int(r.json["sequence"]) for r in records[done:] if not r.json["isDdl"])
        done = len(records)
        return len(seen) >= wanted

    return until


# --- the publisher --------------------------------------------------------------------------------------


class RecordingProducer(Producer):
    """confluent-kafka's producer, counting the transaction aborts sent: what a test asserts about the
    publisher's calls, instead of timing them."""

    aborts = 0

    def abort_transaction(self, *args: Any) -> Any:
        RecordingProducer.aborts += 1
        return super().abort_transaction(*args)


def txn_publisher(kafka: KafkaService, tid: str, delivery_timeout_s: float) -> KafkaPublisher:
    """A transactional publisher with ``tid``, topics of 3 partitions."""
    return KafkaPublisher(
        PublisherConfig(
            kafka.bootstrap_servers,
            create_topics=True,
            topic_defaults=TopicDefaults(partitions=3),
            delivery_timeout_s=delivery_timeout_s,
            transactional_id=tid,
        ),
        producer_factory=RecordingProducer,
    )


def test_batches_complete_at_commit_and_a_second_producer_with_the_id_fences_the_first(
    kafka_service: KafkaService,
) -> None:
    topic, tid = f"txn-{uuid.uuid4().hex[:10]}", f"relay-test-{uuid.uuid4().hex[:10]}"

    first, second = txn_publisher(kafka_service, tid, 10.0), txn_publisher(kafka_service, tid, 10.0)
    try:
        first.init_transactions()
        one = first.send(1, [Record(topic, None, f"k{i}".encode(), b"first-1") for i in range(6)])
        two = first.send(2, [Record(topic, None, f"k{i}".encode(), b"first-2") for i in range(6)])
        # every record delivered (a condition, not a pause: under load 0.5 s proved nothing), and still
        # no batch is complete before its transaction commits
        wait_for(
            lambda: first.poll(0.1) >= 0 and one.pending == two.pending == 0, 30, "the records delivered"
        )
        assert first.completed_prefix() == [], "a batch completed before its transaction committed"
        assert first.commit()
        assert [h.batch_id for h in first.completed_prefix()] == [1, 2]

        second.init_transactions()  # the successor: fences the first
        with pytest.raises(ProducerFencedError, match="fenced"):
            first.send(3, [Record(topic, None, b"k0", b"zombie")])
            first.commit()
        assert first.completed_prefix() == []
        with pytest.raises(PublishError):
            first.send(4, [Record(topic, None, b"k0", b"zombie")])

        second.send(1, [Record(topic, None, f"k{i}".encode(), b"second") for i in range(6)])
        assert second.commit()
        assert [h.batch_id for h in second.completed_prefix()] == [1]
    finally:
        first.close(2)
        second.close(2)
    records = read_topic(kafka_service.bootstrap_servers, topic, until=lambda rs: len(rs) >= 18, timeout=30)
    values = [r.value for r in records]
    assert values.count(b"first-1") == values.count(b"first-2") == values.count(b"second") == 6
    assert b"zombie" not in values  # its AddPartitionsToTxn / produce was refused: nothing reached the log


def test_a_commit_met_by_the_fence_on_its_way_stops_the_publisher_within_the_delivery_timeout(
    kafka_service: KafkaService,
) -> None:
    """Every record delivered, then a successor fences us, then our commit: Apache Kafka answers the EndTxn
    with PRODUCER_FENCED, so the publisher stops as fenced (not "outcome unknown") within the delivery
    timeout, completes nothing, and aborts nothing it cannot. (A broker that closes the connection instead,
    as Tansu does, ends in "outcome unknown" at the delivery timeout: test_transaction_states.py.)"""
    topic, tid = f"txn-{uuid.uuid4().hex[:10]}", f"relay-test-{uuid.uuid4().hex[:10]}"
    timeout = 6.0
    first, second = txn_publisher(kafka_service, tid, timeout), txn_publisher(kafka_service, tid, timeout)
    try:
        first.init_transactions()
        handle = first.send(1, [Record(topic, None, f"k{i}".encode(), b"first") for i in range(6)])
        wait_for(lambda: first.poll(0.1) >= 0 and handle.pending == 0, 30, "the records delivered")
        second.init_transactions()  # the successor, while our transaction waits for its commit
        started = time.monotonic()
        with pytest.raises(ProducerFencedError, match="fenced"):
            first.commit()
        took = time.monotonic() - started
        # bounded by the delivery timeout (plus a loaded machine's scheduling), not by a minute of retries
        assert took < 2 * timeout + 5, f"the commit stopped after {took:.1f} s"
        assert first.completed_prefix() == []
        aborts = RecordingProducer.aborts
        assert first.abort_inflight() == [1]
        # nothing was sent beside the commit (librdkafka would refuse it: _CONFLICT, after waiting): counted,
        # not timed (the 2 s bound this replaced failed on a loaded machine)
        assert RecordingProducer.aborts == aborts, "an abort was attempted beside the commit"
        with pytest.raises(ProducerFatalError):
            first.send(2, [Record(topic, None, b"k0", b"zombie")])
    finally:
        first.close(1)
        second.close(1)


# --- the relay in transactional mode ---------------------------------------------------------------------


def test_a_transactional_relay_publishes_every_row_in_order_and_status_names_the_mode(
    mysql_service: Any, kafka_service: KafkaService, shards: str, tmp_path: Path
) -> None:
    prefix = shards
    cfg = relay_config(tmp_path, mysql_service, kafka_service, prefix)
    writer = Writer(mysql_service, prefix, SHARDS, TABLES, rate=300.0, seed=11)
    with RelayThread(cfg):
        writer.start()
        wait_for(lambda: writer.changes >= 600, 60, "the writer wrote 600 row changes")
        changes = writer.stop()
        records = read_topic(
            kafka_service.bootstrap_servers, f"{prefix}.orders", until=changes_at_least(changes), timeout=90
        )
        status = run_cli("status", "--json", "-c", str(cfg))
    report = json.loads(status.stdout)
    assert report["kafka_mode"] == "transactional"
    assert report["transactional_id"] == f"canal-relay-{prefix}"
    rows = [r for r in records if not r.json["isDdl"]]
    assert len(rows) == changes, "every change exactly once (no broker trouble: no repeats)"
    assert_key_order(records)
    conn = mysql_service.connect()
    try:
        assert apply_in_log_order(records) == select_orders(conn, prefix, SHARDS, TABLES)
    finally:
        conn.close()
    saved = json.loads((tmp_path / "var" / prefix / "status.json").read_text())
    assert saved["kafka_mode"] == "transactional" and saved["state"] == "stopped"
    assert saved["transactional_id"] == f"canal-relay-{prefix}"


def test_a_relay_fenced_by_a_second_instance_stops_with_status_3_and_acks_nothing_after(
    mysql_service: Any, kafka_service: KafkaService, shards: str, tmp_path: Path
) -> None:
    prefix = shards
    # The fence may land while a commit is on its way: Apache Kafka answers that EndTxn with PRODUCER_FENCED.
    cfg = relay_config(tmp_path, mysql_service, kafka_service, prefix, delivery_timeout_seconds=15.0)
    relay = RelayProcess(cfg, tmp_path / "relay.log").start()
    writer = Writer(mysql_service, prefix, SHARDS, TABLES, rate=200.0, seed=12)
    writer.start()
    try:
        wait_for(lambda: relay.status().get("batches_acked", 0) >= 5, 60, "the relay publishing")
        intruder = Producer(
            {
                "bootstrap.servers": kafka_service.bootstrap_servers,
                "transactional.id": f"canal-relay-{prefix}",
            }
        )
        fenced_at = len(relay.log_path.read_bytes())
        intruder.init_transactions(30)  # a second instance with the same transactional.id
        code = relay.wait(60)
        position = relay.position()
    finally:
        writer.stop()
        relay.stop()
    log = relay.log_path.read_bytes()[fenced_at:].decode(errors="replace")
    assert code == 3, log[-3000:]
    marker = "kafka producer fenced"
    assert marker in log, log[-3000:]
    after = log[log.index(marker) :]
    assert "acked, position" not in after, "a batch was acked after the fence"
    assert position, "the position saved before the fence stays"


# --- exactly-once mode -----------------------------------------------------------------------------------


def test_exactly_once_is_refused_where_read_committed_consumers_see_aborted_records(
    mysql_service: Any, tansu_broker: KafkaService, shards: str, tmp_path: Path
) -> None:
    """Tansu shows a read_committed consumer the records of aborted transactions: the probe says so."""
    kafka_service, prefix = tansu_broker, shards
    config = KafkaPositionConfig(kafka_service.bootstrap_servers, f"{prefix}.probe-check", "t", "relay-test")
    with pytest.raises(ConfigError, match="ABORTED transaction"):
        prove_aborted_records_hidden(config)
    positions_topic = f"{prefix}.positions"
    cfg = relay_config(
        tmp_path, mysql_service, kafka_service, prefix, exactly_once=True, positions_topic=positions_topic
    )
    conn = mysql_service.connect()
    with conn.cursor() as cur:
        cur.execute(f"INSERT INTO {prefix}_00.orders_00 VALUES (1, 'NEW', 1.00, NULL)")
    conn.close()
    result = run_cli("run", "-c", str(cfg))
    assert result.returncode != 0, result.stderr[-3000:]
    assert "kafka.exactly_once: refused" in result.stderr, result.stderr[-3000:]
    assert "ABORTED transaction" in result.stderr
    topic = f"{prefix}.orders"
    if topic_exists(kafka_service.bootstrap_servers, topic):
        with pytest.raises(AssertionError, match="condition not met"):
            read_topic(kafka_service.bootstrap_servers, topic, until=lambda rs: len(rs) > 0, timeout=3)
    store = KafkaPositionStore(
        KafkaPositionConfig(kafka_service.bootstrap_servers, positions_topic, prefix, f"canal-relay-{prefix}")
    )
    assert store.load() is None, "the position was written although exactly-once was refused"


def test_exactly_once_commits_records_and_position_together(
    mysql_service: Any, kafka_service: KafkaService, shards: str, tmp_path: Path
) -> None:
    prefix = shards
    probe = KafkaPositionConfig(kafka_service.bootstrap_servers, f"{prefix}.probe-check", "t", "relay-test")
    prove_aborted_records_hidden(probe)  # Apache Kafka hides aborted records: nothing is refused
    positions_topic = f"{prefix}.positions"
    cfg = relay_config(
        tmp_path, mysql_service, kafka_service, prefix, exactly_once=True, positions_topic=positions_topic
    )
    store = KafkaPositionStore(
        KafkaPositionConfig(kafka_service.bootstrap_servers, positions_topic, prefix, f"canal-relay-{prefix}")
    )
    writer = Writer(mysql_service, prefix, SHARDS, TABLES, rate=300.0, seed=13)
    writer.start()
    for _ in range(2):  # a restart resumes from the position committed with the records
        with RelayThread(cfg) as running:
            wait_for(lambda: running.relay.stats.batches_acked >= 10, 60, "the relay publishing")
    changes = writer.stop()
    with RelayThread(cfg):
        records = read_topic(
            kafka_service.bootstrap_servers, f"{prefix}.orders", until=changes_at_least(changes), timeout=90
        )
        wait_for(lambda: store.load() is not None, 30, "the position committed")
    rows = [r for r in records if not r.json["isDdl"]]
    assert len(rows) == changes, "read_committed: every change exactly once, across restarts"
    assert_key_order(records)
    conn = mysql_service.connect()
    try:
        assert apply_in_log_order(records) == select_orders(conn, prefix, SHARDS, TABLES)
    finally:
        conn.close()


def test_the_commit_intents_probe_tells_a_committed_transaction_from_an_aborted_one(
    kafka_service: KafkaService,
) -> None:
    bootstrap = kafka_service.bootstrap_servers
    topic = f"intent-probe-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"probe-{uuid.uuid4().hex}"})
    producer.init_transactions(30)
    landed: dict[bytes, int] = {}

    def report(err: Any, msg: Any) -> None:
        assert err is None, err
        landed[msg.value()] = msg.offset()

    # aborted, committed, aborted: the first is passed by a later record, the last by the stable end
    for value, commit in ((b"aborted-1", False), (b"committed", True), (b"aborted-2", False)):
        producer.begin_transaction()
        producer.produce(topic, value, on_delivery=report)
        assert producer.flush(30) == 0
        (producer.commit_transaction if commit else producer.abort_transaction)(30)
    client = {"bootstrap.servers": bootstrap}
    assert probe_committed(Probe(topic, 0, landed[b"committed"]), client, 30) == COMMITTED
    assert probe_committed(Probe(topic, 0, landed[b"aborted-1"]), client, 30) == ABORTED
    assert probe_committed(Probe(topic, 0, landed[b"aborted-2"]), client, 30) == ABORTED
    # A record deleted since (retention, DeleteRecords): no answer, never a guess.
    for done in admin.delete_records([TopicPartition(topic, 0, landed[b"committed"])]).values():
        done.result(30)
    with pytest.raises(PositionError, match=f"probe {topic} "):
        probe_committed(Probe(topic, 0, landed[b"aborted-1"]), client, 10)
