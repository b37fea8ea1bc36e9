"""A bank workload whose invariant no single table shows, for the consistent-cut tests.

Accounts are sharded over two physical databases (``{p}_0``, ``{p}_1``: account ``i`` lives in
``{p}_{i % 2}``), each with a ``checking`` and a ``savings`` table, mapped to the logical tables
``{p}.checking`` and ``{p}.savings``; ``orders`` and ``order_items`` (logical ``{p}.items``) beside
them. Every logical table has its own topic of three partitions, and the relay publishes transaction
boundaries (``{p}.txn``). Writers commit, concurrently:

- transfers: money moves between two accounts (checking → savings, savings → checking, checking → checking
  across the databases) in one transaction, so the total of every balance never changes;
- orders: an order and its items, a multi-row INSERT, in one transaction; sometimes an order is deleted with
  its items, and sometimes a transfer and an order are one transaction.

``violations`` checks a set of rows (one per table) against the invariant: the total balance, every account in
both tables, and every order with exactly its items (no item without its order). Only the tables' columns are
used; the rows come from whichever reader the test uses.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections import Counter
from typing import Any

import pymysql

ACCOUNTS = 24
OPENING = 1000  # every checking and savings account opens with this much
TOTAL = 2 * ACCOUNTS * OPENING
TABLES = ("checking", "savings", "orders", "items")


def mapping(prefix: str) -> dict[str, Any]:
    tables = {
        name: {"physical": [physical], "topic": f"{prefix}.{name}"}
        for name, physical in (
            ("checking", "checking"),
            ("savings", "savings"),
            ("orders", "orders"),
            ("items", "order_items"),
        )
    }
    return {
        "version": 1,
        "topics": {"partitions": 3, "create": True},
        "unmapped": {"action": "drop"},
        "logical_dbs": {prefix: {"physical": [f"{prefix}_\\d+"], "tables": tables}},
    }


def topics(prefix: str) -> tuple[str, ...]:
    return tuple(f"{prefix}.{t}" for t in TABLES)


def create(conn: Any, prefix: str) -> None:
    with conn.cursor() as cur:
        for d in (0, 1):
            db = f"{prefix}_{d}"
            cur.execute(f"CREATE DATABASE {db}")
            cur.execute(f"CREATE TABLE {db}.checking (id BIGINT PRIMARY KEY, balance BIGINT NOT NULL)")
            cur.execute(f"CREATE TABLE {db}.savings (id BIGINT PRIMARY KEY, balance BIGINT NOT NULL)")
            cur.execute(
                f"CREATE TABLE {db}.orders (id BIGINT PRIMARY KEY, n_items INT NOT NULL, total BIGINT)"
            )
            cur.execute(
                f"CREATE TABLE {db}.order_items (order_id BIGINT, line INT, amount BIGINT, "
                "PRIMARY KEY (order_id, line))"
            )


def drop(conn: Any, prefix: str) -> None:
    with conn.cursor() as cur:
        for d in (0, 1):
            cur.execute(f"DROP DATABASE IF EXISTS {prefix}_{d}")


def open_accounts(conn: Any, prefix: str) -> tuple[int, list[Op]]:
    """Every account of both kinds, in ONE transaction (a cut holds all of them or none); returns its
    GTID's sequence number and what it did (the first entry of a replay log)."""
    conn.begin()
    with conn.cursor() as cur:
        for i in range(1, ACCOUNTS + 1):
            db = f"{prefix}_{i % 2}"
            cur.execute(f"INSERT INTO {db}.checking VALUES (%s, %s)", (i, OPENING))
            cur.execute(f"INSERT INTO {db}.savings VALUES (%s, %s)", (i, OPENING))
    conn.commit()
    return last_gtid(conn), [("open",)]


# What a committed transaction did, for the replay: ("open",), ("move", table, account, delta),
# ("order", id, n_items, total, ((line, amount), …)), ("cancel", order id).
Op = tuple[Any, ...]


def gtid_seq(gtid: str) -> int:
    """The sequence number of a MariaDB GTID ``domain-server-seq`` (the binlog's commit order)."""
    domain, _server, seq = gtid.split("-")
    assert domain == "0", f"the test expects GTID domain 0, got {gtid}"
    return int(seq)


