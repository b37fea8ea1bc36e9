"""The transaction topic (``kafka.transaction_topic``) on real MariaDB and the real broker.

A writer commits multi-statement transactions across two logical tables (``orders``, canal-json, sharded
over two physical tables; ``customers``, debezium-json) — some only on a table the mapping drops — and
notes each one's GTID (``@@last_gtid``) and rows per logical table. Batches are tiny (2 entries), so a
transaction spans several batches. An independent consumer then reassembles complete transactions from
the data topics and the transaction topic:

- every transaction that published rows has a BEGIN and an END keyed by the source id, BEGIN at a lower
  offset than END; a filtered-away transaction has neither; no other id appears;
- the END's ``event_count``, ``data_collections`` and ``topics`` equal what the writer committed, and so do
  the data records carrying the transaction's id (``relay.txn.id``), with ``relay.txn.order`` exactly 1..n and
  ``relay.txn.table_order`` 1..k per table (the debezium-json ``transaction`` block the same);
- END after every row, in offset terms: a consumer that follows the transaction topic while the relay
  runs reads the data topics to their end (the broker's end of partition) each time it has seen new ENDs;
  every row of those transactions is already there, below that end.

Snapshot reads (an initial snapshot) carry no transaction metadata and make no BEGIN/END.

Also in transactional mode (``read_committed``), in exactly-once mode (Apache Kafka hides aborted records),
and across a crash: the relay
is SIGKILLed while its saved position is inside a large transaction and restarted; the ENDs (repeated or not)
all count the whole transaction, and the rows, de-duplicated by change identity, carry the same transaction id
and orders in every copy. Every wait has a deadline.
"""

from __future__ import annotations

import json
import random
import signal
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import Consumer, TopicPartition

from relay.dev.services import KafkaService
from tests.integration.relay_harness import (
    Rec,
    RelayProcess,
    master_position,
    partitions_of,
    read_to_end,
    read_topic,
    wait_for,
    write_configs,
)

ORDERS_SHARDS = 2


@dataclass
class Committed:
    """One transaction the writer committed: its GTID and rows per logical table (``db.table``)."""

    gtid: str
    counts: Counter[str] = field(default_factory=Counter)


def mapping(prefix: str) -> dict[str, Any]:
    return {
        "version": 1,
        "topics": {"partitions": 3, "create": True},
        "unmapped": {"action": "drop"},
        "logical_dbs": {
            prefix: {
                "physical": [f"{prefix}_\\d+"],
                "tables": {
                    "orders": {"physical": ["orders_\\d+"], "topic": f"{prefix}.orders"},
                    "customers": {
                        "physical": ["customers"],
                        "topic": f"{prefix}.customers",
                        "codec": "debezium-json",
                    },
                },
            }
        },
    }


@pytest.fixture
def schema(mysql_service: Any) -> Iterator[str]:
    prefix = f"txm{time.monotonic_ns() % 10**8}"
    conn = mysql_service.connect()
    with conn.cursor() as cur:
        for d in range(ORDERS_SHARDS):
            cur.execute(f"CREATE DATABASE {prefix}_{d:02d}")
            cur.execute(
                f"CREATE TABLE {prefix}_{d:02d}.orders_{d:02d} (id BIGINT PRIMARY KEY, note VARCHAR(64))"
            )
        cur.execute(f"CREATE TABLE {prefix}_00.customers (id INT PRIMARY KEY, name VARCHAR(64))")
        cur.execute(f"CREATE DATABASE {prefix}_dropped")  # not matched by the mapping: dropped
        cur.execute(f"CREATE TABLE {prefix}_dropped.noise (id INT PRIMARY KEY, v INT)")
    try:
        yield prefix
    finally:
        with conn.cursor() as cur:
            for d in range(ORDERS_SHARDS):
                cur.execute(f"DROP DATABASE IF EXISTS {prefix}_{d:02d}")
            cur.execute(f"DROP DATABASE IF EXISTS {prefix}_dropped")
        conn.close()


