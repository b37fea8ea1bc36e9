"""canal's EntryEventSink: table filters and empty-transaction trimming between the builder and the store.

``Sink.process(entries)`` runs on the parser thread right after ``EntryBuilder.build`` and returns
what goes into the ring store.

Filters (canal's ``canal.instance.filter.regex`` / ``filter.black.regex``): comma-separated Perl-style
regexes over ``schema.table``, each matched against the WHOLE name and case-insensitively (canal
anchors every pattern with ``^…$``, lower-cases the name and compiles case-insensitive). Blank items
are ignored and surrounding spaces trimmed. An empty include filter keeps everything, an empty black
filter drops nothing. The black list applies after the include list. Every ROWDATA entry is matched
by its header's ``schema.table``, as canal's sink does — so an entry that names no table (CREATE /
DROP DATABASE, GRANT, XA COMMIT …) is matched as ``schema.`` (the schema, a dot, nothing): ``.*\\..*``
or ``shop_\\d+\\..*`` keep ``CREATE DATABASE shop_01``, a table-specific filter such as ``test.t1``
drops it. A RENAME is kept when its source or its target is included, and dropped by the black
list only when both are black (canal's parser rule); of a multi-table RENAME the first pair counts.

Empty transactions: a transaction whose row entries were all filtered out would still put its BEGIN
and END into the store. As canal, those are dropped, except that an empty transaction passes whole
(BEGIN + END) when more than ``empty_transaction_threshold`` empty ones in a row were dropped, or when
its END comes more than ``empty_transaction_interval_ms`` of binlog time after the last END that went
out: the saved position then keeps moving through long stretches of filtered-out traffic, and a
restart does not re-read all of it. One difference from canal, whose clock and counter restart only
when an EMPTY transaction is let through: here any END that goes out restarts them, since that END
already moved the position — so an empty transaction right after real traffic is not let through
needlessly. Binlog time, not wall-clock time (as canal), so a re-read decides the same way.

At the binlog end those rules alone would leave the saved position behind the last stretch of
filtered-out traffic (up to the interval, or the threshold, of empty transactions) until something
else happens — a busy uncaptured table then ends with hours of binlog re-read at a restart, or a lag
that reads seconds too high. So the last empty transaction dropped is kept (``holds_dropped``), and
``pass_dropped`` hands it out whole when the parser finds itself at the binlog end (``relay.source
.parser``): only while nothing went out after it, so binlog order holds; its END is then the batch's ack
point like any END, and the position saved after it follows the publish path's ordering (acked only once
every earlier batch is, in exactly-once mode inside the Kafka transaction). That decision depends on
when the parser waits, not on binlog time, so a re-read may pass other empty transactions: harmless, as
they make no record and a failover's matching never compares BEGIN/END (``relay.source.failover``).

``last_seen_ms`` is the binlog time of the last entry processed, kept or dropped: the source time the
relay has read up to (heartbeats report it, ``relay.daemon.heartbeats``).

Only a transaction's BEGIN is held back, until its first kept entry (then it goes out first) or its
END (then the transaction was empty); nothing else is buffered, however large the transaction.
"""

from __future__ import annotations

import logging
import re

from relay.canal.ddl import classify
from relay.canal.entry import Entry, EntryType, EventType, RowChange
from relay.config.sections import SinkConfig, compile_filter

log = logging.getLogger(__name__)

_CACHE_LIMIT = 100_000  # distinct schema.table names remembered per filter


class NameFilter:
    """One canal regex filter over ``schema.table`` names."""

    def __init__(self, key: str, text: str, empty_value: bool) -> None:
        self.text = text
        self.empty_value = empty_value
        self.patterns: list[re.Pattern[str]] = compile_filter(text, key)
        self._cache: dict[str, bool] = {}

    @property
    def empty(self) -> bool:
        return not self.patterns

    def matches(self, name: str) -> bool:
        if not self.patterns:
            return self.empty_value
        hit = self._cache.get(name)
        if hit is None:
            hit = any(p.fullmatch(name) for p in self.patterns)
            if len(self._cache) >= _CACHE_LIMIT:
                self._cache.clear()
            self._cache[name] = hit
        return hit


