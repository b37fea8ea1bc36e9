"""The cluster proof tests' harness (``test_cluster_proof.py``, ``test_cluster_cut.py``): nodes as real
``relay cluster run`` processes over instances defined in ZooKeeper, in transactional mode (exactly-once
where the broker hides aborted records), writers that pause for a checkpoint, an observer of the
instances' epochs in ZooKeeper, and the independent ``read_committed`` consumer's checks against
``SELECT`` and the broker's own record batches (``tests.integration.kafka_batches``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from relay.cluster.definition import parse_definition
from relay.cluster.layout import read_view
from relay.cluster.store import ZooKeeperInstanceStore
from relay.dev import services
from relay.errors import ConfigError
from relay.kafka.positions import KafkaPositionConfig, prove_aborted_records_hidden
from tests.integration import kafka_batches
from tests.integration.relay_harness import (
    Rec,
    Writer,
    apply_records,
    check_exact_repeats,
    create_shards,
    drop_shards,
    identity,
    master_position,
    partitions_of,
    row_sequences,
    select_orders,
)
from tests.integration.test_cluster_nodes import PASSWORD_ENV, Fleet, NodeProcess, _kill_children

SHARDS, TABLES = 1, 2


class PausingWriter(Writer):
    """``Writer`` that can be paused between statements (``pause``/``resume``) for a checkpoint."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hold = threading.Event()
        self.held = threading.Event()

    def run(self) -> None:
        try:
            conn = self.service.connect()
            try:
                with conn.cursor() as cur:
                    while not self.halt.wait(1.0 / self.rate):
                        if self.hold.is_set():
                            self.held.set()
                            continue
                        self._write_one(cur)
            finally:
                conn.close()
        except BaseException as exc:
            self.error = exc
            self.held.set()

    def pause(self) -> int:
        """Stop writing (the statement under way completes); the committed changes so far."""
        self.held.clear()
        self.hold.set()
        assert self.held.wait(30), f"{self.prefix}: the writer did not pause"
        if self.error is not None:
            raise self.error
        return self.changes

    def resume(self) -> None:
        self.hold.clear()


class EpochObserver(threading.Thread):
    """Samples every instance's HA ``running`` record (node, epoch) until stopped — ZooKeeper's account of
    who ran each instance when."""

    def __init__(self, zk_hosts: str, root: str, instances: list[str]) -> None:
        super().__init__(name="epoch-observer", daemon=True)
        self.root, self.instances = root, instances
        self.client = KazooClient(hosts=zk_hosts)
        self.client.start(timeout=15)
        self.halt = threading.Event()
        self.seen: dict[str, list[tuple[int, str]]] = {name: [] for name in instances}  # (epoch, node)
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.halt.wait(0.1):
                for name in self.instances:
                    try:
                        data, _ = self.client.get(f"{self.root}/destinations/{name}/running")
                    except NoNodeError:
                        continue
                    info = json.loads(data)
                    sample = (int(info["epoch"]), str(info["member"]))
                    history = self.seen[name]
                    if not history or history[-1] != sample:
                        history.append(sample)
        except BaseException as exc:
            self.error = exc

    def stop(self) -> None:
        self.halt.set()
        self.join(30)
        self.client.stop()
        self.client.close()

    def elections(self, name: str) -> int:
        """How many terms the instance had: its ``epoch`` node's data version (one per election)."""
        _, stat = self.client.get(f"{self.root}/destinations/{name}/epoch")
        return int(stat.version)

    def check(self) -> None:
        assert self.error is None, f"the observer failed: {self.error!r}"
        for name, history in self.seen.items():
            epochs = [epoch for epoch, _ in history]
            assert epochs == sorted(set(epochs)), f"{name}: epochs {history} did not only grow"
            nodes: dict[int, set[str]] = {}
            for epoch, node in history:
                nodes.setdefault(epoch, set()).add(node)
            twice = {e: n for e, n in nodes.items() if len(n) > 1}
            assert not twice, f"{name}: one epoch on two nodes: {twice}"


