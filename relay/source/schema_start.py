"""Starting the schema history for a source: whether to use it, and a snapshot consistent with the start.

Owned here: ``attach_schema_history`` — decides from ``schema.history`` (off / auto / always) and the
server's ``binlog_row_metadata`` whether the source's TABLE_MAPs go through a ``SchemaTracker``; on the
first start (an empty history) it reads the tables' definitions so that they hold at the start
position, and stores them as the history's snapshot. Runs on the thread that starts the instance,
after the start position is resolved and before the stream opens.

Consistency: the definitions are read between two looks at the binlog end (``SHOW MASTER STATUS``),
then the binlog from the start position to the second look is read for schema-changing DDL. None:
the definitions hold at the start. One after the first look: a DDL ran while reading, so read again.
One between the start and the first look: the definitions at the start cannot be read any more, and
the relay refuses to start (start after that DDL, or on a server with FULL metadata).
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import pymysql

from relay.binlog.events import HeartbeatEvent, QueryEvent
from relay.binlog.stream import BinlogStream
from relay.canal.ddl import classify
from relay.common.binlog_names import file_order
from relay.config.sections import SourceConfig
from relay.errors import SchemaError
from relay.schema.ddl import SCHEMA_CHANGING, SYSTEM_SCHEMAS
from relay.schema.history import FileSchemaHistory, Place, Record
from relay.schema.model import Catalog
from relay.schema.server import read_catalog
from relay.schema.tracker import SchemaTracker
from relay.source.binlog_source import (
    BinlogSource,
    ServerInfo,
    StartPoint,
    _binlog_state,
    _connect,
    _stream_config,
    _translate,
)

log = logging.getLogger(__name__)

MODES = ("off", "auto", "always")
SNAPSHOT_ATTEMPTS = 5


def uses_history(mode: str, info: ServerInfo) -> bool:
    return mode == "always" or (mode == "auto" and info.row_metadata != "FULL")


def attach_schema_history(
    source: BinlogSource, history: FileSchemaHistory | None, mode: str, start: StartPoint
) -> SchemaTracker | None:
    """Give ``source`` a schema tracker when ``mode`` and the server call for one (module docstring)."""
    info = source.info
    assert info is not None
    metadata = info.row_metadata or "not supported by this server"
    if history is None or not uses_history(mode, info):
        log.info("binlog_row_metadata=%s: column names and keys come from the binlog", metadata)
        source.schema = None
        return None
    if info.row_metadata == "FULL":
        log.info(
            "binlog_row_metadata=FULL (preferred): names and keys come from the binlog, "
            "checked against the schema history %s",
            history.path,
        )
    else:
        log.warning(
            "binlog_row_metadata=%s: column names, keys and types come from the schema history %s "
            "(binlog_row_metadata=FULL is preferred: it needs no history)",
            metadata,
            history.path,
        )
    if not start.journal:
        raise SchemaError(
            "the schema history needs a binlog file position to start from, not a GTID set "
            f"({start.gtid_set}); set source.start.journal / offset"
        )
    place: Place = (start.journal, start.offset)
    if history.empty:
        catalog = consistent_snapshot(source.config, info, place)
        history.append(Record("snapshot", place, tuple(catalog.tables.items()), catalog.facts_json()))
        log.info("schema history: %d tables read from the server for %s:%d", len(catalog.tables), *place)
    tracker = SchemaTracker(history, place)
    source.schema = tracker
    return tracker


def _status(cfg: SourceConfig, conn: Any) -> Place:
    _, status = _binlog_state(cfg, conn)
    return str(status[0]), int(status[1])


def consistent_snapshot(cfg: SourceConfig, info: ServerInfo, start: Place) -> Catalog:
    """The captured tables' definitions as they are at ``start`` (module docstring)."""
    for _ in range(SNAPSHOT_ATTEMPTS):
        conn = _connect(cfg)
        try:
            before = _status(cfg, conn)
            catalog = read_catalog(conn, info.mariadb)
            after = _status(cfg, conn)
        except pymysql.err.MySQLError as exc:
            raise _translate(cfg, exc, "reading the table definitions") from exc
        finally:
            conn.close()
        ddl = first_ddl(cfg, info, start, after)
        if ddl is None:
            return catalog
        at, sql = ddl
        if (file_order(at[0]), at[1]) > (file_order(before[0]), before[1]):
            log.info("schema history: a DDL ran while the definitions were read (%s:%d); reading again", *at)
            continue
        raise SchemaError(
            f"the schema history cannot start at {start[0]}:{start[1]}: the binlog after it has a DDL at "
            f"{at[0]}:{at[1]} ({sql[:120]!r}), so the definitions read now are not those of the start. "
            "Start after that DDL (source.start), or use a server with binlog_row_metadata=FULL"
        )
    raise SchemaError(
        f"the schema history could not read the definitions without a DDL running "
        f"({SNAPSHOT_ATTEMPTS} attempts); try again when no DDL runs"
    )


def first_ddl(cfg: SourceConfig, info: ServerInfo, start: Place, end: Place) -> tuple[Place, str] | None:
    """The first schema-changing DDL in the binlog from ``start`` to ``end`` (its end place, statement)."""
    limit = (file_order(end[0]), end[1])
    if (file_order(start[0]), start[1]) >= limit:
        return None
    with contextlib.closing(BinlogStream(_stream_config(cfg, info))) as stream:
        stream.open_at(*start)
        while True:
            event = stream.read(timeout=cfg.read_timeout)
            if event is None:
                return None
            h = event.header
            if isinstance(event, HeartbeatEvent) or h.artificial:
                continue
            if isinstance(event, QueryEvent):
                ddl = classify(event.sql, event.schema)
                if ddl.event_type in SCHEMA_CHANGING and ddl.schema not in SYSTEM_SCHEMAS:
                    return (h.log_file, h.log_pos), event.sql
            if (file_order(h.log_file), h.log_pos) >= limit:
                return None
