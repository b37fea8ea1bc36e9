"""Transaction metadata (``kafka.transaction_topic``): the BEGIN and END records of each source transaction
that published rows, and the transaction headers of its data records.

Owned here: ``TransactionMeta``, which follows the entries of a batch as the record encoder turns them into
records and (1) gives every data record of a source transaction its transaction id and order — the headers
``relay.txn.id``, ``relay.txn.order`` (its position among the transaction's data records, from 1) and
``relay.txn.table_order`` (among the transaction's data records of its logical table, from 1), and in
debezium-json the envelope's ``transaction`` block; (2) puts a BEGIN record before the transaction's first
data record; (3) makes the END record once the entry closing the transaction is seen — the caller
(``relay.daemon.txn_topic``) sends it only after every record up to it was acknowledged by Kafka.

The shape is Debezium's transaction metadata (Debezium documentation, "Transaction metadata" of its
connectors: a transaction boundary event has ``status`` BEGIN/END, ``id`` the string form of the
transaction id, ``ts_ms`` the time of the boundary at the source, ``event_count`` (END: the number of events
the transaction emitted, null on BEGIN) and ``data_collections`` (END: an array of ``{data_collection,
event_count}`` pairs, null on BEGIN); a data event's ``transaction`` block has ``id``, ``total_order`` (its
absolute position among the transaction's events) and ``data_collection_order`` (its position among the
events of its data collection)). Beside them ours: ``source_id``, ``first_sequence``/``first_part`` and (on
END) ``last_sequence``/``last_part``: the range of change identities (``relay.kafka.sequences``) of the
transaction's data records, ``position``, the binlog ``file:offset`` where the transaction starts, and (on
END) ``topics``: ``{topic, event_count}`` pairs, the data records per Kafka topic — what a consumer reading
some of the topics (the Spark mirror's consistent cuts, ``relay.spark.holdback``) counts to know it holds
all of a transaction's records in its topics (null for a transaction resumed from a saved state that did
not count them).

The transaction id is its GTID where the server has one (MySQL ``uuid:n``, MariaDB ``domain-server-n``),
else ``file:offset`` of its first event (BEGIN). A data collection is the LOGICAL ``db.table``. Records are
keyed by the source id (``source.id``), so a source's BEGIN/END records are in one partition, in order.

What counts: every record of a row change (INSERT/UPDATE/DELETE) the mapping publishes — both records of a
key change, each DELETE but not the tombstone after it (a tombstone has no value and no transaction
headers, as Debezium's). Snapshot reads carry no transaction metadata and make no BEGIN/END (as Debezium:
a snapshot is not a source transaction), nor do DDL statements; a transaction whose every row the mapping
drops produces nothing.

The state of the transaction open at a batch's end (``OpenTxn``) travels in the resume point saved after
that batch (``ResumePoint.extra["transaction"]``), so a restart in the middle of a transaction continues its
counts and orders where the acknowledged records left them (``relay.daemon.txn_topic``).

Runs on the publisher thread; pure apart from the state it keeps.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

from relay.canal.entry import Entry, EntryType, EventType, RowChange
from relay.kafka.headers import H_DB, H_PART, H_SEQUENCE, H_SOURCE_ID, H_TABLE, text
from relay.kafka.records import Record
from relay.source.snapshot_entry import SNAPSHOT_PROP, SnapshotEntry

log = logging.getLogger(__name__)

H_TXN_ID = "relay.txn.id"
H_TXN_ORDER = "relay.txn.order"
H_TXN_TABLE_ORDER = "relay.txn.table_order"
H_TXN_STATUS = "relay.txn.status"  # on the transaction topic's records: BEGIN or END
EXTRA_KEY = "transaction"  # the resume point's ``extra`` key of the open transaction's state

_ROW_TYPES = frozenset({EventType.INSERT, EventType.UPDATE, EventType.DELETE})
_SNAPSHOT_MARK = (SNAPSHOT_PROP, "true")
_NULL_BLOCK = b',"transaction":null}'


@dataclass
class OpenTxn:
    """The source transaction being published: where it starts, its id, and what it published so far."""

    journal: str
    offset: int
    generation: int
    id: str
    ts_ms: int  # the time of its first event at the source
    begun: bool = False  # its BEGIN record is made (a data record was published)
    total: int = 0
    tables: dict[str, int] = field(default_factory=dict)  # logical db.table → data records, first seen first
    first: tuple[int, int] | None = None  # (sequence, part) of its first data record
    last: tuple[int, int] | None = None
    # Kafka topic → data records, first seen first; None: not counted whole (resumed from a state without it)
    topics: dict[str, int] | None = field(default_factory=dict)

    def same(self, entry: Entry) -> bool:
        start = entry.txn.start
        return (
            self.offset == start.offset
            and self.journal == start.journal
            and self.generation == entry.generation
        )

    def copy(self) -> OpenTxn:
        return OpenTxn(
            self.journal, self.offset, self.generation, self.id, self.ts_ms,
            self.begun, self.total, dict(self.tables), self.first, self.last,
            None if self.topics is None else dict(self.topics),
        )  # fmt: skip

    def to_extra(self) -> dict[str, Any]:
        """The state as the resume point keeps it (JSON)."""
        return {
            "journal": self.journal,
            "offset": self.offset,
            "generation": self.generation,
            "id": self.id,
            "ts_ms": self.ts_ms,
            "begun": self.begun,
            "total": self.total,
            "tables": dict(self.tables),
            "first": None if self.first is None else list(self.first),
            "last": None if self.last is None else list(self.last),
            "topics": None if self.topics is None else dict(self.topics),
        }

    @classmethod
    def from_extra(cls, data: Any) -> OpenTxn | None:
        """The state saved by ``to_extra``; None when ``data`` is not one (a point saved without it)."""
        try:
            first, last = data["first"], data["last"]
            # A state saved before topics were counted: its earlier records' topics are unknown.
            topics = data.get("topics", None if int(data["total"]) else {})
            return cls(
                str(data["journal"]),
                int(data["offset"]),
                int(data["generation"]),
                str(data["id"]),
                int(data["ts_ms"]),
                bool(data["begun"]),
                int(data["total"]),
                {str(k): int(v) for k, v in dict(data["tables"]).items()},
                None if first is None else (int(first[0]), int(first[1])),
                None if last is None else (int(last[0]), int(last[1])),
                None if topics is None else {str(k): int(v) for k, v in dict(topics).items()},
            )
        except (KeyError, TypeError, ValueError, IndexError):
            return None


def transaction_id(entry: Entry) -> str:
    """The GTID of the entry's transaction, else ``file:offset`` of its first event."""
    txn = entry.txn
    return txn.gtid or f"{txn.start.journal}:{txn.start.offset}"


