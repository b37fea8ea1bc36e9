"""Binlog event framing and parsing: raw event bytes → the values of ``relay.binlog.events``.

Owned here: ``BinlogParser``, the per-connection decoder. It keeps what later events depend on —
the current binlog file (from ROTATE), whether events carry a CRC32 trailer and the post-header
lengths (from FORMAT_DESCRIPTION), the table maps (table id → ``TableMapEvent``) — verifies each
event's checksum, and refuses what it cannot decode exactly (rows without a TABLE_MAP, malformed or
unknown compression). Runs on the binlog reader thread, called by
``relay.binlog.stream.BinlogStream.read``; row images go to ``relay.binlog.rows.decode_rows``.

Compressed content (``relay.binlog.compressed``) is decoded into the events it stands for: a MariaDB
QUERY/ROWS_COMPRESSED event becomes the QueryEvent/RowsEvent of its uncompressed twin (its header,
type code and size stay the compressed event's: they are its place in the file). A MySQL
TRANSACTION_PAYLOAD becomes a ``TransactionPayloadEvent`` holding its inner events in order; each
inner event's header reports the payload event's place (``start``, ``event_size``, ``log_pos``) plus
its ordinal in the payload (``payload_index``) and its own length (``inner_size``) — see
``relay.binlog.events.EventHeader``. The stream hands the inner events on one by one.

Layouts: MySQL "Binlog Event" documentation (libbinlogevents) and MariaDB's "Replication Protocol"
pages; every multi-byte integer is little-endian.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from datetime import UTC, tzinfo

from relay.binlog import compressed, rows
from relay.binlog import events as ev
from relay.binlog.gtidset import decode_mysql_gtid_set, format_uuid, tag_text
from relay.binlog.serialization import Kind, read_message
from relay.binlog.tablemap import TableMapBody, parse_table_map, read_lenenc
from relay.errors import DecodeError, IncompleteRowImageError, SourceError

HEADER_LEN = 19
_HEADER = struct.Struct("<IBIIIH")  # timestamp, type, server id, event size, log_pos, flags
_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_QUERY_POST = struct.Struct("<IIBHH")  # thread id, exec time, schema length, error code, status length
_MARIA_GTID = struct.Struct("<QIB")  # seq_no, domain id, flags2
_XA = struct.Struct("<BIII")  # one phase, format id, gtrid length, bqual length

CHECKSUM_OFF = 0
CHECKSUM_CRC32 = 1
STMT_END_F = 0x0001  # rows event flag: last rows event of a statement (MySQL Rows_event::STMT_END_F)
_FL_STANDALONE = 0x01  # MariaDB GTID flags2 (MariaDB "GTID_EVENT" page)
_FL_DDL = 0x20
_FL_PREPARED_XA = 0x40

# GTID_TAGGED_LOG_EVENT fields by id (mysql-server control_events.h, Gtid_event::define_fields):
# flags, uuid, gno, tag, last_committed, sequence_number, immediate/original commit timestamps,
# transaction_length, immediate/original server versions, commit group ticket.
_TAGGED_GTID_FIELDS = (
    Kind.UNSIGNED, Kind.BYTES16, Kind.SIGNED, Kind.STRING, Kind.SIGNED, Kind.SIGNED,
    Kind.UNSIGNED, Kind.UNSIGNED, Kind.UNSIGNED, Kind.UNSIGNED, Kind.UNSIGNED, Kind.UNSIGNED,
)  # fmt: skip

# Post-header lengths of binlog v4 for the events we read; a FORMAT_DESCRIPTION replaces them.
_DEFAULT_POST_HEADER = {
    ev.QUERY_EVENT: 13,
    ev.MARIADB_QUERY_COMPRESSED_EVENT: 13,
    ev.EXECUTE_LOAD_QUERY_EVENT: 26,
    ev.TABLE_MAP_EVENT: 8,
}

_ROWS_KIND = {
    ev.WRITE_ROWS_EVENT_V1: ev.INSERT,
    ev.UPDATE_ROWS_EVENT_V1: ev.UPDATE,
    ev.DELETE_ROWS_EVENT_V1: ev.DELETE,
    ev.WRITE_ROWS_EVENT: ev.INSERT,
    ev.UPDATE_ROWS_EVENT: ev.UPDATE,
    ev.DELETE_ROWS_EVENT: ev.DELETE,
    ev.PARTIAL_UPDATE_ROWS_EVENT: ev.UPDATE,
    ev.MARIADB_WRITE_ROWS_COMPRESSED_EVENT_V1: ev.INSERT,
    ev.MARIADB_UPDATE_ROWS_COMPRESSED_EVENT_V1: ev.UPDATE,
    ev.MARIADB_DELETE_ROWS_COMPRESSED_EVENT_V1: ev.DELETE,
    ev.MARIADB_WRITE_ROWS_COMPRESSED_EVENT: ev.INSERT,
    ev.MARIADB_UPDATE_ROWS_COMPRESSED_EVENT: ev.UPDATE,
    ev.MARIADB_DELETE_ROWS_COMPRESSED_EVENT: ev.DELETE,
}
# Rows events with the v2 extra-data block after the post-header (MySQL 5.6+ / MariaDB 10.2+).
_ROWS_V2 = frozenset(
    {
        ev.WRITE_ROWS_EVENT, ev.UPDATE_ROWS_EVENT, ev.DELETE_ROWS_EVENT, ev.PARTIAL_UPDATE_ROWS_EVENT,
        ev.MARIADB_WRITE_ROWS_COMPRESSED_EVENT, ev.MARIADB_UPDATE_ROWS_COMPRESSED_EVENT,
        ev.MARIADB_DELETE_ROWS_COMPRESSED_EVENT,
    }
)  # fmt: skip
_ROWS_COMPRESSED = frozenset(
    range(ev.MARIADB_WRITE_ROWS_COMPRESSED_EVENT_V1, ev.MARIADB_DELETE_ROWS_COMPRESSED_EVENT + 1)
)
# Events that have no place inside a transaction payload (MySQL writes only a transaction's events
# after its GTID there): one of them inside means a payload we do not understand.
_NOT_IN_PAYLOAD = frozenset(
    {
        ev.FORMAT_DESCRIPTION_EVENT, ev.ROTATE_EVENT, ev.TRANSACTION_PAYLOAD_EVENT, ev.GTID_LOG_EVENT,
        ev.ANONYMOUS_GTID_LOG_EVENT, ev.GTID_TAGGED_LOG_EVENT, ev.PREVIOUS_GTIDS_LOG_EVENT,
        ev.HEARTBEAT_LOG_EVENT, ev.HEARTBEAT_LOG_EVENT_V2, ev.STOP_EVENT,
    }
)  # fmt: skip

_TABLE_CACHE_LIMIT = 4096  # decoded TABLE_MAP bodies kept; cleared wholesale past this (rare DDL churn)

_Handler = Callable[[ev.EventHeader, bytes, int, int], ev.BinlogEvent]


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


class BinlogParser:
    """Decodes the events of one replication connection, in order.

    ``checksum`` is whether events carry a CRC32 trailer until the next FORMAT_DESCRIPTION says
    otherwise (the negotiated ``@master_binlog_checksum``); ``log_file`` the file the first event
    belongs to when known; ``timestamp_zone`` the zone TIMESTAMP values are rendered in (the server's).
    Not thread-safe: one reader thread owns it.
    """

    def __init__(
        self,
        *,
        checksum: bool,
        mariadb: bool,
        log_file: str = "",
        timestamp_zone: tzinfo | str = UTC,
        table_resolver: Callable[[ev.TableMapEvent], ev.TableMapEvent] | None = None,
        decode_rows: bool = True,
    ) -> None:
        self.checksum = checksum
        self.rows = rows.RowDecoder(timestamp_zone)  # TIMESTAMP rendered in this connection's zone
        self.mariadb = mariadb
        self.log_file = log_file
        # The schema history's hook (relay.schema.tracker): names, keys and types for a TABLE_MAP
        # without full metadata, checked against the event; it may stop the stream (SchemaError).
        self.table_resolver = table_resolver
        self._post_header: dict[int, int] = dict(_DEFAULT_POST_HEADER)
        self._tables: dict[int, ev.TableMapEvent] = {}
        self._decoded: dict[bytes, TableMapBody] = {}
        self._handlers: dict[int, _Handler] = {
            ev.ROTATE_EVENT: self._rotate,
            ev.QUERY_EVENT: self._query,
            # LOAD DATA logged as a statement: a QUERY with a longer post-header (the file id and where
            # the file name is in the statement); the guard in relay.canal.statements must see it.
            ev.EXECUTE_LOAD_QUERY_EVENT: self._query,
            ev.XID_EVENT: self._xid,
            ev.GTID_LOG_EVENT: self._mysql_gtid,
            ev.GTID_TAGGED_LOG_EVENT: self._tagged_gtid,
            ev.ANONYMOUS_GTID_LOG_EVENT: self._anonymous_gtid,
            ev.PREVIOUS_GTIDS_LOG_EVENT: self._previous_gtids,
            ev.MARIADB_GTID_EVENT: self._mariadb_gtid,
            ev.MARIADB_GTID_LIST_EVENT: self._gtid_list,
            ev.TABLE_MAP_EVENT: self._table_map,
            ev.HEARTBEAT_LOG_EVENT: self._heartbeat,
            ev.HEARTBEAT_LOG_EVENT_V2: self._heartbeat_v2,
            ev.XA_PREPARE_LOG_EVENT: self._xa_prepare,
            ev.MARIADB_QUERY_COMPRESSED_EVENT: self._query,
            ev.TRANSACTION_PAYLOAD_EVENT: self._transaction_payload,
        }
        if decode_rows:  # False: rows events stay OtherEvents (a reader that only looks at statements)
            for code in _ROWS_KIND:
                self._handlers[code] = self._rows

    def table(self, table_id: int) -> ev.TableMapEvent | None:
        """The TABLE_MAP currently in force for ``table_id``."""
        return self._tables.get(table_id)

    def parse(self, data: bytes, offset: int = 0) -> ev.BinlogEvent:
        """Decode the event in ``data[offset:]`` (exactly one event, checksum included)."""
        try:
            ts, code, server_id, size, log_pos, flags = _HEADER.unpack_from(data, offset)
        except struct.error as exc:
            raise DecodeError(f"{self.log_file}: event shorter than its header ({exc})") from exc
        end = offset + size
        if end != len(data):
            raise DecodeError(
                f"{self._where(log_pos, size)}: event size {size} but {len(data) - offset} bytes received"
            )
        header = ev.EventHeader(ts, code, server_id, size, log_pos, flags, self.log_file)
        if code == ev.FORMAT_DESCRIPTION_EVENT:
            return self._format_description(header, data, offset)
        if self.checksum:
            end -= 4
            if _U32.unpack_from(data, end)[0] != zlib.crc32(memoryview(data)[offset:end]):
                raise DecodeError(f"{self._where(log_pos, size)}: CRC32 mismatch in event type {code}")
        return self._dispatch(header, data, offset + HEADER_LEN, end)

    def _dispatch(self, header: ev.EventHeader, data: bytes, body: int, end: int) -> ev.BinlogEvent:
        """Decode the body ``data[body:end]`` (checksum excluded) with the handler of its type."""
        code = header.type_code
        handler = self._handlers.get(code)
        if handler is None:
            return ev.OtherEvent(header)
        try:
            return handler(header, data, body, end)
        except DecodeError as exc:
            raise DecodeError(f"{_place(header)}: event type {code}: {exc}") from exc
        except (IndexError, ValueError, struct.error) as exc:
            raise DecodeError(f"{_place(header)}: cannot decode event type {code}: {exc}") from exc

    def _where(self, log_pos: int, size: int) -> str:
        """``file:offset`` of an event, for error messages."""
        return f"{self.log_file}:{log_pos - size if log_pos else 0}"

    # --- control events -------------------------------------------------------------------------

    def _format_description(self, header: ev.EventHeader, data: bytes, offset: int) -> ev.BinlogEvent:
        body = offset + HEADER_LEN
        end = offset + header.event_size
        where = f"{self.log_file}:{header.start}"
        binlog_version = _U16.unpack_from(data, body)[0]
        version = data[body + 2 : body + 52].split(b"\0", 1)[0].decode("ascii", "replace")
        header_len = data[body + 56]
        if header_len != HEADER_LEN:
            raise DecodeError(f"{where}: common header length {header_len}, expected {HEADER_LEN}")
        lengths_end = end
        algorithm = CHECKSUM_OFF
        if _checksum_aware(version):
            # A checksum-aware server always writes the algorithm byte and a 4-byte checksum field
            # into the FORMAT_DESCRIPTION, whatever the algorithm (zeros when it is OFF).
            algorithm = data[end - 5]
            lengths_end = end - 5
            if algorithm == CHECKSUM_CRC32:
                if _U32.unpack_from(data, end - 4)[0] != zlib.crc32(memoryview(data)[offset : end - 4]):
                    raise DecodeError(f"{where}: CRC32 mismatch in FORMAT_DESCRIPTION")
            elif algorithm != CHECKSUM_OFF:
                raise DecodeError(f"{where}: unknown binlog checksum algorithm {algorithm}")
        lengths = data[body + 57 : lengths_end]
        self._post_header = {code: lengths[code - 1] for code in range(1, len(lengths) + 1)}
        self.checksum = algorithm == CHECKSUM_CRC32
        return ev.FormatDescriptionEvent(header, binlog_version, version, self.checksum)

    def _rotate(self, header: ev.EventHeader, data: bytes, body: int, end: int) -> ev.BinlogEvent:
        position = _U64.unpack_from(data, body)[0]
        next_file = _text(data[body + 8 : end])
        if header.artificial:
            # The ROTATE sent at connect names the file the following events are in; it belongs there.
            header = ev.EventHeader(
                header.timestamp, header.type_code, header.server_id, header.event_size,
                header.log_pos, header.flags, next_file,
            )  # fmt: skip
        self.log_file = next_file
        return ev.RotateEvent(header, next_file, position)

    def _query(self, header: ev.EventHeader, data: bytes, body: int, end: int) -> ev.BinlogEvent:
        thread_id, exec_time, schema_len, error_code, status_len = _QUERY_POST.unpack_from(data, body)
        p = body + self._post_header.get(header.type_code, 13) + status_len
        schema = _text(data[p : p + schema_len])
        p += schema_len + 1
        if header.type_code == ev.MARIADB_QUERY_COMPRESSED_EVENT:
            sql = _text(compressed.mariadb_uncompress(data, p, end))
        else:
            sql = _text(data[p:end])
        return ev.QueryEvent(header, thread_id, exec_time, error_code, schema, sql)

    def _xid(self, header: ev.EventHeader, data: bytes, body: int, end: int) -> ev.BinlogEvent:
        return ev.XidEvent(header, _U64.unpack_from(data, body)[0])

    def _mysql_gtid(self, header: ev.EventHeader, data: bytes, body: int, end: int) -> ev.BinlogEvent:
        # flags (1), source uuid (16), gno (8), then logical clock fields we do not need.
        gno = _U64.unpack_from(data, body + 17)[0]
        return ev.GtidEvent(header, f"{format_uuid(data[body + 1 : body + 17])}:{gno}", mariadb=False)

    def _anonymous_gtid(self, header: ev.EventHeader, data: bytes, body: int, end: int) -> ev.BinlogEvent:
        # A transaction start on a server with gtid_mode=OFF: a GTID event with no GTID.
        return ev.GtidEvent(header, "", mariadb=False)

    def _tagged_gtid(self, header: ev.EventHeader, data: bytes, body: int, end: int) -> ev.BinlogEvent:
        # MySQL 8.3+ writes a GTID with a tag as a serialized message (no post-header).
        values = read_message(data, body, end, _TAGGED_GTID_FIELDS)
        uuid, gno, tag = values[1], values[2], values[3]
        if not isinstance(uuid, bytes) or not isinstance(gno, int) or not isinstance(tag, bytes):
            raise DecodeError("GTID_TAGGED_LOG_EVENT lacks its uuid, number or tag")
        text = f"{format_uuid(uuid)}:{tag_text(tag)}:{gno}" if tag else f"{format_uuid(uuid)}:{gno}"
        return ev.GtidEvent(header, text, mariadb=False)

    def _previous_gtids(self, header: ev.EventHeader, data: bytes, body: int, end: int) -> ev.BinlogEvent:
        return ev.GtidSetEvent(header, str(decode_mysql_gtid_set(data, body, end)), mariadb=False)

    def _mariadb_gtid(self, header: ev.EventHeader, data: bytes, body: int, end: int) -> ev.BinlogEvent:
        seq_no, domain, flags2 = _MARIA_GTID.unpack_from(data, body)
        return ev.GtidEvent(
            header,
            f"{domain}-{header.server_id}-{seq_no}",
            mariadb=True,
            standalone=bool(flags2 & _FL_STANDALONE),
            is_ddl=bool(flags2 & _FL_DDL),
            xa_prepared=bool(flags2 & _FL_PREPARED_XA),
        )

    def _gtid_list(self, header: ev.EventHeader, data: bytes, body: int, end: int) -> ev.BinlogEvent:
        count = _U32.unpack_from(data, body)[0] & 0x0FFFFFFF  # the top 4 bits are flags
        parts = []
        for i in range(count):
            domain, server_id, seq = struct.unpack_from("<IIQ", data, body + 4 + 16 * i)
            parts.append(f"{domain}-{server_id}-{seq}")
        return ev.GtidSetEvent(header, ",".join(parts), mariadb=True)

    def _heartbeat(self, header: ev.EventHeader, data: bytes, body: int, end: int) -> ev.BinlogEvent:
        return ev.HeartbeatEvent(header, _text(data[body:end]))

    def _heartbeat_v2(self, header: ev.EventHeader, data: bytes, body: int, end: int) -> ev.BinlogEvent:
        # TLV fields: type and length length-encoded; 1 = file name, 2 = position, 0 = end mark.
        name = ""
        p = body
        while p < end:
            kind, p = read_lenenc(data, p)
            if kind == 0:
                break
            length, p = read_lenenc(data, p)
            if kind == 1:
                name = _text(data[p : p + length])
            p += length
        return ev.HeartbeatEvent(header, name)

    def _xa_prepare(self, header: ev.EventHeader, data: bytes, body: int, end: int) -> ev.BinlogEvent:
        one_phase, format_id, gtrid_len, bqual_len = _XA.unpack_from(data, body)
        p = body + _XA.size
        gtrid = data[p : p + gtrid_len]
        bqual = data[p + gtrid_len : p + gtrid_len + bqual_len]
        return ev.XaPrepareEvent(header, bool(one_phase), f"X'{gtrid.hex()}',X'{bqual.hex()}',{format_id}")

    # --- row events -----------------------------------------------------------------------------

    def _table_map(self, header: ev.EventHeader, data: bytes, body: int, end: int) -> ev.BinlogEvent:
        key = data[body:end]
        decoded = self._decoded.get(key)
        if decoded is None:
            id_len = 4 if self._post_header.get(ev.TABLE_MAP_EVENT, 8) == 6 else 6
            decoded = parse_table_map(data, body, end, id_len, self.mariadb)
            if len(self._decoded) >= _TABLE_CACHE_LIMIT:
                self._decoded.clear()
            self._decoded[key] = decoded
        event = ev.TableMapEvent(
            header,
            decoded.table_id,
            decoded.schema,
            decoded.table,
            decoded.columns,
            decoded.names_from_binlog,
            decoded.signedness_from_binlog,
        )
        if self.table_resolver is not None:
            event = self.table_resolver(event)
        self._tables[decoded.table_id] = event
        return event

    def _rows(self, header: ev.EventHeader, data: bytes, body: int, end: int) -> ev.BinlogEvent:
        code = header.type_code
        kind = _ROWS_KIND[code]
        table_id = int.from_bytes(data[body : body + 6], "little")
        (flags,) = _U16.unpack_from(data, body + 6)
        p = body + 8
        if code in _ROWS_V2:
            # v2: extra data whose length counts its own two bytes.
            p += _U16.unpack_from(data, p)[0]
        table = self._tables.get(table_id)
        if table is None:
            raise SourceError(
                f"{_place(header)}: rows event for table id {table_id} without its TABLE_MAP "
                "(the stream started inside a transaction?); resume from the transaction's start"
            )
        if code in _ROWS_COMPRESSED:
            data, p, end = _uncompressed_rows(kind, data, p, end)
        partial = code == ev.PARTIAL_UPDATE_ROWS_EVENT
        try:
            decoded = self.rows.decode_rows(kind, data, p, end, table, partial=partial)
        except IncompleteRowImageError as exc:
            raise exc.at(f"{self.log_file}:{header.start}") from None
        if flags & STMT_END_F:
            # Table ids are valid until the end of the statement; a server re-maps them before the
            # next one, so a stale entry can only hide a missing TABLE_MAP.
            self._tables.clear()
        return ev.RowsEvent(header, kind, table, decoded)

    def _transaction_payload(
        self, header: ev.EventHeader, data: bytes, body: int, end: int
    ) -> ev.BinlogEvent:
        # The TLV header follows the common header directly (MySQL decodes it from there, whatever
        # post-header length the FORMAT_DESCRIPTION lists for this type).
        info = compressed.read_payload_header(data, body, end)
        raw = compressed.payload_bytes(info, data, end)
        inner = tuple(
            self._inner_event(header, raw, at, size, index)
            for index, (at, size) in enumerate(compressed.split_events(raw))
        )
        return ev.TransactionPayloadEvent(header, info.compression_type, info.payload_size, len(raw), inner)

    def _inner_event(
        self, outer: ev.EventHeader, raw: bytes, at: int, size: int, index: int
    ) -> ev.BinlogEvent:
        """One event of a transaction payload: no checksum, reported at the payload event's place."""
        ts, code, server_id, _, _, flags = _HEADER.unpack_from(raw, at)
        if code in _NOT_IN_PAYLOAD:
            raise DecodeError(f"event type {code} (#{index}) inside a transaction payload")
        header = ev.EventHeader(
            ts, code, server_id, outer.event_size, outer.log_pos, flags, outer.log_file,
            payload_index=index, inner_size=size,
        )  # fmt: skip
        return self._dispatch(header, raw, at + HEADER_LEN, at + size)


def _place(header: ev.EventHeader) -> str:
    """``file:offset`` of an event for messages, and its ordinal when it is inside a payload."""
    where = f"{header.log_file}:{header.start}"
    if header.payload_index >= 0:
        where += f" (event #{header.payload_index} of its transaction payload)"
    return where


def _uncompressed_rows(kind: str, data: bytes, pos: int, end: int) -> tuple[bytes, int, int]:
    """A MariaDB compressed rows body as the plain one: column count and bitmap(s) as they are,
    then the inflated row images (MariaDB ``row_log_event_uncompress``)."""
    ncols, p = read_lenenc(data, pos)
    p += ((ncols + 7) // 8) * (2 if kind == ev.UPDATE else 1)
    plain = data[pos:p] + compressed.mariadb_uncompress(data, p, end)
    return plain, 0, len(plain)


def _checksum_aware(version: str) -> bool:
    """Servers from MySQL 5.6.1 / MariaDB 5.3 on write the checksum algorithm into FORMAT_DESCRIPTION."""
    numbers = []
    for part in version.split("-", 1)[0].split(".")[:3]:
        digits = "".join(ch for ch in part if ch.isdigit())
        numbers.append(int(digits or 0))
    triple = tuple(numbers + [0] * (3 - len(numbers)))
    if "mariadb" in version.lower():
        return triple >= (5, 3, 0)
    return triple >= (5, 6, 1)
