"""Snapshots: the existing rows of the captured tables, interleaved with the live binlog by watermarks.

The method is DBLog's / Flink CDC's, with binlog positions as the watermarks (nothing is written to the
source). A reader thread (``snapshot.parallelism`` of them, one connection each) reads a table in
key order, chunk by chunk, with plain SELECTs::

    low  = SHOW MASTER STATUS      (the binlog end before the SELECT)
    rows = SELECT … WHERE key > last ORDER BY key LIMIT chunk_rows
    high = SHOW MASTER STATUS      (the binlog end after it: every change the SELECT saw is below it)

and hands the chunk to the parser thread of the canal instance, which keeps reading the binlog. Once
the parser has read everything up to ``high`` and is at a transaction boundary ``P`` (``P >= high``),
it drops the chunk's rows whose key the binlog changed since the table's previous chunk's ``low``
(``[low_prev, P)``; for the first chunk, since the table's snapshot began) — those keys' current state
comes with that change, which the live stream publishes in full (binlog_row_image=FULL) — and puts the
rest into the store as ONE entry in the binlog's place ``P`` (at ``P - 1``: every earlier change of a
key sorts before the snapshot row, every later one after it). Store, publisher, ack and position save
then treat it like any transaction. A table without a usable key is read whole, in one watermark
window, and read again when the binlog changes it in that window.

The rooms, one job each:

- ``relay.source.snapshot_plan``: which tables a snapshot reads, and the fresh checkpoint naming them;
- ``relay.source.snapshot_readers``: the reader threads (chunks, given keys, a keyless table whole);
- ``relay.source.snapshot_watermarks``: the parser side — watched keys, chunks waiting for their place,
  superseded rows dropped, the checkpoint moved on;
- ``relay.source.snapshot_entry``: a put chunk as a store entry, and its rows' identity;
- ``relay.source.snapshot_checkpoint``: the checkpoint saved with every resume point, so a restart
  continues every table after its last acknowledged key;
- here, ``Snapshot``: the control of one running snapshot — start, stop, cancel, move to the standby
  after a failover (``moved_state``), its failure and its progress (``status``).

Threads: readers (``snapshot-N``) only read the source and wait; ``observe``/``due`` run on the parser
thread; ``start``/``stop``/``cancel`` on the instance's threads; ``status`` anywhere.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from relay.binlog.events import BinlogEvent
from relay.canal.entry import Entry
from relay.config.sections import SnapshotConfig, SourceConfig
from relay.source.snapshot_checkpoint import read_percent
from relay.source.snapshot_readers import Readers
from relay.source.snapshot_watermarks import Pos, Watermarks

log = logging.getLogger(__name__)


class Snapshot:
    """One snapshot run (initial, continued, or on demand) of one canal instance."""

    def __init__(
        self,
        config: SnapshotConfig,
        source: SourceConfig,
        state: dict[str, Any],
        *,
        server_id: int,
        mariadb: bool,
        after: tuple[Pos, int] | None = None,
    ) -> None:
        self.config = config
        self.source = source
        self.cancelled = False
        self._stop = threading.Event()
        self.watermarks = Watermarks(state, server_id=server_id, mariadb=mariadb, after=after)
        self.readers = Readers(config, source, self.watermarks, self._stop)
        self._started = time.monotonic()

    @property
    def state(self) -> dict[str, Any]:
        """The emitted state (moved on by the parser thread), copied into each chunk entry."""
        return self.watermarks.state

    @property
    def skipped(self) -> dict[str, str]:
        """Tables left out (dropped or renamed while read), and why."""
        return self.watermarks.skipped

    @property
    def failure(self) -> BaseException | None:
        """What stopped a reader (and so the snapshot and the relay); None while all is well."""
        return self.readers.failure

    @property
    def done(self) -> bool:
        return bool(self.state.get("done"))

    @property
    def active(self) -> bool:
        """True while chunks may still come (the parser then polls the binlog more often)."""
        return not self.done and self.failure is None and not self._stop.is_set()

    # -- lifecycle (the instance's threads) -------------------------------------------------------
    def start(self, at: tuple[str, int] | None) -> None:
        """Start the readers; ``at``: where the parser starts reading (None: not known yet)."""
        self.watermarks.start_at(at)
        todo = [name for name, t in self.state["tables"].items() if not t["done"]]
        readers = self.readers.start(todo)
        log.info("snapshot %s: %d table(s) to read, %d reader(s)", self.state["id"], len(todo), readers)

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self.readers.join(timeout)

    def moved_state(self) -> dict[str, Any]:
        """The state of what was put, for the same snapshot on another server (after ``stop``): the
        chunks read but not put are dropped (their watermarks are this server's binlog places)."""
        return self.watermarks.moved_state()

    def cancel(self) -> dict[str, Any]:
        """Stop reading; chunks not yet put are dropped. Returns the state to save from now on."""
        self.stop()
        self.cancelled = True
        return self.watermarks.cancel()

    # -- parser thread ----------------------------------------------------------------------------
    def observe(self, event: BinlogEvent, entries: list[Entry]) -> None:
        """Record where the parser is, and the keys of watched tables the event's rows change."""
        self.watermarks.observe(event, entries)

    def due(self, in_transaction: bool, gtid_set: str | None) -> list[Entry]:
        """The chunk entries to put now: those whose ``high`` the parser has reached, at a boundary."""
        return self.watermarks.due(in_transaction, gtid_set)

    # -- status -----------------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        """Progress per table (rows, chunks, estimate, ETA), for the status file and metrics."""
        tables = self.watermarks.tables()
        elapsed = max(1e-3, time.monotonic() - self._started)
        rate = self.readers.rows_read / elapsed
        remaining = 0
        for t in tables.values():
            if not t["done"]:
                remaining += max(0, int(t.get("estimated_rows", 0)) - int(t["rows"]))
        return {
            "id": self.state["id"],
            "done": self.done,
            "cancelled": self.cancelled,
            "failure": None if self.failure is None else str(self.failure),
            "tables": tables,
            "skipped": dict(self.skipped),
            "rows": sum(int(t["rows"]) for t in tables.values()),
            "rows_per_second": round(rate, 1),
            "percent": round(read_percent({"done": self.done, "tables": tables}), 1),
            "eta_seconds": None if self.done or rate <= 0 else round(remaining / rate, 1),
        }
