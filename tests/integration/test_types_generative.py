"""Every published value equals SELECT, in every codec and metadata mode: a generative differential test.

Per seed and ``binlog_row_metadata`` mode (FULL, MINIMAL, and NO_LOG on MariaDB; each with its own server
``time_zone``, for TIMESTAMP text), random tables are drawn by
``fuzz_types`` (every type of the README's type table, random order and nullability, several of each) in
three copies, one per codec (canal-json, canal-protobuf, debezium-json), each its own logical table and
topic. Rows are written before the relay starts (set A: the relay starts at a binlog place before them, so
each is published twice — by the snapshot and as its binlog INSERT) and after (sets A and B; set B is created
by DDL the relay reads, so its history comes from the DDL parser): inserts of boundary and random values,
updates to other values, deletes. After every statement the rows it touched are SELECTed with the oracle's
expressions. Every table has the reported case — a YEAR column right before a signed TINYINT holding -1,
in every row — besides its random columns. A second, uncaptured table holds MariaDB's INET4/INET6/UUID
(and a YEAR before a TINYINT): it must never stop the relay.

The records are read back from Kafka with an independent consumer, every cell of every image is compared
with the SELECT of that row version (a ``ver`` column counts each row's updates) under the convention for
its type, every ``mysqlType`` with the declared type, snapshot and binlog copies of the same row with each
other, and every record must carry a real time. The server's TABLE_MAPs are also decoded directly, where
their tables are known: each column's signedness as declared.

A failure names the seed, the mode and the cell; replay it with ``RELAY_FUZZ_SEEDS=<seed>``. The fixed seeds
below run in ``scripts/test``; a longer run (``RELAY_FUZZ_ROWS=5000 RELAY_FUZZ_SEEDS=1,2`` …, README
"Development") is for anyone changing the decoder, and ``test_a_long_generative_run`` runs one in
``scripts/test-long``.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import signal
import time
import uuid
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import pymysql
import pytest

from relay.binlog.events import TableMapEvent
from relay.binlog.stream import BinlogStream, StreamConfig
from relay.common.mysql import binlog_status
from relay.dev.services import KafkaService, MySQLService
from tests.integration import fuzz_types as fz
from tests.integration.fuzz_check import Check, decode_record
from tests.integration.relay_harness import RelayProcess, read_topic, write_configs

SEEDS = {"FULL": (3801,), "MINIMAL": (3802,), "NO_LOG": (3803,)}  # the fixed set scripts/test runs
CODECS = {"cj": "canal-json", "pb": "canal-protobuf", "dz": "debezium-json"}
ZONES = {"FULL": "", "MINIMAL": "+05:30", "NO_LOG": "-03:00"}  # the server's time_zone per run ("": as it is)
DEFAULT_ROWS = 120  # rows generated per run (both sets), as RELAY_FUZZ_ROWS counts them
COLUMNS = 30


def _seeds(mode: str) -> tuple[int, ...]:
    named = os.environ.get("RELAY_FUZZ_SEEDS")
    return tuple(int(s) for s in named.split(",")) if named else SEEDS[mode]


def _rows() -> int:
    return int(os.environ.get("RELAY_FUZZ_ROWS", DEFAULT_ROWS))


@dataclass
class Run:
    """One seed's run: the tables, the states SELECTed after each statement, the operations written."""

    seed: int
    mode: str
    flavor: str
    schema: str
    rng: random.Random
    sets: dict[str, list[fz.Col]] = field(default_factory=dict)
    # table → (id, ver) → the oracle values of that row version
    states: dict[str, dict[tuple[int, int], tuple[Any, ...]]] = field(default_factory=dict)
    versions: dict[str, dict[int, int]] = field(default_factory=dict)  # set → id → its current ver
    ops: dict[str, int] = field(default_factory=dict)  # set → row changes written after the start
    deletes: dict[str, int] = field(default_factory=dict)
    pre: int = 0  # set A rows written before the relay started

    def tables(self, part: str) -> list[str]:
        return [f"{part}_{c}" for c in CODECS]


# ---- writing -----------------------------------------------------------------------------------------


def _sql_value(value: Any) -> tuple[str, list[Any]]:
    if isinstance(value, fz.Raw):
        return value.sql, []
    if isinstance(value, Decimal):
        return "%s", [format(value, "f")]
    return "%s", [value]


def _write(cur: Any, run: Run, part: str, sql: str, params: list[Any], ids: list[int]) -> None:
    """One statement on the three copies of ``part``, in one transaction, then the touched rows SELECTed."""
    cur.execute("BEGIN")
    for table in run.tables(part):
        cur.execute(sql.replace("{table}", table), params)
    cur.execute("COMMIT")
    for table in run.tables(part):
        _select(cur, run, part, table, ids)


