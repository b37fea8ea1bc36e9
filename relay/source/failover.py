"""MySQL failover: from the configured master to the configured standby, losing nothing, repeating nothing.

The master's source reconnects ``source.failover.attempts`` times (``source.retry`` backoff); when it
gives up (``SourceUnavailableError``) the canal instance asks ``Failover.open_standby`` for a source on
the standby that continues right after the last entry it put into the ring store:

- by GTID where both servers have GTIDs (``mode: auto`` or ``gtid``): the standby streams from the GTID
  set after the last complete transaction put; a transaction the master left half-read is read again
  whole and its first ``skip`` entries, already put, are dropped (``GtidSkip``) — the same resume rule
  as a saved position, keyed by the transaction's GTID instead of its master file offset;
- otherwise by timestamp (canal's ``fallbackIntervalInSeconds``): from the first transaction at or
  after the last put entry's time minus ``fallback_interval_seconds``, dropping the re-read
  transactions whose row changes match, entry for entry, the ones recently put from the master
  (``History`` + ``FingerprintSkip``, both on the same side of the sink's filters: what was put);
  once a transaction is newer than anything put, or the last one put has been matched, everything
  passes. Where the standby's oldest binlog begins after that time (``locate_by_timestamp``: files
  purged), only a match proves that it holds everything after the last one put: ending the filtering
  without one stops the relay;
- by timestamp with nothing put from the master's binlog since a start from a saved position (a
  restart, then the master died; or it was down at the restart), nothing was recorded to match: the
  standby from the saved point's time minus the fallback interval (``SavedBoundary``: a change within
  the fallback interval either side of that time may precede the point or follow it, and stops the
  relay); a saved point without a binlog time (after a snapshot chunk) stops it at once;
- with nothing put from the master's binlog since a start without a saved position (only snapshot
  chunks, or nothing), where the relay started on the master (``Failover._from_start``): by GTID its
  start's GTID set; by timestamp from the master's clock at the start minus the fallback interval
  (``StartBoundary``: a change that time cannot place before or after the start stops the relay);
  a configured master file and offset has no place on the standby: the relay stops. Never the
  standby's end, which would skip what the relay had not read yet.

A place found by time alone (a start, a saved point with nothing put since) on a standby whose oldest
binlog begins after the target time stops the relay too: what lay between may have been purged.

Generations: the standby's binlog is another history (its file numbers and offsets have nothing to do
with the master's), so the entries read from it carry the generation after the master's
(``CanalInstance``): their sequences sort after everything published from the master. The switch is
deterministic: a restart before a standby entry was acknowledged finds the master's position (its
generation g) and switches again to g + 1; one after finds a position saved on the standby, with g + 1.

So consumers see no change twice from two servers; repeats stay exact re-publications of one server's
records (a rolled-back batch sent again). The instance switches ``source`` only after every entry of
the master has been acknowledged, so a saved position never mixes one server's offsets with another's
identity.

Threads: everything here runs on the instance's parser thread (``History.record`` from ``_put``).
"""

from __future__ import annotations

import hashlib
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

from relay.binlog.gtid import GtidSet
from relay.canal.entry import Entry, EntryPosition, EntryType, RowChange
from relay.config.sections import SourceConfig, StandbyConfig, StartConfig
from relay.errors import SourceConnectionError, SourceError, SourceUnavailableError
from relay.positions.store import ResumePoint
from relay.source.binlog_source import (
    BinlogSource,
    ServerInfo,
    StartPoint,
    TimeLocation,
    locate_by_timestamp,
    resolve_start,
    uncovered_error,
)

log = logging.getLogger(__name__)

MODES = ("auto", "gtid", "timestamp")


class EntryFilter(Protocol):
    """Drops what a new server re-reads that was already put; ``done`` once nothing more can match."""

    done: bool

    def filter(self, entries: list[Entry]) -> list[Entry]: ...


# --- configs ---------------------------------------------------------------------------------------


def has_standby(cfg: SourceConfig) -> bool:
    return bool(cfg.standby.host)


def master_config(cfg: SourceConfig) -> SourceConfig:
    """The master's source config: with a standby, reconnecting gives up after ``failover.attempts``."""
    if not has_standby(cfg):
        return cfg
    return replace(cfg, retry=replace(cfg.retry, max_tries=cfg.failover.attempts))


