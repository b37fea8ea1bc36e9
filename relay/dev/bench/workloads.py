"""The five standard workloads on a mixed-type table, as SQL written through PyMySQL.

Owned here: the table (eleven columns: integers, decimal, double, varchar, enum, datetime(3), date,
text, blob), the backlog writers (as fast as the server takes them: the binlog the drains read), the
paced writers (a fixed offered rate, recording each row's commit time for the latency figure), the bulk
transaction of W5 and the stall backlog (server-side ``INSERT … SELECT`` from MariaDB's sequence engine,
or a recursive CTE on MySQL: a large binlog, fast).
Runs on the bench's main thread; it hands back row counts and ``(id, type) → commit time`` maps.

- W1: single-row autocommit INSERT / UPDATE / DELETE (2 inserts, 1 update, 1 delete per cycle);
- W2: 100-row INSERT transactions (one multi-row statement each);
- W3: UPDATE statements touching 1,000 rows each (over rows inserted with ``sql_log_bin=0``);
- W4: rows of about 4 KB (2 KB of text, 2 KB of blob), 10-row INSERT transactions;
- W5: ONE transaction: an ``INSERT … SELECT`` of N rows (default 1,000,000) and an ``UPDATE`` of 40 % of
  them (ids with ``id % 5 < 2``): a bulk load, what every backfill does — 1.4 N row changes, far more
  than the relay's store holds (its memory must not grow with the transaction; issue 32).
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from relay.common.mysql import binlog_status
from relay.errors import BenchError

DB = "relay_bench"
COLUMNS = "id, k, qty, price, ratio, name, status, created, day, note, payload"
_MARKS = "(" + ", ".join(["%s"] * 11) + ")"
_DDL = (
    "CREATE TABLE {db}.{table} ("
    " id BIGINT NOT NULL PRIMARY KEY, k INT NOT NULL, qty SMALLINT UNSIGNED, price DECIMAL(12,2),"
    " ratio DOUBLE, name VARCHAR(64), status ENUM('NEW','PAID','SHIPPED','DONE'), created DATETIME(3),"
    " day DATE, note TEXT, payload BLOB) ENGINE=InnoDB"
)
_STATUSES = ("NEW", "PAID", "SHIPPED", "DONE")
W3_ROWS_PER_UPDATE = 1000
W2_ROWS_PER_TXN = 100
W4_ROWS_PER_TXN = 10
W4_TEXT = 2048

Commits = dict[tuple[int, str], float]  # (row id, INSERT/UPDATE/DELETE) → CLOCK_MONOTONIC of its commit


@dataclass(frozen=True)
class Workload:
    name: str
    table: str
    description: str


WORKLOADS = {
    "W1": Workload("W1", "w1", "single-row autocommit INSERT/UPDATE/DELETE"),
    "W2": Workload("W2", "w2", "100-row INSERT transactions"),
    "W3": Workload("W3", "w3", "UPDATE statements of 1,000 rows"),
    "W4": Workload("W4", "w4", "~4 KB rows (text + blob), 10-row INSERT transactions"),
    "W5": Workload("W5", "w5", "one transaction: INSERT ... SELECT of N rows + UPDATE of 40 % of them"),
}
STEP_WORKLOADS = ("W1", "W2", "W3", "W4")  # written statement by statement (W5: one bulk transaction)
W5_UPDATED = "id % 5 < 2"  # 40 % of the rows


def row(i: int, big: bool = False) -> tuple[Any, ...]:
    """The values of row ``i``; ``big`` gives the ~4 KB row of W4."""
    note = (f"note {i} " * 300)[:W4_TEXT] if big else f"note {i}"
    payload = bytes((i + j) & 0xFF for j in range(W4_TEXT)) if big else (i & 0xFFFFFFFF).to_bytes(4, "big")
    return (
        i,
        (i * 7919) % 1_000_003,
        i % 60_000,
        f"{i % 100_000}.{i % 100:02d}",
        i / 8,
        f"name-{i}",
        _STATUSES[i % 4],
        f"2026-11-21 06:{i // 60 % 60:02d}:{i % 60:02d}.{i % 1000:03d}",
        f"2026-{1 + i % 12:02d}-{1 + i % 28:02d}",
        note,
        payload,
    )


def create_schema(conn: Any, workloads: list[str]) -> None:
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE IF NOT EXISTS {DB}")
        for name in workloads:
            table = WORKLOADS[name].table
            cur.execute(f"DROP TABLE IF EXISTS {DB}.{table}")
            cur.execute(_DDL.format(db=DB, table=table))


def create_table(conn: Any, table: str) -> None:
    """The mixed-type table ``table`` in the bench database, empty."""
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE IF NOT EXISTS {DB}")
        cur.execute(f"DROP TABLE IF EXISTS {DB}.{table}")
        cur.execute(_DDL.format(db=DB, table=table))


def master_position(conn: Any) -> tuple[str, int]:
    with conn.cursor() as cur:
        row = binlog_status(cur)
    if row is None:
        raise BenchError("the bench's server has binary logging off")
    return str(row[0]), int(row[1])


def binlog_bytes(conn: Any, start: tuple[str, int], end: tuple[str, int]) -> int:
    """Bytes of binlog between two positions (across files)."""
    if start[0] == end[0]:
        return end[1] - start[1]
    with conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        sizes = {str(r[0]): int(r[1]) for r in cur.fetchall()}
    total = 0
    for name in sorted(n for n in sizes if start[0] <= n <= end[0]):
        lo = start[1] if name == start[0] else 4
        hi = end[1] if name == end[0] else sizes[name]
        total += hi - lo
    return total


def _insert(cur: Any, table: str, rows: list[tuple[Any, ...]], verb: str = "INSERT") -> None:
    marks = ", ".join([_MARKS] * len(rows))
    cur.execute(f"{verb} INTO {DB}.{table} ({COLUMNS}) VALUES {marks}", [v for r in rows for v in r])


# ---- statements, one per step: each returns [(id, type)] of the row changes it committed --------------

Step = Callable[[Any, int], list[tuple[int, str]]]


def _w1_step(base: int) -> Step:
    """Step ``n`` of W1's 4-statement cycle over ids from ``base``."""

    def step(cur: Any, n: int) -> list[tuple[int, str]]:
        cycle, op = divmod(n, 4)
        a, b = base + 2 * cycle, base + 2 * cycle + 1
        if op < 2:
            i = a if op == 0 else b
            _insert(cur, "w1", [row(i)])
            return [(i, "INSERT")]
        if op == 2:
            cur.execute(
                f"UPDATE {DB}.w1 SET k = k + 1, status = 'PAID', note = %s WHERE id = %s", (f"u{a}", a)
            )
            return [(a, "UPDATE")]
        cur.execute(f"DELETE FROM {DB}.w1 WHERE id = %s", (b,))
        return [(b, "DELETE")]

    return step


