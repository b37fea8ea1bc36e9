"""Helpers for the relay's end-to-end tests: configs on real services, a topic reader, a sharded workload.

Nothing here is a fake: configs point at the session's MariaDB and broker, ``read_topic`` consumes with
``assign`` from the beginning (Tansu's first subscribe is slow and its high watermark is unreliable, so
reading stops on a condition with a deadline, not at the end offset).
"""

from __future__ import annotations

import contextlib
import json
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import yaml
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from relay.common.mysql import binlog_status
from relay.config.state import POSITION_FILE, STATUS_FILE
from relay.kafka.partitioner import partition_for_key


@dataclass
class Rec:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    headers: dict[str, bytes] = field(default_factory=dict)
    timestamp_ms: int = -1  # the record's timestamp and its type, as confluent_kafka's msg.timestamp()
    timestamp_type: int = 0

    @property
    def json(self) -> dict[str, Any]:
        return dict(json.loads(self.value))


def partitions_of(bootstrap: str, topic: str) -> int:
    meta = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    t = meta.topics.get(topic)
    return 0 if t is None or t.error is not None else len(t.partitions)


def topic_exists(bootstrap: str, topic: str) -> bool:
    meta = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    return topic in meta.topics and meta.topics[topic].error is None


def read_topic(
    bootstrap: str,
    topic: str,
    until: Callable[[list[Rec]], bool],
    timeout: float = 60.0,
) -> list[Rec]:
    """Every record of ``topic`` from the start, reading until ``until(records)`` holds (or the deadline)."""
    deadline = time.monotonic() + timeout
    while partitions_of(bootstrap, topic) == 0:
        if time.monotonic() > deadline:
            raise AssertionError(f"topic {topic} never appeared")
        time.sleep(0.2)
    n = partitions_of(bootstrap, topic)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"relay-test-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(n)])
    out: list[Rec] = []
    try:
        while not until(out):
            if time.monotonic() > deadline:
                raise AssertionError(f"{topic}: condition not met after {timeout}s with {len(out)} records")
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                raise KafkaException(msg.error())
            headers = {k: v for k, v in (msg.headers() or [])}
            ts_type, ts = msg.timestamp()
            out.append(
                Rec(msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value(), headers, ts, ts_type)
            )
    finally:
        consumer.close()
    return out


def read_to_end(bootstrap: str, topic: str, timeout: float = 60.0) -> list[Rec]:
    """Every record ``topic`` holds now: a fresh consumer reads each partition from its start until the
    broker reports its end (a fetch's end of partition, reliable on Tansu too, unlike its high
    watermark). What a producer had delivered before this call is in the result."""
    n = partitions_of(bootstrap, topic)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"relay-test-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(n)])
    deadline = time.monotonic() + timeout
    out: list[Rec] = []
    ended: set[int] = set()
    try:
        while len(ended) < n:
            if time.monotonic() > deadline:
                raise AssertionError(f"{topic}: no end of partitions {set(range(n)) - ended} in {timeout}s")
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
            headers = {k: v for k, v in (msg.headers() or [])}
            ts_type, ts = msg.timestamp()
            out.append(
                Rec(msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value(), headers, ts, ts_type)
            )
    finally:
        consumer.close()
    return out


def write_configs(
    tmp: Path,
    *,
    mysql: Any,
    bootstrap: str,
    mapping: dict[str, Any],
    start: tuple[str, int] | None,
    instance: str = "t",
    include: str = ".*\\..*",
    extra: dict[str, Any] | None = None,
) -> Path:
    """conf/relay.yaml + conf/mapping.yaml under ``tmp``; returns the relay config's path."""
    conf = tmp / "conf"
    conf.mkdir(parents=True, exist_ok=True)
    (conf / "mapping.yaml").write_text(yaml.safe_dump(mapping))
    data: dict[str, Any] = {
        "instance": instance,
        # The relay's files under ``tmp`` whatever the working directory (relay.config.state).
        "state_dir": str(tmp / "var" / "{instance}"),
        "source": {
            "host": mysql.host,
            "port": mysql.port,
            "user": mysql.replication_user,
            "password": mysql.replication_password,
            "server_id": 9000 + (abs(hash(str(tmp))) % 900),
            "start": {"journal": start[0], "offset": start[1]} if start else {},
        },
        "filter": {"include": include},
        "kafka": {"bootstrap_servers": bootstrap, "ddl_topic": f"{instance}.ddl"},
        "status": {"interval_seconds": 0.2},
        "logging": {"level": "DEBUG"},
        # Tests that want the existing rows say so (tests/integration/test_snapshot.py): the tables of
        # a shared server would otherwise be snapshotted by every relay started without a position.
        "snapshot": {"mode": "never"},
    }
    for key, value in (extra or {}).items():
        section = data.setdefault(key, {})
        if isinstance(value, dict):
            section.update(value)
        else:
            data[key] = value
    (conf / "relay.yaml").write_text(yaml.safe_dump(data))
    return conf / "relay.yaml"


