"""Statement-logged data changes: which statements are, which tables they write, and the guard's policies."""

from __future__ import annotations

import logging

import pytest

from relay.binlog import events as ev
from relay.canal.sink import Sink
from relay.canal.statements import DmlStatement, StatementDmlGuard, statement_dml
from relay.config.sections import SinkConfig, SourceConfig, validate_source_capture
from relay.errors import ConfigError, SourceError, StatementDmlError


@pytest.mark.parametrize(
    ("sql", "verb", "targets"),
    [
        ("INSERT INTO t VALUES (1)", "INSERT", (("db", "t"),)),
        ("insert low_priority ignore into `s`.`t` (a) values (1)", "INSERT", (("s", "t"),)),
        ("INSERT t SELECT * FROM u", "INSERT", (("db", "t"),)),
        ("REPLACE INTO s.t VALUES (1)", "REPLACE", (("s", "t"),)),
        ("/* hi */ UPDATE t SET a=1", "UPDATE", (("db", "t"),)),
        ("# why\nDELETE FROM s.t WHERE id=1", "DELETE", (("s", "t"),)),
        ("-- why\nDELETE FROM t", "DELETE", (("db", "t"),)),
        ("/*!40000 INSERT */ INTO t VALUES (1)", "INSERT", (("db", "t"),)),
        ("DELETE QUICK FROM t PARTITION (p1) WHERE a=1", "DELETE", (("db", "t"),)),
        ("LOAD DATA LOCAL INFILE '/x' IGNORE INTO TABLE `s`.`t` FIELDS", "LOAD", (("s", "t"),)),
        ("LOAD XML INFILE '/x' INTO TABLE t", "LOAD", (("db", "t"),)),
        ("CREATE TABLE t2 SELECT * FROM t", "CREATE TABLE ... SELECT", (("db", "t2"),)),
        ("CREATE OR REPLACE TABLE s.t2 (a int) AS (SELECT 1)", "CREATE TABLE ... SELECT", (("s", "t2"),)),
        ("WITH a AS (SELECT 1) UPDATE t SET x=1", "WITH", None),
        ("SELECT f(1)", "SELECT", None),
    ],
)
def test_data_changes_and_their_targets(
    sql: str, verb: str, targets: tuple[tuple[str, str], ...] | None
) -> None:
    assert statement_dml(sql, "db") == DmlStatement(verb, targets)


def test_multi_table_statements_name_every_table_they_may_write() -> None:
    multi = statement_dml("UPDATE a.t1 AS x JOIN t2 y ON x.id=y.id SET x.v=1", "db")
    assert multi is not None and multi.targets is not None
    assert {("a", "t1"), ("db", "t2")} <= set(multi.targets)
    multi = statement_dml("DELETE t1, t2 FROM t1 JOIN b.t2 ON t1.id=t2.id WHERE 1", "db")
    assert multi is not None and multi.targets is not None
    assert {("db", "t1"), ("db", "t2"), ("b", "t2")} <= set(multi.targets)
    multi = statement_dml("DELETE FROM t1, c.t2 USING t1 JOIN c.t2", "db")
    assert multi is not None and multi.targets is not None
    assert {("db", "t1"), ("c", "t2")} <= set(multi.targets)
    multi = statement_dml("UPDATE t1, (SELECT id FROM s.t3) d SET t1.a = d.id", "db")
    assert multi is not None and multi.targets is not None and ("db", "t1") in multi.targets


@pytest.mark.parametrize(
    "sql",
    [
        "BEGIN",
        "COMMIT",
        "ROLLBACK",
        "XA START X'7831',X'',1",
        "XA END 'x'",
        "XA COMMIT 'x'",
        "XA ROLLBACK 'x'",
        "SAVEPOINT a",
        "RELEASE SAVEPOINT a",
        "ROLLBACK TO SAVEPOINT a",
        "SET @a=1",
        "# only a comment",
        "/* insert into t values (1) */ COMMIT",
        "CREATE TABLE `t3` (`id` int NOT NULL, `select` int)",
        "CREATE TABLE t (a varchar(10) DEFAULT 'select')",
        "CREATE TEMPORARY TABLE t2 SELECT 1",
        "ALTER TABLE t ADD COLUMN c int",
        "DROP TABLE t",
        "TRUNCATE TABLE t",
        "LOAD INDEX INTO CACHE t",
        "GRANT SELECT ON *.* TO u",
        "",
    ],
)
def test_statements_that_are_not_data_changes(sql: str) -> None:
    assert statement_dml(sql, "db") is None


def query(sql: str, schema: str = "shop") -> ev.QueryEvent:
    header = ev.EventHeader(1_700_000_000, ev.QUERY_EVENT, 1, 100, 1100, 0, "mysql-bin.000003")
    return ev.QueryEvent(header, 9, 0, 0, schema, sql)


def guard(policy: str, include: str = r"shop\..*") -> StatementDmlGuard:
    sink = Sink(SinkConfig(filter=include))
    return StatementDmlGuard(policy, sink.keeps_table)


def test_stop_refuses_captured_tables_with_position_statement_and_fix() -> None:
    with pytest.raises(StatementDmlError) as err:
        guard("stop").check(query("INSERT INTO orders VALUES (1)"))
    text = str(err.value)
    assert text.startswith("mysql-bin.000003:1000: INSERT logged as a statement")
    assert "shop.orders" in text and "binlog_format=ROW" in text and "relay positions set" in text
    assert isinstance(err.value, SourceError) and not err.value.retriable


def test_tables_the_filter_drops_pass_and_unknown_targets_count_as_captured() -> None:
    g = guard("stop")
    g.check(query("INSERT INTO other.t VALUES (1)"))  # not captured: the relay never publishes it
    g.check(query("UPDATE other.t1 JOIN other.t2 ON other.t1.a = other.t2.a SET other.t1.b = 1", "x"))
    g.check(query("BEGIN"))
    with pytest.raises(StatementDmlError, match="tables that cannot be determined"):
        g.check(query("SELECT other.f()", "other"))
    with pytest.raises(StatementDmlError, match=r"shop\.t2"):
        g.check(query("UPDATE other.t1 JOIN shop.t2 ON t1.a = t2.a SET t1.b = 1", "other"))
    with pytest.raises(StatementDmlError, match=r"CREATE TABLE \.\.\. SELECT"):
        g.check(query("CREATE TABLE t2 SELECT * FROM t"))


def test_skip_warns_and_counts(caplog: pytest.LogCaptureFixture) -> None:
    g = guard("skip")
    with caplog.at_level(logging.WARNING):
        g.check(query("DELETE FROM orders WHERE id = 3"))
    assert g.skipped == 1
    assert "NOT published" in caplog.text and "shop.orders" in caplog.text


def test_policy_is_validated_with_its_key() -> None:
    with pytest.raises(ConfigError, match=r"^source\.statement_dml: must be stop or skip"):
        guard("ignore")
    with pytest.raises(ConfigError, match=r"^source\.statement_dml"):
        validate_source_capture(SourceConfig(statement_dml="STOP"))
    with pytest.raises(ConfigError, match=r"^source\.xa_buffer_bytes"):
        validate_source_capture(SourceConfig(xa_buffer_bytes=0))