def last_gtid(conn: Any) -> int:
    """The GTID sequence of the session's last committed transaction (MariaDB ``@@last_gtid``)."""
    with conn.cursor() as cur:
        cur.execute("SELECT @@last_gtid")
        return gtid_seq(str(cur.fetchone()[0]))


def replay(log: list[tuple[int, list[Op]]], upto: int) -> dict[str, list[dict[str, Any]]]:
    """The tables as the source held them right after the transaction of GTID sequence ``upto``: the
    committed transactions of ``log`` applied in commit order (an oracle independent of the relay)."""
    balances: dict[str, dict[int, int]] = {"checking": {}, "savings": {}}
    orders: dict[int, tuple[int, int]] = {}
    items: dict[tuple[int, int], int] = {}
    for _seq, ops in sorted((e for e in log if e[0] <= upto), key=lambda e: e[0]):
        for op in ops:
            if op[0] == "open":
                for accounts in balances.values():
                    accounts.update({i: OPENING for i in range(1, ACCOUNTS + 1)})
            elif op[0] == "move":
                balances[op[1]][op[2]] += op[3]
            elif op[0] == "order":
                orders[op[1]] = (op[2], op[3])
                items.update({(op[1], line): amount for line, amount in op[4]})
            elif op[0] == "cancel":
                orders.pop(op[1], None)
                for key in [k for k in items if k[0] == op[1]]:
                    del items[key]
    return {
        **{k: [{"id": i, "balance": b} for i, b in v.items()] for k, v in balances.items()},
        "orders": [{"id": i, "n_items": n, "total": t} for i, (n, t) in orders.items()],
        "items": [{"order_id": o, "line": ln, "amount": a} for (o, ln), a in items.items()],
    }


class Writers:
    """Writer threads committing transfers and orders until stopped; each has its own connection."""

    def __init__(
        self,
        connect: Any,
        prefix: str,
        threads: int = 2,
        seed: int = 7,
        budget: int = 10**9,
        pace: float = 1.0,
    ) -> None:
        self.connect, self.prefix = connect, prefix
        self.stop_event = threading.Event()
        self.committed = Counter[str]()
        self.errors: list[BaseException] = []
        self.budget = budget  # transactions committed in all, then the writers rest (the mirror catches up)
        self.pace = pace  # the pause between a writer's transactions, in units of 0.05-0.2 s (0: none)
        # Every committed transaction (GTID sequence, what it did), for ``replay``; a writer holds its guard
        # from before its COMMIT until the transaction is logged, so ``log_now`` misses no committed one.
        self.log: list[tuple[int, list[Op]]] = []
        self._guards = [threading.Lock() for _ in range(threads)]
        self._next_order = iter(range(1, 10**9))
        self._lock = threading.Lock()
        self.threads = [
            threading.Thread(target=self._run, args=(seed + n, n), daemon=True, name=f"bank-writer-{n}")
            for n in range(threads)
        ]

    def __enter__(self) -> Writers:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self.stop_event.set()
        for t in self.threads:
            t.join(60)
        assert not self.errors, self.errors

    def log_now(self, first: tuple[int, list[Op]]) -> list[tuple[int, list[Op]]]:
        """``first`` (the opening transaction) and every transaction committed so far."""
        for guard in self._guards:
            guard.acquire()
        try:
            return [first, *self.log]
        finally:
            for guard in self._guards:
                guard.release()

    def _order_id(self) -> int:
        with self._lock:
            return next(self._next_order)

    def _run(self, seed: int, n: int) -> None:
        rng = random.Random(seed)
        conn = self.connect()
        try:
            while not self.stop_event.is_set() and sum(self.committed.values()) < self.budget:
                kind = rng.choices(("transfer", "order", "both", "cancel"), (5, 3, 1, 1))[0]
                try:
                    conn.begin()
                    ops: list[Op] = []
                    with conn.cursor() as cur:
                        if kind in ("transfer", "both"):
                            ops += self._transfer(cur, rng)
                        if kind in ("order", "both"):
                            ops += self._order(cur, rng)
                        if kind == "cancel":
                            ops += self._cancel(cur, rng)
                    with self._guards[n]:
                        conn.commit()
                        if ops:  # a cancel that found no order wrote nothing: no GTID of its own
                            seq = last_gtid(conn)
                            with self._lock:
                                self.log.append((seq, ops))
                    with self._lock:
                        self.committed[kind] += 1
                except pymysql.err.OperationalError as exc:
                    conn.rollback()
                    if exc.args[0] not in (1205, 1213):  # lock wait timeout, deadlock: try again
                        raise
                pause = rng.uniform(0.05, 0.2)  # a pace a loaded 2-core machine's mirror keeps up with
                if self.pace:
                    time.sleep(pause * self.pace)
        except BaseException as exc:
            self.errors.append(exc)
        finally:
            with contextlib.suppress(Exception):
                conn.close()

    def _transfer(self, cur: Any, rng: random.Random) -> list[Op]:
        a, b = rng.sample(range(1, ACCOUNTS + 1), 2)
        amount = rng.randint(1, 50)
        src, dst = rng.choice((("checking", "savings"), ("savings", "checking"), ("checking", "checking")))
        cur.execute(
            f"UPDATE {self.prefix}_{a % 2}.{src} SET balance = balance - %s WHERE id = %s", (amount, a)
        )
        cur.execute(
            f"UPDATE {self.prefix}_{b % 2}.{dst} SET balance = balance + %s WHERE id = %s", (amount, b)
        )
        return [("move", src, a, -amount), ("move", dst, b, amount)]

    def _order(self, cur: Any, rng: random.Random) -> list[Op]:
        order, lines = self._order_id(), rng.randint(1, 5)
        db = f"{self.prefix}_{order % 2}"
        amounts = [rng.randint(1, 99) for _ in range(lines)]
        cur.execute(f"INSERT INTO {db}.orders VALUES (%s, %s, %s)", (order, lines, sum(amounts)))
        values = ", ".join(["(%s, %s, %s)"] * lines)
        flat = [x for i, a in enumerate(amounts, 1) for x in (order, i, a)]
        cur.execute(f"INSERT INTO {db}.order_items VALUES {values}", flat)
        return [("order", order, lines, sum(amounts), tuple(enumerate(amounts, 1)))]

    def _cancel(self, cur: Any, rng: random.Random) -> list[Op]:
        db = f"{self.prefix}_{rng.randrange(2)}"
        cur.execute(f"SELECT id FROM {db}.orders ORDER BY id LIMIT 1 FOR UPDATE")
        row = cur.fetchone()
        if row is not None:
            cur.execute(f"DELETE FROM {db}.order_items WHERE order_id = %s", (row[0],))
            cur.execute(f"DELETE FROM {db}.orders WHERE id = %s", (row[0],))
            return [("cancel", int(row[0]))]
        return []


