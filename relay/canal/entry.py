"""canal's protocol model (``com.alibaba.otter.canal.protocol``) as Python values.

These are what the entry builder produces, the ring store holds and the server hands out. They map
field for field onto canal's ``Entry`` / ``Header`` / ``RowChange`` / ``Column`` messages; the wire form
(our own ``.proto`` files, compatible with canal's) is made on demand by ``relay.canal.proto.convert``.

A ROWDATA entry keeps its rows as the decoder produced them (column metadata plus one tuple of
canal-text values per row image) and builds ``Column`` objects only when asked (``RowChange.row_datas``):
the per-row hot path never pays for objects nobody reads.

Each entry also carries relay-side context that never goes on the wire: the transaction it belongs
to (``txn``), its ordinal inside that transaction (``txn_index``), from which the resume point
of an acknowledged prefix is computed (``relay.positions.store.resume_after``), and the generation of
the binlog history it was read in (``generation``, the top bits of its records' sequences).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

from mypy_extensions import mypyc_attr

from relay.binlog.events import ColumnMeta, RowImage

# ``Entry.footprint``'s constants, fitted by least squares to tracemalloc's count of decoded entries
# (relay bench's tables): the objects of an entry (Entry, Header and its props, the value object and
# its lists), a row image (its RowImage and the tuple's header), a value (a ``str`` header and its slot).
ENTRY_FOOTPRINT = 700
IMAGE_FOOTPRINT = 120
VALUE_FOOTPRINT = 56


class EntryType(IntEnum):
    ENTRYTYPECOMPATIBLEPROTO2 = 0
    TRANSACTIONBEGIN = 1
    ROWDATA = 2
    TRANSACTIONEND = 3
    HEARTBEAT = 4
    GTIDLOG = 5


class EventType(IntEnum):
    EVENTTYPECOMPATIBLEPROTO2 = 0
    INSERT = 1
    UPDATE = 2
    DELETE = 3
    CREATE = 4
    ALTER = 5
    ERASE = 6
    QUERY = 7
    TRUNCATE = 8
    RENAME = 9
    CINDEX = 10
    DINDEX = 11
    GTID = 12
    XACOMMIT = 13
    XAROLLBACK = 14
    MHEARTBEAT = 15


class SourceType(IntEnum):
    TYPECOMPATIBLEPROTO2 = 0
    ORACLE = 1
    MYSQL = 2
    PGSQL = 3


# canal's CanalEntry.EventType isDdl(): the types that change a table's definition.
DDL_EVENT_TYPES = frozenset(
    {
        EventType.CREATE,
        EventType.ALTER,
        EventType.ERASE,
        EventType.RENAME,
        EventType.TRUNCATE,
        EventType.CINDEX,
        EventType.DINDEX,
    }
)


# EntryPosition, TxnContext: values (equal and hashed by their fields, never changed once built); not
# ``frozen``, because a frozen dataclass cannot have the explicit ``__init__`` that mypyc compiles (its
# generated one stays interpreted: ~400 ns against ~50 ns, and one of each is built per transaction).
@dataclass(init=False, slots=True, unsafe_hash=True)
class EntryPosition:
    """Where an entry sits in the source's binlog (canal's ``EntryPosition``).

    ``offset`` is the event's START offset in ``journal``; ``timestamp`` is the binlog time in ms.
    """

    journal: str
    offset: int
    server_id: int = 0
    gtid: str = ""
    timestamp: int = 0

    def __init__(
        self, journal: str, offset: int, server_id: int = 0, gtid: str = "", timestamp: int = 0
    ) -> None:
        self.journal = journal
        self.offset = offset
        self.server_id = server_id
        self.gtid = gtid
        self.timestamp = timestamp


@dataclass(init=False, slots=True, unsafe_hash=True)
class TxnContext:
    """What every entry of one transaction shares: where the transaction starts and its GTID.

    ``start`` is the first event of the transaction (MySQL: its GTID event, or BEGIN without GTIDs;
    MariaDB: its GTID event): reading again from there yields the whole transaction.
    ``gtid_set_before`` is the executed GTID set just before it, where known.
    """

    start: EntryPosition
    gtid: str = ""
    gtid_set_before: str | None = None
    mariadb: bool = False

    def __init__(
        self, start: EntryPosition, gtid: str = "", gtid_set_before: str | None = None, mariadb: bool = False
    ) -> None:
        self.start = start
        self.gtid = gtid
        self.gtid_set_before = gtid_set_before
        self.mariadb = mariadb


@dataclass(init=False, slots=True)
class Header:
    logfile_name: str
    logfile_offset: int
    server_id: int
    execute_time: int  # ms
    event_length: int
    event_type: EventType = EventType.QUERY
    schema_name: str = ""
    table_name: str = ""
    gtid: str = ""
    props: list[tuple[str, str]] = field(default_factory=list)
    version: int = 1
    serveren_code: str = "UTF-8"
    source_type: SourceType = SourceType.MYSQL

    def __init__(
        self,
        logfile_name: str,
        logfile_offset: int,
        server_id: int,
        execute_time: int,
        event_length: int,
        event_type: EventType = EventType.QUERY,
        schema_name: str = "",
        table_name: str = "",
        gtid: str = "",
        props: list[tuple[str, str]] | None = None,
        version: int = 1,
        serveren_code: str = "UTF-8",
        source_type: SourceType = SourceType.MYSQL,
    ) -> None:
        self.logfile_name = logfile_name
        self.logfile_offset = logfile_offset
        self.server_id = server_id
        self.execute_time = execute_time
        self.event_length = event_length
        self.event_type = event_type
        self.schema_name = schema_name
        self.table_name = table_name
        self.gtid = gtid
        self.props = [] if props is None else props
        self.version = version
        self.serveren_code = serveren_code
        self.source_type = source_type


@dataclass(slots=True)
class Column:
    index: int
    sql_type: int
    name: str
    is_key: bool
    updated: bool
    is_null: bool
    value: str
    length: int
    mysql_type: str
    props: list[tuple[str, str]] = field(default_factory=list)


@dataclass(slots=True)
class RowData:
    before_columns: list[Column]
    after_columns: list[Column]
    props: list[tuple[str, str]] = field(default_factory=list)


UTC_MICROS = "utcMicros"  # Column prop: a TIMESTAMP value's epoch microseconds


def _columns(
    meta: tuple[ColumnMeta, ...],
    values: tuple[str | None, ...],
    other: tuple[str | None, ...] | None,
) -> list[Column]:
    """Columns of one image. ``updated`` as canal sets it: on an after image, every column of an INSERT
    (no before image) and the columns an UPDATE changed; never on a before image."""
    out = []
    for m, value in zip(meta, values, strict=True):
        updated = other is None or other[m.index] != value
        out.append(
            Column(
                index=m.index,
                sql_type=m.sql_type,
                name=m.name,
                is_key=m.is_key,
                updated=updated,
                is_null=value is None,
                value="" if value is None else value,
                length=m.length,
                mysql_type=m.mysql_type,
                # a TIMESTAMP's instant (relay.binlog.rows.Instant): its zone text repeats at a DST change
                props=[(UTC_MICROS, str(micros))]
                if (micros := getattr(value, "micros", None)) is not None
                else [],
            )
        )
    return out


def _before_columns(meta: tuple[ColumnMeta, ...], values: tuple[str | None, ...]) -> list[Column]:
    cols = _columns(meta, values, values)  # compared with itself: nothing is marked updated
    return cols


# Where compiled (scripts/build-compiled), still subclassed by interpreted code (relay.canal.proto.convert).
@mypyc_attr(allow_interpreted_subclasses=True)
@dataclass(init=False, slots=True)
class RowChange:
    """canal's RowChange. For DML, ``columns`` + ``rows`` hold the data; ``row_datas()`` builds RowData."""

    event_type: EventType
    table_id: int = 0
    is_ddl: bool = False
    sql: str = ""
    ddl_schema_name: str = ""
    columns: tuple[ColumnMeta, ...] = ()
    rows: tuple[RowImage, ...] = ()
    props: list[tuple[str, str]] = field(default_factory=list)
    # A DDL's changed tables from the schema history (``relay.binlog.events.QueryEvent.table_changes``);
    # relay-side only, never on canal's wire: debezium-json's ``tableChanges`` are made from it.
    table_changes: tuple[object, ...] | None = None

    def __init__(
        self,
        event_type: EventType,
        table_id: int = 0,
        is_ddl: bool = False,
        sql: str = "",
        ddl_schema_name: str = "",
        columns: tuple[ColumnMeta, ...] = (),
        rows: tuple[RowImage, ...] = (),
        props: list[tuple[str, str]] | None = None,
        table_changes: tuple[object, ...] | None = None,
    ) -> None:
        self.event_type = event_type
        self.table_id = table_id
        self.is_ddl = is_ddl
        self.sql = sql
        self.ddl_schema_name = ddl_schema_name
        self.columns = columns
        self.rows = rows
        self.props = [] if props is None else props
        self.table_changes = table_changes

    def row_datas(self) -> list[RowData]:
        out = []
        for row in self.rows:
            before = _before_columns(self.columns, row.before) if row.before is not None else []
            after = _columns(self.columns, row.after, row.before) if row.after is not None else []
            out.append(RowData(before_columns=before, after_columns=after))
        return out


