"""Done-when: a real relay (real MariaDB binlog → real broker) mirrored by real local Spark.

A workload of inserts, updates and deletes across shards goes through the relay; part of it is published
twice (a second relay re-reads the binlog from the middle, as after a crash before the position was
saved). The mirror streams the topic with ``maxOffsetsPerTrigger``, is stopped and restarted from its
checkpoint, and must end equal to ``SELECT *`` over the shards with the right Spark types; a replay from
the start into a fresh directory rebuilds the same table; the protobuf codec mirrors the same way.
"""

from __future__ import annotations

import contextlib
import datetime as dt
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
from relay.spark.layout import BUCKET
from relay.spark.mirror import MirrorConfig, start
from relay.spark.tables import MirrorTable, target_of
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


def mirrored(spark: Any, out: Any, table: str, version: int | None = None) -> dict[str, dict[str, Any]]:
    """Every table column of every mirrored row (the ``_`` meta columns left out), by id, read by the
    format's library (deltalake / pyiceberg); TIMESTAMP (an instant) as naive UTC, as Spark shows it."""
    rows = MirrorTable(target_of(out), table).read(version).to_pylist()
    columns = [c for c in (rows[0] if rows else {}) if not c.startswith("_") and c != BUCKET]
    return {str(r["id"]): {c: _utc(r[c]) for c in columns} for r in rows}


def _utc(value: Any) -> Any:
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.UTC).replace(tzinfo=None)
    return value


