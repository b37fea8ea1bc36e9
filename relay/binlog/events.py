"""Decoded binlog events: the values the binlog stream hands to ``binlog_source`` and the entry builder.

Owned here: the event header, one small class per event kind the relay uses, and ``ColumnMeta`` (one
column of a TABLE_MAP, with everything canal's Column needs). Parsing lives in ``relay.binlog.parse``
(``BinlogParser``) and ``relay.binlog.tablemap``; row images are decoded by ``relay.binlog.rows``.

Positions: ``header.log_pos`` is the END offset of the event in its file (the next event's start),
``header.start`` is where the event begins (canal's ``logfileOffset``). Artificial events the server
sends on connect (ROTATE, FORMAT_DESCRIPTION with ``log_pos`` 0) have ``artificial`` set.

Events inside a MySQL TRANSACTION_PAYLOAD (binlog_transaction_compression=ON) have no place of
their own in the file: MySQL writes them with ``log_pos`` 0 inside the compressed payload. Their
header reports the payload event's place — ``start``, ``event_size`` and ``log_pos`` are the payload
event's, so ``start + event_size`` is where the next event of the file begins, and re-reading from
``start`` reads the same payload again — plus ``payload_index``, the event's ordinal (0, 1, …) in the
payload, stable across re-reads, and ``inner_size``, its own length. Everything before a payload (its
GTID event) and after it is an ordinary event.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Event type codes (MySQL manual, "Binlog Event Type"; MariaDB additions from 160 up).
UNKNOWN_EVENT = 0
START_EVENT_V3 = 1
QUERY_EVENT = 2
STOP_EVENT = 3
ROTATE_EVENT = 4
INTVAR_EVENT = 5
RAND_EVENT = 13
USER_VAR_EVENT = 14
BEGIN_LOAD_QUERY_EVENT = 17
EXECUTE_LOAD_QUERY_EVENT = 18
FORMAT_DESCRIPTION_EVENT = 15
XID_EVENT = 16
TABLE_MAP_EVENT = 19
WRITE_ROWS_EVENT_V1 = 23
UPDATE_ROWS_EVENT_V1 = 24
DELETE_ROWS_EVENT_V1 = 25
INCIDENT_EVENT = 26
HEARTBEAT_LOG_EVENT = 27
IGNORABLE_LOG_EVENT = 28
ROWS_QUERY_LOG_EVENT = 29
WRITE_ROWS_EVENT = 30
UPDATE_ROWS_EVENT = 31
DELETE_ROWS_EVENT = 32
GTID_LOG_EVENT = 33
ANONYMOUS_GTID_LOG_EVENT = 34
PREVIOUS_GTIDS_LOG_EVENT = 35
TRANSACTION_CONTEXT_EVENT = 36
VIEW_CHANGE_EVENT = 37
XA_PREPARE_LOG_EVENT = 38
PARTIAL_UPDATE_ROWS_EVENT = 39
TRANSACTION_PAYLOAD_EVENT = 40
HEARTBEAT_LOG_EVENT_V2 = 41
GTID_TAGGED_LOG_EVENT = 42  # MySQL 8.3+: a GTID with a tag, body in mysql::serialization format
MARIADB_ANNOTATE_ROWS_EVENT = 160
MARIADB_BINLOG_CHECKPOINT_EVENT = 161
MARIADB_GTID_EVENT = 162
MARIADB_GTID_LIST_EVENT = 163
MARIADB_START_ENCRYPTION_EVENT = 164
MARIADB_QUERY_COMPRESSED_EVENT = 165
MARIADB_WRITE_ROWS_COMPRESSED_EVENT_V1 = 166
MARIADB_UPDATE_ROWS_COMPRESSED_EVENT_V1 = 167
MARIADB_DELETE_ROWS_COMPRESSED_EVENT_V1 = 168
MARIADB_WRITE_ROWS_COMPRESSED_EVENT = 169
MARIADB_UPDATE_ROWS_COMPRESSED_EVENT = 170
MARIADB_DELETE_ROWS_COMPRESSED_EVENT = 171

# Row event kinds, as the entry builder names them.
INSERT = "INSERT"
UPDATE = "UPDATE"
DELETE = "DELETE"


@dataclass(init=False, slots=True)
class EventHeader:
    """The 19-byte common header (plus the file name the stream is in when the event arrives)."""

    timestamp: int  # seconds since the epoch
    type_code: int
    server_id: int
    event_size: int  # header + body (+ checksum)
    log_pos: int  # END offset in the file; 0 for artificial events
    flags: int
    log_file: str  # the binlog file this event belongs to
    payload_index: int = -1  # ordinal inside its TRANSACTION_PAYLOAD; -1 outside one
    inner_size: int = 0  # inside a payload: the event's own length (header + body, no checksum)

    def __init__(
        self,
        timestamp: int,
        type_code: int,
        server_id: int,
        event_size: int,
        log_pos: int,
        flags: int,
        log_file: str,
        payload_index: int = -1,
        inner_size: int = 0,
    ) -> None:
        self.timestamp = timestamp
        self.type_code = type_code
        self.server_id = server_id
        self.event_size = event_size
        self.log_pos = log_pos
        self.flags = flags
        self.log_file = log_file
        self.payload_index = payload_index
        self.inner_size = inner_size

    @property
    def start(self) -> int:
        """Offset where the event begins in ``log_file`` (canal's ``logfileOffset``)."""
        return self.log_pos - self.event_size if self.log_pos else 0

    @property
    def artificial(self) -> bool:
        """True for the fake ROTATE / FORMAT_DESCRIPTION sent on connect (LOG_EVENT_ARTIFICIAL_F)."""
        return self.log_pos == 0 or bool(self.flags & 0x20)


@dataclass(frozen=True, slots=True)
class ColumnMeta:
    """One column of a TABLE_MAP event, with what canal's ``Column`` needs to describe it.

    ``type_code`` is the real type (a STRING column whose metadata says ENUM or SET carries
    MYSQL_TYPE_ENUM / MYSQL_TYPE_SET here); ``meta`` is its type metadata from the event.
    ``charset`` is the collation id (63 = binary) or None when the server did not send it.
    ``mysql_type`` is canal's ``mysqlType`` text (``varchar(16)``, ``decimal(12,2)``, ``int unsigned``),
    ``sql_type`` the ``java.sql.Types`` code canal reports, ``length`` canal's ``Column.length``.
    """

    index: int
    name: str
    type_code: int
    meta: int
    nullable: bool
    unsigned: bool
    charset: int | None
    is_key: bool
    mysql_type: str
    sql_type: int
    length: int
    enum_values: tuple[str, ...] | None = None
    set_values: tuple[str, ...] | None = None


@dataclass(slots=True)
class BinlogEvent:
    header: EventHeader


@dataclass(init=False, slots=True)
class RotateEvent(BinlogEvent):
    next_file: str
    position: int

    def __init__(self, header: EventHeader, next_file: str, position: int) -> None:
        self.header = header
        self.next_file = next_file
        self.position = position


@dataclass(slots=True)
class FormatDescriptionEvent(BinlogEvent):
    binlog_version: int
    server_version: str
    checksum: bool  # events of this file carry a CRC32 trailer


@dataclass(init=False, slots=True)
class QueryEvent(BinlogEvent):
    thread_id: int
    exec_time: int
    error_code: int
    schema: str
    sql: str
    # The tables this DDL changed, as the schema history applied it (``relay.schema.model.TableChange``s,
    # set by ``relay.schema.tracker`` before the event is handed on); None without a schema history or
    # when the DDL was not understood. Opaque here: the binlog layer sits below the schema model.
    table_changes: tuple[object, ...] | None

    def __init__(
        self, header: EventHeader, thread_id: int, exec_time: int, error_code: int, schema: str, sql: str
    ) -> None:
        self.header = header
        self.thread_id = thread_id
        self.exec_time = exec_time
        self.error_code = error_code
        self.schema = schema
        self.sql = sql
        self.table_changes = None


@dataclass(init=False, slots=True)
class XidEvent(BinlogEvent):
    xid: int

    def __init__(self, header: EventHeader, xid: int) -> None:
        self.header = header
        self.xid = xid


@dataclass(init=False, slots=True)
class GtidEvent(BinlogEvent):
    """A transaction's GTID. MySQL: ``uuid:gno``; MariaDB: ``domain-server-seq``.

    On MariaDB the GTID event also opens the transaction (there is no BEGIN query): ``standalone``
    (FL_STANDALONE) marks a statement with no BEGIN/COMMIT such as a DDL, ``is_ddl`` is FL_DDL.
    """

    gtid: str
    mariadb: bool
    standalone: bool = False
    is_ddl: bool = False
    # MariaDB FL_PREPARED_XA: the transaction that follows is the prepared part of an XA transaction
    # (MariaDB writes no XA START query; the XID is in the GTID event, and XA END / XA_PREPARE end it).
    xa_prepared: bool = False

    def __init__(
        self,
        header: EventHeader,
        gtid: str,
        mariadb: bool,
        standalone: bool = False,
        is_ddl: bool = False,
        xa_prepared: bool = False,
    ) -> None:
        self.header = header
        self.gtid = gtid
        self.mariadb = mariadb
        self.standalone = standalone
        self.is_ddl = is_ddl
        self.xa_prepared = xa_prepared


@dataclass(slots=True)
class GtidSetEvent(BinlogEvent):
    """PREVIOUS_GTIDS (MySQL) or GTID_LIST (MariaDB): the GTID set written before this file."""

    gtid_set: str
    mariadb: bool


@dataclass(init=False, slots=True)
class TableMapEvent(BinlogEvent):
    table_id: int
    schema: str
    table: str
    columns: tuple[ColumnMeta, ...]
    # True when column names came from the event's optional metadata (binlog_row_metadata=FULL);
    # otherwise names are placeholders ("@1", ...) until the source fills them from the schema.
    names_from_binlog: bool = True
    # True when the event carried the SIGNEDNESS field (binlog_row_metadata MINIMAL or FULL): each
    # numeric column's ``unsigned`` is then the server's word, ``False`` included.
    signedness_from_binlog: bool = False

    def __init__(
        self,
        header: EventHeader,
        table_id: int,
        schema: str,
        table: str,
        columns: tuple[ColumnMeta, ...],
        names_from_binlog: bool = True,
        signedness_from_binlog: bool = False,
    ) -> None:
        self.header = header
        self.table_id = table_id
        self.schema = schema
        self.table = table
        self.columns = columns
        self.names_from_binlog = names_from_binlog
        self.signedness_from_binlog = signedness_from_binlog


@dataclass(init=False, slots=True)
class RowImage:
    """One changed row: values in canal's text form, ``None`` for SQL NULL, per column index.

    INSERT has only ``after``; DELETE only ``before``; UPDATE both.
    """

    before: tuple[str | None, ...] | None
    after: tuple[str | None, ...] | None

    def __init__(self, before: tuple[str | None, ...] | None, after: tuple[str | None, ...] | None) -> None:
        self.before = before
        self.after = after


@dataclass(init=False, slots=True)
class RowsEvent(BinlogEvent):
    kind: str  # INSERT / UPDATE / DELETE
    table: TableMapEvent
    rows: tuple[RowImage, ...] = field(default_factory=tuple)

    def __init__(
        self, header: EventHeader, kind: str, table: TableMapEvent, rows: tuple[RowImage, ...] = ()
    ) -> None:
        self.header = header
        self.kind = kind
        self.table = table
        self.rows = rows


@dataclass(init=False, slots=True)
class HeartbeatEvent(BinlogEvent):
    log_file_name: str

    def __init__(self, header: EventHeader, log_file_name: str) -> None:
        self.header = header
        self.log_file_name = log_file_name


@dataclass(slots=True)
class XaPrepareEvent(BinlogEvent):
    one_phase: bool
    xid: str


@dataclass(slots=True)
class TransactionPayloadEvent(BinlogEvent):
    """A MySQL TRANSACTION_PAYLOAD: a transaction's events after its GTID, compressed together.

    ``events`` are the decoded inner events in order (``relay.binlog.stream`` hands them on one by
    one instead of this event). ``compression_type``: 0 zstd, 255 none; sizes in bytes.
    """

    compression_type: int
    payload_size: int
    uncompressed_size: int
    events: tuple[BinlogEvent, ...]


@dataclass(init=False, slots=True)
class OtherEvent(BinlogEvent):
    """An event the relay has no use for (INTVAR, ROWS_QUERY, ANNOTATE_ROWS, STOP, checkpoints …)."""

    def __init__(self, header: EventHeader) -> None:
        self.header = header
