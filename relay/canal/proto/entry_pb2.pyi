from collections.abc import Iterable as _Iterable
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar

from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper

DESCRIPTOR: _descriptor.FileDescriptor

class EntryType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ENTRYTYPECOMPATIBLEPROTO2: _ClassVar[EntryType]
    TRANSACTIONBEGIN: _ClassVar[EntryType]
    ROWDATA: _ClassVar[EntryType]
    TRANSACTIONEND: _ClassVar[EntryType]
    HEARTBEAT: _ClassVar[EntryType]
    GTIDLOG: _ClassVar[EntryType]

class EventType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EVENTTYPECOMPATIBLEPROTO2: _ClassVar[EventType]
    INSERT: _ClassVar[EventType]
    UPDATE: _ClassVar[EventType]
    DELETE: _ClassVar[EventType]
    CREATE: _ClassVar[EventType]
    ALTER: _ClassVar[EventType]
    ERASE: _ClassVar[EventType]
    QUERY: _ClassVar[EventType]
    TRUNCATE: _ClassVar[EventType]
    RENAME: _ClassVar[EventType]
    CINDEX: _ClassVar[EventType]
    DINDEX: _ClassVar[EventType]
    GTID: _ClassVar[EventType]
    XACOMMIT: _ClassVar[EventType]
    XAROLLBACK: _ClassVar[EventType]
    MHEARTBEAT: _ClassVar[EventType]

