"""The pieces that keep the relay's memory within the store's budget whatever a transaction's size: the
entries' estimated footprint, the store weighing by it (``store.entry_weight: memory``), the parser's
read-ahead (what it holds back counts against the budget; it is put in bounded bursts), the XA buffer
counting an XA transaction against ``source.xa_buffer_bytes`` while it is read, and the schema check a
read ahead uses (the same refusal as the parser's, without changing the history).

Pure logic, no server: the end-to-end proof (a transaction far larger than the store, published exactly
once, the relay's RSS sampled) is tests/integration/test_memory_bound.py.
"""

from __future__ import annotations

import gc
import threading
import time
import tracemalloc
from typing import Any

import pytest

from relay.binlog.events import ColumnMeta, RowImage
from relay.canal.entry import Entry, EntryPosition, EntryType, EventType, Header, RowChange, TxnContext
from relay.canal.ring_store import RingStore
from relay.config.load import parse_config
from relay.config.sections import BatchMode, EntryWeight, StoreConfig
from relay.errors import ConfigError, SchemaError, StoreError, XaBufferFullError
from relay.schema.tracker import SchemaTracker
from relay.source.read_ahead import Pending
from tests.unit.test_schema_tracker import FULL, ORDERS, START, history, table_map
from tests.unit.test_xa import X1, Log, Run, maria_prepare

JOURNAL = "mysql-bin.000001"


def columns(n: int) -> tuple[ColumnMeta, ...]:
    return tuple(ColumnMeta(i, f"c{i}", 3, 0, True, False, None, i == 0, "int", 4, 11) for i in range(n))


def rows_entry(
    offset: int, rows: int, kind: EventType = EventType.INSERT, size: int = 8000, cols: int = 11
) -> Entry:
    """A ROWDATA entry of ``rows`` rows of ``cols`` values (text of ~6 characters), ``size`` binlog bytes."""
    images = [
        RowImage(
            tuple(f"v{offset}-{r}-{c}" for c in range(cols)) if kind != EventType.INSERT else None,
            tuple(f"w{offset}-{r}-{c}" for c in range(cols)) if kind != EventType.DELETE else None,
        )
        for r in range(rows)
    ]
    if kind == EventType.INSERT:
        images = [RowImage(None, i.after) for i in images]
    header = Header(JOURNAL, offset, 1, 0, size, kind, "db", "t")
    value = RowChange(kind, columns=columns(cols), rows=tuple(images))
    return Entry(header, EntryType.ROWDATA, value, TxnContext(EntryPosition(JOURNAL, 4)), offset)


# --- the footprint estimate ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", [EventType.INSERT, EventType.UPDATE, EventType.DELETE])
def test_the_footprint_estimate_is_close_to_what_tracemalloc_counts(kind: EventType) -> None:
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        held = [rows_entry(i, 100, kind, size=100 * 11 * 8) for i in range(50)]
        traced = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    estimate = sum(e.footprint for e in held)
    # Never far below the real size (it bounds memory) nor far above it (the store would hold too little).
    assert 0.8 * traced <= estimate <= 1.6 * traced, (estimate, traced)


def test_an_update_row_weighs_two_images_and_a_statement_its_event() -> None:
    insert, update = rows_entry(100, 10), rows_entry(100, 10, EventType.UPDATE)
    assert update.footprint - update.size - 700 == 2 * (insert.footprint - insert.size - 700)
    header = Header(JOURNAL, 200, 1, 0, 300, EventType.QUERY, "db", "")
    statement = Entry(
        header,
        EntryType.ROWDATA,
        RowChange(EventType.QUERY, sql="x"),
        TxnContext(EntryPosition(JOURNAL, 200)),
    )
    assert statement.footprint == 700 + 300


# --- the store weighing by it -------------------------------------------------------------------------


def memory_store(budget_units: int = 100, memunit: int = 1024, slots: int = 64) -> RingStore:
    return RingStore(StoreConfig(slots, memunit, BatchMode.MEMSIZE, False, EntryWeight.MEMORY))


def test_store_weighs_footprints_with_entry_weight_memory_and_event_lengths_by_default() -> None:
    e = rows_entry(1, 100)
    assert StoreConfig().entry_weight is EntryWeight.EVENT_LENGTH  # canal's core, as canal
    canal = RingStore(StoreConfig(64, 1024, BatchMode.MEMSIZE))
    assert canal.put([e], timeout=0)
    assert canal.fill().bytes == e.size
    relay = memory_store()
    assert relay.put([e], timeout=0)
    assert relay.fill().bytes == e.footprint > 10 * e.size


def test_a_memory_weighed_store_admits_puts_by_memory_and_cuts_batches_by_it() -> None:
    e = rows_entry(1, 100)
    s = RingStore(StoreConfig(64, e.footprint, BatchMode.MEMSIZE, False, EntryWeight.MEMORY))  # budget: 64
    assert s.try_put([rows_entry(i, 100) for i in range(64)])
    assert not s.try_put([rows_entry(99, 100)])  # at the budget in memory, long before in binlog bytes
    batch = s.get(2, timeout=0)  # two memunits: two entries
    assert len(batch) == 2


def test_await_below_waits_for_acks_and_a_get_then_returns_what_there_is() -> None:
    e = rows_entry(1, 10)
    s = RingStore(StoreConfig(64, e.footprint, BatchMode.MEMSIZE, False, EntryWeight.MEMORY))
    assert s.try_put([rows_entry(i, 10) for i in range(4)])
    assert s.await_below(5 * e.footprint, 0)
    assert not s.await_below(2 * e.footprint, 0.05)
    got: list[Any] = []
    consumer = threading.Thread(target=lambda: got.append(s.get(100, timeout=30)))
    consumer.start()
    waiter: list[bool] = []
    producer = threading.Thread(target=lambda: waiter.append(s.await_below(2 * e.footprint, 30)))
    producer.start()
    consumer.join(10)  # the get does not wait for a full batch while the producer waits for room
    assert not consumer.is_alive() and len(got[0]) == 4
    s.ack(got[0].last_seq)
    producer.join(10)
    assert waiter == [True]


