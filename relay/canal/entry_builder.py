"""Decoded binlog events → canal Entries (what canal's ``LogEventConvert`` does), transaction by transaction.

``EntryBuilder.build(event)`` is called once per event in binlog order, on the parser thread, and
returns the entries that event makes (usually one, often none); they go to the sink next.

- TRANSACTIONBEGIN: MySQL's ``BEGIN`` query (the GTID event before it is where the transaction
  starts); on MariaDB a GTID event that is not standalone (MariaDB writes no BEGIN). ``XA START``
  opens an XA transaction the same way, with canal's ``XA_TYPE`` / ``XA_XID`` props.
- ROWDATA: one entry per rows event, rows kept as decoded (``RowChange.row_datas()`` builds columns).
- TRANSACTIONEND: the XID event, or a ``COMMIT`` query (non-transactional engines; transaction id
  "0" as canal), or ``ROLLBACK`` (the server logs it when a transaction that touched a
  non-transactional table rolls back; canal has no case for it, but the transaction is over and its
  non-transactional changes stay applied). ``XA END`` ends the prepared part of an XA transaction,
  as canal does; the XA_PREPARE event after it makes no entry (if one comes while a transaction is
  still open, it ends it). ``XA COMMIT`` / ``XA ROLLBACK`` are statements of their own: a ROWDATA
  entry of type XACOMMIT / XAROLLBACK, as canal. (Holding the prepared part back until XA COMMIT, and
  dropping it at XA ROLLBACK, is the next stage's job: ``relay.canal.xa``.)
- Any other statement: a ROWDATA entry classified by ``relay.canal.ddl`` (``isDdl`` on every type but
  QUERY, canal's rule). Outside a transaction it is a transaction of its own (from its GTID event, or
  itself), ``closes_txn`` set.

Every entry of a transaction shares one ``TxnContext`` (start = the transaction's first event, its
GTID, the executed GTID set before it when known) and is numbered by ``txn_index`` from 0 (BEGIN).
The numbering depends only on the events, so reading a transaction again from its start gives the
same indexes: ``relay.positions.store.resume_after`` and the source's skip rely on that.

Header props: ``curtGtid`` on every entry of a transaction with a GTID, ``rowsCount`` on row entries.
canal's ``curtGtidSn`` / ``curtGtidLct`` (MySQL's logical-clock sequence number and last_committed)
are not written: the decoded GTID event does not carry them. The header's ``gtid`` is the
transaction's GTID (canal writes the executed GTID set there; ours travels in ``TxnContext``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from relay.binlog.events import (
    DELETE,
    INSERT,
    UPDATE,
    BinlogEvent,
    GtidEvent,
    GtidSetEvent,
    QueryEvent,
    RowsEvent,
    XaPrepareEvent,
    XidEvent,
)
from relay.binlog.gtid import GtidSet
from relay.canal.ddl import classify
from relay.canal.entry import (
    Entry,
    EntryPosition,
    EntryType,
    EventType,
    Header,
    RowChange,
    TransactionBegin,
    TransactionEnd,
    TxnContext,
)

log = logging.getLogger(__name__)

_ROW_TYPES = {INSERT: EventType.INSERT, UPDATE: EventType.UPDATE, DELETE: EventType.DELETE}
_NONE = EventType.EVENTTYPECOMPATIBLEPROTO2  # canal leaves the header's eventType unset on BEGIN/END
XA_TYPE = "XA_TYPE"
XA_XID = "XA_XID"
_XA_START, _XA_END, _XA_COMMIT, _XA_ROLLBACK = "XA START", "XA END", "XA COMMIT", "XA ROLLBACK"


@dataclass(frozen=True)
class BuilderConfig:
    """``mariadb``: the server flavour (GTID syntax, BEGIN-less transactions). ``gtid_set``: the
    executed GTID set before the first event the builder will see, or None when unknown."""

    mariadb: bool = False
    gtid_set: str | None = None


@dataclass(init=False, slots=True)
class _Txn:
    ctx: TxnContext
    next_index: int = 0
    opened_by_gtid: bool = False  # MariaDB: the GTID event made the BEGIN

    def __init__(self, ctx: TxnContext, next_index: int = 0, opened_by_gtid: bool = False) -> None:
        self.ctx = ctx
        self.next_index = next_index
        self.opened_by_gtid = opened_by_gtid


def _position(event: BinlogEvent, gtid: str = "") -> EntryPosition:
    h = event.header
    return EntryPosition(h.log_file, h.start, h.server_id, gtid, h.timestamp * 1000)


def _xa_query(sql: str) -> tuple[str, str] | None:
    """(XA keyword, xid text) when ``sql`` is an XA statement canal turns into entries."""
    head = sql.lstrip()
    upper = head[:12].upper()
    for kind in (_XA_START, _XA_END, _XA_COMMIT, _XA_ROLLBACK):
        if upper.startswith(kind):
            return kind, head[len(kind) :].strip()
    return None


class EntryBuilder:
    """Turns one source's decoded events into canal entries. Not thread-safe: one parser thread."""

    def __init__(self, config: BuilderConfig) -> None:
        self.config = config
        self._gtids = GtidSet.parse(config.gtid_set, config.mariadb) if config.gtid_set is not None else None
        self._gtid_text = str(self._gtids) if self._gtids is not None else None
        self._txn: _Txn | None = None
        self._pending: EntryPosition | None = None  # a GTID event whose transaction has not opened yet
        # The event being built: its ordinal and own size inside a transaction payload (-1: not in one).
        self._payload_index, self._inner_size = -1, 0

    @property
    def gtid_set(self) -> str | None:
        """The executed GTID set after the last closed transaction, when known."""
        if self._gtids is None:
            return None
        if self._gtid_text is None:
            self._gtid_text = str(self._gtids)
        return self._gtid_text

    @property
    def in_transaction(self) -> bool:
        return self._txn is not None

    @property
    def transaction_start(self) -> EntryPosition | None:
        """Where the open transaction starts (its first event), or None outside one."""
        return self._txn.ctx.start if self._txn is not None else None

    def build(self, event: BinlogEvent) -> list[Entry]:
        """The entries ``event`` makes, in order. Events the relay has no use for make none."""
        h = event.header
        self._payload_index, self._inner_size = h.payload_index, h.inner_size
        if isinstance(event, RowsEvent):  # the hot path first
            return self._on_rows(event)
        if isinstance(event, QueryEvent):
            return self._on_query(event)
        if isinstance(event, XidEvent):
            return self._on_xid(event)
        if isinstance(event, GtidEvent):
            return self._on_gtid(event)
        if isinstance(event, GtidSetEvent):
            return self._on_gtid_set(event)
        if isinstance(event, XaPrepareEvent):
            return self._on_xa_prepare(event)
        return []  # heartbeats, FORMAT_DESCRIPTION, ROTATE, TABLE_MAP, OtherEvent

    # -- transactions ------------------------------------------------------------------------------
    def _open(self, first: BinlogEvent, by_gtid: bool = False) -> _Txn:
        if self._txn is not None:
            log.warning(
                "transaction starting at %s:%d was never closed; a new one starts at %s:%d",
                self._txn.ctx.start.journal,
                self._txn.ctx.start.offset,
                first.header.log_file,
                first.header.start,
            )
        start = self._pending or _position(first)
        self._pending = None
        ctx = TxnContext(
            start=start, gtid=start.gtid, gtid_set_before=self.gtid_set, mariadb=self.config.mariadb
        )
        self._txn = _Txn(ctx, opened_by_gtid=by_gtid)
        return self._txn

    def _close(self) -> None:
        txn, self._txn = self._txn, None
        if txn is not None and txn.ctx.gtid and self._gtids is not None:
            self._gtids.add(txn.ctx.gtid)
            self._gtid_text = None

    def _entry(
        self,
        txn: _Txn,
        header: Header,
        entry_type: EntryType,
        value: RowChange | TransactionBegin | TransactionEnd,
        closes: bool = False,
    ) -> Entry:
        entry = Entry(header, entry_type, value, txn.ctx, txn.next_index, closes)
        if self._payload_index >= 0:  # an event of a transaction payload (MySQL binlog compression)
            entry.payload_index, entry.inner_size = self._payload_index, self._inner_size
        txn.next_index += 1
        if closes:
            self._close()
        return entry

    def _header(
        self, event: BinlogEvent, gtid: str, event_type: EventType = _NONE, schema: str = "", table: str = ""
    ) -> Header:
        h = event.header
        # Positional: three headers per single-row transaction, and keywords cost more per call.
        return Header(
            h.log_file,  # logfile_name
            h.start,  # logfile_offset
            h.server_id,  # server_id
            h.timestamp * 1000,  # execute_time
            h.event_size,  # event_length
            event_type,
            schema,  # schema_name
            table,  # table_name
            gtid,
            [("curtGtid", gtid)] if gtid else [],  # props
        )

    def _begin(
        self, event: BinlogEvent, thread_id: int, props: list[tuple[str, str]], by_gtid: bool
    ) -> Entry:
        txn = self._open(event, by_gtid)
        value = TransactionBegin(execute_time=event.header.timestamp * 1000, thread_id=thread_id, props=props)
        return self._entry(txn, self._header(event, txn.ctx.gtid), EntryType.TRANSACTIONBEGIN, value)

    def _end(self, event: BinlogEvent, transaction_id: str, props: list[tuple[str, str]]) -> Entry:
        txn = self._txn or self._open(event)  # an END with no BEGIN seen: a transaction of its own
        value = TransactionEnd(transaction_id=transaction_id, props=props)
        return self._entry(
            txn, self._header(event, txn.ctx.gtid), EntryType.TRANSACTIONEND, value, closes=True
        )

    # -- events ----------------------------------------------------------------------------------
    def _on_gtid(self, event: GtidEvent) -> list[Entry]:
        if self._txn is not None:
            # Not executed to its end as far as we saw: drop it without recording its GTID.
            log.warning("GTID %s arrives inside an open transaction; abandoning that one", event.gtid)
            self._txn = None
        self._pending = _position(event, event.gtid)
        if event.mariadb and not event.standalone:
            return [self._begin(event, 0, [], by_gtid=True)]
        return []

    def _on_gtid_set(self, event: GtidSetEvent) -> list[Entry]:
        # PREVIOUS_GTIDS / GTID_LIST head every binlog file: the set executed before it. The
        # artificial one a server may send on connect describes the connection, not a position.
        if event.header.artificial or self._txn is not None or event.mariadb != self.config.mariadb:
            return []
        self._gtids = _parse_gtid_list(event.gtid_set, event.mariadb)
        self._gtid_text = None
        return []

    def _on_rows(self, event: RowsEvent) -> list[Entry]:
        txn = self._txn
        if txn is None:
            log.warning(
                "rows event at %s:%d outside a transaction", event.header.log_file, event.header.start
            )
            txn = self._open(event)
        table = event.table
        event_type = _ROW_TYPES[event.kind]
        header = self._header(event, txn.ctx.gtid, event_type, table.schema, table.table)
        if event.rows:
            header.props.append(("rowsCount", str(len(event.rows))))
        value = RowChange(
            event_type=event_type, table_id=table.table_id, columns=table.columns, rows=event.rows
        )
        return [self._entry(txn, header, EntryType.ROWDATA, value)]

    def _on_xid(self, event: XidEvent) -> list[Entry]:
        return [self._end(event, str(event.xid), [])]

    def _on_xa_prepare(self, event: XaPrepareEvent) -> list[Entry]:
        if self._txn is None:
            return []  # the transaction already ended at XA END
        return [self._end(event, "0", [(XA_TYPE, "XA PREPARE"), (XA_XID, event.xid)])]

    def _on_query(self, event: QueryEvent) -> list[Entry]:
        sql = event.sql
        word = sql.strip().upper() if len(sql) < 16 else ""
        if word == "BEGIN":
            if self._begun_by_gtid():
                return []
            return [self._begin(event, event.thread_id, [], by_gtid=False)]
        if word in ("COMMIT", "ROLLBACK"):
            return [self._end(event, "0", [])]
        xa = _xa_query(sql)
        if xa is not None:
            return self._on_xa(event, *xa)
        return [self._statement(event)]

    def _begun_by_gtid(self) -> bool:
        """True right after a MariaDB GTID event made the BEGIN: a BEGIN / XA START query that
        follows belongs to the same transaction and must not open another one."""
        txn = self._txn
        return txn is not None and txn.opened_by_gtid and txn.next_index == 1

    def _on_xa(self, event: QueryEvent, kind: str, xid: str) -> list[Entry]:
        props = [(XA_TYPE, kind), (XA_XID, xid)]
        if kind == _XA_START:
            if self._begun_by_gtid():
                return []
            return [self._begin(event, event.thread_id, props, by_gtid=False)]
        if kind == _XA_END:
            return [self._end(event, "0", props)]
        event_type = EventType.XACOMMIT if kind == _XA_COMMIT else EventType.XAROLLBACK
        value = RowChange(event_type=event_type, sql=event.sql, props=props)
        return [self._statement_entry(event, value, "", "")]

    def _statement(self, event: QueryEvent) -> Entry:
        info = classify(event.sql, event.schema)
        value = RowChange(
            event_type=info.event_type,
            is_ddl=info.is_ddl,
            sql=event.sql,
            ddl_schema_name=event.schema,
            table_changes=event.table_changes,
        )
        return self._statement_entry(event, value, info.schema, info.table)

    def _statement_entry(self, event: QueryEvent, value: RowChange, schema: str, table: str) -> Entry:
        """A statement inside the open transaction, or a transaction of its own."""
        own = self._txn is None
        txn = self._txn or self._open(event)
        header = self._header(event, txn.ctx.gtid, value.event_type, schema, table)
        return self._entry(txn, header, EntryType.ROWDATA, value, closes=own)


def _parse_gtid_list(text: str, mariadb: bool) -> GtidSet:
    """A GTID set from PREVIOUS_GTIDS / GTID_LIST text. MariaDB's list may name several server ids in
    one domain; the highest sequence number is the domain's position."""
    if not mariadb:
        return GtidSet.parse(text, False)
    out = GtidSet(mariadb=True)
    for part in "".join(text.split()).split(","):
        if not part:
            continue
        one = GtidSet.parse(part, True)
        for domain, (server, seq) in one.domains.items():
            have = out.domains.get(domain)
            if have is None or seq > have[1]:
                out.domains[domain] = (server, seq)
    return out
