"""Done-when: a real relay (real MariaDB binlog → real broker) mirrored by real local Spark into Delta Lake
and Iceberg tables, locally and on a real S3 API server (moto), read back by engines that are not our code.

A workload of inserts, updates and deletes across shards goes through the relay; part of it is published
twice (a second relay re-reads the binlog from the middle, as after a crash before the position was
saved). The mirror streams the topic with ``maxOffsetsPerTrigger``, is stopped and restarted from its
checkpoint, and must end equal to ``SELECT *`` over the shards with the right types; a replay from the start
into a fresh root rebuilds the same table; the protobuf codec mirrors the same way; a rolling ALTER shard by
shard, key changes, TRUNCATE and DROP/CREATE of shards end equal to SELECT, and time travel to the version
mirrored before the TRUNCATE equals what SELECT showed then; SCD2 histories hold one version per state
SELECT showed. Every table is read by each independent reader of its format (``tests.spark.readers``:
deltalake, polars, pyarrow and DuckDB over the version's files; pyiceberg, pyarrow and DuckDB over the
snapshot's files), which must agree. The relay part runs once per test; the mirror once per format.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Producer

from relay.spark.apply import apply_changes
from relay.spark.decode import changes
from relay.spark.mirror import MirrorConfig, start
from relay.spark.storage import Storage
from relay.spark.tables import MirrorTarget
from tests.integration.relay_harness import (
    RelayThread,
    create_shards,
    drop_shards,
    master_position,
    read_topic,
    sharded_mapping,
    wait_for,
    write_configs,
)
from tests.integration.test_relay import workload
from tests.spark.conftest import BUCKET_NAME
from tests.spark.readers import current_version, read_all, schema_of

SHARDS, TABLES = 3, 2
MAX_PER_TRIGGER = 25


@pytest.fixture()
def shards(mysql_service: Any) -> Iterator[str]:
    prefix = f"sp{time.monotonic_ns() % 10**8}"
    with contextlib.closing(mysql_service.connect()) as conn:
        create_shards(conn, prefix, SHARDS, TABLES)
    yield prefix
    with contextlib.closing(mysql_service.connect()) as conn:
        drop_shards(conn, prefix, SHARDS)


def local_targets(root: Path) -> list[MirrorTarget]:
    """A Delta and an Iceberg mirror under ``root`` (the Iceberg catalog: SQLite in its root)."""
    return [MirrorTarget(Storage(str(root / f)), f) for f in ("delta", "iceberg")]


def s3_targets(s3: dict[str, str], root: Path, name: str) -> list[MirrorTarget]:
    """A Delta and an Iceberg mirror on the S3 API server (the Iceberg catalog: SQLite on local disk)."""
    prefix = f"s3://{BUCKET_NAME}/{name}-{time.monotonic_ns() % 10**8}"
    root.mkdir(parents=True, exist_ok=True)
    return [
        MirrorTarget(Storage(f"{prefix}/delta", s3), "delta"),
        MirrorTarget(
            Storage(f"{prefix}/iceberg", s3), "iceberg", {"uri": f"sqlite:///{root / 'catalog.sqlite'}"}
        ),
    ]


def config_for(
    target: MirrorTarget, bootstrap: str, topics: tuple[str, ...], ck: Path, **kw: Any
) -> MirrorConfig:
    return MirrorConfig(
        bootstrap,
        topics,
        target.storage.root,
        ck,
        format=target.format,
        storage_options=target.storage.options,
        catalog=target.catalog,
        **kw,
    )


def relay_run(
    tmp: Path, mysql: Any, bootstrap: str, prefix: str, start_at: tuple[str, int], codec: str, instance: str
) -> RelayThread:
    cfg = write_configs(
        tmp,
        mysql=mysql,
        bootstrap=bootstrap,
        mapping=sharded_mapping(prefix, partitions=3, codec=codec),
        start=start_at,
        instance=instance,
    )
    return RelayThread(cfg)


def mirrored(
    target: MirrorTarget, table: str, version: int | None = None, kind: str = "latest"
) -> dict[str, dict[str, Any]]:
    """Every table column of every mirrored row (the ``_`` bookkeeping left out), by id, as the format's
    independent readers see it (they must agree); TIMESTAMP (an instant) as naive UTC."""
    rows = read_all(target, table, kind, version)
    return {str(r["id"]): {c: v for c, v in r.items() if not c.startswith("_")} for r in rows}


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):  # BIT: the unsigned number, as the relay sends it
        return str(int.from_bytes(value, "big"))
    return str(value)


def select_all(conn: Any, tables: list[str]) -> dict[str, dict[str, str | None]]:
    """``SELECT *`` over the physical ``tables`` of one logical table, by id, every column as text; a column
    some shards lack is None for their rows. TIMESTAMP read in UTC (Spark's session zone here)."""
    out: dict[str, dict[str, str | None]] = {}
    names: list[str] = []
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        for table in tables:
            cur.execute(f"SELECT * FROM {table}")
            cols = [d[0] for d in cur.description]
            names += [c for c in cols if c not in names]
            for row in cur.fetchall():
                out[str(row[cols.index("id")])] = {c: _text(v) for c, v in zip(cols, row, strict=True)}
    return {k: {c: row.get(c) for c in names} for k, row in out.items()}


def physical(prefix: str, tables: int = TABLES) -> list[str]:
    return [f"{prefix}_{d:02d}.orders_{t:02d}" for d in range(SHARDS) for t in range(tables)]


def as_text(rows: dict[str, dict[str, Any]]) -> dict[str, dict[str, str | None]]:
    return {k: {c: None if v is None else str(v) for c, v in row.items()} for k, row in rows.items()}


def row_count(bootstrap: str, topic: str, changes_: int) -> list[Any]:
    return read_topic(
        bootstrap,
        topic,
        until=lambda rs: len({r.json["sequence"] for r in rs if not r.json["isDdl"]}) >= changes_,
    )


def run_mirror(spark: Any, config: MirrorConfig) -> list[dict[str, Any]]:
    query = start(spark, config)
    query.awaitTermination(180)
    assert not query.isActive, "availableNow query did not finish"
    assert query.exception() is None, query.exception()
    return list(query.recentProgress)


def _relay_kafka(spark: Any, bootstrap: str, topic: str, **options: str) -> Any:
    reader = spark.read.format("relay-kafka").option("kafka.bootstrap.servers", bootstrap)
    for key, value in {"subscribe": topic, **options}.items():
        reader = reader.option(key, value)
    return reader.load()


def _mirror_restarted(spark: Any, config: MirrorConfig, total: int) -> None:
    """A continuous query stopped after a few micro-batches (mid-way through the topic), then the same
    checkpoint until caught up: the batches tile the topic exactly once."""
    query = start(spark, config)
    try:
        wait_for(
            lambda: query.lastProgress is not None and query.lastProgress["batchId"] >= 2, 300, "3 batches"
        )
    finally:
        query.stop()  # also when the wait failed: a query left active would fail the next test's start
    first = [p for p in query.recentProgress if p["numInputRows"] > 0]
    second = [
        p
        for p in run_mirror(spark, MirrorConfig(**{**config.__dict__, "available_now": True}))
        if p["numInputRows"] > 0
    ]
    progress = first + second
    assert all(p["numInputRows"] <= MAX_PER_TRIGGER for p in progress)
    assert sum(p["numInputRows"] for p in progress) == total  # neither lost nor read twice
    assert json.loads(second[0]["sources"][0]["startOffset"]) == json.loads(
        first[-1]["sources"][0]["endOffset"]
    )


@pytest.mark.timeout(900)  # a relay run, then per format a restarted query, two replays and a re-apply
def test_mirror_equals_select_through_restart_and_replay(
    spark: Any, mysql_service: Any, kafka_service: Any, shards: str, tmp_path: Path
) -> None:
    prefix, bootstrap = shards, kafka_service.bootstrap_servers
    topic, table = f"{prefix}.orders", f"{prefix}.orders"
    conn = mysql_service.connect()
    begin = master_position(conn)
    with relay_run(tmp_path / "r1", mysql_service, bootstrap, prefix, begin, "canal-json", prefix):
        changes_ = workload(conn, prefix) - 1  # one change goes to customers
        records = row_count(bootstrap, topic, changes_)
        customers = read_topic(bootstrap, prefix, until=lambda rs: len(rs) >= 1)  # the db's topic
    # Publish a third of the row records again, byte for byte, to the same partitions: what a producer
    # retry outside a transaction leaves on any broker (after newer records of the same keys).
    rows = [r for r in records if not r.json["isDdl"]]
    producer = Producer({"bootstrap.servers": bootstrap})
    for rec in rows[::3]:
        producer.produce(
            topic, rec.value, rec.key, partition=rec.partition, headers=list(rec.headers.items())
        )
    assert producer.flush(30) == 0
    again = read_topic(bootstrap, topic, until=lambda rs: len(rs) >= len(records) + len(rows[::3]))
    total = len(again) + len(customers)
    assert len([r for r in again if not r.json["isDdl"]]) > changes_, "nothing was published twice"
    expected = select_all(conn, physical(prefix))
    expected_customers = select_all(conn, [f"{prefix}_00.customers"])

    for target in local_targets(tmp_path / "out"):
        what = target.format
        every = {"max_offsets_per_trigger": MAX_PER_TRIGGER, "trigger_seconds": 0.5}
        config = config_for(target, bootstrap, (topic, prefix), tmp_path / f"ck-{what}", **every)
        _mirror_restarted(spark, config, total)
        got = mirrored(target, table)
        assert as_text(got) == expected, what
        assert as_text(mirrored(target, f"{prefix}.customers")) == expected_customers, what
        schema = schema_of(target, table)
        assert schema["id"] == pa.int64() and schema["amount"] == pa.decimal128(12, 2), what
        assert schema["status"] == pa.string() and schema["note"] == pa.string(), what
        assert isinstance(next(iter(got.values()))["amount"], Decimal)
        assert "extra" in schema  # the ALTER TABLE … ADD COLUMN of one shard appears as a column

        # Replay from the start (earliest, then a timestamp before every record) rebuilds the same table.
        replay = local_targets(tmp_path / f"replay-{what}")[0 if what == "delta" else 1]
        run_mirror(
            spark, config_for(replay, bootstrap, (topic,), tmp_path / f"ck-r-{what}", available_now=True)
        )
        assert as_text(mirrored(replay, table)) == expected, what
        by_time = local_targets(tmp_path / f"by-time-{what}")[0 if what == "delta" else 1]
        apply_changes(changes(_relay_kafka(spark, bootstrap, topic, startingTimestamp="0")), by_time)
        assert as_text(mirrored(by_time, table)) == expected, what
        # Applying everything once more to the mirrored table changes nothing, and commits nothing.
        version = current_version(target, table)
        apply_changes(changes(_relay_kafka(spark, bootstrap, topic)), target)
        assert as_text(mirrored(target, table)) == expected, what
        assert current_version(target, table) == version, f"{what}: a batch that changed nothing committed"


def test_protobuf_topic_mirrors_the_same(
    spark: Any, mysql_service: Any, kafka_service: Any, shards: str, tmp_path: Path
) -> None:
    prefix, bootstrap = shards, kafka_service.bootstrap_servers
    topic = f"{prefix}.orders"
    conn = mysql_service.connect()
    begin = master_position(conn)
    with relay_run(tmp_path / "r", mysql_service, bootstrap, prefix, begin, "canal-protobuf", prefix):
        changes_ = workload(conn, prefix) - 1
        wait_for(lambda: _count(spark, bootstrap, topic) >= changes_, 60, "protobuf records")
    df = _relay_kafka(spark, bootstrap, topic)
    ch = changes(df, codec="canal-protobuf")
    sample = ch.where("type = 'UPDATE'").first()
    assert (
        sample is not None
        and sample["before"] is not None
        and sample["source"]["database"].startswith(prefix)
    )
    expected = select_all(conn, physical(prefix))
    for target in local_targets(tmp_path / "out"):
        apply_changes(changes(df), target)
        assert as_text(mirrored(target, topic)) == expected, target.format


def _count(spark: Any, bootstrap: str, topic: str) -> int:
    return int(changes(_relay_kafka(spark, bootstrap, topic)).where("not is_ddl").count())


# 2024-10-27 in Europe/Berlin: 00:30 and 01:30 UTC are both 02:30 local (CEST, then CET).
FOLD = ("2024-10-27 00:30:00.123", "2024-10-27 01:30:00.123")
BITS = (0, 2**63 - 1, 2**63, 2**64 - 1)


class _Rolling:
    """The rolling-ALTER workload on the shards' ``orders_00``, in two phases."""

    def __init__(self, conn: Any, prefix: str) -> None:
        self.conn, self.tables, self.ident = conn, physical(prefix, 1), 0

    def insert(self, cur: Any, table: str, extra: bool) -> None:
        self.ident += 1
        values = [self.ident, f"s{self.ident}", FOLD[self.ident % 2], BITS[self.ident % 4]]
        if extra:
            cur.execute(f"INSERT INTO {table} VALUES (%s, %s, %s, %s, %s)", (*values, self.ident * 10))
        else:
            cur.execute(f"INSERT INTO {table} VALUES (%s, %s, %s, %s)", values)

    def first(self) -> None:
        """Writes on every shard while ADD COLUMN reaches the shards one by one; key changes (an UPDATE
        of the primary key) before and after a shard's ALTER. TIMESTAMPs in the repeated hour, BIT(64)."""
        tables = self.tables
        with self.conn.cursor() as cur:
            cur.execute("SET time_zone = '+00:00'")
            for _ in range(4):
                for table in tables:
                    self.insert(cur, table, False)
            cur.execute(f"UPDATE {tables[0]} SET id = id + 1000 WHERE id = 1")  # a key change
            for altered in range(len(tables)):
                cur.execute(f"ALTER TABLE {tables[altered]} ADD COLUMN extra INT NULL")
                for i, table in enumerate(tables):  # writes on every shard, altered or not
                    self.insert(cur, table, i <= altered)
                    cur.execute(
                        f"UPDATE {table} SET status = CONCAT(status, '+') WHERE MOD(id, 3) = %s", (altered,)
                    )
                    if i <= altered:
                        cur.execute(
                            f"UPDATE {table} SET extra = id + 1000 WHERE extra IS NULL AND MOD(id, 2) = 0"
                        )
            cur.execute(f"UPDATE {tables[2]} SET id = id + 2000, status = 'moved' WHERE MOD(id, 4) = 0")

    def second(self) -> None:
        """TRUNCATE of one shard, DROP + CREATE of another, writes after each, a key change."""
        tables = self.tables
        with self.conn.cursor() as cur:
            cur.execute("SET time_zone = '+00:00'")
            cur.execute(f"TRUNCATE TABLE {tables[2]}")
            self.insert(cur, tables[2], True)
            cur.execute(f"DROP TABLE {tables[1]}")
            cur.execute(
                f"CREATE TABLE {tables[1]} (id BIGINT PRIMARY KEY, status VARCHAR(16), "
                "at TIMESTAMP(3) NULL, flags BIT(64) NULL, extra INT NULL)"
            )
            self.insert(cur, tables[1], True)
            self.insert(cur, tables[0], True)
            cur.execute(f"UPDATE {tables[0]} SET id = id + 3000 WHERE id = {self.ident}")

    def mark(self, ident: int) -> None:
        """One last change: once it is in the topic, every change before it is."""
        with self.conn.cursor() as cur:
            cur.execute(f"INSERT INTO {self.tables[0]} (id, status) VALUES ({ident}, 'last')")


def _saved_at(running: RelayThread, end: tuple[str, int]) -> bool:
    point = running.relay.instance.last_saved
    return point is not None and (point.journal, point.offset) >= end


def _has(ident: int) -> Any:
    def probe(records: list[Any]) -> bool:
        return any(not r.json["isDdl"] and r.json["data"][0]["id"] == str(ident) for r in records)

    return probe


def test_mirror_keeps_every_value_through_rolling_alter_truncate_and_drop(
    spark: Any, mysql_service: Any, kafka_service: Any, s3: dict[str, str], tmp_path: Path
) -> None:
    prefix, bootstrap = f"sq{time.monotonic_ns() % 10**8}", kafka_service.bootstrap_servers
    conn = mysql_service.connect()
    with conn.cursor() as cur:
        for table in physical(prefix, 1):
            cur.execute(f"CREATE DATABASE {table.split('.')[0]}")
            cur.execute(
                f"CREATE TABLE {table} (id BIGINT PRIMARY KEY, status VARCHAR(16), at TIMESTAMP(3) NULL, "
                "flags BIT(64) NULL)"
            )
    try:
        mapping = sharded_mapping(prefix, partitions=3)
        mapping["logical_dbs"][prefix]["tables"]["orders"]["key"] = ["ID"]  # the mapping's spelling
        cfg = write_configs(
            tmp_path / "r",
            mysql=mysql_service,
            bootstrap=bootstrap,
            mapping=mapping,
            start=master_position(conn),
            instance=prefix,
            extra={"source": {"timezone": "Europe/Berlin"}},
        )
        topic = f"{prefix}.orders"
        targets = [*local_targets(tmp_path / "out"), *s3_targets(s3, tmp_path / "s3", "rolling")]
        run = {"max_offsets_per_trigger": 7, "available_now": True}
        configs = [
            config_for(t, bootstrap, (topic,), tmp_path / f"ck-{i}", **run) for i, t in enumerate(targets)
        ]
        work = _Rolling(conn, prefix)
        with RelayThread(cfg) as running:
            work.first()
            work.mark(99998)
            records = read_topic(bootstrap, topic, until=_has(99998))
            # The mark in one partition does not say the other partitions hold every earlier change (a
            # batch sent again after a rollback may land there later): the saved position at the end does.
            end = master_position(conn)
            wait_for(lambda: _saved_at(running, end), 60, "the relay's saved position at the binlog end")
            before = select_all(conn, physical(prefix, 1))
            versions = []
            for config, target in zip(configs, targets, strict=True):
                run_mirror(spark, config)
                versions.append(current_version(target, topic))
            work.second()
            work.mark(99999)
            read_topic(bootstrap, topic, until=_has(99999))
            end = master_position(conn)
            wait_for(lambda: _saved_at(running, end), 60, "the relay's saved position at the binlog end")
        folded = [
            r.json
            for r in records
            if not r.json["isDdl"] and r.json["data"][0]["at"] == "2024-10-27 02:30:00.123"
        ]
        assert len({m["utcMicros"][0]["at"] for m in folded}) == 2  # one text, two instants
        expected = select_all(conn, physical(prefix, 1))
        assert any(row["extra"] is not None for row in expected.values())
        assert {row["flags"] for row in before.values()} - {None} == {str(b) for b in BITS}
        assert {"1001", "2012"} <= before.keys() and not {"1", "12"} & before.keys()  # the key changes
        for config, target, version in zip(configs, targets, versions, strict=True):
            what = f"{target.format} on {target.storage.root}"
            run_mirror(spark, config)  # the same checkpoint: the second phase
            assert as_text(mirrored(target, topic)) == expected, what
            assert as_text(mirrored(target, topic, version)) == before, f"{what}: time travel"
            schema = schema_of(target, topic)
            assert schema["at"] == pa.timestamp("us", tz="UTC"), what
            assert schema["flags"] == pa.decimal128(20, 0) and schema["extra"] == pa.int32(), what
    finally:
        with contextlib.closing(mysql_service.connect()) as c:
            drop_shards(c, prefix, SHARDS)


def test_scd2_history_equals_what_select_showed_over_time(
    spark: Any, mysql_service: Any, kafka_service: Any, shards: str, tmp_path: Path
) -> None:
    prefix, bootstrap = shards, kafka_service.bootstrap_servers
    topic, table = f"{prefix}.orders", f"{prefix}.orders"
    conn = mysql_service.connect()
    seen: list[dict[str, str | None] | None] = []  # what SELECT showed for id 7 after each change

    def step(sql: str) -> None:
        with conn.cursor() as cur:
            cur.execute(sql)
            cur.execute(
                "SELECT CAST(id AS CHAR), status, CAST(amount AS CHAR), note "
                f"FROM {prefix}_01.orders_00 WHERE id = 7"
            )
            row = cur.fetchone()
        seen.append(None if row is None else dict(zip(("id", "status", "amount", "note"), row, strict=True)))

    with relay_run(
        tmp_path / "r", mysql_service, bootstrap, prefix, master_position(conn), "canal-json", prefix
    ):
        step(f"INSERT INTO {prefix}_01.orders_00 VALUES (7, 'NEW', 1.00, NULL)")
        step(f"UPDATE {prefix}_01.orders_00 SET status = 'PAID' WHERE id = 7")
        step(f"UPDATE {prefix}_01.orders_00 SET amount = 2.50, note = 'gift' WHERE id = 7")
        step(f"UPDATE {prefix}_01.orders_00 SET status = 'SHIPPED' WHERE id = 7")
        step(f"DELETE FROM {prefix}_01.orders_00 WHERE id = 7")
        records = read_topic(bootstrap, topic, until=lambda rs: len(rs) >= 5)
    sequences = sorted(r.json["sequence"] for r in records)
    for target in local_targets(tmp_path / "out"):
        config = config_for(
            target, bootstrap, (topic,), tmp_path / f"ck-{target.format}", max_offsets_per_trigger=2,
            available_now=True, history=True,
        )  # fmt: skip
        run_mirror(spark, config)
        history = sorted(read_all(target, table, "history"), key=lambda r: r["_start_sequence"])
        versions = [
            {c: None if r[c] is None else str(r[c]) for c in ("id", "status", "amount", "note")}
            for r in history
        ]
        assert versions == [v for v in seen if v is not None], target.format  # one per state SELECT showed
        assert [(r["_start_sequence"], r["_end_sequence"]) for r in history] == list(
            itertools.pairwise(sequences)
        ), target.format  # each version ends where the next change (the last one: the DELETE) begins
        assert "7" not in mirrored(target, table), target.format