def sharded_mapping(prefix: str, partitions: int = 3, codec: str = "canal-json") -> dict[str, Any]:
    """Logical db ``{prefix}`` ← physical ``{prefix}_NN``; ``orders`` ← ``orders_NN`` with its own topic."""
    return {
        "version": 1,
        "defaults": {"codec": codec},
        "topics": {"partitions": partitions, "create": True},
        "unmapped": {"action": "drop"},
        "logical_dbs": {
            prefix: {
                "physical": [f"{prefix}_\\d+"],
                "tables": {
                    "orders": {"physical": ["orders_\\d+"], "topic": f"{prefix}.orders", "tag": "orders"},
                    "customers": {"physical": ["customers"]},
                },
            }
        },
    }


def create_shards(conn: Any, prefix: str, shards: int, tables: int) -> None:
    with conn.cursor() as cur:
        for d in range(shards):
            cur.execute(f"CREATE DATABASE {prefix}_{d:02d}")
            for t in range(tables):
                cur.execute(
                    f"CREATE TABLE {prefix}_{d:02d}.orders_{t:02d} (id BIGINT PRIMARY KEY, "
                    "status VARCHAR(16), amount DECIMAL(12,2), note TEXT) ENGINE=InnoDB"
                )
        cur.execute(
            f"CREATE TABLE {prefix}_00.customers (id INT PRIMARY KEY, name VARCHAR(64)) ENGINE=InnoDB"
        )


def orders_tables(prefix: str, shards: int, tables: int) -> list[str]:
    """The physical ``orders`` tables ``create_shards`` made ("db.table")."""
    return [f"{prefix}_{d:02d}.orders_{t:02d}" for d in range(shards) for t in range(tables)]


def drop_shards(conn: Any, prefix: str, shards: int) -> None:
    with conn.cursor() as cur:
        for d in range(shards):
            cur.execute(f"DROP DATABASE IF EXISTS {prefix}_{d:02d}")


def select_orders(conn: Any, prefix: str, shards: int, tables: int) -> dict[str, dict[str, str | None]]:
    """The logical table's rows as SELECT shows them, keyed by id, values as text."""
    out: dict[str, dict[str, str | None]] = {}
    with conn.cursor() as cur:
        for d in range(shards):
            for t in range(tables):
                cur.execute(
                    f"SELECT CAST(id AS CHAR), status, CAST(amount AS CHAR), note "
                    f"FROM {prefix}_{d:02d}.orders_{t:02d}"
                )
                for row in cur.fetchall():
                    out[row[0]] = {"id": row[0], "status": row[1], "amount": row[2], "note": row[3]}
    return out


def identity(rec: Rec) -> tuple[str, int, int]:
    """A record's change identity: (source id, sequence, part)."""
    msg = rec.json
    return str(msg["source"].get("id", "")), int(msg["sequence"]), int(msg.get("part") or 0)


def same_content(rec: Rec, seen: Rec) -> bool:
    """Whether ``rec`` repeats ``seen`` exactly: the same key, value and headers. A snapshot chunk read again
    at the same binlog place (after a restart) has the same identity and rows but its own read time: its
    ``es``/``ts`` may differ, nothing else."""
    if (rec.key, rec.headers) != (seen.key, seen.headers):
        return False
    if rec.value == seen.value or rec.headers.get("relay.snapshot") != b"true":
        return rec.value == seen.value
    one, two = rec.json, seen.json
    for msg in (one, two):
        msg.pop("es", None)
        msg.pop("ts", None)
    return one == two


