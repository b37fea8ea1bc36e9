"""The sharded demo table published with the debezium-json codec is rebuilt equal to SELECT by Flink SQL's
``debezium-json`` format, and by an independent consumer that checks each key's order.

On real MariaDB and a real broker, ``relay run`` as a child process, with a background writer (inserts,
updates, deletes, multi-statement transactions) over 2 shards × 2 ``orders`` tables, plus key-changing
UPDATEs. Everything is judged from what reached Kafka, each partition read in offset order (never re-sorted
by the relay's sequence):

- per key, every change's (sequence, part) — from the ``relay.sequence`` / ``relay.part`` headers — is
  greater than the last one seen in that partition, every DELETE is followed by its tombstone, and applying
  the envelopes (c/u/d) leaves SELECT's rows;
- Flink SQL's ``debezium-json`` format (``tests/flink/debezium_json_state.py``) materialises the same rows,
  with the JSON ``schema`` part (precise DECIMAL, read by Flink as bytes) and without it (DECIMAL as
  ``string``).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from relay.kafka.codec import sequence
from relay.positions.store import ResumePoint
from tests.flink_check import flink_debezium_state
from tests.integration.relay_harness import (
    Rec,
    RelayProcess,
    Writer,
    master_position,
    read_to_end,
    read_topic,
    select_orders,
    sharded_mapping,
    sharded_schema,
    wait_for,
    write_configs,
)

SHARDS, TABLES, PARTITIONS = 2, 2, 3
COLUMNS = ("id", "status", "amount", "note")


@pytest.fixture()
def prefix(mysql_service: Any) -> Iterator[str]:
    with sharded_schema(mysql_service, "dbz", SHARDS, TABLES) as made:
        yield made


def _payload(rec: Rec, schemas: bool) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(rec.value)
    return body["payload"] if schemas else body


def _amount(value: Any, schemas: bool) -> str | None:
    """The DECIMAL(12,2) as SELECT prints it: precise bytes (base64), scale 2; or the string mode's text."""
    if value is None:
        return None
    if not schemas:
        return str(value)
    unscaled = int.from_bytes(base64.b64decode(value), "big", signed=True)
    return f"{Decimal(unscaled).scaleb(-2):.2f}"


def _row(image: dict[str, Any], schemas: bool) -> dict[str, str | None]:
    return {
        "id": str(image["id"]),
        "status": image["status"],
        "amount": _amount(image["amount"], schemas),
        "note": image["note"],
    }


def apply_in_offset_order(records: list[Rec], schemas: bool) -> dict[str, dict[str, str | None]]:
    """Latest state by key, each partition in offset order, checking per key that (sequence, part) grows
    and that a DELETE's next record in its partition is its tombstone."""
    state: dict[str, dict[str, str | None]] = {}
    last: dict[bytes, tuple[int, int]] = {}
    ordered = sorted(records, key=lambda r: (r.partition, r.offset))
    for n, rec in enumerate(ordered):
        if rec.value is None:
            continue  # a tombstone: checked after its DELETE below
        assert rec.key is not None
        order = (int(rec.headers["relay.sequence"]), int(rec.headers.get("relay.part", b"0")))
        assert order > last.get(rec.key, (-1, 0)), f"key {rec.key!r}: {order} at {rec.partition}:{rec.offset}"
        last[rec.key] = order
        event = _payload(rec, schemas)
        if event["op"] == "d":
            after = ordered[n + 1] if n + 1 < len(ordered) else None
            assert after is not None and after.partition == rec.partition, "a DELETE without its tombstone"
            assert after.value is None and after.key == rec.key, "a DELETE not followed by its tombstone"
            state.pop(str(event["before"]["id"]), None)
        else:
            assert event["op"] in ("c", "u"), event["op"]
            state[str(event["after"]["id"])] = _row(event["after"], schemas)
    return state


def _caught_up(proc: RelayProcess, conn: Any) -> None:
    end = master_position(conn)

    def there() -> bool:
        if not proc.position():
            return False
        point = ResumePoint.from_json(proc.position())
        return sequence(point.journal, point.offset, 0) >= sequence(end[0], end[1], 0)

    wait_for(there, 90, "the relay's saved position to reach the binlog end")


@pytest.mark.parametrize("schemas", [True, False], ids=["schema-precise", "payload-string"])
def test_flink_debezium_json_rebuilds_the_sharded_table(
    mysql_service: Any, kafka_service: Any, prefix: str, tmp_path: Path, schemas: bool
) -> None:
    bootstrap, conn = kafka_service.bootstrap_servers, mysql_service.connect()
    mapping = sharded_mapping(prefix, PARTITIONS, codec="debezium-json")
    mapping["debezium"] = {
        "schemas_enable": schemas,
        "decimal_handling_mode": "precise" if schemas else "string",
    }
    cfg = write_configs(
        tmp_path,
        mysql=mysql_service,
        bootstrap=bootstrap,
        mapping=mapping,
        start=master_position(conn),
        instance=prefix,
        include=f"{prefix}_\\d+\\..*",
        extra={"logging": {"level": "INFO"}, "publish": {"batch_size": 64}},
    )
    topic = f"{prefix}.orders"
    writer = Writer(mysql_service, prefix, SHARDS, TABLES, rate=80, seed=3)
    relay = RelayProcess(cfg, tmp_path / "relay.log").start()
    writer.start()
    try:
        read_topic(bootstrap, topic, until=lambda records: len(records) >= 400, timeout=120)
    finally:
        writer.stop()
    with conn.cursor() as cur:  # key changes: DELETE + tombstone + CREATE under the new key
        cur.execute(f"UPDATE {prefix}_00.orders_00 SET id = id + 1000000 ORDER BY id LIMIT 3")
        cur.execute(
            f"UPDATE {prefix}_01.orders_01 SET id = id + 2000000, status = 'MOVED' ORDER BY id LIMIT 2"
        )
    try:
        _caught_up(relay, conn)
    finally:
        relay.stop()
    expected = select_orders(conn, prefix, SHARDS, TABLES)
    conn.close()
    records = read_to_end(bootstrap, topic)
    assert any(r.value is None for r in records) and any("__debezium.oldkey" in r.headers for r in records)
    assert apply_in_offset_order(records, schemas) == expected
    values = [r.value for r in sorted(records, key=lambda r: (r.partition, r.offset))]
    declared = {
        "id": "BIGINT",
        "status": "STRING",
        "amount": "BYTES" if schemas else "STRING",
        "note": "STRING",
    }
    flink = flink_debezium_state(values, "id", declared, schemas, tmp_path)
    rebuilt = {
        key: {
            "id": str(row["id"]),
            "status": row["status"],
            "amount": _amount(base64.b64encode(bytes.fromhex(row["amount"])).decode(), True)
            if schemas and row["amount"] is not None
            else row["amount"],
            "note": row["note"],
        }
        for key, row in flink.items()
    }
    assert rebuilt == expected
