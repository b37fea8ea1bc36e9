"""The demo's sample: a sharded shop schema, a realistic workload over it, and the demo's own config files.

Owns what ``relay demo`` writes to MySQL — ``shop_00..03`` × ``orders_00..03`` (one logical ``shop.orders``,
ids unique across shards) and the unsharded ``shop_00.customers`` — and the ``conf/relay.yaml`` /
``conf/mapping.yaml`` it writes into its temp dir. Runs on the CLI's thread; hands ``relay.dev.demo`` the row
changes it wrote (``Written``), which the topics must then hold.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from relay.common.mysql import binlog_status
from relay.errors import ServiceError

SHARDS, TABLES, PARTITIONS = 4, 4, 3
ORDERS, CUSTOMERS = 600, 24
INSTANCE = "demo"
ORDERS_TOPIC, DB_TOPIC, DDL_TOPIC = "shop.orders", "shop", "relay.ddl"


def shard_of(order_id: int) -> str:
    """The physical table of an order: a modulo sharding function, as applications use."""
    return f"shop_{order_id % SHARDS:02d}.orders_{order_id // SHARDS % TABLES:02d}"


def physical_orders() -> list[str]:
    return [f"shop_{d:02d}.orders_{t:02d}" for d in range(SHARDS) for t in range(TABLES)]


def create_schema(conn: Any) -> None:
    with conn.cursor() as cur:
        for d in range(SHARDS):
            cur.execute(f"CREATE DATABASE shop_{d:02d}")
        for table in physical_orders():
            cur.execute(
                f"CREATE TABLE {table} (id BIGINT PRIMARY KEY, status VARCHAR(16) NOT NULL, "
                "amount DECIMAL(12,2) NOT NULL, customer_id INT NOT NULL, "
                "created_at DATETIME(3) NOT NULL) ENGINE=InnoDB"
            )
        cur.execute(
            "CREATE TABLE shop_00.customers (id INT PRIMARY KEY, name VARCHAR(64) NOT NULL, "
            "email VARCHAR(128)) ENGINE=InnoDB"
        )


@dataclass
class Written:
    """Row changes the sample wrote, by logical table and type (what the topics must hold)."""

    counts: dict[str, Counter[str]] = field(
        default_factory=lambda: {ORDERS_TOPIC: Counter(), DB_TOPIC: Counter()}
    )

    def add(self, topic: str, kind: str, rows: int) -> None:
        self.counts[topic][kind] += rows

    def rows(self, topic: str | None = None) -> int:
        topics = [topic] if topic else list(self.counts)
        return sum(n for t in topics for k, n in self.counts[t].items() if k != "DDL")


class Workload:
    """A day in a small shop: customers sign up, orders are placed, paid, shipped, cancelled; mid-way a
    column is added to one shard (the ALTER). Ids are unique across shards. ``tick(rows_written, force)``
    runs every 25 orders, forced at every quarter of the run (a progress line)."""

    def __init__(self, conn: Any, orders: int, tick: Callable[[int, bool], None]) -> None:
        self.conn, self.orders, self.tick = conn, orders, tick
        self.rng = random.Random(7)
        self.written = Written()
        self.alive: list[int] = []

    def run(self) -> Written:
        with self.conn.cursor() as cur:
            self._customers(cur)
            for n in range(self.orders):
                self._order(cur, 10_001 + n)
                if n == self.orders // 2:
                    self._alter(cur)
                if n % 25 == 24:
                    self._ship(cur)
                    self.tick(self.written.rows(), (n + 1) % max(1, self.orders // 4) < 25)
            self._change(cur, DB_TOPIC, "DELETE", "DELETE FROM shop_00.customers WHERE id = %s", (CUSTOMERS,))
        return self.written

    def _change(self, cur: Any, topic: str, kind: str, sql: str, args: Any = None) -> None:
        self.written.add(topic, kind, cur.execute(sql, args))

    def _customers(self, cur: Any) -> None:
        values = [(c, f"customer {c}", f"c{c}@example.com") for c in range(1, CUSTOMERS + 1)]
        rows = ", ".join(["(%s, %s, %s)"] * len(values))
        args = [v for row in values for v in row]
        self._change(cur, DB_TOPIC, "INSERT", f"INSERT INTO shop_00.customers VALUES {rows}", args)

    def _order(self, cur: Any, oid: int) -> None:
        table, rng = shard_of(oid), self.rng
        cur.execute("BEGIN")
        self._change(
            cur,
            ORDERS_TOPIC,
            "INSERT",
            f"INSERT INTO {table} (id, status, amount, customer_id, created_at) "
            "VALUES (%s, 'NEW', %s, %s, NOW(3))",
            (oid, f"{rng.randrange(500, 50_000) / 100:.2f}", rng.randint(1, CUSTOMERS)),
        )
        if rng.random() < 0.5:  # paid at checkout, in the same transaction
            self._change(cur, ORDERS_TOPIC, "UPDATE", f"UPDATE {table} SET status='PAID' WHERE id=%s", (oid,))
        cur.execute("COMMIT")
        self.alive.append(oid)
        if rng.random() < 0.08 and len(self.alive) > 10:  # a cancellation of a recent order
            gone = self.alive.pop(-rng.randint(2, 10))
            self._change(cur, ORDERS_TOPIC, "DELETE", f"DELETE FROM {shard_of(gone)} WHERE id=%s", (gone,))
        if rng.random() < 0.05:
            c = rng.randint(1, CUSTOMERS - 1)
            sql = "UPDATE shop_00.customers SET email=%s WHERE id=%s"
            self._change(cur, DB_TOPIC, "UPDATE", sql, (f"c{c}.{oid}@example.org", c))

    def _ship(self, cur: Any) -> None:
        """One statement shipping every paid order of one shard table: a multi-row UPDATE event."""
        table = self.rng.choice(physical_orders())
        sql = f"UPDATE {table} SET status='SHIPPED' WHERE status='PAID'"
        self._change(cur, ORDERS_TOPIC, "UPDATE", sql)

    def _alter(self, cur: Any) -> None:
        cur.execute("ALTER TABLE shop_00.orders_00 ADD COLUMN note VARCHAR(64)")
        self.written.add(ORDERS_TOPIC, "DDL", 1)
        old = next((o for o in self.alive if shard_of(o) == "shop_00.orders_00"), None)
        if old is not None:  # a row written before the ALTER, changed after it
            sql = "UPDATE shop_00.orders_00 SET note='gift wrap' WHERE id=%s"
            self._change(cur, ORDERS_TOPIC, "UPDATE", sql, (old,))


def binlog_end(conn: Any) -> tuple[str, int]:
    with conn.cursor() as cur:
        row = binlog_status(cur)
    if row is None:
        raise ServiceError("the demo's MariaDB has binary logging off")
    return str(row[0]), int(row[1])


# -- the demo's configuration ------------------------------------------------------------------------------

_MAPPING = f"""\
# Written by `relay demo`: 4 shard databases x 4 order tables -> one logical table, plus one unsharded
# table. Every key is documented in conf/mapping.yaml of the project.
version: 1
topics:
  partitions: {PARTITIONS}                      # a row (its logical key) stays in one partition
  create: true
