"""The schema history's DDL application (sqlglot, MySQL dialect) and its durable, versioned store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from relay.binlog import types
from relay.errors import UnappliedDdlError
from relay.schema.ddl import apply_ddl, column_from_type
from relay.schema.history import FileSchemaHistory, Record, SchemaHistory
from relay.schema.model import Catalog, Collation, ColumnDef, TableDef, signature
from relay.schema.server import read_catalog

COLLATIONS = {
    n: Collation(n, cs, i, d)
    for n, cs, i, d in [
        ("utf8mb4_general_ci", "utf8mb4", 45, True),
        ("utf8mb4_bin", "utf8mb4", 46, False),
        ("latin1_swedish_ci", "latin1", 8, True),
    ]
}


def catalog() -> Catalog:
    return Catalog(mariadb=True, collations=dict(COLLATIONS), databases={"d": "latin1_swedish_ci"})


def test_columns_keys_and_renames_follow_the_ddl() -> None:
    c = catalog()
    apply_ddl(c, "CREATE TABLE o (id INT UNSIGNED PRIMARY KEY, name VARCHAR(16) CHARACTER SET utf8mb4)", "d")
    apply_ddl(c, "ALTER TABLE o ADD COLUMN note TEXT FIRST, CHANGE name title VARCHAR(20)", "d")
    apply_ddl(c, "ALTER TABLE o DROP PRIMARY KEY, ADD PRIMARY KEY (id, title)", "d")
    apply_ddl(c, "RENAME TABLE o TO p, p TO q", "d")
    t = c.table("d", "q")
    assert t is not None and c.table("d", "o") is None
    assert [col.name for col in t.columns] == ["note", "id", "title"]
    assert t.primary_key == ("id", "title")
    assert t.columns[2].collation == "latin1_swedish_ci"  # CHANGE without a charset: the table's
    assert signature(c, t.columns[2]) == (types.VARCHAR, 20)
    assert signature(c, t.columns[1]) == (types.LONG, 0) and t.columns[1].unsigned


def test_a_statement_the_parser_cannot_apply_names_its_table() -> None:
    c = catalog()
    apply_ddl(c, "CREATE TABLE o (id INT)", "d")
    with pytest.raises(UnappliedDdlError) as caught:
        apply_ddl(c, "ALTER TABLE o CONVERT TO CHARACTER SET utf8mb4", "d")
    assert caught.value.tables == (("d", "o"),)
    assert apply_ddl(c, "CREATE INDEX ix ON o (id)", "d") == {}


def test_the_history_answers_by_place(tmp_path: Path) -> None:
    h = FileSchemaHistory(tmp_path / "h.jsonl")
    c = catalog()
    apply_ddl(c, "CREATE TABLE o (id INT)", "d")
    h.append(Record("snapshot", ("b.000001", 100), tuple(c.tables.items()), c.facts_json()))
    changes = apply_ddl(c, "ALTER TABLE o ADD COLUMN x INT", "d")
    h.append(Record("ddl", ("b.000002", 50), tuple(changes.items()), {"databases": c.databases}, "ALTER"))
    again = FileSchemaHistory(h.path)
    assert len(again.catalog_at(("b.000001", 999)).tables[("d", "o")].columns) == 1
    assert len(again.catalog_at(("b.000002", 50)).tables[("d", "o")].columns) == 2
    with pytest.raises(Exception, match="no definitions as old"):
        again.catalog_at(("b.000001", 4))


@pytest.mark.parametrize(
    "sql",
    [
        "ALTER TABLE o ADD INDEX ix (id)",
        "ALTER TABLE o RENAME INDEX ix TO iy",
        "ALTER TABLE o FORCE",
        "ALTER TABLE o ENGINE=InnoDB, ALGORITHM=INPLACE",
        "ALTER TABLE o PARTITION BY HASH(id) PARTITIONS 4",
        "ALTER TABLE d.o PARTITION BY RANGE (id) (PARTITION p0 VALUES LESS THAN (10), "
        "PARTITION p1 VALUES LESS THAN MAXVALUE)",
        "ALTER TABLE `d`.`o` DROP PARTITION p0",
        "ALTER TABLE o TRUNCATE PARTITION p0, p1",
        "ALTER TABLE o REMOVE PARTITIONING",
        "ALTER TABLE o DISCARD TABLESPACE",
    ],
)
def test_statements_that_change_no_column_leave_the_table_as_it_is(sql: str) -> None:
    c = catalog()
    apply_ddl(c, "CREATE TABLE o (id INT PRIMARY KEY)", "d")
    before = c.table("d", "o")
    apply_ddl(c, sql, "d")
    assert c.table("d", "o") == before


def test_zerofill_before_unsigned_is_read_like_unsigned_zerofill() -> None:
    """MySQL takes both orders; the parser only one (the generative test's seed 38004 stopped on it)."""
    c = catalog()
    apply_ddl(
        c,
        "CREATE TABLE z (id INT PRIMARY KEY, a int(2) ZEROFILL UNSIGNED NULL, b INT ZEROFILL, "
        "c varchar(20) DEFAULT 'zerofill unsigned', `zerofill unsigned` int)",
        "d",
    )
    t = c.table("d", "z")
    assert t is not None
    cols = {col.name: col for col in t.columns}
    assert cols["a"].unsigned and cols["b"].unsigned and not cols["zerofill unsigned"].unsigned


def test_a_quoted_name_is_a_column_even_when_it_spells_a_keyword() -> None:
    c = catalog()
    apply_ddl(c, "CREATE TABLE o (id INT PRIMARY KEY)", "d")
    apply_ddl(c, "ALTER TABLE o ADD `partition` INT", "d")
    t = c.table("d", "o")
    assert t is not None and [col.name for col in t.columns] == ["id", "partition"]
    with pytest.raises(UnappliedDdlError):  # partition options after another action: not guessed
        apply_ddl(c, "ALTER TABLE o ADD COLUMN x INT, PARTITION BY HASH(id)", "d")


def test_mariadb_if_exists_column_clauses_follow_what_the_table_has() -> None:
    c = catalog()
    apply_ddl(c, "CREATE TABLE o (id INT PRIMARY KEY, a INT)", "d")
    apply_ddl(c, "ALTER TABLE o ADD COLUMN IF NOT EXISTS a INT, ADD COLUMN IF NOT EXISTS b INT", "d")
    apply_ddl(c, "ALTER TABLE o DROP COLUMN IF EXISTS zz, DROP COLUMN IF EXISTS a", "d")
    t = c.table("d", "o")
    assert t is not None and [col.name for col in t.columns] == ["id", "b"]


def test_float_unsigned_spatial_subtypes_real_and_mariadb_types_parse() -> None:
    c = catalog()
    apply_ddl(
        c,
        "CREATE TABLE s (id INT PRIMARY KEY, f FLOAT UNSIGNED, g FLOAT(7,3) UNSIGNED ZEROFILL, h FLOAT(53), "
        "r REAL, p POINT NOT NULL, l LINESTRING, m MULTIPOLYGON, gc GEOMETRYCOLLECTION, "
        "u UUID, i6 INET6, i4 INET4, z INT(5) ZEROFILL, point INT)",
        "d",
    )
    t = c.table("d", "s")
    assert t is not None
    kinds = {col.name: (col.kind, col.unsigned) for col in t.columns}
    assert kinds["f"] == ("float", True) and kinds["g"] == ("float", True)
    assert kinds["h"] == ("double", False) and kinds["r"] == ("double", False)
    assert {kinds[n][0] for n in ("p", "l", "m", "gc")} == {"geometry"}
    assert (kinds["u"], kinds["i6"], kinds["i4"]) == (("uuid", False), ("inet6", False), ("inet4", False))
    assert kinds["z"] == ("int", True) and kinds["point"] == ("int", False)  # ZEROFILL: UNSIGNED
    cols = {col.name: col for col in t.columns}
    assert signature(c, cols["i6"]) == (types.STRING, 16) and signature(c, cols["i4"]) == (types.STRING, 4)
    assert signature(c, cols["p"]) == (types.GEOMETRY, 4)
    apply_ddl(c, "ALTER TABLE s ADD COLUMN q POINT, MODIFY f FLOAT", "d")
    t = c.table("d", "s")
    assert t is not None and t.columns[-1].kind == "geometry" and not t.columns[1].unsigned


@pytest.mark.parametrize(
    ("type_text", "kind", "unsigned"),
    [
        ("float unsigned", "float", True),
        ("float(7,3) unsigned zerofill", "float", True),
        ("double unsigned", "double", True),
        ("decimal(5,2) unsigned zerofill", "decimal", True),
        ("int(5) unsigned zerofill", "int", True),
        ("point", "geometry", False),
        ("geomcollection", "geometry", False),
        ("inet6", "inet6", False),
        ("uuid", "uuid", False),
    ],
)
def test_information_schema_types_keep_signedness_and_name_the_mariadb_types(
    type_text: str, kind: str, unsigned: bool
) -> None:
    col = column_from_type("c", type_text, None)
    assert (col.kind, col.unsigned) == (kind, unsigned)
    if kind in ("inet6", "uuid"):
        assert col.collation == "binary"


def test_records_of_earlier_versions_name_the_columns_whose_signedness_to_check() -> None:
    year_first = TableDef(
        "d", "t", (ColumnDef("id", "int"), ColumnDef("y", "year"), ColumnDef("t", "tinyint", (), True),
                   ColumnDef("v", "varchar", (4,), False, "latin1_swedish_ci"), ColumnDef("f", "float")),
    )  # fmt: skip
    facts = catalog().facts_json()
    old = Record("learned", ("b.000001", 9), ((("d", "t"), year_first),), version=1)
    h = SchemaHistory()
    h.append(Record("snapshot", ("b.000001", 4), (), facts))
    h.append(old)
    assert h.catalog_at(("b.000001", 10)).tables[("d", "t")].doubt == ("t", "f")
    assert Record.from_json(old.to_json()).version == 1  # no "v": an earlier version's record
    new = Record("learned", ("b.000001", 9), ((("d", "t"), year_first),))
    assert Record.from_json(new.to_json()).version == 2
    h2 = SchemaHistory()
    h2.append(Record("snapshot", ("b.000001", 4), (), facts))
    h2.append(new)
    assert h2.catalog_at(("b.000001", 10)).tables[("d", "t")].doubt == ()
    # A definition read from information_schema by an earlier version: its FLOATs may have lost UNSIGNED.
    snap = Record("snapshot", ("b.000001", 4), ((("d", "t"), year_first),), facts, version=1)
    h3 = SchemaHistory()
    h3.append(snap)
    assert h3.catalog_at(("b.000001", 4)).tables[("d", "t")].doubt == ("f",)


def test_zerofill_makes_a_number_unsigned() -> None:
    c = catalog()
    apply_ddl(c, "CREATE TABLE z (a INT(5) ZEROFILL, b DECIMAL(5,2) ZEROFILL, f FLOAT ZEROFILL)", "d")
    t = c.table("d", "z")
    assert t is not None and all(col.unsigned for col in t.columns)
    assert column_from_type("c", "tinyint(3) zerofill", None).unsigned


class _Cursor:
    """What ``relay.schema.server`` asks information_schema, answered from canned rows."""

    def __init__(self, answers: dict[str, list[tuple[Any, ...]]]) -> None:
        self.answers, self.rows = answers, []

    def __enter__(self) -> _Cursor:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def execute(self, sql: str, args: Any = None) -> None:
        self.rows = next(rows for key, rows in self.answers.items() if key in sql)

    def fetchall(self) -> list[tuple[Any, ...]]:
        return self.rows


class _Conn:
    def __init__(self, answers: dict[str, list[tuple[Any, ...]]]) -> None:
        self.answers = answers

    def cursor(self) -> _Cursor:
        return _Cursor(self.answers)


def test_a_type_the_history_does_not_model_marks_its_table_broken_instead_of_failing_the_start() -> None:
    conn = _Conn({
        "COLLATIONS": [("utf8mb4_general_ci", "utf8mb4", 45, "Yes")],
        "SCHEMATA": [("app", "utf8mb4_general_ci"), ("other", "utf8mb4_general_ci")],
        "collation_server": [("utf8mb4_general_ci",)],
        "TABLES": [("app", "t", "utf8mb4_general_ci"), ("other", "v", "utf8mb4_general_ci")],
        "COLUMNS": [("app", "t", "id", "int", "int(11)", None), ("app", "t", "u", "uuid", "uuid", None),
                    ("other", "v", "id", "int", "int(11)", None),
                    ("other", "v", "e", "vector", "vector(3)", None)],
        "STATISTICS": [("app", "t", "id"), ("other", "v", "id")],
    })  # fmt: skip
    catalog = read_catalog(conn, mariadb=True)
    app, other = catalog.tables[("app", "t")], catalog.tables[("other", "v")]
    assert not app.broken and app.columns[1].kind == "uuid"
    assert other.broken.startswith("read from the server: column e:") and "VECTOR(3)" in other.broken