def configure(
    tmp: Path,
    mysql: Any,
    kafka: KafkaService,
    prefix: str,
    positions: dict[str, Any] | None = None,
    **kafka_extra: Any,
) -> Path:
    conn = mysql.connect()
    try:
        start = master_position(conn)
    finally:
        conn.close()
    return write_configs(
        tmp,
        mysql=mysql,
        bootstrap=kafka.bootstrap_servers,
        mapping=mapping(prefix),
        start=start,
        instance=prefix,
        include=f"{prefix}_.*\\..*",
        extra={
            "kafka": {
                "settings": {"batch.num.messages": "1"},
                "transaction_topic": f"{prefix}.transactions",
                **kafka_extra,
            },
            "store": {"buffer_size": 256, "batch_mode": "ITEMSIZE"},
            # 2 entries a batch: BEGIN, rows and END of one transaction fall into several batches
            "publish": {"batch_size": 2, "drain_seconds": 5.0, "retry": {"initial": 0.2, "maximum": 2.0}},
            "logging": {"level": "INFO"},
            "positions": {
                "backend": "kafka" if kafka_extra.get("exactly_once") else "file",
                **(positions or {}),
            },
        },
    )


class TxnWriter:
    """Commits transactions on the source and notes what each one changed."""

    def __init__(self, mysql: Any, prefix: str, seed: int) -> None:
        self.conn = mysql.connect()
        self.prefix = prefix
        self.rand = random.Random(seed)
        self.next_id = 1
        self.orders: list[tuple[int, int]] = []  # (shard, id) of rows present
        self.customers: list[int] = []
        self.committed: list[Committed] = []
        self.dropped: list[str] = []  # GTIDs of transactions on the dropped table only

    def close(self) -> None:
        self.conn.close()

    def _gtid(self, cur: Any) -> str:
        cur.execute("SELECT @@last_gtid")
        return str(cur.fetchone()[0])

    def transaction(self, statements: int, rows: int = 3) -> Committed:
        """A transaction of ``statements`` statements over orders (both shards) and customers."""
        counts: Counter[str] = Counter()
        p = self.prefix
        with self.conn.cursor() as cur:
            cur.execute("BEGIN")
            for _ in range(statements):
                kind = self.rand.choice(["insert", "insert", "update", "delete", "customer"])
                if kind == "update" and self.orders:
                    shard, rid = self.rand.choice(self.orders)
                    n = cur.execute(
                        f"UPDATE {p}_{shard:02d}.orders_{shard:02d} SET note = %s WHERE id = %s",
                        (f"u{self.next_id}", rid),
                    )
                    self.next_id += 1
                    counts[f"{p}.orders"] += n
                elif kind == "delete" and self.orders:
                    shard, rid = self.orders.pop(self.rand.randrange(len(self.orders)))
                    counts[f"{p}.orders"] += cur.execute(
                        f"DELETE FROM {p}_{shard:02d}.orders_{shard:02d} WHERE id = %s", (rid,)
                    )
                elif kind == "customer":
                    cid = self.next_id
                    self.next_id += 1
                    counts[f"{p}.customers"] += cur.execute(
                        f"INSERT INTO {p}_00.customers VALUES (%s, %s)", (cid, f"c{cid}")
                    )
                    self.customers.append(cid)
                else:
                    shard = self.rand.randrange(ORDERS_SHARDS)
                    values = []
                    for _ in range(self.rand.randint(1, rows)):
                        values.append((self.next_id, f"n{self.next_id}"))
                        self.orders.append((shard, self.next_id))
                        self.next_id += 1
                    counts[f"{p}.orders"] += cur.execute(
                        f"INSERT INTO {p}_{shard:02d}.orders_{shard:02d} VALUES "
                        + ",".join(["(%s, %s)"] * len(values)),
                        [v for pair in values for v in pair],
                    )
            cur.execute("COMMIT")
            done = Committed(self._gtid(cur), counts)
        self.committed.append(done)
        return done

    def dropped_only(self) -> None:
        """A transaction on the table the mapping drops: it must produce nothing."""
        with self.conn.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute(f"INSERT INTO {self.prefix}_dropped.noise VALUES (%s, 1)", (self.next_id,))
            self.next_id += 1
            cur.execute("COMMIT")
            self.dropped.append(self._gtid(cur))


