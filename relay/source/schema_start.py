"""Starting the schema history for a source: whether to use it, and a snapshot consistent with the start.

Owned here: ``attach_schema_history`` — with ``schema.history`` ``auto`` (the default) or ``always``
the source's TABLE_MAPs and DDL go through a ``SchemaTracker`` whatever the server's
``binlog_row_metadata`` (it logs which one it found: FULL is preferred). Where the history has no
snapshot of this server at or before the start — the first start, a start older than the history, a
failover standby — it takes one: the definitions carried over from the master (a failover by GTID),
or read from the server so that they hold at the start position. A start from a GTID set is placed
at the first GTID event a dump from that set sends (``gtid_start_place``). Runs on the thread that
starts the instance (the parser thread at a failover), after the start position is resolved (and,
with HA, after the leadership is won) and before the stream opens.

Consistency: the definitions are read between two looks at the binlog end (``SHOW MASTER STATUS``),
then the binlog from the start position to the second look is read for schema-changing DDL. None:
the definitions hold at the start. One after the first look: a DDL ran while reading, so read again.
One between the start and the first look: the definitions at the start cannot be read any more, and
the relay refuses to start (start after that DDL, or on a server with FULL metadata). With FULL
metadata (mode ``auto``) the tables those DDL changed are left out instead: each is learned from its
first TABLE_MAP.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable
from typing import Any

import pymysql

from relay.binlog.events import GtidEvent, HeartbeatEvent, QueryEvent
from relay.binlog.stream import BinlogStream
from relay.canal.ddl import classify
from relay.common.binlog_names import file_order
from relay.config.sections import SourceConfig
from relay.errors import SchemaError
from relay.schema.ddl import SCHEMA_CHANGING, SYSTEM_SCHEMAS
from relay.schema.history import Place, Record, SchemaHistory, server_key
from relay.schema.model import Catalog
from relay.schema.server import read_catalog
from relay.schema.tracker import SchemaTracker
from relay.source.binlog_source import BinlogSource
from relay.source.server import ServerInfo, binlog_state, connect, stream_config, translate
from relay.source.start_point import StartPoint

log = logging.getLogger(__name__)

MODES = ("off", "auto", "always")
SNAPSHOT_ATTEMPTS = 5


def uses_history(mode: str, info: ServerInfo) -> bool:
    """Whether a tracker is attached: always, except with ``off`` (which needs FULL metadata)."""
    return mode in ("auto", "always")


def attach_schema_history(
    source: BinlogSource,
    history: SchemaHistory | None,
    mode: str,
    start: StartPoint,
    carry: Catalog | None = None,
    *,
    captures: Callable[[str, str], bool] | None = None,
) -> SchemaTracker | None:
    """Give ``source`` a schema tracker when ``mode`` calls for one (module docstring). ``carry``: the
    schema exactly at ``start``, known from another server's binlog (a failover by GTID continues right
    after the master's last event): it becomes this server's first snapshot instead of a read.
    ``captures``: the tables the relay publishes (None: all); what the history cannot follow in any other
    table is logged, never a reason to stop (``SchemaTracker.captures``)."""
    info = source.info
    assert info is not None
    metadata = info.row_metadata or "not supported by this server (MySQL 5.7)"
    full = info.row_metadata == "FULL"
    if history is None or not uses_history(mode, info):
        log.info("binlog_row_metadata=%s: column names and keys come from the binlog (schema.history: off)",
                 metadata)  # fmt: skip
        source.schema = None
        return None
    if full:
        log.info(
            "binlog_row_metadata=FULL (preferred): names and keys come from the binlog; the schema history "
            "(%s) is kept and checked against them (schema.history: %s)",
            history.describe(),
            mode,
        )
    else:
        log.warning(
            "binlog_row_metadata=%s: column names, keys and types come from the schema history (%s); "
            "binlog_row_metadata=FULL is preferred (MySQL >= 8.0.1, MariaDB >= 10.5): the binlog then "
            "carries them itself and a DDL the parser cannot read does not stop the relay",
            metadata,
            history.describe(),
        )
    server = server_key(info.server_id, info.server_uuid)
    place: Place = (start.journal, start.offset)
    if not start.journal:  # a GTID set: the place of the first GTID event the dump sends
        place = gtid_start_place(source.config, info, start.gtid_set or "")
    history.load()  # now, not when built: a standby that took over reads what its predecessor wrote
    if not history.covers(place, server):
        # The first start on this server (a new history, a failover standby, a start older than the
        # history): the definitions read now, if they hold at the start (``consistent_snapshot``).
        lenient = full and mode == "auto"
        catalog = carry or consistent_snapshot(source.config, info, place, lenient=lenient)
        facts = catalog.facts_json()
        history.append(Record("snapshot", place, tuple(catalog.tables.items()), facts, server=server))
        where = source.config.address
        how = "carried over from the master" if carry is not None else "read"
        log.info("schema history: %d tables %s for %s %s:%d", len(catalog.tables), how, where, *place)
    tracker = SchemaTracker(history, place, mode, full, server)
    tracker.captures = captures
    source.schema = tracker
    return tracker


def _status(cfg: SourceConfig, conn: Any) -> Place:
    _, status = binlog_state(cfg, conn)
    return str(status[0]), int(status[1])


def consistent_snapshot(
    cfg: SourceConfig, info: ServerInfo, start: Place, *, lenient: bool = False
) -> Catalog:
    """The captured tables' definitions as they are at ``start`` (module docstring). ``lenient`` (full
    row metadata): a table a DDL changed between ``start`` and the read is left out instead of refusing
    the start — its TABLE_MAPs describe it, and it is learned from the first one."""
    for _ in range(SNAPSHOT_ATTEMPTS):
        conn = connect(cfg)
        try:
            before = _status(cfg, conn)
            catalog = read_catalog(conn, info.mariadb)
            after = _status(cfg, conn)
        except pymysql.err.MySQLError as exc:
            raise translate(cfg, exc, "reading the table definitions") from exc
        finally:
            conn.close()
        ddls = ddls_between(cfg, info, start, after, every=lenient)
        if not ddls:
            return catalog
        at, sql, _ = ddls[0]
        if lenient:
            changed = {t for _, _, touched in ddls for t in touched}
            for key in changed:
                catalog.tables.pop(key, None)
            log.info("schema history: %d tables changed by DDL after %s:%d are learned from the binlog",
                     len(changed), *start)  # fmt: skip
            return catalog
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


Ddl = tuple[Place, str, tuple[tuple[str, str], ...]]


def gtid_start_place(cfg: SourceConfig, info: ServerInfo, gtid_set: str) -> Place:
    """Where a dump from ``gtid_set`` starts in the binlog: the place of the first GTID event it sends
    (every transaction outside the set starts with one; the file's format description and GTID list
    sent before it are earlier and not transactions), or the binlog end read before the dump when it
    sends nothing but a heartbeat (nothing after the set yet)."""
    conn = connect(cfg)
    try:
        end = _status(cfg, conn)
    except pymysql.err.MySQLError as exc:
        raise translate(cfg, exc, "reading the binlog end") from exc
    finally:
        conn.close()
    config = dataclasses.replace(stream_config(cfg, info, side=True), decode_rows=False)
    with contextlib.closing(BinlogStream(config)) as stream:
        stream.open_at_gtid(gtid_set)
        while True:
            event = stream.read(timeout=cfg.read_timeout)
            if event is None or isinstance(event, HeartbeatEvent):
                return end
            if isinstance(event, GtidEvent) and not event.header.artificial:
                return event.header.log_file, event.header.start


def ddls_between(
    cfg: SourceConfig, info: ServerInfo, start: Place, end: Place, *, every: bool = False
) -> list[Ddl]:
    """The schema-changing DDL in the binlog from ``start`` to ``end`` (end place, statement, tables
    named): the first only, or ``every`` one."""
    limit = (file_order(end[0]), end[1])
    if (file_order(start[0]), start[1]) >= limit:
        return []
    found: list[Ddl] = []
    # Rows are not decoded: an image the relay will refuse later (a session's binlog_row_image=MINIMAL)
    # must stop it where it is read, with its own message, not here.
    config = dataclasses.replace(stream_config(cfg, info, side=True), decode_rows=False)
    with contextlib.closing(BinlogStream(config)) as stream:
        stream.open_at(*start)
        while True:
            event = stream.read(timeout=cfg.read_timeout)
            if event is None:
                return found
            h = event.header
            if isinstance(event, HeartbeatEvent) or h.artificial:
                continue
            if isinstance(event, QueryEvent):
                ddl = classify(event.sql, event.schema)
                if ddl.event_type in SCHEMA_CHANGING and ddl.schema not in SYSTEM_SCHEMAS:
                    named = ((ddl.schema, ddl.table), (ddl.old_schema, ddl.old_table))
                    found.append(((h.log_file, h.log_pos), event.sql, tuple((s, t) for s, t in named if t)))
                    if not every:
                        return found
            if (file_order(h.log_file), h.log_pos) >= limit:
                return found
