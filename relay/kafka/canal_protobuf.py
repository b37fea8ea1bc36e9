"""The canal-protobuf value: canal's ``Packet(MESSAGES)`` holding one Entry narrowed to one row.

Owned here: turning one row (or one DDL) of an Entry into the bytes canal's own Kafka consumer decodes —
``Packet{type=MESSAGES, version=1, compression=NONE, body=Messages{batch_id, messages=[Entry]}}``.
``relay.kafka.codec`` calls this on the publisher thread and hands the bytes to the publisher.

- ``batch_id`` is our sequence (stable across re-publication; canal's restarts at 1).
- The Entry is the row's entry narrowed to that one row: a RowChange with one RowData, the header's
  ``schemaName``/``tableName`` set to the LOGICAL names and its ``rowsCount`` prop set to 1.
- canal's Entry has no other place for our extensions, so they travel as header props (Pairs):
  ``relay.physical.db``, ``relay.physical.table``, ``relay.sequence``, ``relay.server``,
  ``relay.source.id`` (the relay's ``source.id``: with the sequence, the change identity), and ``relay.part``
  on the two records of a key-changing UPDATE.
- Protobuf strings must be UTF-8: SQL text holding bytes that are not (kept by the binlog parser as
  lone surrogates) goes out with those bytes replaced by U+FFFD. canal-json keeps them (escaped).

The wire form itself is ``relay.canal.proto.convert``'s (``messages_packet``); nothing is serialized here.
"""

from __future__ import annotations

import re
from dataclasses import replace

from mapping.model import Route
from relay.binlog.events import RowImage
from relay.canal.entry import Entry, EntryType, Header, RowChange
from relay.canal.proto.convert import messages_packet

PHYSICAL_DB = "relay.physical.db"
PHYSICAL_TABLE = "relay.physical.table"
SEQUENCE = "relay.sequence"
SERVER = "relay.server"
SOURCE_ID = "relay.source.id"
PART = "relay.part"
_ROWS_COUNT = "rowsCount"
_SURROGATE = re.compile("[\ud800-\udfff]")


def _header(
    entry: Entry, route: Route | None, sequence: int, server: str, source_id: str, *, rows: bool
) -> Header:
    h = entry.header
    props = [(k, "1") if rows and k == _ROWS_COUNT else (k, v) for k, v in h.props]
    props += [
        (PHYSICAL_DB, h.schema_name),
        (PHYSICAL_TABLE, h.table_name),
        (SEQUENCE, str(sequence)),
        (SERVER, server),
        (SOURCE_ID, source_id),
    ]
    if route is None:
        return replace(h, props=props)
    return replace(h, schema_name=route.logical_db, table_name=route.logical_table, props=props)


def _packet(entry: Entry, header: Header, rc: RowChange, sequence: int) -> bytes:
    narrowed = Entry(
        header=header,
        entry_type=EntryType.ROWDATA,
        store_value=rc,
        txn=entry.txn,
        txn_index=entry.txn_index,
        closes_txn=entry.closes_txn,
        generation=entry.generation,
    )
    return messages_packet(sequence, [narrowed])


def row_value(
    entry: Entry,
    rc: RowChange,
    row: RowImage,
    route: Route,
    sequence: int,
    server: str,
    source_id: str = "",
    part: int | None = None,
) -> bytes:
    """One row of a ROWDATA entry as a canal MESSAGES packet; ``part`` (the halves of a key change,
    ``relay.kafka.codec``) adds a ``relay.part`` header prop."""
    header = _header(entry, route, sequence, server, source_id, rows=True)
    if part is not None:
        header.props.append((PART, str(part)))
    one = RowChange(
        event_type=rc.event_type,
        table_id=rc.table_id,
        is_ddl=False,
        sql=rc.sql,
        ddl_schema_name=rc.ddl_schema_name,
        columns=rc.columns,
        rows=(row,),
        props=list(rc.props),
    )
    return _packet(entry, header, one, sequence)


def statement_value(
    entry: Entry, rc: RowChange, route: Route | None, sequence: int, server: str, source_id: str = ""
) -> bytes:
    """A DDL (or other statement) entry as a canal MESSAGES packet; logical names when ``route`` is set."""
    header = _header(entry, route, sequence, server, source_id, rows=False)
    statement = replace(rc, sql=utf8_text(rc.sql), props=list(rc.props))
    return _packet(entry, header, statement, sequence)


def utf8_text(text: str) -> str:
    """``text`` with lone surrogates (undecodable binlog bytes) replaced, so protobuf can encode it."""
    return _SURROGATE.sub("\ufffd", text)
