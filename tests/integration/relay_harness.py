"""Helpers for the relay's end-to-end tests: configs on real services, a topic reader, a sharded workload.

Nothing here is a fake: configs point at the session's MariaDB and broker, ``read_topic`` consumes with
``assign`` from the beginning (Tansu's first subscribe is slow and its high watermark is unreliable, so
reading stops on a condition with a deadline, not at the end offset).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from relay.partitioner import partition_for_key


@dataclass
class Rec:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    headers: dict[str, bytes] = field(default_factory=dict)

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
            out.append(Rec(msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value(), headers))
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


def apply_records(records: list[Rec]) -> dict[str, dict[str, str | None]]:
    """Latest state by key, applying row records in sequence order (duplicates are harmless)."""
    state: dict[str, dict[str, str | None]] = {}
    rows = [r for r in records if not r.json["isDdl"]]
    for rec in sorted(rows, key=lambda r: r.json["sequence"]):
        msg = rec.json
        row = msg["data"][0]
        key = json.loads(rec.key or b"{}")
        ident = key["id"]
        if msg["type"] == "DELETE":
            state.pop(ident, None)
        else:
            state[ident] = {k: row.get(k) for k in ("id", "status", "amount", "note")}
    return state


def expected_partition(key: bytes, partitions: int) -> int:
    return partition_for_key(key, partitions)
