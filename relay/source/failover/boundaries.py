"""What a new server re-reads that was already put, dropped without fingerprints: by GTID (``GtidSkip``)
and by time alone (``StartBoundary``, ``SavedBoundary``); and the MariaDB GTID position put so far.

Threads: the instance's parser thread.
"""

from __future__ import annotations

import logging
from typing import Protocol

from relay.binlog.gtid import GtidSet
from relay.canal.entry import Entry, EntryPosition, EntryType
from relay.errors import SourceError
from relay.positions.store import ResumePoint

log = logging.getLogger(__name__)


class EntryFilter(Protocol):
    """Drops what a new server re-reads that was already put; ``done`` once nothing more can match."""

    done: bool

    def filter(self, entries: list[Entry]) -> list[Entry]: ...


class StartBoundary:
    """The timestamp fallback when nothing was put from the master's binlog since the relay started at
    its end (no saved position; only snapshot chunks put, or nothing): there is no transaction put to
    find the start by (``FingerprintSkip`` of nothing recorded would pass everything re-read, the
    transactions before the start included), only the master's clock when the start was taken,
    ``start_ms`` (``ServerInfo.now_ms``, read after the binlog end). The standby is re-read from
    ``since_ms`` (``start_ms`` minus ``fallback_interval_seconds``); its transactions, after the sink:

    - one whose binlog time is in a later second than ``start_ms`` ended after the start (a transaction
      before the start committed before the clock was read, and its binlog time is not later than its
      commit): from it on, everything passes (``done``);
    - one older than ``since_ms`` ended before the start (no transaction runs longer than the fallback
      interval, the timestamp fallback's assumption): dropped, like the transactions before it;
    - one with a change in between may lie before or after the start, and time cannot tell: the relay
      stops (``SourceError``) rather than drop a change it never published or publish one from before
      its start (which would sort after its snapshot rows). Entries without a change (an empty
      transaction the sink passes) are dropped.
    """

    place = "the start"  # what the standby is re-read to find (errors, logs)

    def __init__(self, since_ms: int, start_ms: int, address: str) -> None:
        self.since_ms, self.start_ms, self.address = since_ms, start_ms, address
        self.done = False
        self._current: EntryPosition | None = None
        self._older = False  # the current standby transaction is older than since_ms
        self.preceding = 0  # transactions dropped as older than since_ms

    def filter(self, entries: list[Entry]) -> list[Entry]:
        out: list[Entry] = []
        for e in entries:
            if not self.done and e.txn.start != self._current:
                self._current = e.txn.start
                t = e.header.execute_time
                if t // 1000 > self.start_ms // 1000:
                    self.done = True
                    log.info(
                        "failover: the first transaction after %s (binlog time %d ms, later than %d ms); "
                        "%d older transaction(s) dropped",
                        self.place,
                        t,
                        self.start_ms,
                        self.preceding,
                    )
                else:
                    self._older = t < self.since_ms
                    self.preceding += self._older
            if self.done:
                out.append(e)
            elif e.entry_type == EntryType.ROWDATA and not self._older:
                h = e.header
                raise SourceError(
                    f"failover to the standby {self.address}: {self.situation()}, "
                    f"and the standby holds a change of {h.schema_name}.{h.table_name} at binlog time "
                    f"{h.execute_time} ms ({h.logfile_name}:{h.logfile_offset}), between {self.since_ms} "
                    f"and {self.start_ms} ms (source.failover.fallback_interval_seconds): it may precede "
                    f"{self.place} or follow it, and without GTIDs its place cannot be told by time. "
                    "Not guessing: "
                    "switch by GTID (servers with GTIDs, source.failover.mode auto or gtid), or take a new "
                    "snapshot on the promoted standby (stop the relay, set source.host to it, remove the "
                    "saved position, start with snapshot.mode when_needed)"
                )
        return out

    def situation(self) -> str:
        return (
            "the relay had read nothing from the master's binlog since it started at its end (master "
            f"clock {self.start_ms} ms, no saved position)"
        )


class SavedBoundary(StartBoundary):
    """The timestamp fallback when nothing was put from the master's binlog since the relay started from
    a saved position (a restart, then the master died before anything more was put; or the master was
    down at the restart): ``FingerprintSkip`` has nothing recorded to find the saved point by, so it
    would pass everything re-read, and the last ``fallback_interval_seconds`` before the point would
    be published again under the next generation (new identities that sort after the originals and
    after snapshot rows of the same keys). What is known is the saved point's binlog time ``T`` (the
    last entry published, whole seconds). A binlog time is taken when a statement starts, before its
    commit, and the binlog is in commit order, so times are not monotonic; with the timestamp
    fallback's assumption (no transaction runs longer than the fallback interval ``F``), the last
    transaction published committed in ``[T, T + F]``:

    - one that follows the saved point committed after it: its time is at least ``T - F``, so one older
      than ``T - F`` precedes the point (it was published): dropped;
    - one that precedes it committed before it: its time is at most ``T + F``, so one in a later second
      than ``T + F`` follows the point: from it on, everything passes;
    - one with a change in between may precede the point or follow it (even in ``T``'s second): the
      relay stops (``SourceError``) rather than drop a change never published or publish one again.

    This is ``StartBoundary``'s rule with ``[T - F, T + F]`` for the start's ``[start - F, start]``.
    """

    place = "the saved position"

    def __init__(self, saved: ResumePoint, fallback_ms: int, address: str) -> None:
        super().__init__(saved.timestamp - fallback_ms, saved.timestamp + fallback_ms, address)
        self.saved = saved

    def situation(self) -> str:
        return (
            "the relay had put nothing from the master's binlog since it started from its saved position "
            f"({self.saved}, binlog time {self.saved.timestamp} ms)"
        )


class GtidSkip:
    """Drops the first ``skip`` entries of the transaction ``gtid``: they were put before the switch."""

    def __init__(self, gtid: str, skip: int) -> None:
        self.gtid, self.skip = gtid, skip
        self.done = skip == 0 or not gtid

    def filter(self, entries: list[Entry]) -> list[Entry]:
        if self.done:
            return entries
        kept = []
        for e in entries:
            if not self.done:
                if e.txn.gtid != self.gtid:
                    self.done = True  # the standby started at this transaction: a later one is new
                elif e.txn_index < self.skip:
                    continue
            kept.append(e)
        return kept


class GtidTracker:
    """MariaDB's GTID position (the last GTID of each domain) after the transactions put so far.

    The entry builder knows the executed set only when it started from one; MariaDB's position is just
    the last GTID per domain, so the transactions put since the start give it (every domain that
    appears). MySQL needs the whole executed set: there only ``ResumePoint.gtid_set`` serves.
    """

    def __init__(self, start: str | None) -> None:
        self.gtids = GtidSet.parse(start or "", mariadb=True)

    def record(self, entries: list[Entry]) -> None:
        for e in entries:
            if e.closes_txn and e.txn.gtid:
                self.gtids.add(e.txn.gtid)

    def position(self) -> str | None:
        return str(self.gtids) or None
