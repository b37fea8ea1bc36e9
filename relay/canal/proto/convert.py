"""Our protocol model (``relay.canal.entry``) to canal's protobuf messages and back.

``entry_to_pb`` builds canal's ``Entry`` with ``storeValue`` holding the serialized ``RowChange``,
``TransactionBegin`` or ``TransactionEnd`` (columns built from ``RowChange.row_datas()``);
``messages_packet`` wraps entries the way canal puts them on Kafka in protobuf mode:
``Packet{type=MESSAGES, version=1, compression=NONE, body=Messages{batch_id, messages}}``.
The decoders (``entry_from_pb``, ``decode_messages_packet``) give model values back, for tests and
for readers of our topics.

Presence follows canal's builder calls, so the bytes match what canal writes: the header's ``version``
and ``sourceType`` are always set, its ``eventType`` only when there is one (canal leaves it unset on
TRANSACTIONBEGIN/END); ``RowChange.isDdl`` is set to true on DDL, explicitly to false on row changes
and left unset on other statements; ``Column.isNull`` is always set.

Pure functions: no state, safe on any thread.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import cast

from google.protobuf.internal.containers import RepeatedCompositeFieldContainer
from google.protobuf.message import DecodeError as PbDecodeError

from relay.binlog.events import ColumnMeta, RowImage
from relay.canal.entry import (
    Column,
    Entry,
    EntryPosition,
    EntryType,
    EventType,
    Header,
    RowChange,
    RowData,
    SourceType,
    TransactionBegin,
    TransactionEnd,
    TxnContext,
)
from relay.canal.proto import entry_pb2 as pb
from relay.canal.proto import packet_pb2 as pk
from relay.errors import ProtoDecodeError

PACKET_VERSION = 1
_ROW_EVENTS = frozenset({EventType.INSERT, EventType.UPDATE, EventType.DELETE})


# -- model → protobuf ------------------------------------------------------------------------------


def _pairs(repeated: RepeatedCompositeFieldContainer[pb.Pair], props: list[tuple[str, str]]) -> None:
    for key, value in props:
        repeated.add(key=key, value=value)


def header_to_pb(h: Header) -> pb.Header:
    out = pb.Header(
        version=h.version,
        logfileName=h.logfile_name,
        logfileOffset=h.logfile_offset,
        serverId=h.server_id,
        serverenCode=h.serveren_code,
        executeTime=h.execute_time,
        sourceType=cast(pb.Type, int(h.source_type)),
        schemaName=h.schema_name,
        tableName=h.table_name,
        eventLength=h.event_length,
        gtid=h.gtid,
    )
    if h.event_type != EventType.EVENTTYPECOMPATIBLEPROTO2:
        out.eventType = cast(pb.EventType, int(h.event_type))
    _pairs(out.props, h.props)
    return out


def _columns_to_pb(target: RepeatedCompositeFieldContainer[pb.Column], columns: list[Column]) -> None:
    for c in columns:
        col = target.add(
            index=c.index,
            sqlType=c.sql_type,
            name=c.name,
            isKey=c.is_key,
            updated=c.updated,
            isNull=c.is_null,
            value=c.value,
            length=c.length,
            mysqlType=c.mysql_type,
        )
        _pairs(col.props, c.props)


def row_change_to_pb(rc: RowChange) -> pb.RowChange:
    out = pb.RowChange(tableId=rc.table_id, eventType=cast(pb.EventType, int(rc.event_type)), sql=rc.sql)
    if rc.is_ddl:
        out.isDdl = True
    elif rc.event_type in _ROW_EVENTS:
        out.isDdl = False  # canal sets it explicitly on row changes
    if rc.ddl_schema_name:
        out.ddlSchemaName = rc.ddl_schema_name
    for rd in rc.row_datas():
        row = out.rowDatas.add()
        _columns_to_pb(row.beforeColumns, rd.before_columns)
        _columns_to_pb(row.afterColumns, rd.after_columns)
        _pairs(row.props, rd.props)
    _pairs(out.props, rc.props)
    return out


def _store_value(value: RowChange | TransactionBegin | TransactionEnd | None) -> bytes:
    if value is None:
        return b""
    if isinstance(value, RowChange):
        return row_change_to_pb(value).SerializeToString()
    if isinstance(value, TransactionBegin):
        begin = pb.TransactionBegin(
            executeTime=value.execute_time, transactionId=value.transaction_id, threadId=value.thread_id
        )
        _pairs(begin.props, value.props)
        return begin.SerializeToString()
    end = pb.TransactionEnd(executeTime=value.execute_time, transactionId=value.transaction_id)
    _pairs(end.props, value.props)
    return end.SerializeToString()


def entry_to_pb(entry: Entry) -> pb.Entry:
    return pb.Entry(
        header=header_to_pb(entry.header),
        entryType=cast(pb.EntryType, int(entry.entry_type)),
        storeValue=_store_value(entry.store_value),
    )


def entry_to_bytes(entry: Entry) -> bytes:
    return entry_to_pb(entry).SerializeToString()


def messages_packet(batch_id: int, entries: Iterable[Entry | bytes]) -> bytes:
    """canal's Kafka value in protobuf mode: a MESSAGES packet holding the serialized entries."""
    body = pk.Messages(batch_id=batch_id)
    body.messages.extend(e if isinstance(e, bytes) else entry_to_bytes(e) for e in entries)
    packet = pk.Packet(
        version=PACKET_VERSION,
        type=pk.MESSAGES,
        compression=pk.NONE,
        body=body.SerializeToString(),
    )
    return packet.SerializeToString()


