"""A time in the binlog: the first transaction at or after a given time, found by reading the binlog.

As canal's ``findByStartTimeStamp``: the binlog files are walked newest first, reading only each file's
first transaction, back to the newest file that starts before the target; the scan goes forward from
there. A binlog whose oldest file starts after the target may have lost (purged) transactions at or after
it: ``find_by_timestamp`` then refuses (``uncovered_error``) instead of starting past a possible gap.
Used by the start position (``source.start.timestamp``), ``relay positions set --timestamp`` and the
timestamp failover (``relay.source.failover``). Every read here is on a side connection
(``relay.source.server.SIDE_SERVER_ID_BIT``); runs on the caller's thread.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Generator
from dataclasses import dataclass, replace

from relay.binlog.events import GtidEvent, HeartbeatEvent, QueryEvent, XaPrepareEvent, XidEvent
from relay.binlog.stream import BinlogStream
from relay.common.binlog_names import file_order
from relay.config.sections import SourceConfig
from relay.errors import SourceError
from relay.source.server import ServerInfo, stream_config

log = logging.getLogger(__name__)


def _transactions(
    cfg: SourceConfig, info: ServerInfo, journal: str
) -> Generator[tuple[str, int, int], None, None]:
    """(file, start offset, timestamp s) of each transaction from the start of ``journal`` to the end
    of the binlog as it was when the server was checked (``info.end``), across file switches.

    A transaction starts at its GTID event (MySQL >= 5.7 writes an anonymous one without GTIDs;
    MariaDB always writes one); a server without them starts it with BEGIN or a DDL query.
    Uses the side server id (``SIDE_SERVER_ID_BIT``).
    """
    end = (file_order(info.end[0]), info.end[1])
    with BinlogStream(stream_config(cfg, info, side=True)) as stream:
        stream.open_at(journal, 4)
        in_txn = False
        while True:
            event = stream.read(timeout=cfg.read_timeout)
            if event is None:
                return
            h = event.header
            if isinstance(event, HeartbeatEvent) or h.artificial:
                continue
            sql = event.sql.strip().upper() if isinstance(event, QueryEvent) else None
            if isinstance(event, GtidEvent) or (sql is not None and not in_txn and sql != "COMMIT"):
                in_txn = sql in (None, "BEGIN")
                yield h.log_file, h.start, h.timestamp
            elif isinstance(event, XidEvent | XaPrepareEvent) or sql == "COMMIT":
                in_txn = False
            if (file_order(h.log_file), h.log_pos) >= end:
                return


@dataclass(frozen=True)
class TimeLocation:
    """Where ``locate_by_timestamp`` found the first transaction at or after ``target_ms``.

    ``covered``: the server's binlog provably holds every transaction at or after the target (some file
    starts with a transaction before it, or the oldest file was begun before it). Otherwise the oldest
    file is ``oldest``, begun at ``oldest_begun`` (its first event's time, s), and its first transaction
    (at ``first_txn``, s; None: none) is at or after the target: what lay between the target and it may
    have been purged.
    """

    journal: str
    offset: int
    covered: bool = True
    oldest: str = ""
    oldest_begun: int | None = None
    first_txn: int | None = None


def begun_before(target_ms: int, first_event_s: int | None) -> bool:
    """Whether a binlog file whose first event (its FORMAT_DESCRIPTION) has ``first_event_s`` was begun
    before ``target_ms``, so that no transaction at or after the target can lie in an older (purged)
    file: such a transaction committed before the file was begun, and its binlog time (whole seconds,
    taken before its commit) is at most the file's first event's second. Strictly before: one in that
    very second may still be in the purged file."""
    return first_event_s is not None and first_event_s * 1000 < target_ms


def _first_event_time(cfg: SourceConfig, info: ServerInfo, journal: str) -> int | None:
    """The time (s) of the first event written to ``journal`` (its FORMAT_DESCRIPTION, written when the
    file was begun)."""
    with BinlogStream(stream_config(cfg, info, side=True)) as stream:
        stream.open_at(journal, 4)
        while True:
            event = stream.read(timeout=cfg.read_timeout)
            if event is None:
                return None
            h = event.header
            if isinstance(event, HeartbeatEvent) or h.artificial:
                continue
            return h.timestamp


def locate_by_timestamp(cfg: SourceConfig, info: ServerInfo, target_ms: int) -> TimeLocation:
    """The first transaction at/after ``target_ms``; the current end when there is none.

    Walks the binlog files newest first, reading only each file's first transaction, back to the
    newest file whose first transaction is before the target (the earlier files hold only older
    transactions), then scans forward from there on one connection, into later files if needed.
    When no file starts with a transaction before the target, the scan starts at the oldest file, and
    the result is ``covered`` only when that file was begun before the target (``begun_before``).
    """
    sizes = dict(info.binlogs)
    sizes[info.end[0]] = info.end[1]
    files = sorted(sizes, key=file_order)
    begin: int | None = None
    first_txn: int | None = None
    for i in range(len(files) - 1, -1, -1):
        with contextlib.closing(_transactions(cfg, info, files[i])) as txns:
            first = next(txns, None)
        if i == 0:
            first_txn = first[2] if first is not None else None
        # Strictly before: a transaction in the same second may end the previous file.
        if first is not None and first[0] == files[i] and first[2] * 1000 < target_ms:
            begin = i
            break
    covered, begun = True, None
    if begin is None:
        begin = 0
        begun = _first_event_time(cfg, info, files[0])
        covered = begun_before(target_ms, begun)
    where = TimeLocation(*info.end, covered, files[0], begun, first_txn)
    with contextlib.closing(_transactions(cfg, info, files[begin])) as txns:
        for name, start, ts in txns:
            if ts * 1000 >= target_ms:
                log.info("first transaction at or after %d ms: %s:%d", target_ms, name, start)
                where = replace(where, journal=name, offset=start)
                break
    return where


def uncovered_error(cfg: SourceConfig, where: TimeLocation, target_ms: int, remedy: str) -> SourceError:
    """The error for a binlog that may have lost (purged) transactions at or after ``target_ms``."""
    begun = "unknown" if where.oldest_begun is None else f"{where.oldest_begun * 1000} ms"
    first = "none" if where.first_txn is None else f"at {where.first_txn * 1000} ms"
    return SourceError(
        f"{cfg.address}: the first transaction at or after {target_ms} ms cannot be told: the oldest "
        f"binlog on the server, {where.oldest}, was begun at {begun} (its first event) and its first "
        f"transaction is {first}, both not before the target, so transactions at or after the target may "
        f"have been in binlog files purged since (or never in this server's binlog). Not starting past "
        f"a possible gap: {remedy}"
    )


def find_by_timestamp(
    cfg: SourceConfig,
    info: ServerInfo,
    target_ms: int,
    remedy: str = "give a later time, a binlog file and offset, or a GTID set, or take a snapshot",
) -> tuple[str, int]:
    """The first transaction at/after ``target_ms`` (``locate_by_timestamp``); ``SourceError`` when the
    server's binlog does not provably reach back to the target (``remedy`` says what to do)."""
    where = locate_by_timestamp(cfg, info, target_ms)
    if not where.covered:
        raise uncovered_error(cfg, where, target_ms, remedy)
    return where.journal, where.offset