unmapped:
  action: drop
logical_dbs:
  shop:
    physical: ['shop_\\d+']           # shop_00 .. shop_03
    key_shard: none                  # ids are unique across shards: the key is the id alone, no shard
                                     # identity (said here, as `relay mapping validate` asks of shards)
    tables:
      orders:
        physical: ['orders_\\d+']     # orders_00 .. orders_03 in every shop_NN
        topic: {ORDERS_TOPIC}
        key: [id]                    # ids are unique across shards
        tag: orders
      customers:
        physical: [customers]        # unsharded: goes to the db's topic, "shop"
"""

_RELAY = """\
# Written by `relay demo` for its throwaway services; every key is documented in conf/relay.yaml.
# Run it again (it resumes from its state directory's position.json): relay run -c {config}
instance: {instance}
state_dir: {state_dir}   # position, status, schema history: the demo's folder, whatever the working dir
source:
  host: {host}
  port: {port}
  user: {user}
  password: {password}
  server_id: 6543
  start: {{journal: {journal}, offset: {offset}}}   # where the sample's rows begin
snapshot:
  mode: never      # every sample row is in the binlog from source.start: nothing to snapshot
mapping:
  file: conf/mapping.yaml
kafka:
  bootstrap_servers: {bootstrap}
  ddl_topic: {ddl_topic}
publish:
  drain_seconds: 5.0
status:
  interval_seconds: 0.2
"""


def write_configs(workdir: Path, mysql: Any, bootstrap: str, start: tuple[str, int]) -> Path:
    """``conf/relay.yaml`` and ``conf/mapping.yaml`` in ``workdir``; relative paths resolve under it."""
    conf = workdir / "conf"
    conf.mkdir(parents=True, exist_ok=True)
    (conf / "mapping.yaml").write_text(_MAPPING)
    path = conf / "relay.yaml"
    path.write_text(
        _RELAY.format(
            instance=INSTANCE,
            config=path,
            state_dir=workdir / "var" / INSTANCE,
            host=mysql.host,
            port=mysql.port,
            user=mysql.replication_user,
            password=mysql.replication_password,
            journal=start[0],
            offset=start[1],
            bootstrap=bootstrap,
            ddl_topic=DDL_TOPIC,
        )
    )
    return path