def _insert_step(table: str, per_txn: int, base: int, big: bool) -> Step:
    def step(cur: Any, n: int) -> list[tuple[int, str]]:
        ids = range(base + n * per_txn, base + (n + 1) * per_txn)
        _insert(cur, table, [row(i, big) for i in ids])
        return [(i, "INSERT") for i in ids]

    return step


def w3_update(cur: Any, lo: int, n: int) -> list[tuple[int, str]]:
    """One W3 statement: ids ``lo`` … ``lo + 999``."""
    cur.execute(
        f"UPDATE {DB}.w3 SET k = k + 1, qty = MOD(qty + 1, 60000), status = %s WHERE id >= %s AND id < %s",
        (_STATUSES[n % 4], lo, lo + W3_ROWS_PER_UPDATE),
    )
    return [(i, "UPDATE") for i in range(lo, lo + W3_ROWS_PER_UPDATE)]


def _w3_step(population: int) -> Step:
    def step(cur: Any, n: int) -> list[tuple[int, str]]:
        return w3_update(cur, (n * W3_ROWS_PER_UPDATE) % population, n)

    return step


def rows_per_step(name: str) -> int:
    return {"W1": 1, "W2": W2_ROWS_PER_TXN, "W3": W3_ROWS_PER_UPDATE, "W4": W4_ROWS_PER_TXN}[name]


def steps_for(name: str, base: int, population: int) -> Step:
    """The step function of a workload; ids start at ``base`` (W3 updates ids below ``population``)."""
    if name == "W1":
        return _w1_step(base)
    if name == "W2":
        return _insert_step("w2", W2_ROWS_PER_TXN, base, big=False)
    if name == "W3":
        return _w3_step(population)
    return _insert_step("w4", W4_ROWS_PER_TXN, base, big=True)


def populate_w3(conn: Any, population: int, first: int = 0) -> None:
    """The rows W3 updates (ids ``first`` … ``population - 1``; those already there are kept), inserted
    without binlogging them (they are not part of any backlog)."""
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        try:
            for lo in range(first, population, 1000):
                rows = [row(i) for i in range(lo, min(lo + 1000, population))]
                _insert(cur, "w3", rows, "INSERT IGNORE")
        finally:
            cur.execute("SET SESSION sql_log_bin = 1")


