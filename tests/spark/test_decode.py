"""``changes``/``typed``/``apply_changes`` on canal-json values of the relay's exact shape: Spark types
from mysqlType (binary from the ISO-8859-1 text, decimal, datetime, unsigned), a column added by a DDL
appearing in the next batch, a DELETE leaving a tombstone that a replayed INSERT cannot undo."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

from relay.spark.apply import apply_changes, table_path
from relay.spark.decode import changes, typed

TYPES = {"id": "bigint unsigned", "blob": "varbinary(4)", "price": "decimal(6,2)", "at": "datetime(3)"}


def value(seq: int, kind: str, row: dict[str, Any], types: dict[str, str] = TYPES, old: Any = None) -> bytes:
    return json.dumps(
        {
            "id": seq,
            "database": "d",
            "table": "t",
            "pkNames": ["id"],
            "isDdl": False,
            "type": kind,
            "es": 1,
            "ts": 1,
            "sql": "",
            "sqlType": {},
            "mysqlType": types,
            "data": [row],
            "old": old,
            "gtid": "",
            "source": {"database": "d_00", "table": "t_00"},
            "sequence": seq,
        },
        ensure_ascii=False,
    ).encode()


def frame(spark: Any, values: list[tuple[str, bytes]]) -> Any:
    rows = [(k.encode(), v, "d", 0, i) for i, (k, v) in enumerate(values)]
    df = spark.createDataFrame(rows, "key binary, value binary, topic string, partition int, offset long")
    return df.selectExpr("*", "current_timestamp() as timestamp", "0 as timestampType")


def test_typed_values_and_schema_change(spark: Any, tmp_path: Path) -> None:
    row = {
        "id": "18446744073709551615",
        "blob": "\x00\xff\x80a",
        "price": "12.30",
        "at": "2024-05-01 10:00:00.123",
    }
    batch1 = frame(spark, [('{"id":"18446744073709551615"}', value(10, "INSERT", row))])
    got = typed(changes(batch1), "d.t").first()
    assert got["blob"] == bytearray(b"\x00\xff\x80a")
    assert got["price"] == Decimal("12.30") and got["id"] == Decimal("18446744073709551615")
    assert got["at"] == dt.datetime(2024, 5, 1, 10, 0, 0, 123000)
    out = tmp_path / "out"
    apply_changes(changes(batch1), out)
    # A DDL added a column: the next batch brings it; older rows read null there.
    wider = {**TYPES, "extra": "int"}
    batch2 = frame(
        spark,
        [
            ('{"id":"7"}', value(20, "INSERT", {**row, "id": "7", "extra": "5"}, wider)),
            ('{"id":"7"}', value(20, "INSERT", {**row, "id": "7", "extra": "5"}, wider)),
        ],
    )
    apply_changes(changes(batch2), out)
    table = {str(r["id"]): r for r in spark.read.parquet(str(table_path(out, "d.t"))).collect()}
    assert table["7"]["extra"] == 5 and table["18446744073709551615"]["extra"] is None
    # Delete, then replay an older insert of the same key: the tombstone keeps it deleted.
    batch3 = frame(
        spark,
        [
            ('{"id":"7"}', value(30, "DELETE", {**row, "id": "7", "extra": "5"}, wider)),
            ('{"id":"7"}', value(20, "INSERT", {**row, "id": "7", "extra": "5"}, wider)),
        ],
    )
    apply_changes(changes(batch3), out)
    apply_changes(changes(batch2), out)
    ids = {str(r["id"]) for r in spark.read.parquet(str(table_path(out, "d.t"))).collect()}
    assert ids == {"18446744073709551615"}
