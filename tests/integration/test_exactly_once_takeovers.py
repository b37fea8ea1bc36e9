"""Exactly-once and transactional mode across takeovers and a broker restart (the longer suite).

Two relays serve one instance under ZooKeeper leadership (``ha.enabled``; session 4 s), with long Kafka
transactions (1 s) so that a transaction is open whenever something happens to the active one:

1. the active relay is SIGKILLed with a transaction open: the standby takes over; the killed one is started
   again and stands by;
2. the new active relay is frozen (SIGSTOP) with a transaction open until its session expired and the
   standby took over, then resumed (SIGCONT): it is fenced, exits with status 3, commits nothing.

Then, on a broker of its own (``spare_broker``), an exactly-once relay runs while the broker is restarted
twice in the middle of a transaction — SIGTERM, then SIGKILL — and started again on its data.

Each ends with the independent ``read_committed`` consumer of ``eos_proof``: every change exactly once,
per key in binlog order, equal to SELECT; the ``read_uncommitted`` read shows the aborted records it hid.
Exactly-once mode keeps its position in Kafka (``positions.backend: kafka``), transactional mode in
ZooKeeper, with its commit intents.
"""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from relay.dev import services
from relay.dev.services import KafkaService, ZooKeeperService
from tests.integration.relay_harness import (
    RelayProcess,
    Writer,
    master_position,
    sharded_schema,
    single_table_mapping,
    wait_for,
    write_configs,
)
from tests.integration.test_exactly_once import assert_exactly_once, caught_up, proofs

pytestmark = [pytest.mark.long, pytest.mark.timeout(1200)]

SHARDS, TABLES = 2, 2
SESSION = 4.0


@pytest.fixture
def shards(mysql_service: Any) -> Iterator[str]:
    with sharded_schema(mysql_service, "eot", SHARDS, TABLES) as prefix:
        yield prefix


def relay_config(
    tmp: Path,
    mysql: Any,
    bootstrap: str,
    prefix: str,
    start: tuple[str, int],
    mode: str,
    ha: dict[str, Any] | None = None,
    **kafka_extra: Any,
) -> Path:
    exactly_once = mode == "exactly-once"
    kafka: dict[str, Any] = {
        "transactions": True,
        "exactly_once": exactly_once,
        "transaction_linger_seconds": 1.0,  # a transaction is open nearly all the time
        "settings": {"linger.ms": "100"},
        **kafka_extra,
    }
    if exactly_once:
        kafka["positions_topic"] = f"{prefix}.positions"
    sections: dict[str, Any] = {
        "kafka": kafka,
        "store": {"buffer_size": 4096, "batch_mode": "ITEMSIZE"},
        "publish": {
            "batch_size": 32,
            "max_inflight_batches": 1000,
            "retry": {"initial": 0.2, "maximum": 2.0},
        },
        "positions": {"backend": "kafka" if exactly_once else "zookeeper"},
        "logging": {"level": "DEBUG"},
        **({"ha": ha} if ha else {}),
    }
    return write_configs(
        tmp,
        mysql=mysql,
        bootstrap=bootstrap,
        mapping=single_table_mapping(prefix),
        start=start,
        instance=prefix,
        include=f"{prefix}_\\d+\\..*",
        extra=sections,
    )


def open_transaction(relay: RelayProcess) -> int:
    """Records the relay sent in its open transaction, from its DEBUG log (0 right after a commit)."""
    records = 0
    for line in relay.log().splitlines():
        if "transaction of batches" in line and "committed" in line:
            records = 0
        elif ": sent " in line and " records (" in line:
            records += int(line.split(": sent ", 1)[1].split()[0])
    return records


def open_in_log(bootstrap: str, prefix: str) -> bool:
    """Whether a partition of the prefix's topics holds records of a transaction still open: its end for
    read_uncommitted, asked first, beyond its last stable offset (read_committed's end), asked after."""
    from confluent_kafka import Consumer, TopicPartition

    def ends(level: str) -> dict[tuple[str, int], int]:
        consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": "eos-probe", "isolation.level": level}
        )
        try:
            meta = consumer.list_topics(timeout=10).topics
            parts = [
                TopicPartition(t, p) for t, m in meta.items() if t.startswith(prefix) for p in m.partitions
            ]
            return {
                (tp.topic, tp.partition): consumer.get_watermark_offsets(tp, timeout=10, cached=False)[1]
                for tp in parts
            }
        finally:
            consumer.close()

    everything = ends("read_uncommitted")
    stable = ends("read_committed")
    return any(end > stable.get(key, end) for key, end in everything.items())


def with_transaction_open(relay: RelayProcess, act: Any, bootstrap: str = "", prefix: str = "") -> None:
    """Call ``act(relay)`` once the relay has records in an open transaction — in the log itself when
    ``bootstrap`` is given (records only handed to the client may never reach the broker before the act,
    and then no transaction is left to abort)."""
    wait_for(
        lambda: open_transaction(relay) > 0 and (not bootstrap or open_in_log(bootstrap, prefix)),
        120,
        "a transaction open with records in the log",
        0.02,
    )
    act(relay)


def active_of(relays: list[RelayProcess]) -> RelayProcess | None:
    running = [r for r in relays if r.alive() and r.status().get("state") == "running"]
    assert len(running) <= 1, "two relays report running"
    return running[0] if running else None


