"""Where the binlog source starts reading, and the refusals of a saved position that means nothing here.

Precedence (as canal's ``MysqlEventParser.findStartPosition``): the saved resume point; a configured GTID
set; a configured file + offset; a configured timestamp (the first transaction at or after it:
``relay.source.binlog_time``); otherwise the server's current end. A saved position in a purged file,
past the end of its file, or taken on another server (its server id or UUID) is refused with what to do.
Runs on the thread that starts the instance (and ``relay check``'s).
"""

from __future__ import annotations

from dataclasses import dataclass

from relay.common.binlog_names import file_order
from relay.config.sections import SourceConfig
from relay.errors import SourceError
from relay.positions.store import ResumePoint
from relay.source.binlog_time import find_by_timestamp
from relay.source.server import ServerInfo


@dataclass(frozen=True)
class StartPoint:
    journal: str
    offset: int
    skip: int = 0
    gtid_set: str | None = None
    reason: str = ""


def resolve_start(cfg: SourceConfig, info: ServerInfo, saved: ResumePoint | None) -> StartPoint:
    """Choose where to start; the precedence is the module docstring's."""
    files = [name for name, _ in info.binlogs]
    if saved is not None:
        _check_saved_available(cfg, info, saved)
        _check_same_server(cfg, info, saved)
        return StartPoint(saved.journal, saved.offset, saved.skip, saved.gtid_set, f"saved position {saved}")
    start = cfg.start
    if start.gtid:
        return StartPoint("", 0, 0, start.gtid, f"configured GTID set {start.gtid}")
    if start.journal:
        if start.journal not in files:
            raise SourceError(
                f"source.start.journal: {start.journal} is not on the server; available: {', '.join(files)}"
            )
        offset = start.offset if start.offset is not None else 4
        return StartPoint(start.journal, offset, 0, None, f"configured position {start.journal}:{offset}")
    if start.timestamp is not None:
        journal, offset = find_by_timestamp(cfg, info, start.timestamp)
        return StartPoint(journal, offset, 0, None, f"first transaction at or after {start.timestamp} ms")
    return StartPoint(info.end[0], info.end[1], 0, info.gtid_executed or None, "current end of the binlog")


def _check_saved_available(cfg: SourceConfig, info: ServerInfo, saved: ResumePoint) -> None:
    sizes = dict(info.binlogs)
    sizes[info.end[0]] = info.end[1]
    oldest = min(sizes, key=file_order) if sizes else "none"
    if saved.journal not in sizes:
        if sizes and file_order(saved.journal) > file_order(max(sizes, key=file_order)):
            what = "which is newer than every binlog on the server (was the binlog reset?)"
        else:
            what = "which the server has purged"
        raise SourceError(
            f"{cfg.address}: the saved position {saved} is in {saved.journal}, {what}; the oldest binlog "
            f"still available is {oldest}. Changes in between are lost to the relay: re-snapshot the "
            "tables, then set a new start position (source.start) and remove the saved position"
        )
    if saved.offset > sizes[saved.journal]:
        raise SourceError(
            f"{cfg.address}: the saved position {saved} is past the end of {saved.journal} "
            f"({sizes[saved.journal]} bytes): the binlog was reset or this is another server. "
            "Set a start position for this server explicitly and remove the saved position"
        )


def _check_same_server(cfg: SourceConfig, info: ServerInfo, saved: ResumePoint) -> None:
    src = saved.source
    if src is None:
        return
    mismatch = (src.server_uuid and info.server_uuid and src.server_uuid != info.server_uuid) or (
        src.server_id and info.server_id and src.server_id != info.server_id
    )
    if mismatch:
        raise SourceError(
            f"{cfg.address}: the saved position {saved} belongs to server id {src.server_id} "
            f"{src.server_uuid} at {src.address}, but this server is id {info.server_id} {info.server_uuid}: "
            "a binlog offset means nothing on another server. Set a start position for this server explicitly"
        )
