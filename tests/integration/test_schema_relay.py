"""The schema history end to end: ``relay run`` on MariaDB with binlog_row_metadata MINIMAL and NO_LOG
publishes exactly what it publishes with FULL, across DDL and a SIGKILL; a DDL the parser cannot read
stops it with the documented message, and ``relay schema resync`` recovers; a failover by GTID to a
NO_LOG replica and an HA takeover with the history in ZooKeeper go on with the right columns (the
topic's latest row per key equals SELECT, column names included).

Three private servers differ only in ``binlog_row_metadata``. Each runs the same sharded workload —
ADD / DROP / MODIFY / CHANGE / RENAME COLUMN, RENAME TABLE, CREATE … LIKE, DROP + CREATE with another
layout, a new primary key — while a relay (a child process, default settings: ``schema.history:
auto``) publishes it: part of it live, part right before a SIGKILL, part while the relay is down (read
after the restart with the history stored before the kill). An independent consumer reads every
partition of the data topic and of the DDL audit topic to its end. Per partition, in log order, with
byte-identical repeats dropped, the three runs must give the same records: the same keys, the same
headers and values field for field — except what depends on where the change sits in that server's
binlog (``id``/``sequence``, ``es``/``ts``, the source's server, file and offset), because FULL metadata
makes the binlogs longer.
"""

from __future__ import annotations

import contextlib
import json
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pymysql
import pytest
from confluent_kafka import Consumer, TopicPartition
from kazoo.client import KazooClient

from relay.cli.main import main
from relay.common.mysql import binlog_status
from relay.config.state import SCHEMA_HISTORY_FILE
from relay.dev import services
from relay.dev.services import KafkaService, MySQLService, ZooKeeperService
from relay.errors import ServiceError
from relay.ha.leadership import Layout
from relay.kafka.codec import sequence
from relay.positions.store import ResumePoint
from relay.positions.zookeeper import read_position_node
from tests.integration.relay_harness import RelayProcess, partitions_of, wait_for, write_configs
from tests.integration.test_failover import Pair, caught_up, promote

MODES = ("FULL", "MINIMAL", "NO_LOG")
BEFORE = [
    "CREATE DATABASE shop_00 CHARACTER SET utf8mb4",
    "CREATE DATABASE shop_01 CHARACTER SET latin1",
    """CREATE TABLE shop_00.orders_00 (id INT UNSIGNED NOT NULL, name VARCHAR(16) CHARACTER SET latin1,
       amt DECIMAL(12,2), st ENUM('new','paid','gône'), tags SET('a','b','c'), note TEXT, data BLOB,
       j JSON, ts DATETIME(3), b BIT(5), c CHAR(4), big BIGINT UNSIGNED, PRIMARY KEY (id))""",
    "CREATE TABLE shop_01.orders_01 LIKE shop_00.orders_00",
    "CREATE TABLE shop_01.orders_02 (id BIGINT PRIMARY KEY, v VARCHAR(20), d DOUBLE)",
    "INSERT INTO shop_00.orders_00 VALUES (1, 'café', 12.50, 'gône', 'a,c', 'nöte', x'00ff', '{\"k\": 1}', "
    "'2024-01-02 03:04:05.678', b'10101', 'abcd', 18446744073709551615)",
]
LIVE = [
    "INSERT INTO shop_01.orders_01 SELECT * FROM shop_00.orders_00",
    "INSERT INTO shop_01.orders_02 VALUES (1, 'ä', 1.5), (2, NULL, -2.25)",
    "ALTER TABLE shop_00.orders_00 ADD COLUMN extra VARCHAR(8) AFTER name",
    "INSERT INTO shop_00.orders_00 (id, name, extra, amt) VALUES (2, 'x', 'ext', 1.25)",
    "ALTER TABLE shop_00.orders_00 DROP COLUMN note",
    "UPDATE shop_00.orders_00 SET amt = amt + 1",
    "ALTER TABLE shop_00.orders_00 MODIFY amt DECIMAL(14,3) NOT NULL DEFAULT 0",
    "INSERT INTO shop_00.orders_00 (id, name, amt) VALUES (3, 'y', 7.125)",
]
LIVE_RENAMES = [  # published before the kill: the restart starts from a place after them
    "ALTER TABLE shop_00.orders_00 RENAME COLUMN extra TO extra2",
    "ALTER TABLE shop_00.orders_00 CHANGE name title VARCHAR(20) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
    "INSERT INTO shop_00.orders_00 (id, title, amt) VALUES (4, 'héllo ☃', 2)",
]
BEFORE_KILL = [  # issued, then the relay is killed at once: it may be anywhere in them
    "UPDATE shop_01.orders_02 SET v = CONCAT(COALESCE(v, ''), '-u'), d = d * 2",
    "RENAME TABLE shop_00.orders_00 TO shop_00.orders_00_old",
    "CREATE TABLE shop_00.orders_00 LIKE shop_00.orders_00_old",
]
WHILE_DOWN = [  # read only after the restart, from the history stored before the kill
    "INSERT INTO shop_00.orders_00 SELECT * FROM shop_00.orders_00_old",
    "DROP TABLE shop_00.orders_00_old",
    "DROP TABLE shop_01.orders_01",
    "CREATE TABLE shop_01.orders_01 (k VARCHAR(10) NOT NULL PRIMARY KEY, v INT, t TINYTEXT)",
    "INSERT INTO shop_01.orders_01 VALUES ('k1', -5, 'tïny'), ('k2', NULL, NULL)",
    "ALTER TABLE shop_00.orders_00 DROP PRIMARY KEY, ADD PRIMARY KEY (id, title)",
    "UPDATE shop_00.orders_00 SET tags = 'b' WHERE id = 1",
    "DELETE FROM shop_00.orders_00 WHERE id = 2",
    "ALTER TABLE shop_01.orders_01 ADD COLUMN f FLOAT FIRST, ADD COLUMN d DOUBLE AFTER v",
    "INSERT INTO shop_01.orders_01 VALUES (1.5, 'k3', 1, 2.25, 't')",
    "ALTER TABLE shop_01.orders_02 DROP PRIMARY KEY, ADD PRIMARY KEY (id, v)",
    "UPDATE shop_01.orders_02 SET d = 0 WHERE id = 1",
]
# What depends on where a change sits in its server's binlog (FULL metadata makes events longer).
PLACE_FIELDS = ("id", "es", "ts", "sequence")
PLACE_SOURCE_FIELDS = ("server", "serverUuid", "file", "offset")


