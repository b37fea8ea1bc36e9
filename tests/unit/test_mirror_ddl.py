"""The mirror's schema changes (``relay.spark.ddl.follow`` + ``relay.spark.merge.act``) against MySQL's rules.

Fixed cases: each DDL kind's columns and row actions, the refusals (an expression default, a narrowing, a
change MySQL converts values for) naming the table and the statement. A seeded generator makes a table's
history — rows of two physical tables (shards) written at increasing sequences, ALTER TABLE statements
between them (ADD with or without a DEFAULT, NOT NULL, DROP, RENAME, CHANGE, MODIFY to a wider type) — and
an oracle applies each statement to every row the way MySQL does (existing rows get the default, a dropped
column's values go, a renamed one's move); the mirror's columns and rows after ``follow`` and ``act`` must
equal the oracle's. Seeds: a fixed set; ``RELAY_FUZZ_SEEDS=N`` runs N more; a failure prints its seed.
"""

from __future__ import annotations

import os
import random
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from relay.errors import MirrorDdlError
from relay.spark.ddl import Columns, Statement, follow, schema_of
from relay.spark.layout import MirrorState, arrow_type
from relay.spark.merge import act, conform

T = "shop.orders"
P = "shop_00.orders"


def _cols(*columns: tuple[str, str, str]) -> Columns:
    return Columns([[n, s] for n, s, _ in columns], {n: m for n, _, m in columns}, {P})


def test_add_column_with_default_sets_rows_before_it() -> None:
    cols = _cols(("id", "bigint", "bigint"))
    sql = "ALTER TABLE shop_00.orders ADD COLUMN c INT NOT NULL DEFAULT 7, ADD d VARCHAR(5) DEFAULT 'x''y'"
    actions = follow(T, cols, [Statement(P, 10, sql)])
    assert cols.columns == [["id", "bigint"], ["c", "int"], ["d", "string"]]
    assert [(a.column, a.value, a.sequence) for a in actions] == [("c", 7, 10), ("d", "x'y", 10)]
    assert cols.types["c"] == "int" and cols.types["d"].startswith("varchar(5)")


def test_add_without_default_and_implicit_defaults() -> None:
    cols = _cols(("id", "bigint", "bigint"))
    sql = (
        "ALTER TABLE t ADD a INT NULL, ADD b INT NOT NULL, ADD s VARCHAR(3) NOT NULL, "
        "ADD e DECIMAL(5,2) DEFAULT -1.5"
    )
    actions = follow(T, cols, [Statement(P, 3, sql)])
    assert [c for c, _ in cols.columns] == ["id", "a", "b", "s", "e"]
    assert [(a.column, a.value) for a in actions] == [("b", 0), ("s", ""), ("e", Decimal("-1.50"))]


def test_enum_defaults() -> None:
    cols = _cols(("id", "bigint", "bigint"))
    sql = (
        "ALTER TABLE t ADD a ENUM('x', 'y') NOT NULL, ADD b ENUM('x', 'y') DEFAULT 'y', "
        "ADD c CHAR(3) DEFAULT 'z '"
    )
    actions = follow(T, cols, [Statement(P, 3, sql)])
    assert [(a.column, a.value) for a in actions] == [("a", "x"), ("b", "y"), ("c", "z")]


def test_drop_rename_change_modify() -> None:
    cols = _cols(("id", "bigint", "bigint"), ("a", "int", "int"), ("b", "string", "varchar(10)"))
    statements = [
        Statement(P, 5, "ALTER TABLE t MODIFY a BIGINT"),
        Statement(P, 6, "ALTER TABLE t CHANGE b bb VARCHAR(50)"),
        Statement(P, 7, "ALTER TABLE t RENAME COLUMN a TO aa"),
        Statement(P, 8, "ALTER TABLE t DROP COLUMN bb"),
    ]
    actions = follow(T, cols, statements)
    assert cols.columns == [["id", "bigint"], ["aa", "bigint"]]
    assert [(a.sequence, a.column, a.copy_from) for a in actions] == [
        (6, "bb", "b"),
        (6, "b", None),
        (7, "aa", "a"),
        (7, "a", None),
        (8, "bb", None),
    ]


def test_drop_on_one_shard_keeps_the_column_for_the_others() -> None:
    cols = _cols(("id", "bigint", "bigint"), ("x", "int", "int"))
    cols.sources = {P, "shop_01.orders"}
    follow(T, cols, [Statement(P, 5, "ALTER TABLE t DROP COLUMN x")])
    assert [c for c, _ in cols.columns] == ["id", "x"] and cols.dropped == {"x": {P}}
    follow(T, cols, [Statement("shop_01.orders", 9, "ALTER TABLE t DROP COLUMN x")])
    assert [c for c, _ in cols.columns] == ["id"] and "x" not in cols.dropped