@dataclass
class Proof(Fleet):
    exactly_once: bool = False  # positions in the records' transactions (a broker hiding aborted records)
    capacity: int = 6
    session: float = 6.0
    server_ids: int = 7800  # the instances' replica server ids: server_ids + i
    zk_of: dict[str, str] = field(default_factory=dict)  # a node's own ZooKeeper address (a proxy)
    writers: dict[str, PausingWriter] = field(default_factory=dict)
    removed: set[str] = field(default_factory=set)
    checkpoints: list[str] = field(default_factory=list)

    def node(self, name: str) -> NodeProcess:
        config = self.tmp / f"{name}.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "node": {"name": name, "capacity": self.capacity, "state_dir": str(self.tmp / name)},
                    "zookeeper": {
                        "hosts": self.zk_of.get(name, self.zk_hosts),
                        "root": self.root,
                        "session_timeout_seconds": self.session,
                    },
                    "logging": {"level": "info"},
                    "metrics": {
                        "port": self.ports.setdefault(name, services.free_port()),
                        "host": "127.0.0.1",
                    },
                    "children": {
                        "stop_timeout_seconds": 20,
                        "restart_backoff_seconds": 0.5,
                        "status_interval_seconds": 0.5,
                    },
                }
            )
        )
        env = {**os.environ, PASSWORD_ENV: self.mysql.replication_password}
        proc = NodeProcess(name, config, self.tmp / f"{name}.log", env).start()
        self.nodes[name] = proc
        return proc

    def definition(self, i: int, prefix: str, start: tuple[str, int]) -> str:
        data = yaml.safe_load(super().definition(i, prefix, start))
        data["source"]["server_id"] = self.server_ids + i
        data["kafka"]["transactions"] = True  # transactional.id canal-relay-<instance>
        if self.exactly_once:
            data["kafka"]["exactly_once"] = True
            data["kafka"]["positions_topic"] = f"{prefix}.positions"
            data["positions"] = {"backend": "kafka"}
        return str(yaml.safe_dump(data))

    def settled(self, live: set[str]) -> bool:
        report = self.report()
        instances = report["instances"]
        return (
            set(instances) == set(self.prefixes) - self.removed
            and live <= set(report["nodes"])  # every live node registered (a thawed one: again)
            and all(i["node"] in live and i["running_on"] == i["node"] for i in instances.values())
            and report["balanced"]
            and not report["pending_moves"]
        )

    def active(self, instance: str) -> dict[str, Any] | None:
        """The instance's HA ``running`` record (who is active), None when nobody is — read once (the
        record may go between an ``exists`` and a ``get``)."""
        client = KazooClient(hosts=self.zk_hosts)
        client.start(timeout=15)
        try:
            return dict(json.loads(client.get(f"{self.root}/destinations/{instance}/running")[0]))
        except NoNodeError:
            return None
        finally:
            client.stop()
            client.close()

    def where(self) -> list[str]:
        return ["--zookeeper", self.zk_hosts, "--root", self.root]

    def define(self) -> None:
        """Every instance, from the source's current binlog end."""
        store = ZooKeeperInstanceStore(self.zk_hosts, self.root)
        try:
            start = master_position(self.conn)
            for i, prefix in enumerate(self.prefixes):
                store.add(parse_definition(prefix, self.definition(i, prefix, start)))
        finally:
            store.close()

    def write(self, rate: float, seed: int) -> None:
        """A paced writer per instance."""
        for k, prefix in enumerate(self.prefixes):
            self.writers[prefix] = PausingWriter(self.mysql, prefix, SHARDS, TABLES, rate=rate, seed=seed + k)
            self.writers[prefix].start()

    def pid(self, node: str) -> int:
        popen = self.nodes[node].popen
        assert popen is not None
        return popen.pid


@pytest.fixture(scope="session")
def aborted_visible(kafka_service: Any) -> str | None:
    """Why the session's broker cannot run exactly-once mode (the relay's own start-up probe), or None
    (Apache Kafka hides aborted records: the proofs run in exactly-once mode)."""
    config = KafkaPositionConfig(
        kafka_service.bootstrap_servers, f"relay-test-probe-{uuid.uuid4().hex[:8]}", "t", "relay-test"
    )
    try:
        prove_aborted_records_hidden(config)
    except ConfigError as exc:
        return str(exc)
    return None


