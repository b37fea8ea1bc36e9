"""XA transactions: published when they commit, never when they are only prepared, never when rolled back.

The server writes an XA transaction's rows at XA PREPARE — MariaDB: a GTID event flagged
FL_PREPARED_XA (no XA START query), the rows, ``XA END``, an XA_PREPARE_LOG event; MySQL: ``XA START``,
the rows, ``XA END``, XA_PREPARE_LOG — and the decision later, as a statement of its own
(``XA COMMIT xid`` / ``XA ROLLBACK xid``), possibly much later and after other transactions. ``XA COMMIT
… ONE PHASE`` is written as a normal transaction (MariaDB) or with XA_PREPARE's one-phase flag set
(MySQL): published where it is.

``XaBuffer.process(event, entries)`` runs on the parser thread right after the entry builder. It takes
a prepared transaction's entries out of the stream and keeps them (in memory, at most
``source.xa_buffer_bytes`` for all of them together, weighed by their decoded size ``Entry.footprint``
and counted from the first entry read, so one XA transaction larger than the cap is refused while it is
read, not after: ``XaBufferFullError`` beyond, fail closed); at its
XA COMMIT it puts them back into the stream just before the XA COMMIT entry, in the XA COMMIT's
transaction (renumbered from its ``txn_index``), so they are published in commit order; at XA ROLLBACK
it drops them. Released entries keep their own headers — the rows events' binlog positions — so their
records' sequences are the same every time they are published, unique, and order the changes of a key
correctly: a prepared transaction holds its row locks until it is decided, so no other transaction
changes those rows between its PREPARE and its COMMIT.

Nothing is written to disk. Instead every entry that leaves carries ``xa_hold``, the start of the
oldest prepared transaction still undecided (``relay.positions.store.resume_after`` saves it): a
restart reads again from there, buffers the prepared transactions again and drops what was already
published. The cost: a restart re-reads the binlog from the oldest undecided PREPARE (re-read time, and
the binlog there must not be purged), and memory for the prepared transactions' entries.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from relay.binlog.events import BinlogEvent, GtidEvent, RowsEvent, XaPrepareEvent, XidEvent
from relay.canal.entry import Entry, EntryType, EventType, RowChange, TransactionBegin, TxnContext
from relay.common import binlog_names
from relay.errors import XaBufferFullError

log = logging.getLogger(__name__)

XA_TYPE = "XA_TYPE"  # canal's props, as the entry builder writes them
XA_XID = "XA_XID"


def normalize_xid(text: str) -> str:
    """One spelling per XID: ``'a','b',1``, ``X'61',X'62',1`` and ``0x61,0x62,1`` are the same.

    The server logs XIDs as ``X'hex',X'hex',format_id``; a trailing ``ONE PHASE`` is dropped."""
    parts: list[str] = []
    rest = text.strip()
    if rest.upper().endswith("ONE PHASE"):
        rest = rest[: -len("ONE PHASE")].strip()
    for raw in _split_commas(rest):
        item = raw.strip()
        if item[:2].upper() == "X'" and item.endswith("'"):
            parts.append(item[2:-1].lower())
        elif item[:2].lower() == "0x":
            parts.append(item[2:].lower())
        elif len(item) >= 2 and item[0] == item[-1] and item[0] in "'\"":
            parts.append(item[1:-1].replace(item[0] * 2, item[0]).encode("utf-8", "surrogateescape").hex())
        else:
            parts.append(item)
    while len(parts) < 3:
        parts.append("" if len(parts) == 1 else "1")
    return f"X'{parts[0]}',X'{parts[1]}',{parts[2]}"


def _split_commas(text: str) -> list[str]:
    out: list[str] = []
    cur: list[str] = []
    quote = ""
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == ",":
            out.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    out.append("".join(cur))
    return out


def _props(entry: Entry) -> list[tuple[str, str]]:
    value = entry.store_value
    if isinstance(value, (RowChange, TransactionBegin)):
        return value.props
    return []


def _xa_type(entry: Entry) -> str:
    return next((v for k, v in _props(entry) if k == XA_TYPE), "")


def _xid(entry: Entry) -> str:
    return normalize_xid(next((v for k, v in _props(entry) if k == XA_XID), ""))


def _order(ctx: TxnContext) -> tuple[int, int]:
    return binlog_names.file_number(ctx.start.journal) or 0, ctx.start.offset


@dataclass(slots=True)
class _Prepared:
    xid: str
    ctx: TxnContext  # where the prepared transaction starts: a restart reads from here
    entries: list[Entry]
    size: int


class XaBuffer:
    """Holds prepared XA transactions until their decision. Not thread-safe: the parser thread only."""

    def __init__(self, limit_bytes: int) -> None:
        self.limit = limit_bytes
        self._next_is_xa = False  # MariaDB: the GTID event just seen opens an XA transaction
        self._collecting: list[Entry] | None = None  # the XA transaction being read, up to XA END
        self._ended: list[Entry] | None = None  # read through XA END, waiting for its XA_PREPARE
        self._prepared: dict[str, _Prepared] = {}  # by XID, in prepare (= binlog) order
        self._bytes = 0  # of the prepared transactions
        self._reading = 0  # of the XA transaction being read (collecting, or ended and not yet prepared)
        # A released transaction whose XA COMMIT's own transaction is still open: (that transaction,
        # the released one's context, how many entries were inserted into it).
        self._releasing: tuple[TxnContext, TxnContext, int] | None = None

    @property
    def prepared(self) -> list[str]:
        """XIDs prepared and not yet decided, oldest first."""
        return list(self._prepared)

    @property
    def held_bytes(self) -> int:
        return self._bytes + self._reading

    def process(self, event: BinlogEvent, entries: list[Entry]) -> list[Entry]:
        """The entries that go on, given the entries the builder made of ``event``."""
        idle = self._collecting is None and not self._prepared and self._releasing is None
        if idle and isinstance(event, (RowsEvent, XidEvent)):
            return entries  # the hot path: nothing to hold, nothing to stamp
        if isinstance(event, GtidEvent):
            self._next_is_xa = event.xa_prepared
        elif not entries and not isinstance(event, XaPrepareEvent):
            return entries  # TABLE_MAP, heartbeats, ROTATE …
        out: list[Entry] = []
        for entry in entries:
            self._route(entry, out)
        if isinstance(event, XaPrepareEvent):
            out.extend(self._on_prepare(event))
        return out

    # -- routing ---------------------------------------------------------------------------------
    def _route(self, entry: Entry, out: list[Entry]) -> None:
        collecting = self._collecting
        if collecting is not None:
            if entry.txn is collecting[0].txn:
                collecting.append(entry)
                self._hold(entry)
                if entry.entry_type == EntryType.TRANSACTIONEND:
                    self._ended, self._collecting = collecting, None
                return
            # The builder abandoned it (a GTID inside it): it never reached its PREPARE.
            log.warning("XA transaction at %s:%d was never prepared; dropped", *_where(collecting[0]))
            self._collecting, self._reading = None, 0
        if entry.entry_type == EntryType.TRANSACTIONBEGIN and (
            self._next_is_xa or _xa_type(entry) == "XA START"
        ):
            self._next_is_xa = False
            self._collecting, self._reading = [entry], 0
            self._hold(entry)
            return
        value = entry.store_value
        if isinstance(value, RowChange) and value.event_type in (EventType.XACOMMIT, EventType.XAROLLBACK):
            self._decide(entry, value.event_type == EventType.XACOMMIT, out)
            return
        self._emit(entry, out)

    def _hold(self, entry: Entry) -> None:
        """Count an entry of the XA transaction being read against the cap, as it is read."""
        self._reading += entry.footprint
        if self._bytes + self._reading > self.limit:
            first = (self._collecting or self._ended or [entry])[0]
            raise XaBufferFullError(
                f"{entry.header.logfile_name}:{entry.header.logfile_offset}: the XA transaction read from "
                f"{first.header.logfile_name}:{first.header.logfile_offset} holds {self._reading} bytes "
                f"of changes in memory so far and the prepared, undecided ones {self._bytes}: more than "
                f"source.xa_buffer_bytes ({self.limit}) together. XA transactions are published only when "
                "committed, so their changes are held until then and the relay stops here (nothing past "
                "this point is acknowledged). Raise source.xa_buffer_bytes, or commit / roll back the "
                "prepared transactions (XA RECOVER lists them)"
                + (f"; undecided: {', '.join(self._prepared)}" if self._prepared else "")
            )

    def _emit(self, entry: Entry, out: list[Entry]) -> None:
        releasing = self._releasing
        if releasing is not None and entry.txn is releasing[0]:
            entry.txn_index += releasing[2]
            if entry.closes_txn:  # acknowledged, it moves the position past the XA COMMIT
                self._releasing = None
                entry.xa_hold = self._oldest()
            else:
                entry.xa_hold = self._oldest(releasing[1])
        elif self._prepared:
            entry.xa_hold = self._oldest()
        out.append(entry)

    def _oldest(self, extra: TxnContext | None = None) -> TxnContext | None:
        held = [p.ctx for p in self._prepared.values()]
        if extra is not None:
            held.append(extra)
        return min(held, key=_order) if held else None

    # -- PREPARE, COMMIT, ROLLBACK ---------------------------------------------------------------
    def _on_prepare(self, event: XaPrepareEvent) -> list[Entry]:
        ended, self._ended = self._ended, None
        size, self._reading = self._reading, 0
        if ended is None:
            return []  # reading started between its XA END and its XA_PREPARE: it was handled before
        if event.one_phase:
            out: list[Entry] = []
            for entry in ended:
                self._emit(entry, out)
            return out  # XA COMMIT … ONE PHASE (MySQL): committed where it stands
        xid = normalize_xid(event.xid)
        if xid in self._prepared:
            log.warning("XA %s prepared again before a decision was seen; keeping the newer one", xid)
            self._bytes -= self._prepared.pop(xid).size
        self._prepared[xid] = _Prepared(xid, ended[0].txn, ended, size)
        self._bytes += size
        if self._bytes > self.limit:
            raise XaBufferFullError(
                f"{event.header.log_file}:{event.header.start}: XA transactions prepared and not yet "
                f"decided hold {self._bytes} bytes of changes, more than source.xa_buffer_bytes "
                f"({self.limit}); undecided: {', '.join(self._prepared)}. They are published only when "
                "committed, so the relay stops here (nothing past this point is acknowledged). Raise "
                "source.xa_buffer_bytes, or commit / roll back those transactions (XA RECOVER lists them)"
            )
        log.info("XA %s prepared at %s:%d; held until its decision", xid, *_where(ended[0]))
        return []

    def _decide(self, decision: Entry, commit: bool, out: list[Entry]) -> None:
        xid = _xid(decision)
        prepared = self._prepared.pop(xid, None)
        if prepared is None:
            log.warning(
                "XA %s %s at %s:%d, but its PREPARE was not read (before the start position?): "
                "none of its changes are published",
                "COMMIT" if commit else "ROLLBACK", xid, *_where(decision),
            )  # fmt: skip
            self._emit(decision, out)
            return
        self._bytes -= prepared.size
        if not commit:
            log.info("XA %s rolled back at %s:%d; its prepared changes are dropped", xid, *_where(decision))
            self._emit(decision, out)
            return
        released = [e for e in prepared.entries if e.entry_type != EntryType.TRANSACTIONEND]
        hold = self._oldest(prepared.ctx)  # until the XA COMMIT's transaction closes
        base = decision.txn_index
        for i, entry in enumerate(released):
            out.append(replace(entry, txn=decision.txn, txn_index=base + i, closes_txn=False, xa_hold=hold))
        self._releasing = (decision.txn, prepared.ctx, len(released))
        self._emit(decision, out)


def _where(entry: Entry) -> tuple[str, int]:
    return entry.header.logfile_name, entry.header.logfile_offset