def mapping(prefix: str) -> dict[str, Any]:
    return {
        "version": 1,
        "defaults": {"key_shard": "physical"},
        "topics": {"partitions": 3, "create": True},
        "unmapped": {"action": "drop"},
        "logical_dbs": {
            "shop": {
                "physical": ["shop_\\d+"],
                "tables": {"orders": {"physical": ["orders_\\d+"], "topic": f"{prefix}.orders"}},
            }
        },
    }


def execute(svc: MySQLService, statements: list[str]) -> int:
    """Run ``statements``; the rows the DML among them changed."""
    conn = pymysql.connect(
        host=svc.host, port=svc.port, user=svc.user, password=svc.password, autocommit=True
    )
    changed = 0
    with contextlib.closing(conn), conn.cursor() as cur:
        for sql in statements:
            n = cur.execute(sql)
            if sql.split()[0].upper() in ("INSERT", "UPDATE", "DELETE"):
                changed += int(n)
    return changed


def binlog_end(svc: MySQLService) -> tuple[str, int]:
    conn = pymysql.connect(host=svc.host, port=svc.port, user=svc.user, password=svc.password)
    with contextlib.closing(conn), conn.cursor() as cur:
        row = binlog_status(cur)
        assert row is not None
        return str(row[0]), int(row[1])


def saved_sequence(relay: RelayProcess) -> int:
    text = relay.position()
    if not text:
        return -1
    point = ResumePoint.from_json(text)
    return sequence(point.journal, point.offset, 0)


@dataclass
class Run:
    mode: str
    svc: MySQLService
    prefix: str
    tmp: Path
    cfg: Path
    procs: list[RelayProcess]

    @property
    def topic(self) -> str:
        return f"{self.prefix}.orders"

    @property
    def ddl_topic(self) -> str:
        return f"{self.prefix}.ddl"

    def start(self) -> RelayProcess:
        """``relay run``, returned once it streams (its first start has read the definitions: a DDL
        between the start position and that read would make it refuse, as documented)."""
        proc = RelayProcess(self.cfg, self.tmp / f"relay{len(self.procs)}.log").start()
        self.procs.append(proc)
        wait_for(lambda: proc.status().get("state") in ("running", "failed") or not proc.alive(), 60,
                 f"{self.mode}: relay started")  # fmt: skip
        return proc

    def caught_up(self, timeout: float = 90.0) -> None:
        end = sequence(*binlog_end(self.svc), 0)
        relay = self.procs[-1]
        wait_for(
            lambda: saved_sequence(relay) >= end or not relay.alive(),
            timeout,
            f"{self.mode}: relay caught up",
        )
        assert relay.alive(), relay.log()[-4000:]