class Sink:
    """Filters one instance's entries. Not thread-safe: the parser thread alone calls ``process``."""

    def __init__(self, config: SinkConfig) -> None:
        self.config = config
        self.include = NameFilter("sink.filter", config.filter, empty_value=True)
        self.exclude = NameFilter("sink.black_filter", config.black_filter, empty_value=False)
        self._pending_begin: Entry | None = None
        self._empty_count = 0  # empty transactions trimmed since an END last went out
        self._last_end_time = 0  # binlog ms of the last END that went out
        # The last empty transaction dropped (BEGIN, END) while nothing went out after it: ``pass_dropped``
        self._dropped_pair: tuple[Entry, Entry] | None = None
        self.dropped = 0  # entries dropped so far (filtered rows and trimmed BEGIN/END)
        self.last_seen_ms = 0  # binlog time of the last entry processed, kept or dropped

    def process(self, entries: list[Entry]) -> list[Entry]:
        out: list[Entry] = []
        if entries:
            self.last_seen_ms = max(self.last_seen_ms, entries[-1].header.execute_time)
        for entry in entries:
            kind = entry.entry_type
            if kind == EntryType.ROWDATA:
                self._on_row(entry, out)
            elif kind == EntryType.TRANSACTIONBEGIN:
                self._on_begin(entry)
            elif kind == EntryType.TRANSACTIONEND:
                self._on_end(entry, out)
            else:
                self._dropped_pair = None  # something after it went out: it may no longer follow
                out.append(entry)
        return out

    @property
    def holds_dropped(self) -> bool:
        """An empty transaction was dropped and nothing went out after it."""
        return self._dropped_pair is not None

    def pass_dropped(self) -> list[Entry]:
        """The last empty transaction dropped (BEGIN, END), when nothing went out after it, else []:
        the parser at the binlog end puts it, so the saved position reaches the end of filtered-out
        traffic. The empty-transaction clock starts again, as for any END that goes out."""
        pair, self._dropped_pair = self._dropped_pair, None
        if pair is None:
            return []
        self.dropped -= 2  # counted as trimmed when dropped: it goes out after all
        self._empty_count = 0
        self._last_end_time = pair[1].header.execute_time
        return [pair[0], pair[1]]

    def forget_dropped(self) -> None:
        """Entries that do not come from ``process`` (snapshot chunks) were put after the dropped
        transaction: passing it now would put it after them, out of binlog order."""
        self._dropped_pair = None

    # -- filters -----------------------------------------------------------------------------------
    def _passes(self, name: str) -> tuple[bool, bool]:
        return self.include.matches(name), self.exclude.matches(name)

    def keeps_table(self, schema: str, table: str) -> bool:
        """Whether the filters keep the changes of ``schema.table``."""
        included, black = self._passes(f"{schema}.{table}")
        return included and not black

    def keeps(self, entry: Entry) -> bool:
        """Whether the filters keep this ROWDATA entry."""
        if self.include.empty and self.exclude.empty:
            return True
        h = entry.header
        included, black = self._passes(f"{h.schema_name}.{h.table_name}")
        value = entry.store_value
        if isinstance(value, RowChange) and value.is_ddl and value.event_type == EventType.RENAME:
            info = classify(value.sql, value.ddl_schema_name)
            if info.old_table:
                old_included, old_black = self._passes(f"{info.old_schema}.{info.old_table}")
                included, black = included or old_included, black and old_black
        return included and not black

    # -- transactions ------------------------------------------------------------------------------
    def _on_row(self, entry: Entry, out: list[Entry]) -> None:
        if not self.keeps(entry):
            self.dropped += 1
            log.debug(
                "filtered out %s.%s at %s:%d",
                entry.header.schema_name,
                entry.header.table_name,
                entry.header.logfile_name,
                entry.header.logfile_offset,
            )
            return
        if self._pending_begin is not None:
            out.append(self._pending_begin)
            self._pending_begin = None
        self._dropped_pair = None
        out.append(entry)

    def _on_begin(self, entry: Entry) -> None:
        if self._pending_begin is not None:
            # The builder abandoned that transaction (no END will come): nothing of it was kept.
            self.dropped += 1
        self._pending_begin = entry

    def _on_end(self, entry: Entry, out: list[Entry]) -> None:
        begin, self._pending_begin = self._pending_begin, None
        if begin is not None:  # nothing of the transaction was kept: it is empty
            if self.config.filter_empty_transactions and not self._let_empty_through(entry):
                self.dropped += 2
                self._dropped_pair = (begin, entry)
                return
            out.append(begin)
        self._dropped_pair = None
        out.append(entry)
        # The saved position can move up to here now: the empty-transaction clock starts again.
        self._empty_count = 0
        self._last_end_time = entry.header.execute_time

    def _let_empty_through(self, end: Entry) -> bool:
        """canal's rule: pass an empty transaction when the interval has elapsed or the count is hit."""
        now = end.header.execute_time
        if abs(now - self._last_end_time) > self.config.empty_transaction_interval_ms:
            return True
        self._empty_count += 1
        return self._empty_count > self.config.empty_transaction_threshold