def _select(cur: Any, run: Run, part: str, table: str, ids: list[int]) -> None:
    if not ids:
        return
    exprs = [e for col in run.sets[part] for e in fz.oracle_sql(col)]
    cur.execute(f"SELECT id, ver, {', '.join(exprs)} FROM `{table}` WHERE id IN ({','.join(map(str, ids))})")
    for row in cur.fetchall():
        run.states.setdefault(table, {})[(int(row[0]), int(row[1]))] = tuple(row[2:])


def _insert(cur: Any, run: Run, part: str, ids: list[int]) -> None:
    cols = run.sets[part]
    rows, params = [], []
    for row_id in ids:
        values = [f"{row_id}", "0"]
        for col in cols:
            text, more = _sql_value(col.draw(run.rng, boundary=row_id + run.rng.randrange(3)))
            values.append(text)
            params.extend(more)
        rows.append("(" + ", ".join(values) + ")")
        run.versions.setdefault(part, {})[row_id] = 0
    names = ", ".join(["id", "ver", *(f"`{c.name}`" for c in cols)])
    _write(cur, run, part, f"INSERT INTO `{{table}}` ({names}) VALUES {', '.join(rows)}", params, ids)


def _update(cur: Any, run: Run, part: str, row_id: int) -> None:
    cols = run.rng.sample(run.sets[part], k=min(len(run.sets[part]), run.rng.randint(1, 6)))
    sets, params = ["ver = ver + 1"], []
    for col in cols:
        text, more = _sql_value(col.draw(run.rng, boundary=run.rng.randrange(16)))
        sets.append(f"`{col.name}` = {text}")
        params.extend(more)
    run.versions[part][row_id] += 1
    _write(cur, run, part, f"UPDATE `{{table}}` SET {', '.join(sets)} WHERE id = {row_id}", params, [row_id])


def _delete(cur: Any, run: Run, part: str, row_id: int) -> None:
    del run.versions[part][row_id]
    _write(cur, run, part, f"DELETE FROM `{{table}}` WHERE id = {row_id}", [], [])
    run.deletes[part] = run.deletes.get(part, 0) + 1


def _create(cur: Any, run: Run, part: str) -> None:
    cols = ", ".join(c.declaration for c in run.sets[part])
    for table in run.tables(part):
        cur.execute(
            f"CREATE TABLE `{table}` (id INT PRIMARY KEY, ver INT NOT NULL, {cols}) DEFAULT CHARSET=utf8mb4"
        )


def _uncaptured(cur: Any, run: Run) -> None:
    """A table the mapping does not capture, with MariaDB's INET4 / INET6 / UUID where the server has them."""
    kinds = [k for k in ("inet4", "inet6", "uuid") if _server_has(cur, k)] if run.flavor == "mariadb" else []
    extra = "".join(f", `{k}` {k}" for k in kinds)
    cur.execute(f"CREATE TABLE other (id INT PRIMARY KEY, y YEAR, t TINYINT{extra})")
    values = {
        "inet4": "'10.0.0.1'",
        "inet6": "'::ffff:1.2.3.4'",
        "uuid": "'123e4567-e89b-12d3-a456-426614174000'",
    }
    cur.execute(f"INSERT INTO other VALUES (1, 2024, -1{''.join(', ' + values[k] for k in kinds)})")


def _server_has(cur: Any, kind: str) -> bool:
    try:
        cur.execute(f"CREATE TEMPORARY TABLE probe_{kind} (c {kind})")
    except pymysql.err.MySQLError:
        return False
    cur.execute(f"DROP TEMPORARY TABLE probe_{kind}")
    return True