def standby_config(cfg: SourceConfig) -> SourceConfig:
    sb = cfg.standby
    return replace(
        cfg,
        host=sb.host,
        port=sb.port,
        user=sb.user or cfg.user,
        password=sb.password or cfg.password,
        start=StartConfig(),
        standby=StandbyConfig(),
    )


# --- what was put, for the timestamp fallback -------------------------------------------------------


def digest(entry: Entry) -> bytes:
    """What identifies an entry's change on any server: table, kind, row images, DDL text.

    Positions, server ids and xids differ between a master and its replica; the changes do not.
    """
    h = entry.header
    value = entry.store_value
    parts: list[str] = [str(int(entry.entry_type)), h.schema_name, h.table_name]
    if isinstance(value, RowChange):
        parts += [str(int(value.event_type)), value.sql if value.is_ddl else ""]
        parts += [repr((row.before, row.after)) for row in value.rows]
    return hashlib.blake2b("\x1f".join(parts).encode("utf-8", "surrogateescape"), digest_size=16).digest()


DIGEST = 16  # bytes of one change's digest
# What a re-read transaction being matched may hold before its held changes are let go (module docstring
# of FingerprintSkip): the instance passes half the store's budget.
HOLD_BYTES = 8 << 20


@dataclass(slots=True)
class _Txn:
    """A transaction put: where and when it started, and its changes' digests, back to back (16 bytes
    each: ~64 bytes a change less than a list of ``bytes``, which matters for a large transaction)."""

    start: EntryPosition
    time_ms: int
    digests: bytearray
    closed: bool = False  # its END (or a closing statement) was put: nothing of it comes after

    @property
    def changes(self) -> int:
        return len(self.digests) // DIGEST

    def digest(self, k: int) -> bytes:
        return bytes(self.digests[k * DIGEST : (k + 1) * DIGEST])


class History:
    """The transactions recently put into the store (after the sink's filters), as the digests of their
    changes (ROWDATA entries: rows and statements), covering ``window_ms`` of binlog time: about 250 bytes
    a transaction and 16 a rows event (at most ``max_txns`` transactions)."""

    def __init__(self, window_ms: int, max_txns: int = 200_000) -> None:
        self.window_ms = window_ms
        self.txns: deque[_Txn] = deque(maxlen=max_txns)

    def record(self, entries: list[Entry]) -> None:
        for e in entries:
            last = self.txns[-1] if self.txns else None
            if e.entry_type == EntryType.ROWDATA:
                if last is None or last.start != e.txn.start:
                    last = _Txn(e.txn.start, e.header.execute_time, bytearray())
                    self.txns.append(last)
                last.digests += digest(e)
            # BEGIN/END carry no change (and the sink passes empty ones by its own clock): not compared
            if e.closes_txn and last is not None and last.start == e.txn.start:
                last.closed = True
        newest = self.txns[-1].time_ms if self.txns else 0
        while self.txns and self.txns[0].time_ms < newest - self.window_ms - 1_000:
            self.txns.popleft()