def violations(rows: dict[str, list[dict[str, Any]]]) -> list[str]:
    """What breaks the invariant in ``rows`` (table → its rows, a missing table: none); [] when it holds."""
    checking, savings = rows.get("checking", []), rows.get("savings", [])
    out = []
    if checking or savings:  # both empty: before the accounts were opened, a state the source had too
        total = sum(int(r["balance"]) for r in checking) + sum(int(r["balance"]) for r in savings)
        if total != TOTAL:
            out.append(f"total balance {total} != {TOTAL}")
        if len(checking) != ACCOUNTS or len(savings) != ACCOUNTS:
            out.append(f"{len(checking)} checking and {len(savings)} savings accounts, not {ACCOUNTS} each")
    lines = Counter(int(r["order_id"]) for r in rows.get("items", []))
    orders = {int(r["id"]): int(r["n_items"]) for r in rows.get("orders", [])}
    for order, n in orders.items():
        if lines.get(order, 0) != n:
            out.append(f"order {order} has {lines.get(order, 0)} of its {n} items")
    orphans = set(lines) - set(orders)
    if orphans:
        out.append(f"items of {len(orphans)} orders that do not exist (e.g. {min(orphans)})")
    return out


def select(conn: Any, prefix: str) -> dict[str, list[dict[str, Any]]]:
    """What SELECT shows now, per logical table (one snapshot: a consistent read)."""
    physical = {"checking": "checking", "savings": "savings", "orders": "orders", "items": "order_items"}
    out: dict[str, list[dict[str, Any]]] = {}
    with conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
        for table, name in physical.items():
            out[table] = []
            for d in (0, 1):
                cur.execute(f"SELECT * FROM {prefix}_{d}.{name}")
                out[table] += list(cur.fetchall())
    conn.commit()
    return out