def _post_phase(cur: Any, run: Run, rows: int) -> None:
    """After the relay started: set B by DDL, inserts, updates to other values, deletes, on both sets."""
    _create(cur, run, "b")
    start = {"a": run.pre + 1, "b": 1}
    for part, count in (("a", rows // 4), ("b", rows - run.pre - rows // 4)):
        for first in range(start[part], start[part] + count, 20):
            _insert(cur, run, part, list(range(first, min(first + 20, start[part] + count))))
        run.ops[part] = run.ops.get(part, 0) + count
    for _ in range(max(8, rows // 2)):
        part = run.rng.choice(("a", "b"))
        alive = sorted(run.versions[part])
        row_id = run.rng.choice(alive)
        if run.rng.random() < 0.15 and len(alive) > 4:
            _delete(cur, run, part, row_id)
        else:
            _update(cur, run, part, row_id)
        run.ops[part] += 1
    cur.execute("INSERT INTO other (id, y, t) VALUES (2, 1999, -2)")


# ---- the run ------------------------------------------------------------------------------------------


def _mapping(run: Run) -> dict[str, Any]:
    tables = {
        f"{part}_{short}": {
            "physical": [f"{part}_{short}"],
            "topic": f"{run.schema}.{part}_{short}",
            "codec": codec,
        }
        for part in ("a", "b")
        for short, codec in CODECS.items()
    }
    return {
        "version": 1,
        "topics": {"partitions": 1, "create": True},
        "unmapped": {"action": "drop"},
        "logical_dbs": {
            "fz": {"physical": [re.escape(run.schema)], "tables": tables, "unclaimed_tables": "drop"}
        },
    }


@contextlib.contextmanager
def _server_settings(conn: Any, mode: str) -> Any:
    """The server's ``binlog_row_metadata`` set to ``mode`` and its ``time_zone`` to the mode's zone
    (TIMESTAMP text is the server zone's: as it is, east and west of UTC), both restored after; this
    session's zone too."""
    zone = ZONES[mode]
    with conn.cursor() as cur:
        cur.execute("SELECT @@GLOBAL.binlog_row_metadata, @@GLOBAL.time_zone")
        metadata, before_zone = (str(v) for v in cur.fetchone())
        cur.execute(f"SET GLOBAL binlog_row_metadata = '{mode}'")
        cur.execute(f"SET GLOBAL time_zone = '{zone or before_zone}'")
        cur.execute(f"SET SESSION time_zone = '{zone or before_zone}'")
    try:
        yield
    finally:
        with conn.cursor() as cur:
            cur.execute(f"SET GLOBAL binlog_row_metadata = '{metadata}'")
            cur.execute(f"SET GLOBAL time_zone = '{before_zone}'")


def _status(cur: Any) -> tuple[str, int]:
    """The binlog end (MySQL 8.4 and later call it SHOW BINARY LOG STATUS)."""
    row = binlog_status(cur)
    assert row is not None
    return str(row[0]), int(row[1])


def run_case(
    seed: int,
    mode: str,
    rows: int,
    mysql: MySQLService,
    kafka: KafkaService,
    tmp: Path,
    columns: list[fz.Col] | None = None,
) -> list[str]:
    """One seed in one metadata mode; the problems found (empty: every cell equals SELECT). ``columns``:
    these instead of random ones, in both sets."""
    rng = random.Random(f"{seed}")
    run = Run(seed, mode, mysql.flavor, f"fz{seed}_{mode.lower()}_{uuid.uuid4().hex[:6]}", rng)
    run.sets = {part: columns or fz.table_columns(rng, run.flavor, COLUMNS) for part in ("a", "b")}
    run.pre = max(4, rows // 4)
    conn = mysql.connect()
    conn.autocommit(True)
    try:
        with _server_settings(conn, mode), conn.cursor() as cur:
            cur.execute("SET SESSION sql_mode = ''")
            cur.execute(f"CREATE DATABASE `{run.schema}`")
            cur.execute(f"USE `{run.schema}`")
            _create(cur, run, "a")
            _uncaptured(cur, run)
            start = _status(cur)
            for first in range(1, run.pre + 1, 20):
                _insert(cur, run, "a", list(range(first, min(first + 20, run.pre + 1))))
            relay = _start_relay(run, mysql, kafka, tmp, start)
            _wait(run, kafka, relay, {f"a_{c}": 2 * run.pre for c in CODECS})
            _post_phase(cur, run, rows)
            end = _status(cur)
            _wait(run, kafka, relay, _expected_counts(run))
            relay.signal(signal.SIGTERM)
            relay.wait(60)
            return Check(run, kafka.bootstrap_servers).problems() + _table_map_problems(
                run, mysql, start, end
            )
    finally:
        with contextlib.suppress(Exception), conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{run.schema}`")
        conn.close()


def _expected_counts(run: Run) -> dict[str, int]:
    counts = {}
    for short in CODECS:
        counts[f"a_{short}"] = 2 * run.pre + run.ops.get("a", 0)
        counts[f"b_{short}"] = run.ops.get("b", 0)
    return counts


def _start_relay(
    run: Run, mysql: MySQLService, kafka: KafkaService, tmp: Path, at: tuple[str, int]
) -> RelayProcess:
    cfg = write_configs(
        tmp / run.schema,
        mysql=mysql,
        bootstrap=kafka.bootstrap_servers,
        mapping=_mapping(run),
        start=at,
        instance=run.schema,
        include=re.escape(run.schema) + r"\..*",
        extra={"snapshot": {"mode": "initial"}, "logging": {"level": "INFO"}},
    )
    return RelayProcess(cfg, tmp / run.schema / "relay.log").start()


class _Counted:
    """``read_topic``'s condition: ``count`` change records read (each record decoded once), or the relay
    stopped (checked once a second)."""

    def __init__(self, codec: str, count: int, relay: RelayProcess) -> None:
        self.codec, self.count, self.relay = codec, count, relay
        self.seen = self.changes = 0
        self.checked = 0.0

    def __call__(self, records: list[Any]) -> bool:
        for record in records[self.seen :]:
            self.changes += decode_record(record, self.codec) is not None
        self.seen = len(records)
        if self.changes >= self.count:
            return True
        if time.monotonic() - self.checked > 1:
            self.checked = time.monotonic()
            return not self.relay.alive()
        return False


def _wait(run: Run, kafka: KafkaService, relay: RelayProcess, counts: dict[str, int]) -> None:
    """Until every topic holds its count of change records (tombstones aside), or the relay stopped."""
    for table, count in counts.items():
        done = _Counted(CODECS[table.split("_")[1]], count, relay)
        read_topic(kafka.bootstrap_servers, f"{run.schema}.{table}", done, timeout=600)
        assert relay.alive(), f"seed {run.seed} {run.mode}: the relay stopped:\n{relay.log()[-3000:]}"


def _table_map_problems(
    run: Run, mysql: MySQLService, start: tuple[str, int], end: tuple[str, int]
) -> list[str]:
    """The server's own TABLE_MAPs of the known tables, decoded directly (no schema history): where they carry
    SIGNEDNESS, each column's signedness as declared (columns by position: MINIMAL has no names)."""
    config = StreamConfig(
        mysql.host, mysql.port, mysql.replication_user, mysql.replication_password,
        server_id=7000 + run.seed % 900, mariadb=run.flavor == "mariadb", decode_rows=False,
    )  # fmt: skip
    problems: list[str] = []
    with contextlib.closing(BinlogStream(config)) as stream:
        stream.open_at(*start)
        while True:
            event = stream.read(timeout=5)
            if event is None:
                break
            h = event.header
            if isinstance(event, TableMapEvent) and event.schema == run.schema and event.table != "other":
                problems += _signedness(run, event)
            if not h.artificial and (h.log_file, h.log_pos) >= end:
                break
    return problems


def _signedness(run: Run, event: TableMapEvent) -> list[str]:
    if not event.signedness_from_binlog:
        return []
    out = []
    for col, meta in zip(run.sets[event.table[0]], event.columns[2:], strict=True):
        want = col.mysql_type.endswith(" unsigned")
        if meta.unsigned != want:
            out.append(f"seed {run.seed} {run.mode}: TABLE_MAP {event.table}.{col.name} ({col.ddl}) reads as "
                       f"{'unsigned' if meta.unsigned else 'signed'}")  # fmt: skip
    return out


def _report(problems: list[str], seed: int, mode: str) -> str:
    head = f"seed {seed}, binlog_row_metadata={mode}: {len(problems)} mismatches"
    head += f" (replay: RELAY_FUZZ_SEEDS={seed} pytest {__file__} -k {mode})"
    return "\n".join([head, *problems[:60]])


@pytest.mark.parametrize("mode", ["FULL", "MINIMAL", "NO_LOG"])
def test_every_published_value_equals_select(
    mode: str, mysql_service: MySQLService, kafka_service: KafkaService, tmp_path: Path
) -> None:
    if mode == "NO_LOG" and mysql_service.flavor != "mariadb":
        pytest.skip("NO_LOG is MariaDB's (MySQL writes MINIMAL or FULL)")
    for seed in _seeds(mode):
        began = time.monotonic()
        problems = run_case(seed, mode, _rows(), mysql_service, kafka_service, tmp_path)
        took = time.monotonic() - began
        print(f"seed {seed} {mode}: {_rows()} rows, {len(problems)} mismatches, {took:.0f} s")
        assert not problems, _report(problems, seed, mode)


@pytest.mark.long
@pytest.mark.parametrize("mode", ["FULL", "MINIMAL"])
def test_a_long_generative_run(
    mode: str, mysql_service: MySQLService, kafka_service: KafkaService, tmp_path: Path
) -> None:
    """5,000 generated rows per mode (10,000 across both), two seeds each: 0 mismatches."""
    for seed in (38001, 38002):
        began = time.monotonic()
        problems = run_case(seed, mode, 2500, mysql_service, kafka_service, tmp_path)
        print(f"seed {seed} {mode}: 2500 rows, {len(problems)} mismatches, {time.monotonic() - began:.0f} s")
        assert not problems, _report(problems, seed, mode)
