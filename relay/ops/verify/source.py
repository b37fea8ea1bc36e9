"""The source side of ``relay verify``: plain SELECTs between two binlog positions, as a snapshot reads.

Every read is bracketed by ``SHOW MASTER STATUS`` (``Window``): its rows are consistent with the binlog
between ``low`` and ``high`` — a change logged before ``low`` is in them (or, for the few milliseconds a
group commit leaves a transaction logged but not yet visible, it is caught because the caller takes
``low`` of the previous read as the window's start), one logged after ``high`` is not. Nothing is locked,
nothing written (autocommit SELECTs on one connection, with the snapshot readers' session time zone, so
TIMESTAMP text is the binlog's). Reads:

- ``boundary`` / ``range_digest``: a chunk's upper key (an index-only ``LIMIT 1 OFFSET n-1``) and the
  count and sum of its rows' hashes (``relay.ops.verify.digest``), one row back per chunk;
- ``hashes``: the join key and hash of each row of a key range or chunk;
- ``rows_by_keys``: full rows (canal text, as a snapshot reads them) of given join keys;
- ``bucket_digests`` / ``bucket_rows``: a table without a usable key, by hash bucket.

``gap_touches`` reads ``SHOW BINLOG EVENTS`` between two positions for table maps of given tables: how
``relay verify`` knows nothing of them is still unpublished when the relay's saved position stops short
of a window (a binlog tail of transactions the relay drops moves no position). Runs on the caller's thread.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import pymysql

from relay.common import mysql
from relay.common.binlog_names import file_order
from relay.config.sections import SourceConfig
from relay.errors import SourceError, VerifyError
from relay.ops.verify.digest import double_layout_matches, double_probe_sql, quote_name, row_hash_sql
from relay.ops.verify.shards import JoinKey, Shard
from relay.source.snapshot_readers import text_connection
from relay.source.snapshot_rows import K_BIT, K_FLOAT, K_INT, Row, query_rows
from relay.source.snapshot_tables import TableSpec, describe_table, list_tables
from relay.source.snapshot_watermarks import position

Pos = tuple[tuple[str, int], int]
ChunkKey = tuple[str | None, ...]  # chunk key values (canal text), in key order
_ROW_TYPES = frozenset({"Table_map", "Transaction_payload"})


@dataclass(frozen=True)
class Place:
    """A binlog position of the source (``SHOW MASTER STATUS``)."""

    journal: str
    offset: int

    @property
    def pos(self) -> Pos:
        return position(self.journal, self.offset)

    def __str__(self) -> str:
        return f"{self.journal}:{self.offset}"


@dataclass(frozen=True)
class Window:
    """A read's place in the binlog: a change logged before ``start`` is in what it read, one logged
    at or after ``high`` is not, one in between may be either."""

    start: Place
    high: Place


class RateLimit:
    """At most ``rate`` rows per second (0: no limit), as ``snapshot.max_rows_per_second``."""

    def __init__(self, rate: float, stop: threading.Event | None = None) -> None:
        self.rate = rate
        self._stop = stop or threading.Event()
        self._next = time.monotonic()

    def take(self, rows: int) -> None:
        if self.rate <= 0 or rows <= 0:
            return
        now = time.monotonic()
        start = max(self._next, now)
        self._next = start + rows / self.rate
        if start > now:
            self._stop.wait(start - now)


def _select_item(spec: TableSpec, i: int) -> str:
    c = quote_name(spec.columns[i].name)
    if spec.kinds[i] == K_FLOAT:
        return f"CAST({c} AS DOUBLE)"
    if spec.kinds[i] == K_BIT:
        return f"{c}+0"
    return c


def _greater(names: Sequence[str]) -> str:
    """``(a > %s) OR (a = %s AND b > %s) …``: after a key, in key order."""
    ors = []
    for n in range(len(names)):
        ands = [f"{names[j]} = %s" for j in range(n)] + [f"{names[n]} > %s"]
        ors.append("(" + " AND ".join(ands) + ")")
    return "(" + " OR ".join(ors) + ")"


def _at_most(names: Sequence[str]) -> str:
    """``(a < %s) OR (a = %s AND b <= %s) …``: up to a key, in key order."""
    ors = []
    for n in range(len(names)):
        last = "<=" if n == len(names) - 1 else "<"
        ands = [f"{names[j]} = %s" for j in range(n)] + [f"{names[n]} {last} %s"]
        ors.append("(" + " AND ".join(ands) + ")")
    return "(" + " OR ".join(ors) + ")"


class SourceReader:
    """One connection to the source, reading the shards of one logical table."""

    def __init__(self, source: SourceConfig, rate: RateLimit, where: str = "") -> None:
        self.source = source
        self.rate = rate
        self.where = where
        self._conn: Any = None

    # -- connection ------------------------------------------------------------------------------
    def open(self) -> None:
        self._conn = text_connection(self.source, lambda why: VerifyError(f"the source: {why}"))

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        try:
            with self._conn.cursor() as cur:
                cur.execute(sql, tuple(params))  # always formatted: every % of the text is doubled
                return list(cur.fetchall())
        except pymysql.err.MySQLError as exc:
            raise mysql.translate(exc, f"relay verify: {sql[:120]}") from exc

    def _rows(
        self, sql: str, params: Sequence[Any], kinds: tuple[int, ...], stamps: tuple[int, ...]
    ) -> list[Row]:
        try:
            with self._conn.cursor() as cur:
                # always formatted, also without params: every % of the text is doubled (a --where
                # 'id % 6 = 1' reached the server as 'id %% 6' from the first chunk's query)
                text = cur.mogrify(sql, tuple(params))
            return query_rows(self._conn, text, kinds, stamps)
        except pymysql.err.MySQLError as exc:
            raise mysql.translate(exc, f"relay verify: {sql[:120]}") from exc

    # -- the server ------------------------------------------------------------------------------
    def identity(self) -> tuple[int, str]:
        """(server id, server UUID or "") of the server read."""
        row = self._query("SELECT @@server_id")[0]
        try:
            uuid = self._query("SELECT @@server_uuid")[0][0]
        except SourceError:
            uuid = b""  # MariaDB has no server_uuid
        return int(_text(row[0])), _text(uuid)

    def binlog_end(self) -> Place:
        try:
            rows = self._query("SHOW MASTER STATUS")
        except SourceError:
            rows = self._query("SHOW BINARY LOG STATUS")
        if not rows:
            raise VerifyError("SHOW MASTER STATUS is empty: binary logging is off on the source")
        return Place(_text(rows[0][0]), int(_text(rows[0][1])))

    def double_layout_ok(self) -> bool:
        return double_layout_matches([_text(r[1]) for r in self._query(double_probe_sql())])

    def tables(self) -> list[tuple[str, str, int]]:
        try:
            return list_tables(self._conn, lambda db, table: True)
        except pymysql.err.MySQLError as exc:
            raise mysql.translate(exc, "relay verify: listing the tables") from exc

    def describe(self, db: str, table: str, estimated: int = 0) -> TableSpec:
        try:
            return describe_table(self._conn, db, table, estimated)
        except pymysql.err.MySQLError as exc:
            raise mysql.translate(exc, f"relay verify: describing {db}.{table}") from exc

    def defaults(self, db: str, table: str) -> dict[str, str | None]:
        """The columns whose default is a literal, to it as canal text (None: NULL); an expression default
        (CURRENT_TIMESTAMP, …) or none declared is left out: what MySQL gave existing rows is not known."""
        rows = self._query(
            "SELECT COLUMN_NAME, COLUMN_DEFAULT, IS_NULLABLE, EXTRA FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
            [db, table],
        )
        out: dict[str, str | None] = {}
        for name, default, nullable, extra in rows:
            value = literal_default(
                None if default is None else _text(default), _text(nullable) == "YES", _text(extra)
            )
            if value is not NO_LITERAL:
                out[_text(name)] = value  # type: ignore[assignment]
        return out

    # -- chunks (by the chunk key: the PRIMARY KEY or a UNIQUE key over NOT NULL columns) -----------
    def _chunk_where(self, shard: Shard, lo: ChunkKey | None, hi: ChunkKey | None) -> tuple[str, list[Any]]:
        spec = shard.spec
        names = [quote_name(spec.columns[i].name).replace("%", "%%") for i in spec.key]
        conds = [f"({self.where.replace('%', '%%')})"] if self.where else []
        params: list[Any] = []
        for key, build in ((lo, _greater), (hi, _at_most)):
            if key is not None:
                conds.append(build(names))
                for n in range(len(key)):
                    params.extend(spec.key_param(j, key[j]) for j in range(n + 1))
        return (" WHERE " + " AND ".join(conds)) if conds else "", params

    def _order(self, shard: Shard) -> str:
        names = [quote_name(shard.spec.columns[i].name) for i in shard.spec.key]
        return f" ORDER BY {', '.join(names)}".replace("%", "%%") if names else ""

    def boundary(self, shard: Shard, after: ChunkKey | None, rows: int) -> ChunkKey | None:
        """The chunk key of the ``rows``-th row after ``after`` (None: from the start), or None when the
        table has fewer: the chunk after ``after`` is the last."""
        spec = shard.spec
        where, params = self._chunk_where(shard, after, None)
        select = ", ".join(_select_item(spec, i) for i in spec.key).replace("%", "%%")
        sql = f"SELECT {select} FROM {spec.qualified.replace('%', '%%')}{where}{self._order(shard)}"
        sql += f" LIMIT 1 OFFSET {int(rows) - 1}"
        found = self._rows(sql, params, tuple(spec.kinds[i] for i in spec.key), ())
        return tuple(found[0]) if found else None

    def range_digest(self, shard: Shard, lo: ChunkKey | None, hi: ChunkKey | None) -> tuple[int, int]:
        """(rows, sum of row hashes) of the chunk ``lo < key <= hi``: one row back from the server."""
        where, params = self._chunk_where(shard, lo, hi)
        h = row_hash_sql(shard.names, shard.kinds).replace("%", "%%")
        sql = f"SELECT COUNT(*), SUM({h}) FROM {shard.spec.qualified.replace('%', '%%')}{where}"
        count, total = self._query(sql, params)[0]
        rows = int(_text(count))
        self.rate.take(rows)
        return rows, int(_text(total)) if total is not None else 0

    def hashes(
        self, shard: Shard, lo: ChunkKey | None, hi: ChunkKey | None, limit: int | None = None
    ) -> list[tuple[JoinKey, ChunkKey, int]]:
        """(join key, chunk key, row hash) of each row of ``lo < key <= hi`` in chunk-key order, at most
        ``limit`` (None: all; a table without a chunk key is read whole)."""
        spec = shard.spec
        where, params = self._chunk_where(shard, lo, hi)
        cols = tuple(dict.fromkeys((*self._join_columns(shard), *spec.key)))
        h = row_hash_sql(shard.names, shard.kinds)
        select = f"{', '.join(_select_item(spec, i) for i in cols)}, {h}".replace("%", "%%")
        sql = f"SELECT {select} FROM {spec.qualified.replace('%', '%%')}{where}{self._order(shard)}"
        if limit is not None and spec.key:
            sql += f" LIMIT {int(limit)}"
        out = []
        for row in self._rows(sql, params, (*(spec.kinds[i] for i in cols), K_INT), ()):
            full: list[str | None] = [None] * len(spec.columns)
            for i, value in zip(cols, row, strict=False):
                full[i] = value
            out.append((shard.join_key(full), tuple(full[i] for i in spec.key), int(row[-1] or 0)))
        self.rate.take(len(out))
        return out

    @staticmethod
    def _join_columns(shard: Shard) -> tuple[int, ...]:
        extra = (shard.shard_value,) if isinstance(shard.shard_value, int) else ()
        return (*extra, *shard.join)

    # -- rows ------------------------------------------------------------------------------------
    def rows_by_keys(self, shard: Shard, keys: Sequence[JoinKey]) -> dict[JoinKey, tuple[Row, bool]]:
        """The full rows (canal text, as a snapshot reads them) of the ``keys`` that exist, each with
        whether it meets ``--where`` (a row outside it is not compared)."""
        out: dict[JoinKey, tuple[Row, bool]] = {}
        cols = self._join_columns(shard)
        spec = replace(shard.spec, key=cols)  # key_param over the join columns
        names = ", ".join(quote_name(spec.columns[i].name) for i in cols).replace("%", "%%")
        one = "(" + ", ".join(["%s"] * len(cols)) + ")"
        scope = f"({self.where}) IS TRUE, " if self.where else ""
        kinds = (*((K_INT,) if self.where else ()), *spec.kinds)
        skip = 1 if self.where else 0
        stamps = tuple(i + skip for i in spec.timestamps)
        for start in range(0, len(keys), 500):
            batch = keys[start : start + 500]
            params: list[Any] = []
            for key in batch:
                values = _full_key(shard, key)
                params.extend(spec.key_param(j, values[j]) for j in range(len(values)))
            select = f"{scope}{spec.select_list()}".replace("%", "%%")
            sql = (
                f"SELECT {select} FROM {spec.qualified.replace('%', '%%')}"
                f" WHERE ({names}) IN ({', '.join([one] * len(batch))})"
            )
            for row in self._rows(sql, params, kinds, stamps):
                data, inside = row[skip:], (row[0] == "1") if skip else True
                out[shard.join_key(data)] = (data, inside)
            self.rate.take(len(batch))
        return out

    # -- tables without a key --------------------------------------------------------------------
    def bucket_digests(self, shard: Shard, buckets: int) -> dict[int, tuple[int, int]]:
        """Per hash bucket (``hash % buckets``) of the whole table: (rows, sum of row hashes)."""
        h = row_hash_sql(shard.names, shard.kinds)
        where = f" WHERE ({self.where})" if self.where else ""
        sql = (
            f"SELECT h % {int(buckets)}, COUNT(*), SUM(h) FROM (SELECT {h} AS h FROM {shard.spec.qualified}"
            f"{where}) x GROUP BY 1"
        )
        found = self._query(sql.replace("%", "%%"))
        out = {int(_text(b)): (int(_text(n)), int(_text(s))) for b, n, s in found}
        self.rate.take(sum(n for n, _ in out.values()))
        return out

    def bucket_rows(self, shard: Shard, buckets: int, wanted: Sequence[int]) -> list[Row]:
        """The full rows (canal text) of the hash buckets ``wanted``."""
        spec = shard.spec
        h = row_hash_sql(shard.names, shard.kinds)
        conds = [f"({h}) % {int(buckets)} IN ({', '.join(str(int(b)) for b in wanted)})"]
        if self.where:
            conds.append(f"({self.where})")
        sql = f"SELECT {spec.select_list()} FROM {spec.qualified} WHERE {' AND '.join(conds)}"
        try:
            rows = list(spec.read(self._conn, sql.replace("%", "%%"), []))
        except pymysql.err.MySQLError as exc:
            raise mysql.translate(exc, f"relay verify: reading {spec.name}") from exc
        self.rate.take(len(rows))
        return rows

    # -- the binlog between two places ---------------------------------------------------------------
    def gap_touches(self, start: tuple[str, int], end: Pos, tables: set[str], most: int) -> bool | None:
        """Whether the binlog from ``start`` (a journal and offset, an event's start) up to ``end`` holds
        a table map of one of ``tables`` (or a compressed transaction payload, which hides its table
        maps). None: more than ``most`` events to look at (too far to scan; wait instead)."""
        files = [_text(r[0]) for r in self._query("SHOW BINARY LOGS")]
        journal, offset = start
        seen = 0
        for name in [f for f in files if file_order(f) >= file_order(journal)]:
            if file_order(name) > end[0]:
                break
            pos = offset if name == journal else 4
            while True:
                rows = self._query(f"SHOW BINLOG EVENTS IN %s FROM {int(pos)} LIMIT 500", (name,))
                for row in rows:
                    if (file_order(name), int(_text(row[1]))) >= end:
                        return False
                    kind, info = _text(row[2]), _text(row[5])
                    if kind in _ROW_TYPES and (kind != "Table_map" or _mapped(info) in tables):
                        return True
                    pos = int(_text(row[4]))
                seen += len(rows)
                if seen > most:
                    return None
                if len(rows) < 500:
                    break
        return False


def _full_key(shard: Shard, key: JoinKey) -> JoinKey:
    """The values of the join columns (shard column first) of a join key."""
    return key if isinstance(shard.shard_value, int) else shard.key_values(key)


def _mapped(info: str) -> str:
    """``table_id: 42 (shop_00.orders_01)`` → ``shop_00.orders_01``."""
    inner = info[info.find("(") + 1 : info.rfind(")")] if "(" in info else ""
    return inner.replace("`", "")


NO_LITERAL = object()  # a default that is not a literal (an expression), or none declared
_NUMBER = re.compile(r"-?\d+(\.\d+)?([eE][-+]?\d+)?")


def literal_default(default: str | None, nullable: bool, extra: str) -> object:
    """``information_schema.COLUMNS.COLUMN_DEFAULT`` as canal text, None for NULL, or ``NO_LITERAL``.

    MariaDB (10.2.7+) writes a literal quoted (``'a''b'``), a number bare, NULL as ``NULL`` and an expression
    as itself (``current_timestamp()``); MySQL writes a literal bare, NULL as SQL NULL, and marks an
    expression ``DEFAULT_GENERATED`` in EXTRA."""
    if "DEFAULT_GENERATED" in extra.upper():
        return NO_LITERAL
    if default is None or (default == "NULL" and nullable):
        return None if nullable else NO_LITERAL  # NOT NULL without a default: an implicit one, not known
    if len(default) >= 2 and default[0] == default[-1] == "'":
        return default[1:-1].replace("''", "'")
    if _NUMBER.fullmatch(default):
        return default
    if "(" in default or default.lower().startswith("current_timestamp"):
        return NO_LITERAL
    return default  # MySQL's bare literal text


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes | bytearray) else str(value)