class FingerprintSkip:
    """Drops re-read transactions that match ``history`` entry for entry (see the module docstring).

    Both sides are compared after the sink (``History`` records what was put; the instance filters the
    standby's entries through its sink first), and by their changes only: a transaction touching kept
    and filtered tables looks the same on both servers. The entries of a standby transaction are held
    back while its changes match the start of some recorded transaction. A recorded transaction that
    was put whole (``closed``) is matched only when the standby transaction ends there too (its END, or
    a statement that closes it, comes after the same number of changes): one that goes on past it is
    another transaction. A match drops the held entries; a divergence (or its END coming first) releases
    them — once some recorded transaction has been matched. Before that, a transaction that matches none
    is dropped: the standby's binlog holds the master's transactions in the master's order, so one that
    comes before the copy of every transaction put precedes the first one put — it was published before,
    or precedes where the relay started (its changes are in the snapshot, or were never asked for).
    Binlog times have a resolution of one second, so "older than the oldest recorded" alone does not
    tell such a transaction in the same second apart (a relay that started at the binlog end, e.g. for
    its initial snapshot, under load). The last recorded transaction may be partial (the master died
    inside it, ``closed`` False): matching its recorded entries drops just those, and everything after
    passes (the rest of that transaction included). A transaction older than the oldest one recorded is
    dropped (the same reason). One newer than every recorded one (by binlog time) ends the filtering.

    The held entries of a standby transaction being matched are bounded by ``hold_bytes`` (their
    ``Entry.footprint``): beyond it they are let go (``_discarded`` counts them), since every outcome but
    an improbable one drops them — a full match (the copy of a transaction put whole), or a partial one
    (the master died inside it: what was put is dropped, the rest passes). Should the transaction then
    need them — it differs after matching more than ``hold_bytes`` of changes put, or goes on past a
    partial one it matched beyond that — the relay stops (``SourceError``): which of them were published
    cannot be told any more, and it does not guess.
    """

    def __init__(
        self, history: History, *, covered: bool = True, address: str = "", hold_bytes: int = HOLD_BYTES
    ) -> None:
        self.history = list(history.txns)
        # False: the standby's binlog may have lost (purged) transactions before the first one it holds
        # (``locate_by_timestamp``); only a match proves that it holds the copy of one put and,
        # being gap-free from there, everything after it. Ending the filtering without a match stops
        # the relay (``_finish``): what comes then may follow a gap.
        self.covered, self.address = covered, address
        self.oldest_ms = self.history[0].time_ms if self.history else 0
        # The newest binlog time put, not the last one's: binlog times are statement starts, so one put
        # before the last can be newer (it started later and committed first); its copy must be matched.
        self.newest_ms = max((t.time_ms for t in self.history), default=0)
        self.done = not self.history
        self._current: EntryPosition | None = None
        self._state = "pass"  # of the current standby transaction: match, pass or drop
        self._held: list[Entry] = []
        self.hold_bytes = hold_bytes
        self._held_bytes = 0  # the footprint of ``_held``
        self._discarded = 0  # entries of the current transaction let go before ``_held`` (class docstring)
        self.discards = 0  # transactions whose held entries were let go (tests, logs)
        self._matched = 0  # ROWDATA entries of the current transaction matched so far
        self._finish_next = False  # the last transaction put was matched whole: done at the next one
        self._candidates: list[int] = []
        # A partial (not closed) recorded transaction whose every recorded change the current standby
        # transaction matched: (its index, how many of its entries those are, counted from its start).
        self._partial: tuple[int, int] | None = None
        self._matched_any = False  # some recorded transaction was matched whole (see the docstring)
        self.preceding = 0  # unmatched transactions dropped before the first match (they precede it)

    def filter(self, entries: list[Entry]) -> list[Entry]:
        out: list[Entry] = []
        for e in entries:
            if not self.done and e.txn.start != self._current:
                out += self._begin(e)
            if self._state == "match":
                out += self._match(e) if e.entry_type == EntryType.ROWDATA else self._hold(e)
            elif self._state == "pass":
                out.append(e)
        return out

    def _hold(self, e: Entry) -> list[Entry]:
        """BEGIN (or another entry without a change) of a transaction being matched: held with it; its
        END decides (``_ended``)."""
        self._keep(e)
        return self._ended() if e.closes_txn else []

    def _keep(self, e: Entry) -> None:
        self._held.append(e)
        self._held_bytes += e.footprint
        if self._held_bytes > self.hold_bytes:
            if not self._discarded:
                self.discards += 1
                log.info(
                    "failover: a re-read transaction at %s:%d matches changes put for more than %d bytes; "
                    "its matched changes are let go as they are read (class FingerprintSkip)",
                    e.txn.start.journal, e.txn.start.offset, self.hold_bytes,
                )  # fmt: skip
            self._discarded += len(self._held)
            self._held, self._held_bytes = [], 0

    def _reset(self) -> None:
        self._held, self._held_bytes, self._discarded, self._matched, self._partial = [], 0, 0, 0, None

    def _let_go(self, needed_from: int) -> None:
        """Entries from ``needed_from`` (counted from the transaction's start) must be passed on: stop if
        some of them were let go (class docstring)."""
        if needed_from < self._discarded:
            start = self._current
            where = f"{start.journal}:{start.offset}" if start is not None else "?"
            raise SourceError(
                f"failover to the standby {self.address}: the re-read transaction at {where} matched "
                f"{self._discarded} changes put from the master — more than could be held (half the "
                "store's budget) — and then differed from every transaction put; which of its changes "
                "were published cannot be told any more. Not guessing: switch by GTID (servers with "
                "GTIDs, source.failover.mode auto or gtid), or raise store.memunit so the whole "
                "transaction can be held while it is matched"
            )

    def _unmatched(self, released: list[Entry]) -> list[Entry]:
        """The held entries of a standby transaction that matches no recorded one (and the rest of it):
        new once a recorded transaction was matched; before that, it precedes the first one put."""
        if self._matched_any:
            self._let_go(0)
            self._reset()
            self._state = "pass"
            return released
        self._reset()
        self.preceding += 1
        log.debug("failover: dropped a re-read transaction from before the first one put")
        self._state = "drop"
        return []

    def _begin(self, e: Entry) -> list[Entry]:
        """A new standby transaction; the previous one, if still held, never closed: it matched a partial
        recorded one, or none."""
        released = self._settle([]) if self._held or self._discarded else []
        self._reset()
        self._current = e.txn.start
        t = e.header.execute_time
        if self.done:  # that was the last (partial) transaction put
            pass
        elif self._finish_next:
            self._finish("matched the last transaction put from the master")
        elif t > self.newest_ms:
            self._finish("a transaction newer than every one put from the master")
        elif t < self.oldest_ms:
            self._state = "drop"
        else:
            self._state = "match"
            self._candidates = list(range(len(self.history)))
        return released

    def _match(self, e: Entry) -> list[Entry]:
        k = self._matched
        d = digest(e)
        hist = self.history
        alive = [i for i in self._candidates if k < hist[i].changes and hist[i].digest(k) == d]
        if not alive:  # diverged: it goes on past (or differs from) every recorded transaction
            return self._settle([e])
        self._candidates = alive
        self._keep(e)
        self._matched += 1
        partial = next((i for i in alive if not hist[i].closed and hist[i].changes == self._matched), None)
        if partial is not None:
            self._partial = (partial, self._discarded + len(self._held))
        return self._ended() if e.closes_txn else []

    def _ended(self) -> list[Entry]:
        """The standby transaction closed (its last entry is held): it matches a closed recorded one with
        as many changes, else a partial one it started with, else none."""
        hist = self.history
        full = next(
            (i for i in self._candidates if hist[i].closed and hist[i].changes == self._matched),
            None,
        )
        if full is None:
            return self._settle([])
        log.debug("failover: dropped %d re-read entries already put", self._discarded + len(self._held))
        hist.pop(full)
        self._reset()
        self._state = "drop"
        self._matched_any = True
        if full == len(hist):  # that was the last one put: everything after it is new
            self._finish_next = True
        return []

    def _settle(self, rest: list[Entry]) -> list[Entry]:
        """The held entries (and ``rest`` of the transaction) match no closed recorded transaction: drop
        the changes a partial recorded one had put and pass the rest, or handle them as unmatched."""
        if self._partial is None:
            return self._unmatched([*self._held, *rest])
        index, put = self._partial
        self._let_go(put)
        released = [*self._held[put - self._discarded :], *rest]
        log.debug("failover: dropped %d re-read entries of a transaction put in part", put)
        self.history.pop(index)
        self._reset()
        self._state = "pass"
        self._matched_any = True
        if index == len(self.history):  # the master died inside it: the rest of it is new
            self._finish("matched the last (partial) transaction put from the master")
        return released

    def _finish(self, why: str) -> None:
        if not self.covered and not self._matched_any:
            last = self.history[-1] if self.history else None
            raise SourceError(
                f"failover to the standby {self.address}: its oldest binlog begins after the re-read's "
                "start (the last change put minus source.failover.fallback_interval_seconds), and it "
                f"reached {why} without holding the copy of any transaction put from the master (the "
                f"last one put: binlog time {last.time_ms if last else 0} ms): transactions after it may "
                "have been purged from the standby's binlog. Not guessing: switch by GTID (servers with "
                "GTIDs, source.failover.mode auto or gtid), or take a new snapshot on the promoted "
                "standby (stop the relay, set source.host to it, remove the saved position, start with "
                "snapshot.mode when_needed)"
            )
        self.done, self._state = True, "pass"
        log.info(
            "failover: re-read changes dropped up to here (%s); %d unmatched transaction(s) dropped as "
            "preceding the first one put",
            why,
            self.preceding,
        )


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


# --- switching -------------------------------------------------------------------------------------


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
