"""A snapshot chunk as a store entry: where it sits in the binlog, its rows' identity, its memory size.

A chunk put at the binlog place ``P`` (a transaction boundary at or after its high watermark:
``relay.source.snapshot_watermarks``) becomes ONE entry at ``P - 1`` (offset ``P - 1``, length 1: the
resume point after it is ``P``), so every row of the chunk gets ``sequence = (generation << 52) |
(file << 32) | (P - 1)``. Every change read before the chunk came from an event that ends at or before
``P``, and its rows' sequences are below ``P - 19`` (an event is longer than its row count plus its
19-byte header); every change after it has a sequence ``>= P``. So per key: earlier changes < snapshot
row < later changes, and the changes between the SELECT and ``P`` superseded the row (it was dropped).
The rows of one chunk share the sequence: the change identity of a snapshot row is (source id, sequence,
key), and chunks put at the same place are told apart by their ``ordinal``. A chunk read again (after a
restart) at the same ``P`` saw the same rows — no change was logged in between — and gives byte-identical
records; read at a later ``P'`` it gives new identities that sort after everything the earlier copy could
be ordered against.

Built on the parser thread; read by the store, the codec (``relay.kafka.codec``) and the ack path.
"""

from __future__ import annotations

import copy
from typing import Any

from relay.binlog.events import RowImage
from relay.canal.entry import Entry, EntryPosition, EntryType, EventType, Header, RowChange, TxnContext
from relay.source.snapshot_tables import TableSpec

SNAPSHOT_PROP = "relay.snapshot"  # RowChange.props marker of a snapshot chunk (read by the codec)


class SnapshotEntry(Entry):
    """A chunk of snapshot rows in the store: an INSERT ROWDATA entry that is its own transaction, plus
    the snapshot's checkpoint after it and its memory size (the rows' text, not the length of 1 that
    places it in the binlog)."""

    __slots__ = ("checkpoint", "memory", "ordinal", "read_ms")

    checkpoint: dict[str, Any]
    memory: int
    # Chunks put at the same binlog place share its sequence: the ordinal of this one among them (0, 1, …),
    # part of its rows' ``part`` (relay.kafka.codec), so no two rows of one place share an identity.
    ordinal: int
    # When its rows were read (ms since the epoch): the time its records carry (relay.kafka.codec). The
    # header's execute_time stays 0: a snapshot read has no binlog time, and the resume point after it
    # must not claim one (relay.positions.store).
    read_ms: int

    @property
    def size(self) -> int:
        return self.memory


def is_snapshot(entry: Entry) -> bool:
    return isinstance(entry, SnapshotEntry)


def chunk_entry(
    spec: TableSpec,
    rows: list[tuple[str | None, ...]],
    deleted: list[tuple[str | None, ...]],
    journal: str,
    offset: int,
    *,
    ordinal: int,
    server_id: int,
    mariadb: bool,
    gtid_set: str | None,
    checkpoint: dict[str, Any],
    read_ms: int = 0,
) -> SnapshotEntry:
    """The chunk's entry at the place ``journal``:``offset`` (``P``): an INSERT of its rows (after
    images) and, for a key snapshot, delete rows (before images only) for the keys asked for that the
    table does not have. ``checkpoint``: the snapshot's state after it (copied); ``read_ms``: when its
    rows were read (ms; 0: unknown)."""
    start = EntryPosition(journal, offset - 1, server_id)
    header = Header(journal, offset - 1, server_id, 0, 1, EventType.INSERT, spec.db, spec.table)
    header.props.append((SNAPSHOT_PROP, "true"))
    value = RowChange(
        event_type=EventType.INSERT,
        columns=spec.columns,
        rows=(*(RowImage(None, r) for r in rows), *(RowImage(r, None) for r in deleted)),
        props=[(SNAPSHOT_PROP, "true")],
    )
    ctx = TxnContext(start=start, gtid_set_before=gtid_set, mariadb=mariadb)
    entry = SnapshotEntry(header, EntryType.ROWDATA, value, ctx, 0, True)
    entry.checkpoint = copy.deepcopy(checkpoint)
    entry.memory = 64 + sum(sum(len(v) for v in r if v is not None) + 8 * len(r) for r in [*rows, *deleted])
    entry.ordinal = ordinal
    entry.read_ms = read_ms
    return entry
