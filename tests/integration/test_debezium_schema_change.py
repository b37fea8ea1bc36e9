"""debezium-json's schema change topic carries ``tableChanges``: the definitions of the tables a DDL
created or altered, as the schema history applied it.

On real MariaDB and a real broker, ``relay run`` as a child process with the schema history on (its
default). A CREATE TABLE of a new shard table and an ALTER TABLE of an existing one are read back from the
schema change topic by an independent consumer, in offset order, and their ``tableChanges`` compared with
what the server itself says of the tables (``information_schema``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.relay_harness import (
    Rec,
    RelayProcess,
    master_position,
    read_topic,
    sharded_mapping,
    sharded_schema,
    write_configs,
)


@pytest.fixture()
def prefix(mysql_service: Any) -> Iterator[str]:
    with sharded_schema(mysql_service, "dbzddl", 1, 1) as made:
        yield made


def _server_table(conn: Any, db: str, table: str) -> dict[str, Any]:
    """The table as the server describes it, in the fields tableChanges shows."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT COLUMN_NAME, DATA_TYPE, CHARACTER_SET_NAME, ORDINAL_POSITION, COLUMN_TYPE "
            "FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s "
            "ORDER BY ORDINAL_POSITION",
            (db, table),
        )
        columns = [
            {
                "name": name,
                "typeName": kind.upper() + (" UNSIGNED" if "unsigned" in ctype.lower() else ""),
                "charsetName": charset,
                "position": int(pos),
            }
            for name, kind, charset, pos, ctype in cur.fetchall()
        ]
        cur.execute(
            "SELECT COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE WHERE TABLE_SCHEMA = %s "
            "AND TABLE_NAME = %s AND CONSTRAINT_NAME = 'PRIMARY' ORDER BY ORDINAL_POSITION",
            (db, table),
        )
        key = [row[0] for row in cur.fetchall()]
    return {"primaryKeyColumnNames": key, "columns": columns}


def _shown(change: dict[str, Any]) -> dict[str, Any]:
    table = change["table"]
    fields = ("name", "typeName", "charsetName", "position")
    return {
        "primaryKeyColumnNames": table["primaryKeyColumnNames"],
        "columns": [{f: c[f] for f in fields} for c in table["columns"]],
    }


def test_create_and_alter_carry_their_table_definitions(
    mysql_service: Any, kafka_service: Any, prefix: str, tmp_path: Path
) -> None:
    bootstrap, conn = kafka_service.bootstrap_servers, mysql_service.connect()
    changes_topic = f"{prefix}.schema-changes"
    mapping = sharded_mapping(prefix, 1, codec="debezium-json")
    mapping["debezium"] = {"schemas_enable": False, "schema_change_topic": changes_topic}
    cfg = write_configs(
        tmp_path,
        mysql=mysql_service,
        bootstrap=bootstrap,
        mapping=mapping,
        start=master_position(conn),
        instance=prefix,
        include=f"{prefix}_\\d+\\..*",
        extra={"logging": {"level": "INFO"}},
    )
    db = f"{prefix}_00"
    relay = RelayProcess(cfg, tmp_path / "relay.log").start()
    try:
        with conn.cursor() as cur:  # a row first: once it is in Kafka the relay has its history
            cur.execute(f"INSERT INTO {db}.orders_00 (id, status) VALUES (1, 'NEW')")
        read_topic(bootstrap, f"{prefix}.orders", until=lambda records: len(records) >= 1, timeout=120)
        with conn.cursor() as cur:
            cur.execute(
                f"CREATE TABLE {db}.orders_01 (id BIGINT UNSIGNED NOT NULL, region CHAR(2) NOT NULL, "
                "status VARCHAR(16), amount DECIMAL(12,2), PRIMARY KEY (id, region)) DEFAULT CHARSET=utf8mb4"
            )
            cur.execute(
                f"ALTER TABLE {db}.orders_00 ADD COLUMN kind ENUM('a','b') CHARACTER SET latin1, "
                "ADD COLUMN at DATETIME(3)"
            )
        records = read_topic(bootstrap, changes_topic, until=lambda records: len(records) >= 2, timeout=120)
    finally:
        relay.stop()
    by_offset = sorted(records, key=lambda r: (r.partition, r.offset))
    assert len({r.partition for r in by_offset}) == 1  # one logical db: one key, one partition
    create, alter = (_value(r) for r in by_offset[:2])
    assert "CREATE TABLE" in create["ddl"] and "ALTER TABLE" in alter["ddl"]
    assert [(c["type"], c["id"]) for c in create["tableChanges"]] == [("CREATE", f'"{db}"."orders_01"')]
    assert [(c["type"], c["id"]) for c in alter["tableChanges"]] == [("ALTER", f'"{db}"."orders_00"')]
    assert _shown(create["tableChanges"][0]) == _server_table(conn, db, "orders_01")
    assert _shown(alter["tableChanges"][0]) == _server_table(conn, db, "orders_00")
    columns = {c["name"]: c for c in alter["tableChanges"][0]["table"]["columns"]}
    assert columns["kind"]["enumValues"] == ["a", "b"] and columns["at"]["length"] == 3
    assert columns["amount"]["length"] == 12 and columns["amount"]["scale"] == 2
    made = {c["name"]: c for c in create["tableChanges"][0]["table"]["columns"]}
    assert made["id"]["optional"] is False and made["region"]["optional"] is False
    assert create["tableChanges"][0]["table"]["defaultCharsetName"] == "utf8mb4"
    conn.close()


def _value(record: Rec) -> dict[str, Any]:
    assert record.value is not None
    out: dict[str, Any] = json.loads(record.value)
    return out