def schema_of(out: Any, table: str) -> dict[str, Any]:
    return {f.name: f.type for f in MirrorTable(target_of(out), table).rows.schema()}


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

    out, checkpoint = tmp_path / "out", tmp_path / "ck"
    config = MirrorConfig(
        bootstrap,
        (topic, prefix),
        out,
        checkpoint,
        max_offsets_per_trigger=MAX_PER_TRIGGER,
        trigger_seconds=0.5,
    )
    # First run: a continuous query, stopped after a few micro-batches (mid-way through the topic).
    query = start(spark, config)
    wait_for(lambda: query.lastProgress is not None and query.lastProgress["batchId"] >= 2, 120, "3 batches")
    query.stop()
    first = [p for p in query.recentProgress if p["numInputRows"] > 0]
    # Second run: the same checkpoint, until caught up.
    second = [
        p
        for p in run_mirror(spark, MirrorConfig(**{**config.__dict__, "available_now": True}))
        if p["numInputRows"] > 0
    ]
    progress = first + second
    assert all(p["numInputRows"] <= MAX_PER_TRIGGER for p in progress)
    # Neither lost nor read twice: the batches tile the topic exactly once.
    assert sum(p["numInputRows"] for p in progress) == total
    assert json.loads(second[0]["sources"][0]["startOffset"]) == json.loads(
        first[-1]["sources"][0]["endOffset"]
    )

    got = mirrored(spark, out, table)
    assert as_text(got) == expected
    assert as_text(mirrored(spark, out, f"{prefix}.customers")) == select_all(
        conn, [f"{prefix}_00.customers"]
    )
    schema = schema_of(out, table)
    assert schema["id"] == pa.int64() and schema["amount"] == pa.decimal128(12, 2)
    assert schema["status"] == pa.string() and schema["note"] == pa.string()
    assert isinstance(next(iter(got.values()))["amount"], Decimal)
    assert "extra" in schema  # the ALTER TABLE … ADD COLUMN of one shard appears as a column

    # Replay from the start (earliest, then a timestamp before every record) rebuilds the same table.
    for name, start_opts in (("earliest", "earliest"), ("timestamp", None)):
        replay = MirrorConfig(
            bootstrap,
            (topic,),
            tmp_path / f"replay-{name}",
            tmp_path / f"ck-{name}",
            available_now=True,
            starting_offsets=start_opts or "earliest",
        )
        if start_opts is None:
            batch = (
                spark.read.format("relay-kafka")
                .option("kafka.bootstrap.servers", bootstrap)
                .option("subscribe", topic)
                .option("startingTimestamp", "0")
                .load()
            )
            apply_changes(changes(batch), replay.out)
        else:
            run_mirror(spark, replay)
        assert as_text(mirrored(spark, replay.out, table)) == expected
    # Applying everything once more to the mirrored table changes nothing.
    batch = (
        spark.read.format("relay-kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .load()
    )
    apply_changes(changes(batch), out)
    assert as_text(mirrored(spark, out, table)) == expected


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
    out = tmp_path / "out"
    df = (
        spark.read.format("relay-kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .load()
    )
    ch = changes(df, codec="canal-protobuf")
    sample = ch.where("type = 'UPDATE'").first()
    assert (
        sample is not None
        and sample["before"] is not None
        and sample["source"]["database"].startswith(prefix)
    )
    apply_changes(changes(df), out)
    assert as_text(mirrored(spark, out, topic)) == select_all(conn, physical(prefix))


def _count(spark: Any, bootstrap: str, topic: str) -> int:
    df = (
        spark.read.format("relay-kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .load()
    )
    return int(changes(df).where("not is_ddl").count())


# 2024-10-27 in Europe/Berlin: 00:30 and 01:30 UTC are both 02:30 local (CEST, then CET).
FOLD = ("2024-10-27 00:30:00.123", "2024-10-27 01:30:00.123")
BITS = (0, 2**63 - 1, 2**63, 2**64 - 1)


def _rolling_workload(conn: Any, prefix: str) -> None:
    """Writes on every shard while ADD COLUMN reaches the shards one by one; then TRUNCATE of one shard,
    DROP + CREATE of another, with writes after each. TIMESTAMPs in the repeated hour, BIT(64) limits."""
    tables = physical(prefix, 1)
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        ident = 0

        def insert(table: str, extra: bool) -> None:
            nonlocal ident
            ident += 1
            values = [ident, f"s{ident}", FOLD[ident % 2], BITS[ident % 4]]
            if extra:
                cur.execute(f"INSERT INTO {table} VALUES (%s, %s, %s, %s, %s)", (*values, ident * 10))
            else:
                cur.execute(f"INSERT INTO {table} VALUES (%s, %s, %s, %s)", values)

        for _ in range(4):
            for table in tables:
                insert(table, False)
        for altered in range(len(tables)):
            cur.execute(f"ALTER TABLE {tables[altered]} ADD COLUMN extra INT NULL")
            for i, table in enumerate(tables):  # writes on every shard, altered or not
                insert(table, i <= altered)
                cur.execute(
                    f"UPDATE {table} SET status = CONCAT(status, '+') WHERE MOD(id, 3) = %s", (altered,)
                )
                if i <= altered:
                    cur.execute(
                        f"UPDATE {table} SET extra = id + 1000 WHERE extra IS NULL AND MOD(id, 2) = 0"
                    )
        cur.execute(f"TRUNCATE TABLE {tables[2]}")
        insert(tables[2], True)
        cur.execute(f"DROP TABLE {tables[1]}")
        cur.execute(
            f"CREATE TABLE {tables[1]} (id BIGINT PRIMARY KEY, status VARCHAR(16), "
            "at TIMESTAMP(3) NULL, flags BIT(64) NULL, extra INT NULL)"
        )
        insert(tables[1], True)
        insert(tables[0], True)


def _is_last(message: dict[str, Any]) -> bool:
    return not message["isDdl"] and message["data"][0]["id"] == "99999"


def test_mirror_keeps_every_value_through_rolling_alter_truncate_and_drop(
    spark: Any, mysql_service: Any, kafka_service: Any, tmp_path: Path
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
        with RelayThread(cfg):
            _rolling_workload(conn, prefix)
            with conn.cursor() as cur:  # the last change: once it is in the topic, all are
                cur.execute(f"INSERT INTO {prefix}_00.orders_00 (id, status) VALUES (99999, 'last')")
            records = read_topic(bootstrap, topic, until=lambda rs: any(_is_last(r.json) for r in rs))
        folded = [
            r.json
            for r in records
            if not r.json["isDdl"] and r.json["data"][0]["at"] == "2024-10-27 02:30:00.123"
        ]
        assert len({m["utcMicros"][0]["at"] for m in folded}) == 2  # one text, two instants
        config = MirrorConfig(
            bootstrap,
            (topic,),
            tmp_path / "out",
            tmp_path / "ck",
            max_offsets_per_trigger=7,
            available_now=True,
        )
        run_mirror(spark, config)
        got = mirrored(spark, config.out, topic)
        expected = select_all(conn, physical(prefix, 1))
        assert as_text(got) == expected
        assert any(row["extra"] is not None for row in expected.values())
        assert {row["flags"] for row in expected.values()} - {None} == {str(b) for b in BITS}
        schema = schema_of(config.out, topic)
        assert schema["at"] == pa.timestamp("us", tz="UTC") and schema["flags"] == pa.decimal128(20, 0)
        assert schema["extra"] == pa.int32()
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
    config = MirrorConfig(
        bootstrap,
        (topic,),
        tmp_path / "out",
        tmp_path / "ck",
        max_offsets_per_trigger=2,
        available_now=True,
        history=True,
    )
    run_mirror(spark, config)
    history = sorted(
        MirrorTable(target_of(config.out), table, "history").read().to_pylist(),
        key=lambda r: r["_start_sequence"],
    )
    versions = [
        {c: None if r[c] is None else str(r[c]) for c in ("id", "status", "amount", "note")} for r in history
    ]
    assert versions == [v for v in seen if v is not None]  # one version per state SELECT showed
    sequences = sorted(r.json["sequence"] for r in records)
    assert [(r["_start_sequence"], r["_end_sequence"]) for r in history] == list(
        itertools.pairwise(sequences)
    )  # each version ends where the next change (the last one: the DELETE) begins
    assert "7" not in mirrored(spark, config.out, table)