def apply_records(records: list[Rec]) -> dict[str, dict[str, str | None]]:
    """Latest state by key, applying row records as a consumer reads them: each partition in offset
    (log) order — never re-sorted by sequence — and checking that order on the way: for each key, every
    new change has a greater sequence than the last one seen, and a repeated identity (source id,
    sequence, part) is a byte-identical repeat of its earlier record (dropped)."""
    state: dict[str, dict[str, str | None]] = {}
    first: dict[tuple[str, int, int], Rec] = {}
    last: dict[str, tuple[tuple[int, int], Rec]] = {}
    for rec in sorted(records, key=lambda r: (r.topic, r.partition, r.offset)):
        msg = rec.json
        if msg["isDdl"]:
            continue
        ident = identity(rec)
        seen = first.setdefault(ident, rec)
        if seen is not rec:
            assert same_content(rec, seen), (
                f"{ident} at {rec.partition}:{rec.offset} repeats {seen.partition}:{seen.offset} "
                "with different content"
            )
            continue
        key = str(json.loads(rec.key or b"{}")["id"])
        order = (ident[1], ident[2])  # (sequence, part): part orders the rows of a transaction payload
        before = last.get(key, ((-1, 0), rec))
        assert order > before[0], (
            f"key {key}: (sequence, part) {order} at {rec.partition}:{rec.offset} comes after "
            f"{before[0]} at {before[1].partition}:{before[1].offset}"
        )
        last[key] = (order, rec)
        if msg["type"] == "DELETE":
            state.pop(key, None)
        else:
            state[key] = {k: msg["data"][0].get(k) for k in ("id", "status", "amount", "note")}
    return state


def expected_partition(key: bytes, partitions: int) -> int:
    return partition_for_key(key, partitions)


# ---------------------------------------------------------------------------------------------------------
# Fault tests: the relay as a child process, a background writer, conditions with deadlines
# ---------------------------------------------------------------------------------------------------------

REPO_ROOT = Path(__file__).resolve().parents[2]


def wait_for(probe: Callable[[], bool], timeout: float, what: str, interval: float = 0.05) -> None:
    """Poll ``probe`` until it holds; fail naming ``what`` at the deadline."""
    deadline = time.monotonic() + timeout
    while not probe():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:.0f}s: {what}")
        time.sleep(interval)


