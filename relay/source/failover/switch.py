"""The failover policy of one instance: where the standby continues, and what of it to drop (``Failover``).

Threads: the instance's parser thread (``record``, ``open_standby``); ``track`` and ``check_master`` at start.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from relay.canal.entry import Entry
from relay.config.sections import SourceConfig
from relay.errors import SourceConnectionError, SourceError, SourceUnavailableError
from relay.positions.store import ResumePoint
from relay.source.binlog_source import BinlogSource
from relay.source.binlog_time import TimeLocation, locate_by_timestamp, uncovered_error
from relay.source.failover.boundaries import EntryFilter, GtidSkip, GtidTracker, SavedBoundary, StartBoundary
from relay.source.failover.config import has_standby, master_config, standby_config
from relay.source.failover.fingerprint import FingerprintSkip
from relay.source.failover.history import HOLD_BYTES, History
from relay.source.server import ServerInfo
from relay.source.start_point import StartPoint, resolve_start

log = logging.getLogger(__name__)


@dataclass
class Switch:
    """A source open on the standby, where to start, and what to drop of what it re-reads."""

    source: BinlogSource
    info: ServerInfo
    start: StartPoint
    drop: EntryFilter


class Failover:
    """The failover policy of one instance (``source.standby`` + ``source.failover``)."""

    def __init__(self, cfg: SourceConfig) -> None:
        self.config = cfg
        self.enabled = has_standby(cfg)
        self.history: History | None = None
        self.gtids: GtidTracker | None = None
        # The master as checked at the start and where reading it started (``track``): where the standby
        # starts when nothing was put from the master's binlog since a start without a saved position.
        self.began: tuple[ServerInfo, StartPoint] | None = None
        # With a schema history, a standby without binlog_row_metadata=FULL is accepted, and ``prepare``
        # (``open_standby``) gives its source the history's tracker before it streams.
        self.accept_schema_history = False
        # How much of a re-read transaction being matched ``FingerprintSkip`` holds (the instance: half
        # the store's budget).
        self.hold_bytes = HOLD_BYTES

    @property
    def recording(self) -> bool:
        return self.history is not None or self.gtids is not None

    def stop_recording(self) -> None:
        """Switched: there is no second failover (from the standby, reconnecting is all there is)."""
        self.history, self.gtids = None, None

    def record(self, entries: list[Entry]) -> None:
        """What was put into the store (parser thread), for a switch later."""
        if self.history is not None:
            self.history.record(entries)
        if self.gtids is not None:
            self.gtids.record(entries)

    def track(self, master: ServerInfo, start: StartPoint) -> None:
        """Start recording what is put: digests where the timestamp fallback may be needed (a master
        without GTIDs), the GTID position on MariaDB."""
        if not self.enabled:
            return
        self.began = (master, start)
        mode = self.config.failover.mode
        if mode == "timestamp" or (mode == "auto" and not master.gtid_executed):
            self.history = History(int(self.config.failover.fallback_interval_seconds * 1000))
        if mode != "timestamp" and master.mariadb:
            self.gtids = GtidTracker(start.gtid_set)

    def check_master(self, source: BinlogSource) -> ServerInfo:
        """Check the master at start; with a standby, ``attempts`` tries, then ``SourceUnavailableError``."""
        if not self.enabled:
            return source.check()
        backoff = master_config(self.config).retry.start()
        while True:
            try:
                return source.check()
            except SourceConnectionError as exc:
                log.warning("master %s: %s (try %d)", self.config.address, exc, backoff.tries + 1)
                if not backoff.wait():
                    raise SourceUnavailableError(
                        f"{self.config.address}: not reachable after {backoff.tries} tries: {exc}"
                    ) from exc

    def on_standby(self, saved: ResumePoint | None) -> bool:
        """True when a saved position was written reading the standby (after an earlier failover)."""
        sb = self.config.standby
        src = saved.source if saved is not None else None
        return self.enabled and src is not None and (src.host, src.port) == (sb.host, sb.port)

    def open_standby(
        self,
        after: ResumePoint | None,
        reason: str,
        *,
        saved_there: bool = False,
        prepare: Callable[[BinlogSource, StartPoint], None] | None = None,
    ) -> Switch:
        """A source on the standby continuing right after ``after`` (the last entry put, or the saved one).

        ``saved_there``: ``after`` is a position saved while reading the standby: resume it exactly.
        ``prepare``: called with the checked source and its start before it streams (the schema history).
        """
        cfg = standby_config(self.config)
        source = BinlogSource(cfg)
        source.accept_schema_history = self.accept_schema_history
        info = source.check()
        drop: EntryFilter
        if saved_there:
            start, drop = resolve_start(cfg, info, after), GtidSkip("", 0)
        else:
            start, drop = self._where(cfg, info, after)
        log.warning("failing over to the standby %s (%s): %s", cfg.address, reason, start.reason)
        try:
            if prepare is not None:
                prepare(source, start)
            source.open(start)
        except BaseException:
            source.close()
            raise
        return Switch(source, info, start, drop)

    def _where(
        self, cfg: SourceConfig, info: ServerInfo, after: ResumePoint | None
    ) -> tuple[StartPoint, EntryFilter]:
        mode = self.config.failover.mode
        if after is None:
            return self._from_start(cfg, info)
        gtid_set = after.gtid_set
        if gtid_set is None and self.gtids is not None:
            gtid_set = self.gtids.position()
        use_gtid = mode == "gtid" or (mode == "auto" and bool(info.gtid_executed) and gtid_set is not None)
        if use_gtid:
            if gtid_set is None:
                raise SourceError(
                    f"{cfg.address}: failover by GTID, but the GTID position after {after} is not known "
                    "(a master without GTIDs, or nothing read yet): set source.failover.mode to auto"
                )
            reason = f"GTID position {gtid_set}" + (
                f", skipping {after.skip} entries of {after.gtid}" if after.skip else ""
            )
            return StartPoint("", 0, 0, gtid_set, reason), GtidSkip(after.gtid, after.skip)
        if self.history is None or not self.history.txns:
            return self._from_saved(cfg, info, after)
        target = after.timestamp - int(self.config.failover.fallback_interval_seconds * 1000)
        # The standby's binlog may begin after the target (purged): then only a match of a transaction
        # put proves it holds everything after it (FingerprintSkip's ``covered``).
        where = self._locate(cfg, info, target)
        journal, offset = where.journal, where.offset
        reason = f"first transaction at or after {target} ms ({journal}:{offset}), dropping what was put"
        if not where.covered:
            reason += f" (the standby's binlog begins after it: {where.oldest})"
        drop = FingerprintSkip(
            self.history, covered=where.covered, address=cfg.address, hold_bytes=self.hold_bytes
        )
        return StartPoint(journal, offset, 0, None, reason), drop

    def _from_saved(
        self, cfg: SourceConfig, info: ServerInfo, after: ResumePoint
    ) -> tuple[StartPoint, EntryFilter]:
        """By timestamp with nothing put from the master's binlog since the relay started from the saved
        position ``after`` (nothing recorded to match): the standby from the point's time minus the
        fallback interval, placed by time alone (``SavedBoundary``), or a stop where it cannot be."""
        if after.timestamp <= 0:
            raise SourceError(
                f"failover to the standby {cfg.address} by timestamp: the relay had put nothing from the "
                f"master's binlog since it started from its saved position {after}, and that position "
                "has no binlog time (it was saved after a snapshot chunk, or set by an operator): its "
                "place on the standby cannot be found by time, and reading from an earlier place would "
                "publish changes again, a later one skip some. Not guessing: switch by GTID (servers "
                "with GTIDs, source.failover.mode auto or gtid), or take a new snapshot on the promoted "
                "standby (stop the relay, set source.host to it, remove the saved position, start with "
                "snapshot.mode when_needed)"
            )
        fallback_ms = int(self.config.failover.fallback_interval_seconds * 1000)
        drop = SavedBoundary(after, fallback_ms, cfg.address)
        journal, offset = self._at_time(cfg, info, drop.since_ms)
        reason = (
            f"first transaction at or after {drop.since_ms} ms ({journal}:{offset}): the relay started from "
            f"its saved position {after} (binlog time {after.timestamp} ms) and put nothing since"
        )
        return StartPoint(journal, offset, 0, None, reason), drop

    def _from_start(self, cfg: SourceConfig, info: ServerInfo) -> tuple[StartPoint, EntryFilter]:
        """Nothing was put from the master's binlog since a start without a saved position (only snapshot
        chunks, or nothing; or the master was unreachable at the start): the standby from the place that
        corresponds to where the relay started on the master (``began``), or would have started
        (``source.start``), never from the standby's end, which would skip what the relay had not read.
        A start that has no such place on the standby stops the relay (``SourceError``)."""
        mode, start = self.config.failover.mode, self.config.start
        began = self.began
        configured = bool(start.gtid or start.journal or start.timestamp is not None)
        if began is None and not configured:
            # Never read, and asked to start at the end: the relay starts now, on the standby.
            reason = "the standby's end (the master was not reachable at the start, no source.start)"
            return StartPoint(info.end[0], info.end[1], 0, None, reason), GtidSkip("", 0)
        at = began[1].reason if began is not None else "source.start"
        gtid_set = began[1].gtid_set if began is not None else (start.gtid or None)
        if mode == "gtid" or (mode == "auto" and bool(info.gtid_executed) and gtid_set is not None):
            if gtid_set is None:
                raise SourceError(
                    f"{cfg.address}: failover by GTID with nothing read from the master's binlog since the "
                    f"relay started ({at}), and that start has no GTID set: set source.start.gtid (or "
                    "source.failover.mode auto on servers without GTIDs)"
                )
            reason = f"GTID position {gtid_set}, where the relay started on the master ({at})"
            return StartPoint("", 0, 0, gtid_set, reason), GtidSkip("", 0)
        if start.gtid or start.journal:
            raise SourceError(
                f"{cfg.address}: failover by timestamp with nothing read from the master's binlog since the "
                f"relay started at a configured place of the master ({at}), which has no time to find it by "
                "on the standby: set source.start.timestamp instead, or switch by GTID (servers with GTIDs)"
            )
        if start.timestamp is not None:
            # The same rule on the standby's copy of the master's binlog: the same first transaction.
            journal, offset = self._at_time(cfg, info, start.timestamp)
            reason = f"first transaction at or after {start.timestamp} ms ({journal}:{offset}), as the start"
            return StartPoint(journal, offset, 0, None, reason), GtidSkip("", 0)
        assert began is not None  # not configured: the master was read from its end
        begun_ms = began[0].now_ms
        target = begun_ms - int(self.config.failover.fallback_interval_seconds * 1000)
        journal, offset = self._at_time(cfg, info, target)
        reason = (
            f"first transaction at or after {target} ms ({journal}:{offset}): the relay started at the "
            f"master's end at {begun_ms} ms and read nothing since"
        )
        return StartPoint(journal, offset, 0, None, reason), StartBoundary(target, begun_ms, cfg.address)

    def _at_time(self, cfg: SourceConfig, info: ServerInfo, target_ms: int) -> tuple[str, int]:
        """The standby's first transaction at or after ``target_ms`` (its end when there is none); a stop
        where its binlog may have lost (purged) transactions at or after the target."""
        where = self._locate(cfg, info, max(0, target_ms))
        if not where.covered:
            raise uncovered_error(cfg, where, max(0, target_ms), FAILOVER_REMEDY)
        return where.journal, where.offset

    def _locate(self, cfg: SourceConfig, info: ServerInfo, target_ms: int) -> TimeLocation:
        """The standby's binlog searched by time (``locate_by_timestamp``; a table in unit tests)."""
        return locate_by_timestamp(cfg, info, max(0, target_ms))


FAILOVER_REMEDY = (
    "switch by GTID (servers with GTIDs, source.failover.mode auto or gtid), or take a new snapshot on "
    "the promoted standby (stop the relay, set source.host to it, remove the saved position, start with "
    "snapshot.mode when_needed)"
)