@pytest.mark.parametrize(
    ("sql", "why"),
    [
        ("ALTER TABLE t ADD c TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP", "is an expression"),
        ("ALTER TABLE t ADD c INT DEFAULT (1 + 2)", "is an expression"),
        ("ALTER TABLE t MODIFY a SMALLINT", "is not a widening"),
        ("ALTER TABLE t MODIFY a INT UNSIGNED", "is not a widening"),
        ("ALTER TABLE t MODIFY b VARCHAR(5)", "is not a widening"),
        ("ALTER TABLE t MODIFY a VARCHAR(20)", "is not a widening"),
        ("ALTER TABLE t ADD c TINYINT DEFAULT 300", "does not fit"),
        ("ALTER TABLE t ADD c DATETIME NOT NULL", "implicit value"),
        ("ALTER TABLE t ADD c BIT(3) DEFAULT b'101'", "expression"),
        ("ALTER TABLE t ADD c ENUM('x', 'y') DEFAULT 2", "member's number"),
    ],
)
def test_what_cannot_be_applied_exactly_is_refused(sql: str, why: str) -> None:
    cols = _cols(("id", "bigint", "bigint"), ("a", "int", "int"), ("b", "string", "varchar(10)"))
    with pytest.raises(MirrorDdlError) as err:
        follow(T, cols, [Statement(P, 4, sql)])
    message = str(err.value)
    assert why in message and T in message and sql in message, message


def test_statements_that_change_no_column() -> None:
    cols = _cols(("id", "bigint", "bigint"), ("a", "int", "int"))
    for sql in (
        "ALTER TABLE t ADD INDEX i (a)",
        "ALTER TABLE t ALTER COLUMN a SET DEFAULT 3",
        "ALTER TABLE t ENGINE=InnoDB",
        "CREATE INDEX j ON t (a)",
        "ALTER TABLE t ADD COLUMN IF NOT EXISTS a INT DEFAULT 5",
        "ALTER TABLE t DROP COLUMN IF EXISTS zz",
    ):
        assert follow(T, cols, [Statement(P, 4, sql)]) == [], sql
    assert cols.columns == [["id", "bigint"], ["a", "int"]]


def test_schema_of_skips_statements_already_applied() -> None:
    stored = MirrorState([["id", "bigint"]], types={"id": "bigint"}, sources=[P], altered={P: 10})
    alters = [(P, 10, "ALTER TABLE t ADD c INT DEFAULT 1"), (P, 12, "ALTER TABLE t ADD d INT DEFAULT 2")]
    followed = schema_of(T, stored, [["id", "bigint"]], alters, {}, frozenset({P}))
    assert [c for c, _ in followed.columns.columns] == ["id", "d"]
    assert [a.column for a in followed.actions] == ["d"] and followed.altered == {P: 12}


def test_schema_of_checks_a_modify_against_the_type_before_it() -> None:
    """Rows after the MODIFY in the same batch already carry the new type: the check uses the older one."""
    stored = MirrorState([["id", "bigint"], ["a", "bigint"]], types={"a": "bigint"}, sources=[P])
    variants = {'{"id":"bigint","a":"int"}': 20}
    with pytest.raises(MirrorDdlError, match="not a widening"):
        schema_of(
            T, stored, stored.columns, [(P, 15, "ALTER TABLE t MODIFY a INT")], variants, frozenset({P})
        )


# --- the generator and its oracle ------------------------------------------------------------------------

SHARDS = ("s_00.t", "s_01.t")
KINDS = {  # MySQL type → (Spark type, a value generator, a literal default)
    "int": ("int", lambda r: r.randint(-1000, 1000), "7"),
    "bigint": ("bigint", lambda r: r.randint(-(10**12), 10**12), "-3"),
    "varchar(10)": ("string", lambda r: r.choice(["a", "bé", "", "x y"]), "'d''q'"),
    "decimal(6,2)": ("decimal(6,2)", lambda r: Decimal(r.randint(-9999, 9999)).scaleb(-2), "1.5"),
}
WIDER = {"int": "bigint", "varchar(10)": "varchar(50)", "decimal(6,2)": "decimal(9,3)"}