def _identity(record: Record) -> tuple[int, int] | None:
    seq = None
    part = 0
    for name, value in record.headers:
        if name == H_SEQUENCE:
            seq = int(value)
        elif name == H_PART:
            part = int(value)
    return None if seq is None else (seq, part)


def _table(record: Record) -> str:
    db = table = b""
    for name, value in record.headers:
        if name == H_DB:
            db = value
        elif name == H_TABLE:
            table = value
            break
    return (db + b"." + table).decode("utf-8", "surrogateescape")


def debezium_block(txn_id: str, total_order: int, table_order: int) -> bytes:
    """The debezium-json envelope's ``transaction`` block."""
    return b'{"id":%s,"total_order":%d,"data_collection_order":%d}' % (
        json.dumps(txn_id).encode(),
        total_order,
        table_order,
    )


def with_block(value: bytes, block: bytes) -> bytes:
    """A debezium-json value with its ``"transaction":null`` (the envelope's last field, see
    ``relay.kafka.debezium_json.envelope``) replaced by ``block``; other values unchanged."""
    at = value.rfind(_NULL_BLOCK)
    if at < 0:
        return value
    return b'%s,"transaction":%s}%s' % (value[:at], block, value[at + len(_NULL_BLOCK) :])


def boundary_value(txn: OpenTxn, status: str, source_id: str, ts_ms: int) -> bytes:
    """A BEGIN or END record's value (see the module docstring)."""
    end = status == "END"
    value: dict[str, Any] = {
        "status": status,
        "id": txn.id,
        "ts_ms": ts_ms,
        "event_count": txn.total if end else None,
        "data_collections": (
            [{"data_collection": name, "event_count": n} for name, n in txn.tables.items()] if end else None
        ),
        "source_id": source_id,
        "position": f"{txn.journal}:{txn.offset}",
        "first_sequence": None if txn.first is None else txn.first[0],
        "first_part": None if txn.first is None else txn.first[1],
        "last_sequence": None if txn.last is None or not end else txn.last[0],
        "last_part": None if txn.last is None or not end else txn.last[1],
    }
    if end:
        counted = txn.topics
        value["topics"] = (
            None if counted is None else [{"topic": name, "event_count": n} for name, n in counted.items()]
        )
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogateescape")


