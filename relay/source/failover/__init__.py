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

The package: ``config`` (the master's and the standby's source configs), ``history`` (what was put, as
digests), ``fingerprint`` (``FingerprintSkip``, the state machine of the timestamp fallback: see its
module docstring and docs/architecture.md), ``boundaries`` (the GTID skip and the time-only boundaries),
``switch`` (``Failover``: where the standby continues).

Threads: everything here runs on the instance's parser thread (``History.record`` from ``_put``).
"""

from __future__ import annotations

from relay.source.failover.boundaries import EntryFilter, GtidSkip, GtidTracker, SavedBoundary, StartBoundary
from relay.source.failover.config import MODES, has_standby, master_config, standby_config
from relay.source.failover.fingerprint import Event, FingerprintSkip, State
from relay.source.failover.history import DIGEST, HOLD_BYTES, History, digest
from relay.source.failover.switch import FAILOVER_REMEDY, Failover, Switch

__all__ = [
    "DIGEST",
    "FAILOVER_REMEDY",
    "HOLD_BYTES",
    "MODES",
    "EntryFilter",
    "Event",
    "Failover",
    "FingerprintSkip",
    "GtidSkip",
    "GtidTracker",
    "History",
    "SavedBoundary",
    "StartBoundary",
    "State",
    "Switch",
    "digest",
    "has_standby",
    "master_config",
    "standby_config",
]
