"""The canal-json value: canal's FlatMessage with ONE row in ``data``, plus our source block and sequence.

Owned here: the bytes of a canal-json record value, built from fragments. Everything that is the same for
every row of a table (logical names, ``pkNames``, ``sqlType``, ``mysqlType``, the physical names of the
source block) is serialized once per (route, columns) into a ``JsonTable``; what is the same for every row
of one entry (type, event time, GTID, binlog position) once per entry into a ``JsonEntry``; per row only
the row's values (one C-encoder call), the previous values of an UPDATE, the sequence and the row index
are encoded. ``relay.kafka.codec`` calls this on the publisher thread and hands the bytes to the publisher.

Field order is canal's, then ours (readers of canal-json ignore unknown fields)::

    id database table pkNames isDdl type es ts sql sqlType mysqlType data old gtid | source sequence utcMicros

``utcMicros`` appears only where the row has TIMESTAMP values that know their instant. ``snapshot`` (true)
appears only on snapshot reads (``snapshot_row_text``, right after ``sequence``): INSERTs with ``es``/``ts``
the time the chunk's rows were read, ``old`` null, ``rowIndex`` 0 and the sequence their chunk shares
(``relay.source.snapshot_entry``).
``part`` (``relay.kafka.codec``) comes last where a record has one.

- ``id`` is our sequence (canal's batch id restarts at 1 on every start; ours is stable across
  re-publication, and a non-negative Java long as canal's), ``sequence`` repeats it under an
  unambiguous name; the source block's ``id`` is the source id, the other half of the change identity.
- ``ts`` equals ``es`` (the binlog time, ms) instead of canal's "time the message was built", so that a
  re-publication of the same change is byte-identical; the build time is the Kafka record timestamp.
- ``pkNames`` holds the table's PRIMARY KEY columns (canal's meaning), even where the mapping sets other
  key columns for the Kafka key; null when the table has no primary key and on DDL, as canal leaves it.
- ``old`` (UPDATE only) holds the previous values of the changed columns; null when none changed and on
  every other type, as canal.
- Values are canal's text forms; SQL NULL is JSON null. BINARY/VARBINARY/BLOB values are canal's
  ISO-8859-1 text (one character per byte) and go into the JSON as those characters: a consumer gets the
  bytes back with ``value.encode("latin-1")``.
- ``utcMicros`` (rows of tables with TIMESTAMP columns, decoded from the binlog): ``[{column: epoch
  microseconds}]`` of the row's non-zero TIMESTAMP values in ``data``. ``data`` renders TIMESTAMP in the
  server's zone as canal does (unchanged for canal/Flink readers), which is ambiguous in the hour a DST
  change repeats and needs the zone to read; ``utcMicros`` is the instant itself (a snapshot SELECT reads
  it with ``UNIX_TIMESTAMP``: the same as the binlog's). Absent where no value has one (no TIMESTAMP
  column, all NULL or zero).
- Output is ``json.dumps(..., ensure_ascii=False, separators=(",", ":"))`` encoded as UTF-8. A statement
  whose SQL text holds bytes that are not UTF-8 (the binlog parser keeps them as lone surrogates) is
  written with ASCII escapes instead, so the value is still valid UTF-8 JSON and keeps those bytes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from mapping.model import Route
from relay import _native
from relay.binlog.events import ColumnMeta
from relay.binlog.rows import Instant
from relay.canal.entry import Entry, RowChange
from relay.positions.store import SourceIdentity

dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
_dumps_ascii = json.JSONEncoder(ensure_ascii=True, separators=(",", ":")).encode
# The string encoder ``dumps`` itself uses (C when available): per row, objects are assembled from
# pre-encoded ``"name":`` fragments and one call per value, the same text as ``dumps(dict)`` without
# building a dict and an encoder per row (the encoder's set-up cost more than the values).
_quote = json.encoder.encode_basestring

# The C helper (relay/kafka/_jsontext.c, built with the compiled modules): a row's ``data`` object straight
# to UTF-8 bytes, the same bytes as ``object_text(...).encode()``; None where it is not built or the relay
# runs pure Python (RELAY_PURE_PYTHON=1), and then ``object_text`` alone builds every row.
# Beside it, an UPDATE's ``old`` field the same way (``old_bytes``: ``old_text(...).encode()``).
ObjectBytes = Callable[[tuple[bytes, ...], Sequence[str | None]], bytes | None]
OldBytes = Callable[[tuple[bytes, ...], Sequence[str | None], Sequence[str | None]], bytes | None]
object_bytes: ObjectBytes | None = None
old_bytes: OldBytes | None = None
if _native.mode == "compiled":
    try:
        from relay.kafka._jsontext import object_bytes as _object_bytes
        from relay.kafka._jsontext import old_bytes as _old_bytes

        object_bytes = _object_bytes
        old_bytes = _old_bytes
    except ImportError:  # an interrupted build: the Python path
        pass


def _field(name: str, value: Any) -> str:
    """``"name":value`` as JSON text."""
    return f"{dumps(name)}:{dumps(value)}"


def server_block(source: SourceIdentity, server_id: int, source_id: str = "") -> str:
    """The source block's leading fields (one per encoder and server id): ``id`` is the relay's source id
    (``source.id``), the first half of the change identity (source id, sequence)."""
    return ",".join(
        (
            _field("id", source_id),
            _field("server", source.address),
            _field("serverId", server_id),
            _field("serverUuid", source.server_uuid),
        )
    )


@dataclass(frozen=True, slots=True)
class JsonTable:
    """The JSON text shared by every row of one (route, columns)."""

    names: tuple[str, ...]  # column names, in column order (the keys of ``data``)
    keys: tuple[str, ...]  # the JSON fragment ``"name":`` of each column
    data_format: str  # ``object_format(keys)``: the ``data`` object of a row
    head: str  # ,"database":…,"table":…,"pkNames":…,"isDdl":false,"type":"
    schema: str  # ,"sql":"","sqlType":{…},"mysqlType":{…},"data":[
    physical: str  # "database":…,"table":…  (inside the source block)
    instants: tuple[tuple[int, str], ...] = ()  # (index, ``"name":``) of the TIMESTAMP columns
    # ``keys`` as UTF-8, for ``object_bytes``; None where a name does not encode (the Python path then
    # raises as it always did)
    key_bytes: tuple[bytes, ...] | None = None


def json_table(route: Route, columns: Sequence[ColumnMeta]) -> JsonTable:
    pk_names = [c.name for c in columns if c.is_key] or None
    head = ",".join(
        (
            "",
            _field("database", route.logical_db),
            _field("table", route.logical_table),
            _field("pkNames", pk_names),
            '"isDdl":false,"type":"',
        )
    )
    schema = ",".join(
        (
            "",
            '"sql":""',
            _field("sqlType", {c.name: c.sql_type for c in columns}),
            _field("mysqlType", {c.name: c.mysql_type for c in columns}),
            '"data":[',
        )
    )
    physical = f"{_field('database', route.physical_db)},{_field('table', route.physical_table)}"
    names = tuple(c.name for c in columns)
    keys = tuple(f"{dumps(n)}:" for n in names)
    instants = tuple(
        (i, keys[i]) for i, c in enumerate(columns) if c.mysql_type.lower().startswith("timestamp")
    )
    try:
        key_bytes: tuple[bytes, ...] | None = tuple(k.encode() for k in keys)
    except UnicodeEncodeError:
        key_bytes = None
    return JsonTable(names, keys, object_format(keys), head, schema, physical, instants, key_bytes)


@dataclass(init=False, slots=True)
class JsonEntry:
    """The JSON text shared by every row of one entry: everything but id, data, old, rowIndex, sequence.
    Built once per entry: an explicit ``__init__``, which mypyc compiles (a dataclass's stays interpreted)."""

    middle: str  # from ,"database" up to "data":[
    tail: str  # from ,"gtid" up to "rowIndex":

    def __init__(self, middle: str, tail: str) -> None:
        self.middle = middle
        self.tail = tail


def json_entry(table: JsonTable, server: str, entry: Entry, type_name: str) -> JsonEntry:
    h = entry.header
    es = h.execute_time
    # type_name is an EventType member name: plain ASCII, needs no escaping.
    middle = f'{table.head}{type_name}","es":{es},"ts":{es}{table.schema}'
    gtid = _quote(h.gtid)  # what dumps() writes for a str, without an encoder per entry
    tail = (
        f',"gtid":{gtid},"source":{{{server},{table.physical},'
        f'"file":{_quote(h.logfile_name)},"offset":{h.logfile_offset},"gtid":{gtid},"rowIndex":'
    )
    return JsonEntry(middle, tail)


def row_value(
    je: JsonEntry,
    sequence: int,
    row_index: int,
    data: dict[str, str | None],
    old: dict[str, str | None] | None,
) -> bytes:
    """One row's canal-json value."""
    old_text = "null" if not old else f"[{dumps(old)}]"
    return (
        f'{{"id":{sequence}{je.middle}{dumps(data)}],"old":{old_text}{je.tail}{row_index}}},'
        f'"sequence":{sequence}}}'
    ).encode()


def object_format(keys: Sequence[str]) -> str:
    """The %-format of a JSON object with these ``"name":`` fragments: ``{"a":%s,"b":%s}``."""
    return "{" + ",".join(k.replace("%", "%%") + "%s" for k in keys) + "}"


def object_text(form: str, values: Sequence[str | None]) -> str:
    """``dumps(dict(zip(names, values)))`` for text-or-None values, ``form`` being ``object_format`` of
    the names' ``"name":`` fragments (distinct names)."""
    if None in values:
        return form % tuple(["null" if v is None else _quote(v) for v in values])
    return form % tuple(map(_quote, values))  # type: ignore[arg-type]  # no None: checked above


def old_text(keys: Sequence[str], before: Sequence[str | None], after: Sequence[str | None]) -> str:
    """The ``old`` field of an UPDATE: ``[{changed columns' previous values}]``, or ``null``."""
    parts = [
        k + ("null" if b is None else _quote(b))
        for k, b, a in zip(keys, before, after, strict=True)
        if b != a
    ]
    return "[{" + ",".join(parts) + "}]" if parts else "null"


def row_text(je: JsonEntry, sequence: int, row_index: int, data: str, old: str, extra: str = "") -> bytes:
    """One row's canal-json value from its ``data`` object text, ``old`` field text and the ``utcMicros``
    field text (``instants_text``; "" for none)."""
    return (
        f'{{"id":{sequence}{je.middle}{data}],"old":{old}{je.tail}{row_index}}},"sequence":{sequence}{extra}}}'
    ).encode()


def row_bytes(
    middle: bytes, tail: bytes, sequence: int, row_index: int, data: bytes, old: bytes, extra: str = ""
) -> bytes:
    """``row_text`` from the ``data`` object and the ``old`` field already as UTF-8 (``object_bytes``,
    ``old_bytes``) and the entry's ``middle`` and ``tail`` encoded once: the same bytes, without encoding
    the whole row again."""
    return b'{"id":%d%b%b],"old":%b%b%d},"sequence":%d%b}' % (
        sequence,
        middle,
        data,
        old,
        tail,
        row_index,
        sequence,
        extra.encode(),
    )


def snapshot_row_text(je: JsonEntry, sequence: int, data: str, extra: str = "") -> bytes:
    """A snapshot read's value: an INSERT (``old`` null, ``rowIndex`` 0) with ``"snapshot":true`` after
    ``sequence`` (and ``utcMicros``, ``extra``). canal has no READ type; readers that ignore unknown
    fields see an INSERT."""
    return (
        f'{{"id":{sequence}{je.middle}{data}],"old":null{je.tail}0}},"sequence":{sequence}{extra},'
        '"snapshot":true}'
    ).encode()


def snapshot_row_bytes(middle: bytes, tail: bytes, sequence: int, data: bytes, extra: str = "") -> bytes:
    """``snapshot_row_text`` from the ``data`` object already as UTF-8 (``object_bytes``) and the entry's
    ``middle`` and ``tail`` encoded once: the same bytes."""
    return b'{"id":%d%b%b],"old":null%b0},"sequence":%d%b,"snapshot":true}' % (
        sequence,
        middle,
        data,
        tail,
        sequence,
        extra.encode(),
    )


def instants_text(table: JsonTable, image: Sequence[str | None]) -> str:
    """``,"utcMicros":[{…}]`` for the row's TIMESTAMP values that know their instant, or ""."""
    parts = [f"{key}{image[i].micros}" for i, key in table.instants if isinstance(image[i], Instant)]  # type: ignore[union-attr]
    return ',"utcMicros":[{' + ",".join(parts) + "}]" if parts else ""


def changed(
    names: tuple[str, ...], before: Sequence[str | None], after: Sequence[str | None]
) -> dict[str, str | None]:
    """The previous values of the columns an UPDATE changed (canal's ``updated`` columns)."""
    return {name: b for name, b, a in zip(names, before, after, strict=True) if b != a}


def statement_value(
    entry: Entry,
    rc: RowChange,
    *,
    sequence: int,
    names: tuple[str, str],
    physical: tuple[str, str],
    server: dict[str, Any],
) -> bytes:
    """A DDL (``isDdl`` true) or other statement as canal-json: ``data``/``old``/``sqlType``/``mysqlType``
    null. ``names`` are the (database, table) the message shows, ``physical`` those of the source block."""
    h = entry.header
    message: dict[str, Any] = {
        "id": sequence,
        "database": names[0],
        "table": names[1],
        "pkNames": None,
        "isDdl": rc.is_ddl,
        "type": rc.event_type.name,
        "es": h.execute_time,
        "ts": h.execute_time,
        "sql": rc.sql,
        "sqlType": None,
        "mysqlType": None,
        "data": None,
        "old": None,
        "gtid": h.gtid,
        "source": {
            **server,
            "database": physical[0],
            "table": physical[1],
            "file": h.logfile_name,
            "offset": h.logfile_offset,
            "gtid": h.gtid,
            "rowIndex": 0,
        },
        "sequence": sequence,
    }
    text = dumps(message)
    try:
        return text.encode()
    except UnicodeEncodeError:
        return _dumps_ascii(message).encode()