@contextlib.contextmanager
def open_proof(
    servers: tuple[Any, Any, Any],
    tmp_path: Path,
    instances: int,
    aborted_visible: str | None,
    **settings: Any,
) -> Iterator[Proof]:
    """A ``Proof`` over ``instances`` fresh databases; every process it started is gone after it."""
    mysql_service, kafka_service, zk_service = servers
    tag = f"pf{time.monotonic_ns() % 10**7}"
    prefixes = [f"{tag}i{i}" for i in range(instances)]
    conn = mysql_service.connect()
    for prefix in prefixes:
        create_shards(conn, prefix, SHARDS, TABLES)
    made = Proof(
        tmp_path,
        str(zk_service.hosts),
        f"/relay-test/{uuid.uuid4().hex}",
        mysql_service,
        kafka_service.bootstrap_servers,
        conn,
        prefixes,
        exactly_once=aborted_visible is None,
        **settings,
    )
    print(
        "exactly-once mode"
        if made.exactly_once
        else f"transactional mode (this broker cannot run exactly-once: {aborted_visible})"
    )
    try:
        yield made
    finally:
        _clean_up(made, prefixes)


def _clean_up(made: Proof, prefixes: list[str]) -> None:
    conn, tmp_path = made.conn, made.tmp
    for writer in made.writers.values():
        writer.halt.set()
        writer.join(30)
    for proc in made.nodes.values():
        if proc.popen is not None and proc.alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.popen.pid, signal.SIGCONT)
                proc.popen.send_signal(signal.SIGKILL)
            proc.popen.wait(30)
    _kill_children(tmp_path)
    for prefix in prefixes:
        drop_shards(conn, prefix, SHARDS)
    conn.close()


# --- the independent consumer's checks ---------------------------------------------------------------


def read_committed(bootstrap: str, topic: str, wanted: int, timeout: float = 180.0) -> list[Rec]:
    """Every record of ``topic`` a ``read_committed`` consumer sees, reading from the start until
    ``wanted`` distinct row changes are there (then to the end of every partition)."""
    deadline = time.monotonic() + timeout
    while (n := partitions_of(bootstrap, topic)) == 0:
        assert time.monotonic() < deadline, f"topic {topic} never appeared"
        time.sleep(0.2)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"relay-proof-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(n)])
    out: list[Rec] = []
    seen: set[int] = set()
    ended: set[int] = set()
    try:
        while len(seen) < wanted or len(ended) < n:
            if time.monotonic() > deadline:
                raise AssertionError(f"{topic}: {len(seen)} of {wanted} changes after {timeout:.0f} s")
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    ended.add(int(msg.partition() or 0))
                    continue
                raise KafkaException(err)
            ended.discard(int(msg.partition() or 0))
            rec = Rec(
                msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value(), dict(msg.headers() or [])
            )
            out.append(rec)
            seen.update(row_sequences([rec]))
    finally:
        consumer.close()
    return out


Writers = dict[tuple[int, int], kafka_batches.Writer]  # (partition, offset) -> who wrote the record


def committed_view(bootstrap: str, records: list[Rec]) -> tuple[list[Rec], Writers]:
    """The records a ``read_committed`` reader sees (those of committed transactions, whatever this
    broker delivered), in (partition, offset) order, and who wrote each record."""
    by_partition: dict[int, list[Rec]] = {}
    for rec in records:
        by_partition.setdefault(rec.partition, []).append(rec)
    writers: Writers = {}
    for partition, recs in sorted(by_partition.items()):
        recs.sort(key=lambda r: r.offset)
        batches = kafka_batches.read_batches(bootstrap, recs[0].topic, partition, recs[-1].offset + 1)
        for rec, who in zip(recs, kafka_batches.writers(batches, [r.offset for r in recs]), strict=True):
            writers[(partition, rec.offset)] = who
    kept = [r for r in records if writers[(r.partition, r.offset)].committed]
    return sorted(kept, key=lambda r: (r.partition, r.offset)), writers


