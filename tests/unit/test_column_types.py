"""One mapping from MySQL's declared types to TABLE_MAP type codes: the schema history's ``signature`` of a
declared column and the snapshot's ``column_meta`` of the same column in information_schema agree."""

from __future__ import annotations

from typing import Any

import pytest

from relay.binlog import types
from relay.binlog.column_types import table_map_meta, table_map_type
from relay.errors import SourceError
from relay.schema.model import Catalog, ColumnDef, event_signature, signature
from relay.source.snapshot_rows import K_BINARY
from relay.source.snapshot_tables import column_meta

# (declared column, its information_schema.COLUMNS row as MySQL 8 gives it, binary collation)
CASES: list[tuple[ColumnDef, dict[str, Any]]] = [
    (ColumnDef("c", "int", (), True), {"DATA_TYPE": "int", "COLUMN_TYPE": "int unsigned"}),
    (
        ColumnDef("c", "decimal", (12, 3)),
        {"DATA_TYPE": "decimal", "NUMERIC_PRECISION": 12, "NUMERIC_SCALE": 3},
    ),
    (ColumnDef("c", "double", ()), {"DATA_TYPE": "double"}),
    (ColumnDef("c", "datetime", (6,)), {"DATA_TYPE": "datetime", "DATETIME_PRECISION": 6}),
    (ColumnDef("c", "bit", (13,)), {"DATA_TYPE": "bit", "NUMERIC_PRECISION": 13}),
    (
        ColumnDef("c", "varbinary", (300,), collation="binary"),
        {"DATA_TYPE": "varbinary", "CHARACTER_OCTET_LENGTH": 300},
    ),
    (
        ColumnDef("c", "binary", (16,), collation="binary"),
        {"DATA_TYPE": "binary", "CHARACTER_OCTET_LENGTH": 16},
    ),
    (
        ColumnDef("c", "enum", (), collation="binary", members=("a", "b")),
        {"DATA_TYPE": "enum", "COLUMN_TYPE": "enum('a','b')"},
    ),
    (
        ColumnDef("c", "set", (), collation="binary", members=tuple(f"m{i}" for i in range(40))),
        {"DATA_TYPE": "set", "COLUMN_TYPE": "set(" + ",".join(f"'m{i}'" for i in range(40)) + ")"},
    ),
    (ColumnDef("c", "mediumblob", (), collation="binary"), {"DATA_TYPE": "mediumblob"}),
    (ColumnDef("c", "json", ()), {"DATA_TYPE": "json"}),
    (ColumnDef("c", "year", ()), {"DATA_TYPE": "year"}),
]


def information_schema(row: dict[str, Any]) -> dict[str, Any]:
    full = {
        "COLUMN_NAME": "c", "IS_NULLABLE": "YES", "COLLATION_ID": None, "CHARACTER_OCTET_LENGTH": None,
        "NUMERIC_PRECISION": None, "NUMERIC_SCALE": None, "DATETIME_PRECISION": None, **row,
    }  # fmt: skip
    full.setdefault("COLUMN_TYPE", row["DATA_TYPE"])
    full["COLUMN_TYPE"] = full["COLUMN_TYPE"] or row["DATA_TYPE"]
    return full


@pytest.mark.parametrize(("declared", "row"), CASES, ids=[c[0].kind for c in CASES])
def test_the_history_and_the_snapshot_describe_a_column_alike(
    declared: ColumnDef, row: dict[str, Any]
) -> None:
    meta, _ = column_meta(0, information_schema(row), False)
    assert event_signature(meta) == signature(Catalog(), declared)


def test_the_string_family_is_written_as_string_with_the_real_type_in_the_metadata() -> None:
    code, meta = table_map_meta(*table_map_type("enum", members=300))
    assert code == types.STRING and types.string_type(meta) == (types.ENUM, 2)
    code, meta = table_map_meta(*table_map_type("char", length=1020))  # CHAR(255) utf8mb4
    assert code == types.STRING and types.string_type(meta) == (types.STRING, 1020)
    assert table_map_meta(*table_map_type("varchar", length=1020)) == (types.VARCHAR, 1020)


def test_json_on_mariadb_is_longtext_and_unknown_types_are_refused() -> None:
    assert table_map_type("json", mariadb=True) == (types.BLOB, 4)
    with pytest.raises(ValueError, match="no binlog type for vector"):
        table_map_type("vector")
    # A spatial column is read as bytes: SELECT sends the SRID + WKB the binlog holds.
    meta, kind = column_meta(0, information_schema({"DATA_TYPE": "point"}), False)
    assert (meta.type_code, kind) == (types.GEOMETRY, K_BINARY)
    # MariaDB's INET6 is BINARY(16) in the binlog but text in SELECT: refused, naming the way out.
    refused = r"column 'c': type inet6 \(MariaDB\) is not captured.*filter.exclude"
    with pytest.raises(SourceError, match=refused):
        column_meta(0, information_schema({"DATA_TYPE": "inet6", "COLUMN_TYPE": "inet6"}), False)
