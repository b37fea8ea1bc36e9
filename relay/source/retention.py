"""Retention runway: how long until the server's binlog expiry could purge the file holding our position.

Owned here: reading the server's expiry settings and the times of its binlog files, and the runway
arithmetic. Called from the metrics exporter's HTTP thread (``relay.daemon.metrics``), at most once per
``metrics.server_check_seconds``; it hands back a ``Retention`` value.

The method (MySQL 8 and MariaDB purge the same way, by file modification time): a binlog file is
purged automatically once its last write is older than the expiry period; the file being written is
never purged. The last write of a closed file is its rotation, and the rotation is when the *next*
file was created — the timestamp of that file's first event (its FORMAT_DESCRIPTION event, read with a
short replication dump from offset 4). So, for the file holding the saved position::

    runway = (first event time of the next file) + expiry − now        (a closed file)
    runway = expiry                                                     (the current file: a lower bound)
    runway = +inf                                                       (no automatic expiry)

Expiry: ``binlog_expire_logs_seconds`` when it is non-zero (MySQL ≥ 8.0, MariaDB ≥ 10.6; MySQL uses it in
preference to ``expire_logs_days`` when both are set), else ``expire_logs_days`` × 86400; 0 means never;
MySQL's ``binlog_expire_logs_auto_purge=OFF`` (8.0.29+) means never too. Expiry is checked by the
server at startup and at each log rotation, so the runway is when the purge *may* happen, at the earliest.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass
from typing import Any

import pymysql

from relay.binlog.events import HeartbeatEvent
from relay.binlog.stream import BinlogStream, StreamConfig
from relay.common import mysql
from relay.config.sections import SourceConfig
from relay.errors import SourceError

log = logging.getLogger(__name__)

_PROBE_ID_OFFSET = 1_000_000  # the probe's replica server id: ours + this (a dump with our own id would
#                               make the server drop the relay's running dump connection)


@dataclass(frozen=True)
class Retention:
    expire_seconds: float  # 0: the server never purges by age
    journal: str  # the binlog file holding the position
    file_time: float | None  # its last write (s since the epoch); None while it is the current file
    present: bool = True  # False: the file is no longer on the server (already purged)

    def runway(self, now: float | None = None) -> float:
        """Seconds until the file may be purged: +inf without expiry, 0 when already gone or due."""
        if not self.present:
            return 0.0
        if self.expire_seconds <= 0:
            return math.inf
        if self.file_time is None:
            return self.expire_seconds
        now = time.time() if now is None else now
        return max(0.0, self.file_time + self.expire_seconds - now)


def expire_seconds(variables: dict[str, str]) -> float:
    """The server's expiry period in seconds from its global variables (0: never)."""
    if variables.get("binlog_expire_logs_auto_purge", "ON").upper() in ("OFF", "0"):
        return 0.0
    seconds = float(variables.get("binlog_expire_logs_seconds") or 0)
    if seconds > 0:
        return seconds
    return float(variables.get("expire_logs_days") or 0) * 86_400.0


class RetentionProbe:
    """Reads expiry settings and binlog file times; file times are cached (a closed file's never change)."""

    def __init__(self, source: SourceConfig) -> None:
        self.source = source
        self._created: dict[str, float] = {}
        self._lock = threading.Lock()

    def check(self, journal: str) -> Retention:
        variables, files = self._server_state()
        expire = expire_seconds(variables)
        if journal not in files:
            return Retention(expire, journal, None, present=False)
        i = files.index(journal)
        if i == len(files) - 1:
            return Retention(expire, journal, None)
        return Retention(expire, journal, self.created(files[i + 1]))

    def _server_state(self) -> tuple[dict[str, str], list[str]]:
        cfg = self.source
        conn = mysql.connect(
            cfg.host,
            cfg.port,
            cfg.user,
            cfg.password,
            tls=cfg.tls,
            connect_timeout=cfg.connect_timeout,
            read_timeout=cfg.read_timeout,
        )
        try:
            with conn.cursor() as cur:
                cur.execute(
                    "SHOW GLOBAL VARIABLES WHERE Variable_name IN "
                    "('binlog_expire_logs_seconds', 'expire_logs_days', 'binlog_expire_logs_auto_purge')"
                )
                variables = {str(k).lower(): str(v) for k, v in cur.fetchall()}
                cur.execute("SHOW BINARY LOGS")
                files = [str(row[0]) for row in cur.fetchall()]
            return variables, files
        except pymysql.err.MySQLError as exc:
            raise SourceError(f"{cfg.address}: reading the binlog expiry settings failed: {exc}") from exc
        finally:
            conn.close()

    def created(self, journal: str) -> float:
        """When ``journal`` was created: the timestamp of its first real event (cached)."""
        with self._lock:
            if journal in self._created:
                return self._created[journal]
        stamp = self._first_event_time(journal)
        with self._lock:
            self._created[journal] = stamp
        return stamp

    def _first_event_time(self, journal: str) -> float:
        cfg = self.source
        config = StreamConfig(
            host=cfg.host,
            port=cfg.port,
            user=cfg.user,
            password=cfg.password,
            server_id=(cfg.server_id + _PROBE_ID_OFFSET) % 2**32 or 1,
            heartbeat_seconds=cfg.heartbeat_seconds,
            connect_timeout=cfg.connect_timeout,
            read_timeout=cfg.read_timeout,
            tls=cfg.tls,
        )
        with BinlogStream(config) as stream:
            stream.open_at(journal, 4)
            deadline = time.monotonic() + cfg.read_timeout
            while time.monotonic() < deadline:
                event: Any = stream.read(timeout=max(0.1, deadline - time.monotonic()))
                if event is None:
                    break
                h = event.header
                if isinstance(event, HeartbeatEvent) or h.artificial or not h.timestamp:
                    continue
                log.debug("binlog %s was created at %d", journal, h.timestamp)
                return float(h.timestamp)
        raise SourceError(f"{cfg.address}: no event at the start of {journal} to date it by")