class Model:
    """A logical table over two shards as MySQL holds it: rows with their source and last sequence."""

    def __init__(self, rng: random.Random) -> None:
        self.rng, self.seq, self.n = rng, 0, 0
        self.types: dict[str, str] = {"id": "bigint"}  # column → MySQL type (same on both shards)
        self.rows: list[dict[str, Any]] = []

    def write(self) -> None:
        for _ in range(self.rng.randint(1, 4)):
            self.seq += 1
            if self.rows and self.rng.random() < 0.4:
                row = self.rng.choice(self.rows)
                row.update(self._values(), _sequence=self.seq)
            else:
                self.n += 1
                source = self.rng.choice(SHARDS)
                self.rows.append({"id": self.n, **self._values(), "_source": source, "_sequence": self.seq})

    def _values(self) -> dict[str, Any]:
        return {c: KINDS[t][1](self.rng) for c, t in self.types.items() if c != "id" and t in KINDS}

    def alter(self) -> str:
        """One statement on BOTH shards (applied to the model as MySQL does); its SQL."""
        r, cols = self.rng, [c for c in self.types if c != "id"]
        choice = r.choice(["add", "add", "drop", "rename", "modify"] if cols else ["add"])
        if choice == "add":
            name, kind = f"c{self.seq}", r.choice(list(KINDS))
            default = r.choice([None, "null", "not null", "default"])
            literal = KINDS[kind][2]
            value: Any = None
            clause = ""
            if default == "default":
                clause = f" DEFAULT {literal}"
                value = {"int": 7, "bigint": -3, "varchar(10)": "d'q", "decimal(6,2)": Decimal("1.50")}[kind]
            elif default == "not null":
                clause = " NOT NULL"
                value = "" if kind.startswith("varchar") else 0
            elif default == "null":
                clause = " DEFAULT NULL"
            self.types[name] = kind
            for row in self.rows:
                row[name] = value
            return f"ALTER TABLE t ADD COLUMN {name} {kind}{clause}"
        name = r.choice(cols)
        if choice == "drop":
            del self.types[name]
            for row in self.rows:
                row.pop(name, None)
            return f"ALTER TABLE t DROP COLUMN {name}"
        if choice == "rename":
            new = f"r{self.seq}"
            self.types[new] = self.types.pop(name)
            for row in self.rows:
                row[new] = row.pop(name, None)
            return f"ALTER TABLE t RENAME COLUMN {name} TO {new}"
        wider = WIDER.get(self.types[name], self.types[name])
        self.types[name] = wider
        return f"ALTER TABLE t MODIFY {name} {wider}"


def _mirror_rows(model: Model, snapshot: list[dict[str, Any]], columns: list[list[str]]) -> pa.Table:
    data = {c: pa.array([r.get(c) for r in snapshot], arrow_type(t)) for c, t in columns}
    data["_source"] = pa.array([r["_source"] for r in snapshot], pa.string())
    data["_sequence"] = pa.array([r["_sequence"] for r in snapshot], pa.int64())
    return pa.table(data)


def run_seed(seed: int) -> None:
    rng = random.Random(seed)
    model = Model(rng)
    model.write()
    state = Columns([["id", "bigint"]], {"id": "bigint"}, set(SHARDS))
    stored = [dict(r) for r in model.rows]  # what the mirror holds: rows as their last record carried them
    table = _mirror_rows(model, stored, state.columns)
    for _ in range(rng.randint(1, 6)):
        statements = []
        for _ in range(rng.randint(1, 3)):
            model.seq += 1
            sql = model.alter()
            statements += [Statement(s, model.seq, sql) for s in SHARDS]
        actions = follow(T, state, statements)
        table = act(table, actions)
        schema = pa.schema([(c, arrow_type(t)) for c, t in state.columns])
        table = conform(table, pa.schema([*schema, ("_source", pa.string()), ("_sequence", pa.int64())]))
        model.write()  # new rows and updates: their records carry every column as it is now
        fresh = {r["id"]: r for r in model.rows if r["_sequence"] > max(s.sequence for s in statements)}
        kept = [r for r in table.to_pylist() if r["id"] not in fresh]
        table = _mirror_rows(model, kept + list(fresh.values()), state.columns)
    assert [c for c, _ in state.columns] == list(model.types), f"seed {seed}: columns"
    got = {r["id"]: {c: r[c] for c in model.types} for r in table.to_pylist()}
    want = {r["id"]: {c: r.get(c) for c in model.types} for r in model.rows}
    assert got == want, f"seed {seed}: rows differ"


SEEDS = list(range(40)) + [
    random.randrange(10**6) for _ in range(int(os.environ.get("RELAY_FUZZ_SEEDS", "0")))
]


@pytest.mark.parametrize("seed", SEEDS)
def test_generated_histories_equal_mysql(seed: int) -> None:
    run_seed(seed)