@pytest.mark.parametrize("mode", ["exactly-once", "transactional"])
def test_sigkill_and_sigstop_takeovers_publish_every_change_exactly_once(
    mysql_service: Any,
    kafka_service: KafkaService,
    zk_service: ZooKeeperService,
    shards: str,
    tmp_path: Path,
    mode: str,
) -> None:
    prefix = shards
    conn = mysql_service.connect()
    start = master_position(conn)
    conn.close()
    ha = {"zookeeper": zk_service.hosts, "root": f"/relay-test/{uuid.uuid4().hex}", "enabled": True}
    ha["session_timeout_seconds"] = SESSION

    def relay(i: int) -> RelayProcess:
        cfg = relay_config(tmp_path / f"r{i}", mysql_service, kafka_service.bootstrap_servers, prefix, start,
                           mode, ha={**ha, "member_id": f"relay-{i}"})  # fmt: skip
        return RelayProcess(cfg, tmp_path / f"relay-{i}-{time.monotonic_ns()}.log").start()

    writer = Writer(mysql_service, prefix, SHARDS, TABLES, rate=250.0, seed=29)
    a = relay(0)
    relays = [a]
    try:
        wait_for(lambda: active_of(relays) is a, 60, "relay-0 active")
        b = relay(1)  # started once relay-0 leads: started together, either could win the election
        relays.append(b)
        wait_for(lambda: b.status().get("state") == "standby", 60, "relay-1 standing by")
        writer.start()
        wait_for(lambda: a.status().get("batches_acked", 0) >= 3, 60, "relay-0 publishing")

        # 1. SIGKILL of the active relay, a transaction open
        with_transaction_open(a, lambda r: r.signal(signal.SIGKILL), kafka_service.bootstrap_servers, prefix)
        assert a.wait(10) == -signal.SIGKILL
        wait_for(lambda: active_of(relays) is b, SESSION + 30, "relay-1 took over")
        a2 = relay(0)
        relays.append(a2)
        wait_for(lambda: a2.status().get("state") == "standby", 60, "relay-0 back, standing by")
        wait_for(lambda: b.status().get("batches_acked", 0) >= 3, 60, "relay-1 publishing")

        # 2. SIGSTOP of the active relay past its session, a transaction open; then SIGCONT
        with_transaction_open(b, lambda r: r.signal(signal.SIGSTOP), kafka_service.bootstrap_servers, prefix)
        try:
            # the frozen relay's status file still says running (it cannot write): asked of the others
            others = [r for r in relays if r is not b]
            wait_for(lambda: active_of(others) is a2, SESSION + 30, "relay-0 took over from the frozen one")
            wait_for(lambda: a2.status().get("batches_acked", 0) >= 3, 60, "relay-0 publishing again")
        finally:
            b.signal(signal.SIGCONT)
        assert b.wait(90) == 3, b.log()[-3000:]
        assert "no longer the active relay" in b.log() or "fenced" in b.log()

        grown = writer.changes + 200
        wait_for(lambda: writer.changes >= grown, 60, "more changes after the takeovers")
        changes = writer.stop()
        conn = mysql_service.connect()
        end = master_position(conn)
        conn.close()
        wait_for(lambda: caught_up(a2, end), 120, "relay-0 caught up")
    finally:
        writer.halt.set()
        for proc in relays:
            if proc.alive():
                proc.signal(signal.SIGCONT)
            proc.stop()
    committed, everything = proofs(kafka_service, prefix, changes, mysql_service)
    assert_exactly_once(committed, everything, f"{mode}: SIGKILL and SIGSTOP takeovers")


def test_a_broker_restarted_in_the_middle_of_a_transaction_loses_and_repeats_nothing_exactly_once(
    mysql_service: Any, spare_broker: services.KafkaCluster, shards: str, tmp_path: Path
) -> None:
    prefix = shards
    bootstrap = spare_broker.service.bootstrap_servers
    conn = mysql_service.connect()
    start = master_position(conn)
    conn.close()
    cfg = relay_config(
        tmp_path, mysql_service, bootstrap, prefix, start, "exactly-once", delivery_timeout_seconds=30.0
    )
    writer = Writer(mysql_service, prefix, SHARDS, TABLES, rate=250.0, seed=31)
    relays: list[RelayProcess] = []

    def supervise() -> RelayProcess:
        """The running relay; one that stopped (status 2 after the broker went) is started again, as a
        supervisor does."""
        current = relays[-1] if relays else None
        if current is None or not current.alive():
            relays.append(RelayProcess(cfg, tmp_path / f"relay-{len(relays)}.log").start())
        return relays[-1]

    try:
        relay = supervise()
        wait_for(lambda: relay.status().get("state") == "running", 60, "the relay running")
        writer.start()
        for how in ("SIGTERM", "SIGKILL"):
            relay = supervise()
            wait_for(lambda r=relay: r.status().get("batches_acked", 0) >= 3, 120, "the relay publishing")
            stop = spare_broker.stop_node if how == "SIGTERM" else spare_broker.kill
            with_transaction_open(relay, lambda _r, stop=stop: stop(1))
            spare_broker.start_node(1)
            relay = supervise()
            wait_for(lambda r=relay: r.status().get("batches_acked", 0) >= 3, 180, f"publishing after {how}")
        changes = writer.stop()
        conn = mysql_service.connect()
        end = master_position(conn)
        conn.close()
        wait_for(lambda: caught_up(supervise(), end), 180, "the relay caught up")
    finally:
        writer.halt.set()
        for proc in relays:
            proc.stop()
    committed, everything = proofs(spare_broker.service, prefix, changes, mysql_service)
    restarts = len(relays) - 1
    # A relay that rode out a restart committed its open transaction once the broker was back: nothing was
    # aborted, legitimately. Aborted records are required only where a relay stopped with one open.
    assert_exactly_once(
        committed,
        everything,
        f"exactly-once, broker restarted twice ({restarts} relay restarts)",
        aborted=restarts > 0,
    )