class Follower(threading.Thread):
    """Follows the transaction topic while the relay runs. Each time it has seen new ENDs it reads the
    data topics to their end and records, per END, how many rows of that transaction were already there:
    END after every row means all of them are, every time."""

    def __init__(self, bootstrap: str, topic: str, data_topics: list[str], isolation: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.data_topics = bootstrap, topic, data_topics
        self.isolation = isolation
        self.seen_at_end: dict[str, list[int]] = defaultdict(list)  # txn id → rows present, per END seen
        self.ends: dict[str, int] = {}  # txn id → event_count
        self.stopping = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._follow()
        except BaseException as exc:
            self.error = exc

    def _follow(self) -> None:
        wait_for(lambda: partitions_of(self.bootstrap, self.topic) > 0, 120, f"{self.topic} exists")
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"relay-test-follow-{time.monotonic_ns()}",
                "enable.auto.commit": False,
                "isolation.level": self.isolation,
            }
        )
        n = partitions_of(self.bootstrap, self.topic)
        consumer.assign([TopicPartition(self.topic, p, 0) for p in range(n)])
        checked = time.monotonic()
        try:
            while not self.stopping.is_set():
                if time.monotonic() - checked > 2:  # a topic just created may report only some partitions
                    checked = time.monotonic()
                    more = partitions_of(self.bootstrap, self.topic)
                    if more > n:
                        consumer.incremental_assign(
                            [TopicPartition(self.topic, p, 0) for p in range(n, more)]
                        )
                        n = more
                new: list[dict[str, Any]] = []
                msg = consumer.poll(0.5)
                while msg is not None:
                    if msg.error() is None and msg.value():
                        value = json.loads(msg.value())
                        if value["status"] == "END":
                            new.append(value)
                    msg = consumer.poll(0.05)
                if new:
                    self._check(new)
        finally:
            consumer.close()

    def _check(self, ends: list[dict[str, Any]]) -> None:
        present: Counter[str] = Counter()
        for topic in self.data_topics:
            if partitions_of(self.bootstrap, topic) == 0:
                continue
            seen: set[tuple[bytes, bytes, bytes]] = set()
            for rec in read_to_end(self.bootstrap, topic, timeout=120):
                txn = rec.headers.get("relay.txn.id")
                ident = (
                    rec.headers.get("relay.sequence", b""),
                    rec.headers.get("relay.part", b"0"),
                    txn or b"",
                )
                if txn is not None and rec.value is not None and ident not in seen:
                    seen.add(ident)
                    present[txn.decode()] += 1
        for end in ends:
            self.ends[end["id"]] = end["event_count"]
            self.seen_at_end[end["id"]].append(present[end["id"]])


def txn_records(bootstrap: str, topic: str) -> list[Rec]:
    records = read_to_end(bootstrap, topic, timeout=120)
    return [r for r in records if r.value is not None]