# -- protobuf → model ------------------------------------------------------------------------------


@dataclass(slots=True)
class DecodedRowChange(RowChange):
    """A RowChange read from canal bytes: ``row_datas()`` returns the decoded rows exactly as sent.

    ``columns``/``rows`` are filled too when every image carries the same columns 0..n-1 (canal's
    full row image); the column metadata canal does not send (type code, charset …) is zero there.
    """

    decoded_rows: list[RowData] = field(default_factory=list)

    def row_datas(self) -> list[RowData]:
        return self.decoded_rows


def _props(repeated: Iterable[pb.Pair]) -> list[tuple[str, str]]:
    return [(p.key, p.value) for p in repeated]


def header_from_pb(h: pb.Header) -> Header:
    event_type = h.eventType if h.HasField("eventType") else EventType.EVENTTYPECOMPATIBLEPROTO2
    return Header(
        logfile_name=h.logfileName,
        logfile_offset=h.logfileOffset,
        server_id=h.serverId,
        execute_time=h.executeTime,
        event_length=h.eventLength,
        event_type=EventType(event_type),
        schema_name=h.schemaName,
        table_name=h.tableName,
        gtid=h.gtid,
        props=_props(h.props),
        version=h.version,
        serveren_code=h.serverenCode,
        source_type=SourceType(h.sourceType),
    )


def _column_from_pb(c: pb.Column) -> Column:
    return Column(
        index=c.index,
        sql_type=c.sqlType,
        name=c.name,
        is_key=c.isKey,
        updated=c.updated,
        is_null=c.isNull,
        value=c.value,
        length=c.length,
        mysql_type=c.mysqlType,
        props=_props(c.props),
    )


def _meta(columns: list[Column]) -> tuple[ColumnMeta, ...] | None:
    """Column metadata from one image, or None when its indexes are not 0..n-1 (minimal images)."""
    if [c.index for c in columns] != list(range(len(columns))):
        return None
    return tuple(
        ColumnMeta(
            index=c.index,
            name=c.name,
            type_code=0,
            meta=0,
            nullable=True,
            unsigned=False,
            charset=None,
            is_key=c.is_key,
            mysql_type=c.mysql_type,
            sql_type=c.sql_type,
            length=c.length,
        )
        for c in columns
    )


def _image(columns: list[Column]) -> tuple[str | None, ...] | None:
    return tuple(None if c.is_null else c.value for c in columns) if columns else None


def _rows(rows: list[RowData]) -> tuple[tuple[ColumnMeta, ...], tuple[RowImage, ...]]:
    if not rows:
        return (), ()
    first = rows[0].after_columns or rows[0].before_columns
    meta = _meta(first)
    names = [c.name for c in first]
    for rd in rows:
        for image in (rd.before_columns, rd.after_columns):
            if image and [c.name for c in image] != names:
                return (), ()
    if meta is None:
        return (), ()
    return meta, tuple(RowImage(_image(rd.before_columns), _image(rd.after_columns)) for rd in rows)