def check_instance(
    proof: Proof, observer: EpochObserver, name: str, changes: int, fenced: bool = False
) -> str:
    """The instance's topic against SELECT and its fencing in Kafka; a line for the log. ``fenced``: its
    relay was frozen and replaced — whatever it had sent of an open transaction was aborted by its
    successor's fence (the record batches of an older producer epoch than the partition's newest)."""
    topic = f"{name}.orders"
    seen = read_committed(proof.bootstrap, topic, changes)
    records, writers = committed_view(proof.bootstrap, seen)
    hidden = len(seen) - len(records)
    found = len(row_sequences(records))
    assert found == changes, f"{name}: {found} of {changes} changes"
    repeats = check_repeats(name, records, writers, strict=proof.exactly_once)
    assert apply_records(records) == select_orders(proof.conn, name, SHARDS, TABLES), name
    producers = {writers[(r.partition, r.offset)].producer_id for r in records}
    assert len(producers) == 1, f"{name}: records of producer ids {producers} (one transactional.id)"
    epochs: set[int] = set()
    for partition in {r.partition for r in records}:
        order = [writers[(r.partition, r.offset)].producer_epoch for r in records if r.partition == partition]
        assert order == sorted(order), f"{name}/{partition}: producer epochs go back in offset order: {order}"
        epochs.update(order)
    if fenced:
        newest = {
            p: max(writers[(r.partition, r.offset)].producer_epoch for r in records if r.partition == p)
            for p in {r.partition for r in records}
        }
        for rec in seen:
            who = writers[(rec.partition, rec.offset)]
            assert who.committed or who.producer_epoch < newest[rec.partition], (
                f"{name}: {rec.partition}:{rec.offset} of an aborted transaction by the newest epoch"
            )
    terms = observer.elections(name)
    assert len(epochs) <= terms, f"{name}: {len(epochs)} producer epochs wrote, in {terms} ZooKeeper terms"
    return (
        f"{name}: {changes} changes, {len(records)} committed records ({repeats} repeated; +{hidden} of "
        f"aborted transactions delivered), producer epochs {sorted(epochs)} over {terms} terms"
    )


def check_repeats(name: str, records: list[Rec], writers: Writers, strict: bool) -> int:
    """No change committed twice in exactly-once mode (``strict``). In transactional mode the position is
    saved in ZooKeeper after the commit, so a term that ends between the two (a frozen or killed relay)
    leaves its last committed changes to be published again by the next term: each repeat must then be
    byte-identical, in the same partition, and written by a LATER producer epoch than its first copy —
    never a zombie's late copy. Returns how many repeats there are."""
    repeats = check_exact_repeats(records)  # byte-identical, same partition
    assert not (strict and repeats), f"{name}: {repeats} committed changes repeated in exactly-once mode"
    first: dict[tuple[str, int, int], Rec] = {}
    for rec in records:
        if rec.json["isDdl"]:
            continue
        seen = first.setdefault(identity(rec), rec)
        if seen is not rec:
            later = writers[(rec.partition, rec.offset)].producer_epoch
            assert later > writers[(seen.partition, seen.offset)].producer_epoch, (
                f"{name}: {identity(rec)} at {rec.partition}:{rec.offset} repeats offset {seen.offset} "
                "from the same producer epoch or an older one (a zombie's copy)"
            )
    return repeats


def check_balance(proof: Proof, live: set[str]) -> None:
    """Balanced within one, from ZooKeeper's assignments and from ``relay cluster status --json``."""
    client = KazooClient(hosts=proof.zk_hosts)
    client.start(timeout=15)
    try:
        view = read_view(client, proof.root)
    finally:
        client.stop()
        client.close()
    eligible = {n.name for n in view.placement_nodes() if n.eligible}
    assert eligible == live, f"eligible nodes {eligible}, expected {live}"
    loads = dict.fromkeys(eligible, 0)
    for assignment in view.assignments.values():
        assert assignment.node in loads, f"assigned to {assignment.node}, not an eligible node"
        loads[assignment.node] += 1
    assert sum(loads.values()) == len(proof.prefixes) - len(proof.removed)
    assert max(loads.values()) - min(loads.values()) <= 1, f"unbalanced: {loads}"
    status = proof.cli("status", "--json")
    assert status.returncode == 0, status.stdout + status.stderr
    nodes = json.loads(status.stdout)["nodes"]
    assert {n: nodes[n]["load"] for n in live} == loads, (nodes, loads)


def checkpoint(
    proof: Proof, observer: EpochObserver, live: set[str], step: str, fenced: frozenset[str] = frozenset()
) -> None:
    """Writers paused: every instance's topic checked (``check_instance``), the balance, the epochs."""
    counts = {name: w.pause() for name, w in proof.writers.items() if name not in proof.removed}
    try:
        lines = [check_instance(proof, observer, name, n, name in fenced) for name, n in counts.items()]
        check_balance(proof, live)
        observer.check()
    finally:
        for name in counts:
            proof.writers[name].resume()
    print(f"after {step}:\n  " + "\n  ".join(lines))
    proof.checkpoints.append(step)


def children_of(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def log_since(log: Path, mark: int) -> str:
    return log.read_bytes()[mark:].decode(errors="replace")


def process_state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0]
    except (OSError, IndexError):
        return "Z"