def sequence_source(conn: Any, rows: int, db: str = DB) -> str:
    """A row source of ``seq`` = 1 … ``rows`` for ``INSERT … SELECT … FROM`` it: MariaDB's sequence engine
    (a virtual table in any database, ``db``), else a recursive CTE (MySQL 8; the session's recursion limit
    raised for it)."""
    with conn.cursor() as cur:
        cur.execute("SELECT VERSION()")
        version = str(cur.fetchone()[0])
        if "MariaDB" in version:
            return f"{db}.seq_1_to_{rows}"
        cur.execute("SET SESSION cte_max_recursion_depth = %s", (rows + 1,))
    return (
        f"(WITH RECURSIVE s (seq) AS (SELECT 1 UNION ALL SELECT seq + 1 FROM s WHERE seq < {rows})"
        " SELECT seq FROM s) AS q"
    )


def write_bulk(conn: Any, table: str, rows: int) -> int:
    """W5: ONE transaction — ``rows`` rows by ``INSERT … SELECT``, then an ``UPDATE`` of 40 % of them;
    returns the row changes it committed (the INSERT's rows and the UPDATE's)."""
    source = sequence_source(conn, rows)
    with conn.cursor() as cur:
        cur.execute("BEGIN")
        inserted = cur.execute(
            f"INSERT INTO {DB}.{table} ({COLUMNS}) SELECT seq, (seq * 7919) % 1000003, seq % 60000,"
            f" CONCAT(seq % 100000, '.', LPAD(seq % 100, 2, '0')), seq / 8, CONCAT('name-', seq),"
            f" ELT(1 + seq % 4, 'NEW', 'PAID', 'SHIPPED', 'DONE'),"
            f" '2026-11-21 06:00:00.123' + INTERVAL seq SECOND, '2026-01-01' + INTERVAL seq % 365 DAY,"
            f" CONCAT('note ', seq), UNHEX(LPAD(HEX(seq % 4294967296), 8, '0')) FROM {source}"
        )
        updated = cur.execute(
            f"UPDATE {DB}.{table} SET k = k + 1, status = 'PAID', note = CONCAT(note, ' u')"
            f" WHERE {W5_UPDATED}"
        )
        cur.execute("COMMIT")
    return int(inserted) + int(updated)


def write_backlog(
    conn: Any, step: Step, steps: int, progress: Callable[[int], None], per_key: Counter[int] | None = None
) -> int:
    """Run ``steps`` statements as fast as the server takes them; returns the row changes (counted per row
    id into ``per_key`` too, where given: what a complete copy of the backlog holds)."""
    changes = 0
    with conn.cursor() as cur:
        for n in range(steps):
            changed = step(cur, n)
            changes += len(changed)
            if per_key is not None:
                per_key.update(i for i, _ in changed)
            if n % 500 == 499:
                progress(changes)
    return changes


def write_paced(
    conn: Any, step: Step, rows_per_s: float, seconds: float, rows_per_step_: int
) -> tuple[Commits, float]:
    """Offer ``rows_per_s`` for ``seconds``; returns commit times and the achieved rate."""
    interval = rows_per_step_ / rows_per_s
    commits: Commits = {}
    start = time.monotonic()
    n = 0
    with conn.cursor() as cur:
        while True:
            due = start + n * interval
            now = time.monotonic()
            if due - start >= seconds:
                break
            if due > now:
                time.sleep(due - now)
            changed = step(cur, n)
            done = time.monotonic()
            for key in changed:
                commits[key] = done
            n += 1
    elapsed = max(time.monotonic() - start, seconds)  # the last step is due before ``seconds`` ends
    return commits, len(commits) / elapsed


@contextlib.contextmanager
def stall_table(conn: Any) -> Iterator[str]:
    table = "stall"
    with conn.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS {DB}.{table}")
        cur.execute(_DDL.format(db=DB, table=table))
    try:
        yield table
    finally:
        with conn.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS {DB}.{table}")


def write_stall_chunk(cur: Any, table: str, first: int, rows: int) -> None:
    """``rows`` rows of ~4 KB from the sequence engine, one statement (one transaction)."""
    cur.execute(
        f"INSERT INTO {DB}.{table} ({COLUMNS}) SELECT seq, seq % 1000003, seq % 60000, seq % 1000, seq / 8,"
        f" CONCAT('name-', seq), 'NEW', '2026-11-21 06:00:00.123', '2026-11-21', REPEAT('n', {W4_TEXT}),"
        f" REPEAT(CHAR(seq % 256), {W4_TEXT}) FROM {DB}.seq_{first}_to_{first + rows - 1}"
    )
