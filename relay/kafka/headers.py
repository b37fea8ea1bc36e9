"""What every record of a change carries besides its value: the header names and values, and the source
stamp (``Origin``).

Headers (bytes): ``relay.db``, ``relay.table`` (logical), ``relay.physical.db``,
``relay.physical.table``, ``relay.type`` (INSERT/UPDATE/DELETE/ALTER…), ``relay.tag`` (when the route
has one), ``relay.source.id`` (the relay's ``source.id``), ``relay.snapshot`` ("true", on snapshot reads
only), ``relay.sequence`` (decimal), ``relay.part`` (where it is not 0: the two records of a key change, the
rows of a transaction payload or of a snapshot chunk; see ``relay.kafka.sequences``).

``Origin`` is the source a record comes from: the source id (and its header) and the server read from
(``SourceIdentity``: ``host:port``, server id — the event's own when the configured one is 0 —, server
UUID), with the canal-json source block of each server id made once.

Pure values and functions: used per record on the publisher thread (one ``Origin`` per encoder).
"""

from __future__ import annotations

from mapping.model import Route
from relay.kafka import canal_json as codec_json
from relay.kafka.records import Record
from relay.positions.store import SourceIdentity
from relay.source.snapshot_entry import SNAPSHOT_PROP

H_DB = "relay.db"
H_TABLE = "relay.table"
H_PHYSICAL_DB = "relay.physical.db"
H_PHYSICAL_TABLE = "relay.physical.table"
H_TYPE = "relay.type"
H_TAG = "relay.tag"
H_SEQUENCE = "relay.sequence"
H_SOURCE_ID = "relay.source.id"
H_PART = "relay.part"
H_SNAPSHOT = SNAPSHOT_PROP  # "true" on a snapshot read (relay.source.snapshot_entry); absent on live changes

Headers = tuple[tuple[str, bytes], ...]


def text(value: str) -> bytes:
    """A name as header (or key) bytes; surrogateescape gives back the exact bytes of a name the binlog
    parser could not decode."""
    return value.encode("utf-8", "surrogateescape")


def route_headers(route: Route) -> tuple[Headers, Headers]:
    """(db, table, physical db, physical table headers; the tag header or ()) of ``route``."""
    headers = (
        (H_DB, text(route.logical_db)),
        (H_TABLE, text(route.logical_table)),
        (H_PHYSICAL_DB, text(route.physical_db)),
        (H_PHYSICAL_TABLE, text(route.physical_table)),
    )
    tag = ((H_TAG, text(route.tag)),) if route.tag is not None else ()
    return headers, tag


def identity(seq: int, part: int | None) -> Headers:
    """The change identity's headers: ``relay.sequence``, and ``relay.part`` where it is not 0."""
    if part is None:
        return ((H_SEQUENCE, str(seq).encode()),)
    return ((H_SEQUENCE, str(seq).encode()), (H_PART, str(part).encode()))


def snapshot_delete_headers(headers: Headers) -> Headers:
    """A snapshot chunk's headers (``relay.type`` INSERT) for a key snapshot's delete row: DELETE."""
    return tuple((H_TYPE, b"DELETE") if name == H_TYPE else (name, value) for name, value in headers)


def tombstone(record: Record) -> Record:
    """The compaction tombstone of a DELETE record: same topic, key and headers, null value."""
    return Record(record.topic, None, record.key, None, record.headers)


class Origin:
    """The source the records come from: its id, the server read from, and their renderings."""

    def __init__(self, source: SourceIdentity, source_id: str) -> None:
        self.source = source
        self.source_id = source_id
        self.header = (H_SOURCE_ID, text(source_id))
        self._servers: dict[int, str] = {}

    def server(self, header_server_id: int) -> str:
        """The canal-json source block's server fields. ``serverId`` is the configured source's id, or the
        event's when the source's is unknown (0)."""
        server_id = self.source.server_id or header_server_id
        block = self._servers.get(server_id)
        if block is None:
            block = self._servers[server_id] = codec_json.server_block(self.source, server_id, self.source_id)
        return block