class Type(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TYPECOMPATIBLEPROTO2: _ClassVar[Type]
    ORACLE: _ClassVar[Type]
    MYSQL: _ClassVar[Type]
    PGSQL: _ClassVar[Type]
ENTRYTYPECOMPATIBLEPROTO2: EntryType
TRANSACTIONBEGIN: EntryType
ROWDATA: EntryType
TRANSACTIONEND: EntryType
HEARTBEAT: EntryType
GTIDLOG: EntryType
EVENTTYPECOMPATIBLEPROTO2: EventType
INSERT: EventType
UPDATE: EventType
DELETE: EventType
CREATE: EventType
ALTER: EventType
ERASE: EventType
QUERY: EventType
TRUNCATE: EventType
RENAME: EventType
CINDEX: EventType
DINDEX: EventType
GTID: EventType
XACOMMIT: EventType
XAROLLBACK: EventType
MHEARTBEAT: EventType
TYPECOMPATIBLEPROTO2: Type
ORACLE: Type
MYSQL: Type
PGSQL: Type

class Entry(_message.Message):
    __slots__ = ("entryType", "header", "storeValue")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    ENTRYTYPE_FIELD_NUMBER: _ClassVar[int]
    STOREVALUE_FIELD_NUMBER: _ClassVar[int]
    header: Header
    entryType: EntryType
    storeValue: bytes
    def __init__(self, header: Header | _Mapping | None = ..., entryType: EntryType | str | None = ..., storeValue: bytes | None = ...) -> None: ...

class Header(_message.Message):
    __slots__ = ("eventLength", "eventType", "executeTime", "gtid", "logfileName", "logfileOffset", "props", "schemaName", "serverId", "serverenCode", "sourceType", "tableName", "version")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    LOGFILENAME_FIELD_NUMBER: _ClassVar[int]
    LOGFILEOFFSET_FIELD_NUMBER: _ClassVar[int]
    SERVERID_FIELD_NUMBER: _ClassVar[int]
    SERVERENCODE_FIELD_NUMBER: _ClassVar[int]
    EXECUTETIME_FIELD_NUMBER: _ClassVar[int]
    SOURCETYPE_FIELD_NUMBER: _ClassVar[int]
    SCHEMANAME_FIELD_NUMBER: _ClassVar[int]
    TABLENAME_FIELD_NUMBER: _ClassVar[int]
    EVENTLENGTH_FIELD_NUMBER: _ClassVar[int]
    EVENTTYPE_FIELD_NUMBER: _ClassVar[int]
    PROPS_FIELD_NUMBER: _ClassVar[int]
    GTID_FIELD_NUMBER: _ClassVar[int]
    version: int
    logfileName: str
    logfileOffset: int
    serverId: int
    serverenCode: str
    executeTime: int
    sourceType: Type
    schemaName: str
    tableName: str
    eventLength: int
    eventType: EventType
    props: _containers.RepeatedCompositeFieldContainer[Pair]
    gtid: str
    def __init__(self, version: int | None = ..., logfileName: str | None = ..., logfileOffset: int | None = ..., serverId: int | None = ..., serverenCode: str | None = ..., executeTime: int | None = ..., sourceType: Type | str | None = ..., schemaName: str | None = ..., tableName: str | None = ..., eventLength: int | None = ..., eventType: EventType | str | None = ..., props: _Iterable[Pair | _Mapping] | None = ..., gtid: str | None = ...) -> None: ...

class Column(_message.Message):
    __slots__ = ("index", "isKey", "isNull", "length", "mysqlType", "name", "props", "sqlType", "updated", "value")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    SQLTYPE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ISKEY_FIELD_NUMBER: _ClassVar[int]
    UPDATED_FIELD_NUMBER: _ClassVar[int]
    ISNULL_FIELD_NUMBER: _ClassVar[int]
    PROPS_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    MYSQLTYPE_FIELD_NUMBER: _ClassVar[int]
    index: int
    sqlType: int
    name: str
    isKey: bool
    updated: bool
    isNull: bool
    props: _containers.RepeatedCompositeFieldContainer[Pair]
    value: str
    length: int
    mysqlType: str
    def __init__(self, index: int | None = ..., sqlType: int | None = ..., name: str | None = ..., isKey: bool | None = ..., updated: bool | None = ..., isNull: bool | None = ..., props: _Iterable[Pair | _Mapping] | None = ..., value: str | None = ..., length: int | None = ..., mysqlType: str | None = ...) -> None: ...

class RowData(_message.Message):
    __slots__ = ("afterColumns", "beforeColumns", "props")
    BEFORECOLUMNS_FIELD_NUMBER: _ClassVar[int]
    AFTERCOLUMNS_FIELD_NUMBER: _ClassVar[int]
    PROPS_FIELD_NUMBER: _ClassVar[int]
    beforeColumns: _containers.RepeatedCompositeFieldContainer[Column]
    afterColumns: _containers.RepeatedCompositeFieldContainer[Column]
    props: _containers.RepeatedCompositeFieldContainer[Pair]
    def __init__(self, beforeColumns: _Iterable[Column | _Mapping] | None = ..., afterColumns: _Iterable[Column | _Mapping] | None = ..., props: _Iterable[Pair | _Mapping] | None = ...) -> None: ...

class RowChange(_message.Message):
    __slots__ = ("ddlSchemaName", "eventType", "isDdl", "props", "rowDatas", "sql", "tableId")
    TABLEID_FIELD_NUMBER: _ClassVar[int]
    EVENTTYPE_FIELD_NUMBER: _ClassVar[int]
    ISDDL_FIELD_NUMBER: _ClassVar[int]
    SQL_FIELD_NUMBER: _ClassVar[int]
    ROWDATAS_FIELD_NUMBER: _ClassVar[int]
    PROPS_FIELD_NUMBER: _ClassVar[int]
    DDLSCHEMANAME_FIELD_NUMBER: _ClassVar[int]
    tableId: int
    eventType: EventType
    isDdl: bool
    sql: str
    rowDatas: _containers.RepeatedCompositeFieldContainer[RowData]
    props: _containers.RepeatedCompositeFieldContainer[Pair]
    ddlSchemaName: str
    def __init__(self, tableId: int | None = ..., eventType: EventType | str | None = ..., isDdl: bool | None = ..., sql: str | None = ..., rowDatas: _Iterable[RowData | _Mapping] | None = ..., props: _Iterable[Pair | _Mapping] | None = ..., ddlSchemaName: str | None = ...) -> None: ...

class TransactionBegin(_message.Message):
    __slots__ = ("executeTime", "props", "threadId", "transactionId")
    EXECUTETIME_FIELD_NUMBER: _ClassVar[int]
    TRANSACTIONID_FIELD_NUMBER: _ClassVar[int]
    PROPS_FIELD_NUMBER: _ClassVar[int]
    THREADID_FIELD_NUMBER: _ClassVar[int]
    executeTime: int
    transactionId: str
    props: _containers.RepeatedCompositeFieldContainer[Pair]
    threadId: int
    def __init__(self, executeTime: int | None = ..., transactionId: str | None = ..., props: _Iterable[Pair | _Mapping] | None = ..., threadId: int | None = ...) -> None: ...

class TransactionEnd(_message.Message):
    __slots__ = ("executeTime", "props", "transactionId")
    EXECUTETIME_FIELD_NUMBER: _ClassVar[int]
    TRANSACTIONID_FIELD_NUMBER: _ClassVar[int]
    PROPS_FIELD_NUMBER: _ClassVar[int]
    executeTime: int
    transactionId: str
    props: _containers.RepeatedCompositeFieldContainer[Pair]
    def __init__(self, executeTime: int | None = ..., transactionId: str | None = ..., props: _Iterable[Pair | _Mapping] | None = ...) -> None: ...

class Pair(_message.Message):
    __slots__ = ("key", "value")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: str
    def __init__(self, key: str | None = ..., value: str | None = ...) -> None: ...