class RelayProcess:
    """``relay run -c CFG`` as a child process; its stderr (the log) appended to ``log_path``.

    Every process started is remembered until ``stop_started`` (called after each test by the fixture in
    tests/conftest.py) makes sure none outlives the test that started it."""

    live: ClassVar[list[RelayProcess]] = []

    @classmethod
    def stop_started(cls) -> None:
        while cls.live:
            cls.live.pop().stop()

    def __init__(self, cfg: Path, log_path: Path) -> None:
        from relay.config.load import load_config

        self.cfg = cfg
        self.log_path = log_path
        config = load_config(cfg)
        self.status_path = config.state_path(STATUS_FILE)
        self.position_path = config.state_path(POSITION_FILE)
        self.popen: subprocess.Popen[bytes] | None = None
        self.started = 0.0

    def start(self) -> RelayProcess:
        with open(self.log_path, "ab") as log:
            self.popen = subprocess.Popen(
                [sys.executable, "-m", "relay.cli", "run", "-c", str(self.cfg)],
                cwd=REPO_ROOT,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.started = time.monotonic()
        RelayProcess.live.append(self)
        return self

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def signal(self, sig: int) -> None:
        assert self.popen is not None
        self.popen.send_signal(sig)

    def wait(self, timeout: float) -> int:
        """The exit status; a relay still running after ``timeout`` fails the test with its log's tail."""
        assert self.popen is not None
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the relay still runs after {timeout} s:\n{self.stacks()}") from None

    def stacks(self) -> str:
        """The log's tail, then every thread's stack (``relay run`` dumps them on SIGUSR1)."""
        tail = self.log()[-4000:]
        size = len(self.log())
        with contextlib.suppress(ProcessLookupError):
            self.signal(signal.SIGUSR1)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and "Current thread" not in self.log()[size:]:
            time.sleep(0.1)
        return f"{tail}\n--- thread stacks after SIGUSR1 ---\n{self.log()[size:][-12000:]}"

    def stop(self) -> None:
        """Make sure the child is gone (test clean-up): SIGKILL if it still runs."""
        if self.alive():
            self.signal(signal.SIGKILL)
            self.wait(10)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def status(self) -> dict[str, Any]:
        """This process's status file ({} while the file is absent or written by an earlier process)."""
        try:
            data = json.loads(self.status_path.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) and data.get("pid") == self.pid else {}

    def position(self) -> str:
        """The saved position file's text ("" before the first save)."""
        try:
            return self.position_path.read_text()
        except FileNotFoundError:
            return ""


class Writer(threading.Thread):
    """Writes row changes to the sharded ``orders`` tables until stopped, counting committed row changes.

    A mix of single and multi-row inserts, updates (single and multi-row) and deletes, some in
    multi-statement transactions, paced at about ``rate`` statements a second. ``changes`` counts
    affected rows (``cursor.execute``'s return value) of committed statements only.
    """

    def __init__(
        self, service: Any, prefix: str, shards: int, tables: int, *, rate: float = 400.0, seed: int = 1
    ) -> None:
        super().__init__(name=f"writer-{prefix}", daemon=True)
        self.service, self.prefix, self.shards, self.tables = service, prefix, shards, tables
        self.rate = rate
        self.rng = random.Random(seed)
        self.changes = 0
        self.statements = 0
        self.error: BaseException | None = None
        self.halt = threading.Event()
        self._next_id = 1
        self._live: dict[int, str] = {}  # id -> its physical table

    def stop(self) -> int:
        """Stop writing; returns the committed row changes."""
        self.halt.set()
        self.join(30)
        assert not self.is_alive(), "the writer did not stop"
        if self.error is not None:
            raise self.error
        return self.changes

    def run(self) -> None:
        try:
            conn = self.service.connect()
            try:
                with conn.cursor() as cur:
                    while not self.halt.wait(1.0 / self.rate):
                        self._write_one(cur)
            finally:
                conn.close()
        except BaseException as exc:
            self.error = exc

    def _pick_table(self) -> str:
        d, t = self.rng.randrange(self.shards), self.rng.randrange(self.tables)
        return f"{self.prefix}_{d:02d}.orders_{t:02d}"

    def _write_one(self, cur: Any) -> None:
        op = self.rng.random()
        if op < 0.2:
            cur.execute("BEGIN")
            n = self._insert_rows(cur, 1) + self._update_rows(cur, 3)
            n += self._insert_rows(cur, 2) + self._delete_row(cur)
            cur.execute("COMMIT")
        elif op < 0.5:
            n = self._insert_rows(cur, self.rng.randint(1, 4))
        elif op < 0.8:
            n = self._update_rows(cur, 1)
        else:
            n = self._delete_row(cur)
        self.changes += n
        self.statements += 1

    def _insert_rows(self, cur: Any, rows: int) -> int:
        table = self._pick_table()
        ids = list(range(self._next_id, self._next_id + rows))
        self._next_id += rows
        values = [(i, "NEW", f"{i % 1000}.25", self.rng.choice([None, "", "note ü", "x" * 40])) for i in ids]
        marks = ", ".join(["(%s, %s, %s, %s)"] * rows)
        n = int(cur.execute(f"INSERT INTO {table} VALUES {marks}", [v for row in values for v in row]))
        self._live.update(dict.fromkeys(ids, table))
        return n

    def _update_rows(self, cur: Any, rows: int) -> int:
        if not self._live:
            return 0
        table = self.rng.choice(list(self._live.values()))
        ids = [i for i, t in self._live.items() if t == table][-rows:]
        marks = ", ".join(["%s"] * len(ids))
        status = self.rng.choice(["PAID", "SHIPPED", "DONE"])
        sql = f"UPDATE {table} SET amount = amount + 1, status = %s WHERE id IN ({marks})"
        return int(cur.execute(sql, [status, *ids]))

    def _delete_row(self, cur: Any) -> int:
        if len(self._live) < 20:
            return 0
        ident = self.rng.choice(list(self._live))
        table = self._live.pop(ident)
        return int(cur.execute(f"DELETE FROM {table} WHERE id = %s", (ident,)))


def row_sequences(records: list[Rec]) -> set[int]:
    return {int(r.json["sequence"]) for r in records if not r.json["isDdl"]}


def check_exact_repeats(records: list[Rec]) -> int:
    """Every repeated sequence is a byte-identical re-publication; returns how many repeats there are."""
    first: dict[tuple[int, Any], Rec] = {}
    repeats = 0
    for rec in records:
        msg = rec.json
        # a DDL has one copy per partition; a key change two records (part 0 and 1) with one sequence
        ident = (int(msg["sequence"]), rec.partition if msg["isDdl"] else msg.get("part"))
        seen = first.setdefault(ident, rec)
        if seen is rec:
            continue
        repeats += 1
        assert same_content(rec, seen) and rec.partition == seen.partition, (
            f"sequence {ident[0]} re-published with different content"
        )
    return repeats


def distinct_rows_at_least(count: int) -> Callable[[list[Rec]], bool]:
    """A ``read_topic`` condition: ``count`` distinct row sequences, looking at each record once."""
    seen: set[int] = set()
    looked = 0

    def until(records: list[Rec]) -> bool:
        nonlocal looked
        for rec in records[looked:]:
            msg = rec.json
            if not msg["isDdl"]:
                seen.add(int(msg["sequence"]))
        looked = len(records)
        return len(seen) >= count

    return until


def master_position(conn: Any) -> tuple[str, int]:
    """The server's current binlog end: where a relay started now would begin."""
    with conn.cursor() as cur:
        row = binlog_status(cur)
    assert row, "binary logging is off"
    return str(row[0]), int(row[1])


def single_table_mapping(prefix: str, partitions: int = 3) -> dict[str, Any]:
    """Logical db ``{prefix}`` ← ``{prefix}_NN``; ``orders`` ← ``orders_NN`` in topic ``{prefix}.orders``."""
    return {
        "version": 1,
        "topics": {"partitions": partitions, "create": True},
        "unmapped": {"action": "drop"},
        "logical_dbs": {
            prefix: {
                "physical": [f"{prefix}_\\d+"],
                "tables": {"orders": {"physical": ["orders_\\d+"], "topic": f"{prefix}.orders"}},
            }
        },
    }


@dataclass
class OneTableCase:
    """A test's one sharded table ``{prefix}_00.orders_00`` → topic ``{prefix}.orders``, its relays (each
    with a log of its own) and its SQL; ``EXTRA`` is the config every ``configure`` starts from."""

    EXTRA: ClassVar[dict[str, Any]] = {"logging": {"level": "INFO"}}

    prefix: str
    tmp: Path
    mysql: Any
    bootstrap: str
    conn: Any
    start: tuple[str, int]
    procs: list[RelayProcess] = field(default_factory=list)

    @property
    def table(self) -> str:
        return f"{self.prefix}_00.orders_00"

    @property
    def topic(self) -> str:
        return f"{self.prefix}.orders"

    def configure(self, extra: dict[str, Any] | None = None) -> Path:
        return write_configs(
            self.tmp,
            mysql=self.mysql,
            bootstrap=self.bootstrap,
            mapping=single_table_mapping(self.prefix),
            start=self.start,
            instance=self.prefix,
            include=f"{self.prefix}_\\d+\\..*",
            extra={**self.EXTRA, **(extra or {})},
        )

    def relay(self, cfg: Path) -> RelayProcess:
        proc = RelayProcess(cfg, self.tmp / f"relay{len(self.procs)}.log").start()
        self.procs.append(proc)
        return proc

    def sql(self, *statements: str, conn: Any = None) -> None:
        with (conn or self.conn).cursor() as cur:
            for s in statements:
                cur.execute(s)


class RelayThread:
    """A relay in a thread of the test process, its mapping read from the configured store, stopped the way
    SIGTERM stops it; leaving the ``with`` block asserts it stopped and raised nothing."""

    def __init__(self, config_path: Path) -> None:
        from relay.config.load import load_config
        from relay.wiring import build_relay, mapping_store

        config = load_config(config_path)
        store = mapping_store(config)
        try:
            mapping = store.read()
        finally:
            store.close()
        self.relay = build_relay(config, mapping)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            self.relay.run()
        except BaseException as exc:
            self.error = exc

    def __enter__(self) -> RelayThread:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.relay.stop()
        self.thread.join(60)
        assert not self.thread.is_alive(), "the relay did not stop"
        assert self.error is None, self.error


@contextlib.contextmanager
def sharded_schema(mysql: Any, tag: str, shards: int, tables: int) -> Iterator[str]:
    """Fresh ``{prefix}_NN.orders_NN`` shards and ``{prefix}_00.customers`` for one test, dropped after."""
    prefix = f"{tag}{time.monotonic_ns() % 10**8}"
    conn = mysql.connect()
    create_shards(conn, prefix, shards, tables)
    try:
        yield prefix
    finally:
        drop_shards(conn, prefix, shards)
        conn.close()