def reassemble(
    bootstrap: str, prefix: str, writer: TxnWriter, *, dedup: bool
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, list[dict[str, Any]]]]:
    """Check every committed transaction against what reached Kafka; returns (BEGINs, ENDs) by id."""
    topic = f"{prefix}.transactions"
    meta = txn_records(bootstrap, topic)
    assert {r.partition for r in meta} == {meta[0].partition}, "keyed by the source id: one partition"
    assert {r.key for r in meta} == {prefix.encode()}
    begins: dict[str, list[dict[str, Any]]] = defaultdict(list)
    ends: dict[str, list[dict[str, Any]]] = defaultdict(list)
    first_begin: dict[str, int] = {}
    for rec in sorted(meta, key=lambda r: r.offset):
        value = rec.json
        assert rec.headers["relay.txn.status"].decode() == value["status"]
        assert value["source_id"] == prefix
        if value["status"] == "BEGIN":
            begins[value["id"]].append(value)
            first_begin.setdefault(value["id"], rec.offset)
        else:
            assert value["id"] in first_begin, f"END of {value['id']} at {rec.offset} before any BEGIN"
            ends[value["id"]].append(value)
    committed = {c.gtid: c for c in writer.committed if sum(c.counts.values())}
    assert set(ends) == set(committed), set(ends) ^ set(committed)
    assert set(begins) == set(committed)
    assert not set(writer.dropped) & (set(ends) | set(begins)), "a filtered-away transaction has metadata"
    # the data records, grouped by transaction id (each change identity once)
    rows: dict[str, dict[tuple[str, int, int], Rec]] = defaultdict(dict)
    for name in ("orders", "customers"):
        for rec in read_to_end(bootstrap, f"{prefix}.{name}", timeout=120):
            if rec.value is None:
                continue  # a tombstone
            h = rec.headers
            if h.get("relay.snapshot") == b"true":  # a snapshot read: no source transaction
                assert not {k for k in h if k.startswith("relay.txn.")}, f"{rec.topic}:{rec.offset}: {h}"
                if rec.topic.endswith(".customers"):
                    assert rec.json["payload"]["transaction"] is None
                continue
            assert "relay.txn.id" in h, f"{rec.topic}:{rec.offset} without its transaction id"
            ident = (h["relay.source.id"].decode(), int(h["relay.sequence"]), int(h.get("relay.part", b"0")))
            group = rows[h["relay.txn.id"].decode()]
            if ident in group:
                assert dedup, f"{ident} published twice"
                seen = group[ident].headers
                assert all(
                    seen[k] == h[k] for k in ("relay.txn.id", "relay.txn.order", "relay.txn.table_order")
                )
                continue
            group[ident] = rec
    for gtid, c in committed.items():
        expected = {t: n for t, n in c.counts.items() if n}
        for end in ends[gtid]:  # repeated after a restart: every copy counts the whole transaction
            assert end["event_count"] == sum(expected.values()), (gtid, end)
            assert {d["data_collection"]: d["event_count"] for d in end["data_collections"]} == expected
        got = list(rows[gtid].values())
        assert Counter(
            f"{r.headers['relay.db'].decode()}.{r.headers['relay.table'].decode()}" for r in got
        ) == Counter(expected)
        for end in ends[gtid]:  # the per-topic counts a consumer of some topics relies on
            assert {t["topic"]: t["event_count"] for t in end["topics"]} == Counter(r.topic for r in got)
        assert sorted(int(r.headers["relay.txn.order"]) for r in got) == list(range(1, len(got) + 1))
        per_table: dict[str, list[int]] = defaultdict(list)
        for r in got:
            per_table[r.headers["relay.table"].decode()].append(int(r.headers["relay.txn.table_order"]))
            if r.topic.endswith(".customers"):
                block = r.json["payload"]["transaction"]
                assert block == {
                    "id": gtid,
                    "total_order": int(r.headers["relay.txn.order"]),
                    "data_collection_order": int(r.headers["relay.txn.table_order"]),
                }
        assert all(sorted(v) == list(range(1, len(v) + 1)) for v in per_table.values())
        # the identity range: the first and last data record of the transaction
        idents = sorted(
            (int(r.headers["relay.sequence"]), int(r.headers.get("relay.part", b"0"))) for r in got
        )
        end = ends[gtid][-1]
        assert (end["first_sequence"], end["first_part"]) == idents[0]
        assert (end["last_sequence"], end["last_part"]) == idents[-1]
    return begins, ends


@pytest.mark.parametrize("mode", ["idempotent", "transactional", "exactly-once"])
def test_whole_transactions_reassemble_from_kafka(
    mode: str, tmp_path: Path, mysql_service: Any, kafka_service: KafkaService, schema: str
) -> None:
    bootstrap = kafka_service.bootstrap_servers
    extra: dict[str, Any] = {}
    if mode == "exactly-once":
        extra = {"transactions": True, "exactly_once": True, "positions_topic": f"{schema}.positions"}
    elif mode == "transactional":
        extra = {"transactions": True}
    cfg = configure(tmp_path, mysql_service, kafka_service, schema, **extra)
    writer = TxnWriter(mysql_service, schema, seed=30)
    relay = RelayProcess(cfg, tmp_path / "relay.log").start()
    isolation = "read_uncommitted" if mode == "idempotent" else "read_committed"
    follower = Follower(
        bootstrap, f"{schema}.transactions", [f"{schema}.orders", f"{schema}.customers"], isolation
    )
    follower.start()
    try:
        for i in range(16):
            writer.transaction(statements=1 + i % 5)
            if i % 4 == 1:
                writer.dropped_only()
        expected = {c.gtid for c in writer.committed if sum(c.counts.values())}
        wait_for(
            lambda: set(follower.ends) >= expected or follower.error is not None, 240, "every END followed"
        )
        follower.stopping.set()
        follower.join(60)
        assert follower.error is None, follower.error
        for gtid in expected:  # when its END was readable, every row of it already was
            assert all(n == follower.ends[gtid] for n in follower.seen_at_end[gtid]), (
                gtid,
                follower.ends[gtid],
                follower.seen_at_end[gtid],
            )
        reassemble(bootstrap, schema, writer, dedup=False)
        relay.signal(signal.SIGTERM)
        assert relay.wait(60) == 0
    finally:
        follower.stopping.set()
        relay.stop()
        writer.close()