def make_run(mode: str, svc: MySQLService, tmp: Path, bootstrap: str, prefix: str = "", **extra: Any) -> Run:
    prefix = prefix or f"sch{mode.replace('_', '').lower()}{time.monotonic_ns() % 10**7}"
    start = binlog_end(svc)
    cfg = write_configs(
        tmp,
        mysql=svc,
        bootstrap=bootstrap,
        mapping=mapping(prefix),
        start=start,
        instance=prefix,
        include="shop_\\d+\\..*",
        extra={
            "source": {"id": "schema-e2e"},
            # One record per producer batch: the broker's partition ends are then exact (Tansu).
            "kafka": {"ddl_topic": f"{prefix}.ddl", "settings": {"batch.num.messages": "1"}},
            "logging": {"level": "INFO"},
            **extra,
        },
    )
    return Run(mode, svc, prefix, tmp, cfg, [])


def read_to_end(bootstrap: str, topic: str, timeout: float = 60.0) -> list[Any]:
    """Every record of every partition of ``topic``, up to the partition ends read now (the relays have
    saved positions past everything: it is all in Kafka)."""
    n = partitions_of(bootstrap, topic)
    assert n > 0, f"topic {topic} does not exist"
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"schema-{time.monotonic_ns()}",
                         "enable.auto.commit": False})  # fmt: skip
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(n)}
        consumer.assign([TopicPartition(topic, p, 0) for p in range(n)])
        out: list[Any] = []
        at = dict.fromkeys(range(n), 0)
        deadline = time.monotonic() + timeout
        while any(at[p] < ends[p] for p in range(n)):
            assert time.monotonic() < deadline, f"{topic}: not read to {ends} in {timeout}s (at {at})"
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            out.append(msg)
            at[msg.partition()] = msg.offset() + 1
        return out
    finally:
        consumer.close()


def comparable(messages: list[Any]) -> dict[int, list[tuple[Any, ...]]]:
    """Per partition, in log order: (key, headers, value) without the binlog-place fields, each change
    once — a repeat (same sequence and part) must be byte-identical to its first copy."""
    out: dict[int, list[tuple[Any, ...]]] = {}
    first: dict[tuple[int, int, int], Any] = {}
    for msg in sorted(messages, key=lambda m: (m.partition(), m.offset())):
        value = json.loads(msg.value())
        ident = (msg.partition(), int(value["sequence"]), int(value.get("part") or 0))
        seen = first.setdefault(ident, msg)
        if seen is not msg:
            assert (msg.key(), msg.value(), msg.headers()) == (seen.key(), seen.value(), seen.headers())
            continue
        fields = list(value)
        for name in PLACE_FIELDS:
            value.pop(name, None)
        source = value.get("source", {})
        for name in PLACE_SOURCE_FIELDS:
            source.pop(name, None)
        headers = [(k, v) for k, v in msg.headers() or [] if k != "relay.sequence"]
        out.setdefault(msg.partition(), []).append((msg.key(), headers, fields, value))
    return out


@pytest.fixture
def runs(
    mysql_server_factory: Callable[..., MySQLService], kafka_service: KafkaService, tmp_path: Path
) -> Iterator[dict[str, Run]]:
    made: dict[str, Run] = {}
    for mode in MODES:
        svc = mysql_server_factory(f"--binlog-row-metadata={mode}")
        execute(svc, BEFORE)
        made[mode] = make_run(mode, svc, tmp_path / mode, kafka_service.bootstrap_servers)
    yield made
    for run in made.values():
        for proc in run.procs:
            proc.stop()