def row_change_from_pb(data: bytes) -> DecodedRowChange:
    rc = pb.RowChange.FromString(data)
    rows = [
        RowData(
            before_columns=[_column_from_pb(c) for c in rd.beforeColumns],
            after_columns=[_column_from_pb(c) for c in rd.afterColumns],
            props=_props(rd.props),
        )
        for rd in rc.rowDatas
    ]
    columns, images = _rows(rows)
    return DecodedRowChange(
        event_type=EventType(rc.eventType),
        table_id=rc.tableId,
        is_ddl=rc.isDdl,
        sql=rc.sql,
        ddl_schema_name=rc.ddlSchemaName,
        columns=columns,
        rows=images,
        props=_props(rc.props),
        decoded_rows=rows,
    )


def _value_from_pb(
    entry_type: EntryType, data: bytes
) -> RowChange | TransactionBegin | TransactionEnd | None:
    if entry_type == EntryType.ROWDATA:
        return row_change_from_pb(data)
    if entry_type == EntryType.TRANSACTIONBEGIN:
        b = pb.TransactionBegin.FromString(data)
        return TransactionBegin(b.executeTime, b.transactionId, b.threadId, _props(b.props))
    if entry_type == EntryType.TRANSACTIONEND:
        e = pb.TransactionEnd.FromString(data)
        return TransactionEnd(e.executeTime, e.transactionId, _props(e.props))
    return None


def entry_from_pb(data: bytes | pb.Entry) -> Entry:
    """A model Entry from canal bytes. The relay-side context is what the header can tell: the
    transaction starts at this entry, ``closes_txn`` on TRANSACTIONEND."""
    try:
        msg = data if isinstance(data, pb.Entry) else pb.Entry.FromString(data)
        entry_type = EntryType(msg.entryType)
        header = header_from_pb(msg.header)
        value = _value_from_pb(entry_type, msg.storeValue)
    except (PbDecodeError, ValueError) as exc:
        raise ProtoDecodeError(f"not a canal Entry: {exc}") from exc
    start = EntryPosition(
        header.logfile_name, header.logfile_offset, header.server_id, header.gtid, header.execute_time
    )
    return Entry(
        header=header,
        entry_type=entry_type,
        store_value=value,
        txn=TxnContext(start=start, gtid=header.gtid),
        closes_txn=entry_type == EntryType.TRANSACTIONEND,
    )


def decode_messages_packet(data: bytes) -> tuple[int, list[Entry]]:
    """(batch_id, entries) from a canal MESSAGES packet with an uncompressed body."""
    try:
        packet = pk.Packet.FromString(data)
        if packet.type != pk.MESSAGES:
            raise ProtoDecodeError(f"packet type {packet.type} is not MESSAGES ({pk.MESSAGES})")
        if packet.HasField("compression") and packet.compression not in (pk.NONE, 0):
            raise ProtoDecodeError(f"compressed packet bodies are not supported ({packet.compression})")
        body = pk.Messages.FromString(packet.body)
    except PbDecodeError as exc:
        raise ProtoDecodeError(f"not a canal Packet: {exc}") from exc
    return body.batch_id, [entry_from_pb(m) for m in body.messages]


def renamed_packet(data: bytes, schema_name: str, table_name: str) -> bytes | None:
    """A MESSAGES packet with each entry's header naming ``schema_name``.``table_name`` (a record copied
    into the topic of a table's new logical names: ``relay.kafka.remap``), every other field as it was;
    None when ``data`` is not such a packet."""
    try:
        packet = pk.Packet.FromString(data)
        if packet.type != pk.MESSAGES or (packet.HasField("compression") and packet.compression != pk.NONE):
            return None
        body = pk.Messages.FromString(packet.body)
        entries = [pb.Entry.FromString(m) for m in body.messages]
    except PbDecodeError:
        return None
    if all(e.header.schemaName == schema_name and e.header.tableName == table_name for e in entries):
        return data
    for i, entry in enumerate(entries):
        entry.header.schemaName, entry.header.tableName = schema_name, table_name
        body.messages[i] = entry.SerializeToString()
    packet.body = body.SerializeToString()
    return packet.SerializeToString()