def test_snapshot_reads_make_no_transaction_metadata(
    tmp_path: Path, mysql_service: Any, kafka_service: KafkaService, schema: str
) -> None:
    """Rows read by the initial snapshot carry no ``relay.txn.*`` (debezium-json: ``transaction`` null) and
    make no BEGIN/END (Debezium emits none for snapshot reads); the live transactions after it do."""
    bootstrap = kafka_service.bootstrap_servers
    writer = TxnWriter(mysql_service, schema, seed=32)
    with writer.conn.cursor() as cur:
        cur.execute(f"INSERT INTO {schema}_00.orders_00 VALUES (900001, 's1'), (900002, 's2')")
        cur.execute(f"INSERT INTO {schema}_00.customers VALUES (900003, 's3')")
    writer.committed.clear()
    cfg = configure(tmp_path, mysql_service, kafka_service, schema)
    data = yaml.safe_load(cfg.read_text())
    data["snapshot"] = {"mode": "initial"}
    cfg.write_text(yaml.safe_dump(data))
    relay = RelayProcess(cfg, tmp_path / "relay.log").start()
    try:
        snapshot = read_topic(
            bootstrap,
            f"{schema}.customers",
            lambda rs: any(r.headers.get("relay.snapshot") == b"true" for r in rs),
            timeout=240,
        )
        assert snapshot
        for i in range(4):
            writer.transaction(statements=2 + i)
        expected = {c.gtid for c in writer.committed if sum(c.counts.values())}

        def all_ends() -> bool:
            metas = (
                txn_records(bootstrap, f"{schema}.transactions")
                if partitions_of(bootstrap, f"{schema}.transactions")
                else []
            )
            return {r.json["id"] for r in metas if r.json["status"] == "END"} >= expected

        wait_for(all_ends, 240, "every live transaction's END", interval=1.0)
        begins, _ = reassemble(bootstrap, schema, writer, dedup=False)  # also: snapshot reads carry no txn
        assert set(begins) == expected  # nothing for the snapshot
        orders = read_to_end(bootstrap, f"{schema}.orders")
        assert sum(r.headers.get("relay.snapshot") == b"true" for r in orders) == 2
        relay.signal(signal.SIGTERM)
        assert relay.wait(60) == 0
    finally:
        relay.stop()
        writer.close()


def test_a_crash_inside_a_transaction_leaves_nothing_inconsistent(
    tmp_path: Path, mysql_service: Any, kafka_service: KafkaService, schema: str
) -> None:
    bootstrap = kafka_service.bootstrap_servers
    cfg = configure(tmp_path, mysql_service, kafka_service, schema, positions={"save_interval_seconds": 0})
    writer = TxnWriter(mysql_service, schema, seed=31)
    relay = RelayProcess(cfg, tmp_path / "relay0.log").start()
    try:
        writer.transaction(statements=3)
        big = writer.transaction(statements=200, rows=8)  # ~200 row events: about 100 batches
        writer.transaction(statements=4)

        def inside() -> bool:  # the saved position is inside the big transaction, with its counts
            text = relay.position()
            if not text:
                return False
            point = json.loads(text)
            state = point.get("extra", {}).get("transaction")
            return point["skip"] > 0 and state is not None and state["id"] == big.gtid and state["total"] > 0

        wait_for(inside, 240, "a position saved inside the large transaction", interval=0.01)
        relay.signal(signal.SIGKILL)
        relay.wait(30)
        saved = json.loads(relay.position())["extra"]["transaction"]
        assert saved["id"] == big.gtid and 0 < saved["total"] < sum(big.counts.values())
        again = RelayProcess(cfg, tmp_path / "relay1.log").start()
        try:
            writer.transaction(statements=2)
            expected = {c.gtid for c in writer.committed if sum(c.counts.values())}

            def all_ends() -> bool:
                ids = {
                    r.json["id"]
                    for r in txn_records(bootstrap, f"{schema}.transactions")
                    if r.json["status"] == "END"
                }
                return ids >= expected

            wait_for(all_ends, 300, "every transaction's END after the restart", interval=1.0)
            begins, _ = reassemble(bootstrap, schema, writer, dedup=True)
            assert len(begins[big.gtid]) == 1, "the BEGIN was acknowledged before the crash: not repeated"
            again.signal(signal.SIGTERM)
            assert again.wait(60) == 0
        finally:
            again.stop()
    finally:
        relay.stop()
        writer.close()