class TransactionMeta:
    """Follows the entries of the batches sent, in order (see the module docstring). ``debezium(db, table)``
    tells whether a physical table's records are debezium-json (their envelope gets the block)."""

    def __init__(self, topic: str, source_id: str) -> None:
        self.topic = topic
        self.source_id = source_id
        self._key = text(source_id)
        self.open: OpenTxn | None = None
        # The start (journal, offset, generation) of a transaction the relay resumed in the middle of
        # without its state: its records get no transaction metadata (it could not be counted whole).
        self.unaccounted: tuple[str, int, int] | None = None

    def follow(
        self, entry: Entry, records: list[Record], debezium: bool
    ) -> tuple[list[Record], Record | None]:
        """The records of ``entry`` with their transaction headers (and the BEGIN record before the
        transaction's first data record), and the END record when ``entry`` closes a transaction that
        published data records (else None). A snapshot chunk is no part of any transaction: unchanged."""
        if isinstance(entry, SnapshotEntry):
            return records, None
        txn = self.open
        if txn is None or not txn.same(entry):
            if txn is not None and txn.begun:
                log.warning(
                    "transaction %s (%s:%d) ended without its closing event; no END record for it",
                    txn.id,
                    txn.journal,
                    txn.offset,
                )
            txn = self.open = self._start(entry)
        if txn is not None and records and _counted(entry):
            records = self._annotate(txn, entry, records, debezium)
        if not entry.closes_txn:
            return records, None
        self.open = None
        if txn is None or not txn.begun:
            return records, None
        end = Record(
            self.topic,
            None,
            self._key,
            boundary_value(txn, "END", self.source_id, entry.header.execute_time),
            self._headers(txn, b"END"),
        )
        return records, end

    def _start(self, entry: Entry) -> OpenTxn | None:
        start = entry.txn.start
        if self.unaccounted == (start.journal, start.offset, entry.generation):
            return None
        self.unaccounted = None
        # the time of the first entry seen of it: its BEGIN (or, resumed without state, none is published)
        ts_ms = entry.header.execute_time
        return OpenTxn(start.journal, start.offset, entry.generation, transaction_id(entry), ts_ms)

    def _headers(self, txn: OpenTxn, status: bytes) -> tuple[tuple[str, bytes], ...]:
        return ((H_SOURCE_ID, self._key), (H_TXN_ID, text(txn.id)), (H_TXN_STATUS, status))

    def _annotate(self, txn: OpenTxn, entry: Entry, records: list[Record], debezium: bool) -> list[Record]:
        out: list[Record] = []
        txn_id = text(txn.id)
        for record in records:
            value = record.value
            if value is None:  # a tombstone: not an event of the transaction
                out.append(record)
                continue
            name = _table(record)
            txn.total += 1
            order = txn.tables[name] = txn.tables.get(name, 0) + 1
            if txn.topics is not None:
                txn.topics[record.topic] = txn.topics.get(record.topic, 0) + 1
            ident = _identity(record)
            if not txn.begun:
                txn.begun = True
                txn.first = ident
                begin = boundary_value(txn, "BEGIN", self.source_id, txn.ts_ms)
                out.append(Record(self.topic, None, self._key, begin, self._headers(txn, b"BEGIN")))
            txn.last = ident
            if debezium:
                value = with_block(value, debezium_block(txn.id, txn.total, order))
            headers = (
                *record.headers,
                (H_TXN_ID, txn_id),
                (H_TXN_ORDER, b"%d" % txn.total),
                (H_TXN_TABLE_ORDER, b"%d" % order),
            )
            out.append(Record(record.topic, record.partition, record.key, value, headers))
        return out


def _counted(entry: Entry) -> bool:
    """Whether the entry's records are data records of its transaction (a row change, not a snapshot read)."""
    rc = entry.store_value
    if entry.entry_type != EntryType.ROWDATA or not isinstance(rc, RowChange) or rc.is_ddl:
        return False
    if rc.event_type not in _ROW_TYPES:
        return False
    return not (rc.props and _SNAPSHOT_MARK in rc.props)