def test_minimal_and_no_log_publish_what_full_publishes_across_ddl_and_a_sigkill(
    runs: dict[str, Run], kafka_service: KafkaService, capsys: pytest.CaptureFixture[str]
) -> None:
    bootstrap = kafka_service.bootstrap_servers
    for run in runs.values():
        run.start()
    changed = {mode: execute(run.svc, LIVE) for mode, run in runs.items()}
    for run in runs.values():
        run.caught_up()
    for mode, run in runs.items():
        changed[mode] += execute(run.svc, LIVE_RENAMES)
    for run in runs.values():
        run.caught_up()
    for mode, run in runs.items():
        changed[mode] += execute(run.svc, BEFORE_KILL)
        relay = run.procs[-1]
        relay.signal(signal.SIGKILL)
        assert relay.wait(10) == -signal.SIGKILL
    for mode, run in runs.items():
        changed[mode] += execute(run.svc, WHILE_DOWN)
        run.start()
    for run in runs.values():
        run.caught_up()
    logs = {mode: run.procs[0].log() for mode, run in runs.items()}
    assert "binlog_row_metadata=FULL (preferred)" in logs["FULL"], logs["FULL"][-3000:]
    for mode in ("MINIMAL", "NO_LOG"):
        assert (
            f"binlog_row_metadata={mode}: column names, keys and types come from the schema history"
            in (logs[mode])
        ), logs[mode][-3000:]

    data = {mode: comparable(read_to_end(bootstrap, run.topic)) for mode, run in runs.items()}
    audit = {mode: comparable(read_to_end(bootstrap, run.ddl_topic)) for mode, run in runs.items()}
    full = data["FULL"]
    rows = [json.loads(json.dumps(r[3])) for recs in full.values() for r in recs if not r[3]["isDdl"]]
    assert len(rows) == changed["FULL"] == changed["NO_LOG"] > 15, (len(rows), changed)  # each change once
    names = {tuple(r["data"][0]) for r in rows}
    assert ("id", "title", "extra2", "amt", "st", "tags", "data", "j", "ts", "b", "c", "big") in names
    assert ("f", "k", "v", "d", "t") in names
    assert any(r["pkNames"] == ["id", "title"] for r in rows)  # the new primary key
    keys = {r[0] for recs in full.values() for r in recs}
    assert '{"_shard":"shop_00.orders_00","id":"1","title":"café"}'.encode() in keys  # the new key
    assert b'{"_shard":"shop_01.orders_01","k":"k3"}' in keys  # DROP + CREATE with another key
    assert '{"_shard":"shop_01.orders_02","id":"1","v":"ä-u"}'.encode() in keys
    for mode in ("MINIMAL", "NO_LOG"):
        assert data[mode] == full, mode
        assert audit[mode] == audit["FULL"], mode

    # With FULL the history was kept and checked against every TABLE_MAP: it never had to learn a table.
    kinds = {mode: [json.loads(line)["kind"] for line in history_file(run).read_text().splitlines()]
             for mode, run in runs.items()}  # fmt: skip
    assert kinds["FULL"] == kinds["NO_LOG"] == kinds["MINIMAL"], kinds
    assert kinds["FULL"][0] == "snapshot" and set(kinds["FULL"][1:]) == {"ddl"}, kinds["FULL"]

    # What the relay knows of a table after it all, read from the history of the NO_LOG run.
    cfg = str(runs["NO_LOG"].cfg)
    assert main(["schema", "show", "-c", cfg, "--table", "shop_01.orders_01"]) == 0
    shown = capsys.readouterr().out
    assert "2 k                        varchar(10) collate latin1_swedish_ci  PRI" in shown, shown


def history_file(run: Run) -> Path:
    from relay.config.load import load_config

    config = load_config(run.cfg)
    return config.state_path(SCHEMA_HISTORY_FILE)


