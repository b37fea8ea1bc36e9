"""What a snapshot will read: the captured tables listed, a row filter checked, the fresh checkpoint.

``plan`` lists the server's base tables the mapping captures (``relay.source.snapshot_tables``), narrowed
to those an on-demand request names, and gives the checkpoint naming them
(``relay.source.snapshot_checkpoint.new_state``); ``check_where`` refuses a ``--where`` condition that
fails on any of them before the snapshot starts. Each call opens and closes its own connection; runs on
the caller's thread (the instance's start, a snapshot request, ``relay verify``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pymysql

from relay.common import mysql
from relay.config.sections import SnapshotConfig, SourceConfig
from relay.source.snapshot_checkpoint import new_state
from relay.source.snapshot_tables import TableSpec, list_tables, quote_name


def _connect(source: SourceConfig) -> Any:
    return mysql.connect(
        source.host, source.port, source.user, source.password, tls=source.tls,
        connect_timeout=source.connect_timeout, read_timeout=source.read_timeout,
    )  # fmt: skip


def check_where(source: SourceConfig, tables: list[str], where: str) -> str | None:
    """Why ``where`` cannot select rows of every table in ``tables`` (``db.table``), or None: each is
    asked ``SELECT 1 … WHERE (where) LIMIT 0`` first, so a bad condition is refused at the request
    instead of stopping the snapshot (and the relay) at its first chunk."""
    conn = _connect(source)
    try:
        for name in tables:
            db, table = name.split(".", 1)
            qualified = f"{quote_name(db)}.{quote_name(table)}"
            try:
                with conn.cursor() as cur:
                    cur.execute(f"SELECT 1 FROM {qualified} WHERE ({where}) LIMIT 0")
            except pymysql.err.MySQLError as exc:
                text = exc.args[1] if len(exc.args) > 1 else str(exc)
                return f"--where {where!r} fails on {name}: {text}"
    finally:
        conn.close()
    return None


def captured_tables(source: SourceConfig, captures: Callable[[str, str], bool]) -> list[tuple[str, str]]:
    """(db, table) of the server's base tables ``captures`` keeps."""
    conn = _connect(source)
    try:
        return [(db, table) for db, table, _ in list_tables(conn, captures)]
    except pymysql.err.MySQLError as exc:
        raise mysql.translate(exc, "listing the tables") from exc
    finally:
        conn.close()


def plan(
    config: SnapshotConfig,
    source: SourceConfig,
    captures: Callable[[str, str], bool],
    snapshot_id: str,
    where: str = "",
    only: Callable[[str, str], bool] | None = None,
) -> dict[str, Any]:
    """A fresh checkpoint over the tables ``captures`` keeps (and ``only``, for an on-demand run)."""
    conn = _connect(source)
    try:
        found = list_tables(conn, captures)
        specs = [
            TableSpec(db, table, (), (), (), "", rows)
            for db, table, rows in found
            if only is None or only(db, table)
        ]
    except pymysql.err.MySQLError as exc:
        raise mysql.translate(exc, "snapshot: listing the tables") from exc
    finally:
        conn.close()
    return new_state(specs, snapshot_id, where)
