"""A mapping against the live source: what ``relay mapping validate``, every ``relay mapping`` edit and the
console's mapping editor check beyond the mapping itself.

Owns listing the source's tables (and, for column controls, their columns: ``information_schema``), the
rule "against the source when reachable" (``reachable``: a server that does not answer within
``REACH_SECONDS`` is a warning, the patterns then checked against each other only), and the problems only
real names show (``live_problems``: two claimants of a table, two codecs in one topic, column controls that
do not fit a table — ``mapping.columns.check_columns`` per published table, a db-level name no table of
its db has). Runs on the caller's thread (the CLI's, or a console request's); each call opens and closes
its own connection.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from mapping.columns import ColumnInfo, check_columns, unused_db_names
from mapping.key_shard import shard_column
from mapping.model import Mapping, Route
from mapping.names import name_path
from relay.common import mysql
from relay.common.tls import TlsConfig
from relay.config.load import RelayConfig
from relay.errors import MappingError, SourceError

LiveColumns = dict[tuple[str, str], list[ColumnInfo]]
Live = tuple[list[tuple[str, str]], LiveColumns]
SYSTEM_SCHEMAS = ("mysql", "information_schema", "performance_schema", "sys")
REACH_SECONDS = 5.0  # how long a check that does not need the server waits for it


@dataclass(frozen=True)
class LiveSource:
    """The server whose tables a mapping is checked against, and the account that lists them."""

    host: str
    port: int
    user: str
    password: str
    tls: TlsConfig | None = None
    option: str = "--mysql"  # the setting that names it, for the error line

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def live_source(config: RelayConfig) -> LiveSource:
    """The source of a relay's config, with the account the relay reads it as."""
    src = config.source
    return LiveSource(src.host, src.port, src.user, src.password, src.tls, "source")


def live_tables(source: LiveSource, timeout: float, *, columns: bool) -> Live:
    """The server's base tables outside the system schemas and, with ``columns``, each one's columns;
    ``MappingError`` (naming ``source.option``) when the server cannot be asked."""
    import pymysql

    marks = ", ".join(["%s"] * len(SYSTEM_SCHEMAS))
    try:
        conn = mysql.connect(
            source.host,
            source.port,
            source.user,
            source.password,
            tls=source.tls,
            connect_timeout=timeout,
            origin=source.option,
        )
        with contextlib.closing(conn), conn.cursor() as cur:
            cur.execute(
                "SELECT table_schema, table_name FROM information_schema.tables WHERE table_type = "
                f"'BASE TABLE' AND table_schema NOT IN ({marks}) ORDER BY 1, 2",
                SYSTEM_SCHEMAS,
            )
            tables = [(_text(db), _text(table)) for db, table in cur.fetchall()]
            return tables, (live_columns(cur, SYSTEM_SCHEMAS) if columns else {})
    except (pymysql.MySQLError, SourceError) as exc:
        raise MappingError(source.option, f"cannot list the tables of {source.address}: {exc}") from exc


def reachable(
    source: LiveSource | None, *, columns: bool, warn: Callable[[str], None], timeout: float = REACH_SECONDS
) -> Live | None:
    """The source's tables (and columns) when it answers within ``timeout``; None when it does not (said
    through ``warn``: the patterns are then checked against each other only, and column controls against
    the mapping's own key columns only) or when no source is named."""
    if source is None:
        return None
    try:
        return live_tables(source, timeout, columns=columns)
    except MappingError as exc:
        warn(f"overlaps checked between the patterns only: {exc}")
        return None


def live_problems(mapping: Mapping, live: Live) -> list[MappingError]:
    """Every problem only the live names show: tables claimed twice, two codecs in one topic, column
    controls that do not fit a table (empty: the mapping fits the source)."""
    coverage = mapping.validate_against(live[0], raise_errors=False)
    problems = column_problems(mapping, coverage.routes, live[1]) if mapping.column_controls() else []
    return [*coverage.errors, *problems]


def live_columns(cur: Any, system_schemas: Sequence[str]) -> LiveColumns:
    """Every column of the server's tables outside ``system_schemas``, per (db, table), in table order."""
    marks = ", ".join(["%s"] * len(system_schemas))
    cur.execute(
        "SELECT table_schema, table_name, column_name, column_key, column_type "
        "FROM information_schema.columns "
        f"WHERE table_schema NOT IN ({marks}) ORDER BY table_schema, table_name, ordinal_position",
        tuple(system_schemas),
    )
    out: LiveColumns = {}
    for db, table, column, key, kind in cur.fetchall():
        info = ColumnInfo(_text(column), _text(key) == "PRI", _text(kind))
        out.setdefault((_text(db), _text(table)), []).append(info)
    return out


def column_problems(mapping: Mapping, routes: Iterable[Route], columns: LiveColumns) -> list[MappingError]:
    """The problems of the mapping's column controls on the real tables it publishes."""
    errors: list[MappingError] = []
    seen: set[str] = set()
    by_db: dict[str, list[list[ColumnInfo]]] = {}
    for route in routes:
        found = columns.get((route.physical_db, route.physical_table))
        if route.columns is None or found is None or not route.mapped:
            continue
        by_db.setdefault(route.logical_db, []).append(found)
        where = f"{route.physical_db}.{route.physical_table}"
        for error in check_columns(
            route.columns, where, found, route.key_columns, shard_column(route.key_shard)
        ):
            if str(error) not in seen:
                seen.add(str(error))
                errors.append(error)
    for db in mapping.logical_dbs:
        if db.columns is not None and db.name in by_db:
            errors.extend(
                unused_db_names(db.columns, f"{name_path('logical_dbs', db.name)}.columns", by_db[db.name])
            )
    return errors


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