def test_an_unreadable_ddl_stops_the_relay_and_resync_recovers(
    mysql_server_factory: Callable[..., MySQLService],
    kafka_service: KafkaService,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    svc = mysql_server_factory("--binlog-row-metadata=NO_LOG")
    execute(svc, BEFORE[:3])
    run = make_run("NO_LOG", svc, tmp_path, kafka_service.bootstrap_servers)
    try:
        relay = run.start()
        execute(svc, ["INSERT INTO shop_00.orders_00 (id, name) VALUES (1, 'a')"])
        run.caught_up()
        before = binlog_end(svc)
        execute(svc, [
            "ALTER TABLE shop_00.orders_00 CONVERT TO CHARACTER SET latin1",
            "INSERT INTO shop_00.orders_00 (id, name, note) VALUES (9, 'é', 'ü')",
        ])  # fmt: skip
        for attempt in range(2):  # the stop is durable: a restart without a resync stops at the same place
            wait_for(lambda proc=relay: not proc.alive(), 60, "the relay stops on the DDL")
            assert relay.wait(1) != 0
            status = json.loads(relay.status_path.read_text())
            error = status["error"]
            assert status["state"] == "failed", status
            assert (
                f"the DDL at {before[0]}:" in error and "on shop_00.orders_00 cannot be applied" in error
            ), error
            assert (
                "CONVERT TO CHARACTER SET" in error
                and "relay schema resync -c CONFIG --table shop_00.orders_00" in error
            )
            point = ResumePoint.from_json(relay.position())
            assert (point.journal, point.offset) <= before  # nothing of the DDL or after it acknowledged
            if attempt == 0:
                relay = run.start()

        records = read_to_end(kafka_service.bootstrap_servers, run.topic)
        assert [
            json.loads(m.value())["data"][0]["id"] for m in records if not json.loads(m.value())["isDdl"]
        ] == ["1"]

        table = ["--table", "shop_00.orders_00"]
        assert main(["schema", "resync", "-c", str(run.cfg), *table]) == 1  # shown, not written
        assert "not written" in capsys.readouterr().out
        assert main(["schema", "resync", "-c", str(run.cfg), *table, "--yes"]) == 0
        assert f"resynced shop_00.orders_00 at {before[0]}:" in capsys.readouterr().out
        end = binlog_end(svc)
        assert main(["schema", "show", "-c", str(run.cfg), *table, "--at", f"{end[0]}:{end[1]}"]) == 0
        assert "latin1" in capsys.readouterr().out

        run.start()
        run.caught_up()
        rows = [json.loads(m.value()) for m in read_to_end(kafka_service.bootstrap_servers, run.topic)]
        # (Partitions interleave in what a consumer reads: the row is found by its id, not by its place.)
        nines = [r for r in rows if not r["isDdl"] and r["data"][0]["id"] == "9"]
        assert nines, [r["data"] for r in rows if not r["isDdl"]]
        last = nines[-1]
        assert last["data"][0]["name"] == "é" and last["data"][0]["note"] == "ü"
        assert [c for c in last["data"][0]][:3] == ["id", "name", "amt"]
        assert any(r["isDdl"] and "CONVERT TO" in r["sql"] for r in rows)
    finally:  # the last relay still runs: never leave it behind
        for proc in run.procs:
            proc.stop()


# --- failover to a standby without full metadata ------------------------------------------------------


@pytest.fixture
def no_log_pair(tmp_path: Path) -> Iterator[Pair]:
    """A MariaDB primary and its replica (GTID replication), both binlog_row_metadata=NO_LOG."""
    try:
        services.find_binary("mariadbd")
    except ServiceError as exc:
        pytest.skip(str(exc))
    no_log = "--binlog-row-metadata=NO_LOG"
    primary = services.start_mysql(services.StartOptions(tmp_path / "primary", extra_args=(no_log,)))
    replica = services.start_mysql(
        services.StartOptions(
            tmp_path / "replica", extra_args=("--server-id=2", "--log-slave-updates", no_log)
        )
    )
    try:
        p = primary.service
        with contextlib.closing(replica.service.connect()) as conn, conn.cursor() as cur:
            cur.execute(
                "CHANGE MASTER TO MASTER_HOST=%s, MASTER_PORT=%s, MASTER_USER=%s, MASTER_PASSWORD=%s, "
                "MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1",
                (p.host, p.port, p.replication_user, p.replication_password),
            )
            cur.execute("START SLAVE")
        yield Pair(primary, replica)
    finally:
        replica.stop(remove_dir=True)
        primary.stop(remove_dir=True)


def latest_by_key(messages: list[Any]) -> dict[tuple[str, str], dict[str, str | None]]:
    """(physical table, key) → the row as the last record of its key says, in log order per partition."""
    state: dict[tuple[str, str], dict[str, str | None]] = {}
    for msg in sorted(messages, key=lambda m: (m.partition(), m.offset())):
        value = json.loads(msg.value())
        if value["isDdl"]:
            continue
        src = value["source"]
        key = (f"{src['database']}.{src['table']}", json.dumps(value["pkNames"]) + msg.key().decode())
        if value["type"] == "DELETE":
            state.pop(key, None)
        else:
            state[key] = value["data"][0]
    return state


def selected(svc: MySQLService, tables: list[str]) -> dict[str, list[dict[str, str | None]]]:
    out: dict[str, list[dict[str, str | None]]] = {}
    with contextlib.closing(svc.connect()) as conn, conn.cursor() as cur:
        for table in tables:
            cur.execute(f"SELECT * FROM {table}")
            names = [d[0] for d in cur.description]
            rows = [
                {n: None if v is None else str(v) for n, v in zip(names, row, strict=True)} for row in cur
            ]
            out[table] = sorted(rows, key=json.dumps)
    return out


def test_a_failover_to_a_standby_without_full_metadata_continues_with_the_standbys_own_history(
    no_log_pair: Pair, kafka_service: KafkaService, tmp_path: Path
) -> None:
    primary, replica = no_log_pair.primary.service, no_log_pair.replica.service
    tables = ["shop_00.orders_00", "shop_01.orders_01"]
    execute(primary, [
        "CREATE DATABASE shop_00", "CREATE DATABASE shop_01",
        "CREATE TABLE shop_00.orders_00 (id BIGINT PRIMARY KEY, status VARCHAR(16), amount DECIMAL(12,2), "
        "note TEXT)",
        "CREATE TABLE shop_01.orders_01 LIKE shop_00.orders_00",
    ])  # fmt: skip
    wait_for(lambda: caught_up(no_log_pair), 30, "the replica applies the schema")
    run = make_run("NO_LOG", primary, tmp_path, kafka_service.bootstrap_servers, source={
        "standby": {"host": replica.host, "port": replica.port},
        "failover": {"attempts": 2, "mode": "gtid"},
        "retry": {"initial": 0.2, "maximum": 0.5},
    })  # fmt: skip
    try:
        relay = run.start()
        execute(primary, [
            "INSERT INTO shop_00.orders_00 VALUES (1, 'NEW', 1.25, 'a'), (2, 'NEW', 2.50, NULL)",
            "ALTER TABLE shop_00.orders_00 ADD COLUMN extra INT AFTER status",
            "UPDATE shop_00.orders_00 SET extra = id * 10, status = 'PAID'",
            "ALTER TABLE shop_01.orders_01 RENAME COLUMN note TO memo",
            "INSERT INTO shop_01.orders_01 VALUES (7, 'NEW', 7.75, 'm')",
        ])  # fmt: skip
        run.caught_up()
        wait_for(lambda: caught_up(no_log_pair), 30, "the replica has every change of the primary")
        no_log_pair.primary.process.stop()
        promote(replica)
        # On the promoted replica, after the switch: more DDL, read through the standby's own history.
        execute(replica, [
            "ALTER TABLE shop_00.orders_00 DROP COLUMN note, ADD COLUMN tag VARCHAR(8) FIRST",
            "INSERT INTO shop_00.orders_00 VALUES ('t', 3, 'NEW', 30, 3.00)",
            "ALTER TABLE shop_01.orders_01 CHANGE status state VARCHAR(20)",
            "UPDATE shop_01.orders_01 SET state = 'SHIPPED', memo = 'm2' WHERE id = 7",
            "DELETE FROM shop_00.orders_00 WHERE id = 2",
            "UPDATE shop_00.orders_00 SET tag = CONCAT('x', id)",  # every row's last record: the last layout
        ])  # fmt: skip
        failover_log = "failing over to the standby"
        wait_for(lambda: failover_log in relay.log() or not relay.alive(), 90, "the relay fails over")
        assert relay.alive(), relay.log()[-4000:]
        end = sequence(*binlog_end(replica), 0)

        def on_standby_caught_up() -> bool:
            text = relay.position()
            point = ResumePoint.from_json(text) if text else None
            done = (
                point is not None
                and point.generation == 1
                and sequence(point.journal, point.offset, 0) >= end
            )
            return done or not relay.alive()

        wait_for(on_standby_caught_up, 60, "the relay publishes the standby's binlog to its end")
        assert relay.alive(), relay.log()[-4000:]
        messages = read_to_end(kafka_service.bootstrap_servers, run.topic)
        got: dict[str, list[dict[str, str | None]]] = {}
        for (table, _), row in latest_by_key(messages).items():
            got.setdefault(table, []).append(row)
        assert {t: sorted(rows, key=json.dumps) for t, rows in got.items()} == selected(replica, tables)
        servers = {json.loads(line)["server"] for line in history_file(run).read_text().splitlines()}
        assert servers == {"id:1", "id:2"}  # each server's records apart: their binlog places differ
    finally:  # the relay still runs: never leave it behind
        for proc in run.procs:
            proc.stop()


# --- HA takeover with the history in ZooKeeper ---------------------------------------------------------


def test_a_standby_taking_over_reads_the_history_from_zookeeper_and_goes_on_without_full_metadata(
    mysql_server_factory: Callable[..., MySQLService],
    kafka_service: KafkaService,
    zk_service: ZooKeeperService,
    tmp_path: Path,
) -> None:
    svc = mysql_server_factory("--binlog-row-metadata=NO_LOG")
    execute(svc, [
        *BEFORE[:2],
        "CREATE TABLE shop_00.orders_00 (id BIGINT PRIMARY KEY, status VARCHAR(16), amount DECIMAL(12,2))",
        "CREATE TABLE shop_01.orders_01 LIKE shop_00.orders_00",
    ])  # fmt: skip
    prefix = f"schha{time.monotonic_ns() % 10**7}"
    root = f"/relay-test-{uuid.uuid4().hex[:10]}"

    def ha(i: int) -> dict[str, Any]:
        return {
            "ha": {
                "enabled": True,
                "zookeeper": zk_service.hosts,
                "root": root,
                "session_timeout_seconds": 4.0,
                "member_id": f"relay-{i}",
            },
            "positions": {"backend": "zookeeper"},
        }

    runs = [make_run("NO_LOG", svc, tmp_path / f"r{i}", kafka_service.bootstrap_servers, prefix, **ha(i))
            for i in range(2)]  # fmt: skip
    active = runs[0].start()
    standby = RelayProcess(runs[1].cfg, tmp_path / "standby.log").start()
    runs[1].procs.append(standby)
    wait_for(lambda: standby.status().get("state") == "standby", 60, "relay-1 stands by")
    zk = KazooClient(hosts=zk_service.hosts, timeout=10.0)
    zk.start(timeout=30)
    layout = Layout(root, prefix)

    def published_to_end() -> bool:
        end = sequence(*binlog_end(svc), 0)
        point, _ = read_position_node(zk, layout.position)
        return point is not None and sequence(point.journal, point.offset, 0) >= end

    try:
        execute(svc, [
            "INSERT INTO shop_00.orders_00 VALUES (1, 'NEW', 1.25), (2, 'NEW', 2.50)",
            "ALTER TABLE shop_00.orders_00 ADD COLUMN note VARCHAR(20) AFTER status",
            "INSERT INTO shop_01.orders_01 VALUES (7, 'NEW', 7.75)",
        ])  # fmt: skip
        wait_for(published_to_end, 60, "relay-0 publishes")
        active.signal(signal.SIGKILL)
        assert active.wait(10) == -signal.SIGKILL
        # While nobody leads: DDL the successor must take from the history relay-0 left in ZooKeeper.
        execute(svc, [
            "ALTER TABLE shop_00.orders_00 RENAME COLUMN status TO state, DROP COLUMN amount",
            "ALTER TABLE shop_01.orders_01 ADD COLUMN tag CHAR(2) FIRST",
            "UPDATE shop_00.orders_00 SET note = CONCAT('n', id), state = 'PAID'",
            "UPDATE shop_01.orders_01 SET tag = 'ab'",
        ])  # fmt: skip
        wait_for(lambda: standby.status().get("state") == "running", 60, "relay-1 takes over")
        wait_for(lambda: published_to_end() or not standby.alive(), 60, "relay-1 publishes to the end")
        assert standby.alive(), standby.log()[-4000:]
        records = zk.get_children(f"{layout.base}/schema")
    finally:
        zk.stop()
        zk.close()
        for run in runs:
            for proc in run.procs:
                proc.stop()
    assert len(records) == 4  # relay-0: the snapshot and one DDL; relay-1: the two DDL it read itself
    assert "schema history: mysql-bin" in standby.log()  # relay-1 applied the DDL it read itself
    got: dict[str, list[dict[str, str | None]]] = {}
    for (table, _), row in latest_by_key(read_to_end(kafka_service.bootstrap_servers, runs[0].topic)).items():
        got.setdefault(table, []).append(row)
    tables = ["shop_00.orders_00", "shop_01.orders_01"]
    assert {t: sorted(rows, key=json.dumps) for t, rows in got.items()} == selected(svc, tables)