def test_config_knows_entry_weight_and_names_a_bad_one() -> None:
    assert parse_config({}).store_config().entry_weight is EntryWeight.MEMORY
    assert parse_config({"store": {"entry_weight": "event_length"}}).store_config().by_memory is False
    with pytest.raises(ConfigError, match=r"^store\.entry_weight"):
        parse_config({"store": {"entry_weight": "rows"}})
    with pytest.raises(StoreError, match="entry_weight"):
        StoreConfig(entry_weight="rows")  # type: ignore[arg-type]


# --- the parser's read-ahead -------------------------------------------------------------------------


def test_pending_holds_a_transaction_to_half_the_budget_then_puts_in_bursts_of_a_sixteenth() -> None:
    one = rows_entry(1, 10).footprint
    pending = Pending(StoreConfig(4096, one, BatchMode.MEMSIZE, False, EntryWeight.MEMORY))  # 4096 entries
    assert pending.hold_weight == 2048 * one and pending.burst_weight == 256 * one
    pending.add([rows_entry(i, 10) for i in range(300)])
    assert pending.due(holding=False)  # past a burst
    assert not pending.due(holding=True)  # far below half the budget
    assert pending.store_limit() == 4096 * one - pending.weight  # what it holds counts against the store
    pending.add([rows_entry(i, 10) for i in range(300, 2048)])
    assert pending.due(holding=True)
    held = pending.take()
    assert not pending and pending.weight == 0 and pending.store_limit() is None
    bursts = list(pending.bursts(held))
    assert [e for b in bursts for e in b] == held  # in order, nothing lost or repeated
    assert max(sum(e.footprint for e in b) for b in bursts) <= 256 * one
    assert max(len(b) for b in bursts) <= 256


def test_pending_in_itemsize_mode_counts_entries_only() -> None:
    pending = Pending(StoreConfig(64, 1024, BatchMode.ITEMSIZE))
    pending.add([rows_entry(i, 1000) for i in range(31)])  # huge entries: no byte budget here
    assert pending.store_limit() is None and not pending.due(holding=True)
    pending.add([rows_entry(31, 1)])
    assert pending.due(holding=True)
    assert [len(b) for b in pending.bursts(pending.take())] == [16, 16]


def test_one_entry_larger_than_a_burst_is_a_burst_of_its_own() -> None:
    small = rows_entry(1, 1)
    pending = Pending(StoreConfig(64, small.footprint, BatchMode.MEMSIZE, False, EntryWeight.MEMORY))
    entries = [small, rows_entry(2, 1000), small]
    assert [len(b) for b in pending.bursts(entries)] == [1, 1, 1]


# --- XA counted while it is read -------------------------------------------------------------------


def test_an_xa_transaction_larger_than_the_cap_is_refused_while_it_is_read() -> None:
    log, run = Log(), Run(limit=3000)
    events = maria_prepare(log, X1, *range(1, 40))
    refused_at = None
    for i, event in enumerate(events):
        try:
            run.feed([event])
        except XaBufferFullError as exc:
            assert "source.xa_buffer_bytes" in str(exc) and "the XA transaction read from" in str(exc)
            refused_at = i
            break
    # Refused while its rows were read, long before its XA END and XA_PREPARE events.
    assert refused_at is not None and refused_at < len(events) - 10


def test_held_bytes_count_footprints() -> None:
    log, run = Log(), Run()
    run.feed(maria_prepare(log, X1, 1, 2))
    assert run.xa.held_bytes > 2 * 700


# --- the read ahead's schema check --------------------------------------------------------------------


def test_check_refuses_what_resolve_refuses_and_changes_nothing() -> None:
    from relay.binlog import events as ev
    from relay.binlog.parse import BinlogParser
    from tests.unit.test_binlog_parse import FILE, event
    from tests.unit.test_schema_tracker import resolve

    def checked(tracker: SchemaTracker, body: bytes) -> ev.TableMapEvent:
        parser = BinlogParser(checksum=True, mariadb=False, log_file=FILE, table_resolver=tracker.check)
        e = parser.parse(event(ev.TABLE_MAP_EVENT, body, log_pos=500), 1)
        assert isinstance(e, ev.TableMapEvent)
        return e

    h = history()  # the table is unknown to the history
    with pytest.raises(SchemaError, match="the history has no such table"):
        checked(SchemaTracker(h, START, "always", full=True), table_map(FULL))
    # Mode auto with full metadata learns it — resolve appends a record; check only lets it pass.
    records = len(h.records)
    e = checked(SchemaTracker(h, START, "auto", full=True), table_map(FULL))
    assert [c.name for c in e.columns] == ["id", "title", "doc"] and len(h.records) == records
    resolve(SchemaTracker(h, START, "auto", full=True), table_map(FULL))
    assert len(h.records) == records + 1
    # Without names in the event, the history's names, as resolve gives them.
    plain = checked(SchemaTracker(history(ORDERS), START), table_map(b""))
    assert [c.name for c in plain.columns] == ["id", "name", "doc"]


def test_await_below_gives_up_at_its_timeout() -> None:
    e = rows_entry(1, 10)
    s = RingStore(StoreConfig(64, e.footprint, BatchMode.MEMSIZE, False, EntryWeight.MEMORY))
    assert s.try_put([e, rows_entry(2, 10)])
    began = time.monotonic()
    assert not s.await_below(e.footprint, 0.1)
    assert time.monotonic() - began >= 0.09