@dataclass(init=False, slots=True)
class TransactionBegin:
    execute_time: int = 0
    transaction_id: str = ""
    thread_id: int = 0
    props: list[tuple[str, str]] = field(default_factory=list)

    def __init__(
        self,
        execute_time: int = 0,
        transaction_id: str = "",
        thread_id: int = 0,
        props: list[tuple[str, str]] | None = None,
    ) -> None:
        self.execute_time = execute_time
        self.transaction_id = transaction_id
        self.thread_id = thread_id
        self.props = [] if props is None else props


@dataclass(init=False, slots=True)
class TransactionEnd:
    execute_time: int = 0
    transaction_id: str = ""  # the XID, as text
    props: list[tuple[str, str]] = field(default_factory=list)

    def __init__(
        self, execute_time: int = 0, transaction_id: str = "", props: list[tuple[str, str]] | None = None
    ) -> None:
        self.execute_time = execute_time
        self.transaction_id = transaction_id
        self.props = [] if props is None else props


# Where compiled (scripts/build-compiled), still subclassed by interpreted code (relay.source.snapshot_entry).
@mypyc_attr(allow_interpreted_subclasses=True)
@dataclass(init=False, slots=True)
class Entry:
    """canal's Entry plus the relay-side transaction context (``txn``, ``txn_index``)."""

    header: Header
    entry_type: EntryType
    store_value: RowChange | TransactionBegin | TransactionEnd | None
    txn: TxnContext
    txn_index: int = 0
    # True when nothing of this entry's transaction follows it: TRANSACTIONEND, or a statement that
    # is its own transaction (a DDL outside BEGIN/COMMIT). Set by the entry builder.
    closes_txn: bool = False
    # The binlog history it was read in (``ResumePoint.generation``): set by the canal instance; part of
    # the record sequence and of the resume point after it.
    generation: int = 0
    # Inside a TRANSACTION_PAYLOAD (MySQL's binlog_transaction_compression): the event's ordinal in the
    # payload, and its own length. Every event of a payload has the payload's place (start offset and
    # length), so these tell its entries apart in the change identity (``relay.kafka.codec``) and weigh
    # them in the store by what they really hold. -1 / 0 outside a payload.
    payload_index: int = -1
    inner_size: int = 0
    # The oldest XA transaction prepared but not yet decided when this entry was made (its start and
    # GTID set before it), or None: a restart must read again from there (``relay.canal.xa``).
    xa_hold: TxnContext | None = None

    def __init__(
        self,
        header: Header,
        entry_type: EntryType,
        store_value: RowChange | TransactionBegin | TransactionEnd | None,
        txn: TxnContext,
        txn_index: int = 0,
        closes_txn: bool = False,
        generation: int = 0,
        payload_index: int = -1,
        inner_size: int = 0,
        xa_hold: TxnContext | None = None,
    ) -> None:
        self.header = header
        self.entry_type = entry_type
        self.store_value = store_value
        self.txn = txn
        self.txn_index = txn_index
        self.closes_txn = closes_txn
        self.generation = generation
        self.payload_index = payload_index
        self.inner_size = inner_size
        self.xa_hold = xa_hold

    @property
    def is_ddl(self) -> bool:
        value = self.store_value
        return isinstance(value, RowChange) and value.is_ddl

    @property
    def size(self) -> int:
        """Memory the ring store charges for this entry: the binlog event length, as canal does (an event
        inside a transaction payload: its own length, not the whole payload's)."""
        return self.inner_size if self.payload_index >= 0 else self.header.event_length

    @property
    def footprint(self) -> int:
        """What this entry holds in memory, estimated from counts (no walk over its objects): the
        objects every entry has, its content (as long as its binlog event: the decoded values' text
        takes about as many bytes as their binary form), and per row image a tuple and per value a
        ``str`` header. Measured with tracemalloc against the bench's tables (11 mixed columns, 4 KB
        rows, single-row transactions) it is 1.00-1.08 times the real size: a small row takes about
        eleven times its binlog length, a 4 KB row 1.3 times (docs/architecture.md, "Memory")."""
        weight = ENTRY_FOOTPRINT + self.size
        value = self.store_value
        if isinstance(value, RowChange) and value.rows:
            images = len(value.rows) * (2 if value.event_type == EventType.UPDATE else 1)
            weight += images * (IMAGE_FOOTPRINT + VALUE_FOOTPRINT * len(value.columns))
        return weight

    @property
    def position(self) -> EntryPosition:
        h = self.header
        return EntryPosition(h.logfile_name, h.logfile_offset, h.server_id, h.gtid, h.execute_time)

    @property
    def is_transaction_boundary(self) -> bool:
        """TRANSACTIONBEGIN, TRANSACTIONEND or a DDL: the places canal's store may set an ack point."""
        return self.entry_type in (EntryType.TRANSACTIONBEGIN, EntryType.TRANSACTIONEND) or self.is_ddl
