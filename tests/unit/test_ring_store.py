"""Unit tests of the ring store: sequences, wrap-around, memory accounting, DDL isolation, ack points,
rollback, timeouts, close, and a two-thread run moving 100k entries through small buffers."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from relay.canal.entry import (
    Entry,
    EntryPosition,
    EntryType,
    EventType,
    Header,
    RowChange,
    TransactionBegin,
    TransactionEnd,
    TxnContext,
)
from relay.canal.ring_store import Events, Fill, RingStore
from relay.config.sections import BatchMode, StoreConfig
from relay.errors import StoreClosedError, StoreError

JOURNAL = "mysql-bin.000001"
ITEM = BatchMode.ITEMSIZE
MEM = BatchMode.MEMSIZE


def entry(offset: int, kind: str = "row", size: int = 100) -> Entry:
    """A small Entry identified by its binlog offset. kind: row, begin, end or ddl."""
    event_type = {"ddl": EventType.ALTER, "row": EventType.INSERT}.get(kind, EventType.QUERY)
    header = Header(JOURNAL, offset, 1, offset * 1000, size, event_type, "db", "t")
    value: RowChange | TransactionBegin | TransactionEnd
    if kind == "begin":
        entry_type, value = EntryType.TRANSACTIONBEGIN, TransactionBegin()
    elif kind == "end":
        entry_type, value = EntryType.TRANSACTIONEND, TransactionEnd(transaction_id=str(offset))
    else:
        entry_type = EntryType.ROWDATA
        value = RowChange(event_type, is_ddl=kind == "ddl", sql="ALTER TABLE t" if kind == "ddl" else "")
    txn = TxnContext(EntryPosition(JOURNAL, offset))
    return Entry(header, entry_type, value, txn, closes_txn=kind in ("end", "ddl"))


def entries(start: int, count: int, kind: str = "row", size: int = 100) -> list[Entry]:
    return [entry(i, kind, size) for i in range(start, start + count)]


def offsets(batch: Events | Sequence[Entry]) -> list[int]:
    items = batch.entries if isinstance(batch, Events) else batch
    return [e.header.logfile_offset for e in items]


def store(size: int = 8, mode: BatchMode = ITEM, memunit: int = 100, ddl: bool = False) -> RingStore:
    return RingStore(StoreConfig(buffer_size=size, memunit=memunit, batch_mode=mode, ddl_isolation=ddl))


def held_slots(s: RingStore) -> int:
    return sum(1 for slot in s._slots if slot is not None)


class Call:
    """Runs a blocking call on a thread and records its result or exception."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.result: Any = None
        self.error: BaseException | None = None
        self.started = time.monotonic()
        self.elapsed = 0.0
        self._fn = fn
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.result = self._fn()
        except BaseException as exc:  # recorded for the test to assert on
            self.error = exc
        self.elapsed = time.monotonic() - self.started

    def still_blocked_after(self, seconds: float) -> bool:
        self.thread.join(seconds)
        return self.thread.is_alive()

    def finish(self, deadline: float = 10.0) -> Any:
        self.thread.join(deadline)
        assert not self.thread.is_alive(), "call did not return before the deadline"
        if self.error is not None:
            raise self.error
        return self.result


# ---- configuration ----


def test_config_defaults_are_canals() -> None:
    config = StoreConfig()
    assert (config.buffer_size, config.memunit, config.batch_mode, config.ddl_isolation) == (
        16384,
        1024,
        BatchMode.MEMSIZE,
        False,
    )
    assert config.memory_budget == 16384 * 1024


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"buffer_size": 0}, "buffer_size"),
        ({"buffer_size": -8}, "buffer_size"),
        ({"buffer_size": 1000}, "buffer_size"),
        ({"buffer_size": True}, "buffer_size"),
        ({"buffer_size": "16"}, "buffer_size"),
        ({"memunit": 0}, "memunit"),
        ({"memunit": -1}, "memunit"),
        ({"batch_mode": "BYTES"}, "batch_mode"),
        ({"ddl_isolation": "yes"}, "ddl_isolation"),
    ],
)
def test_config_rejects_bad_values_naming_the_field(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(StoreError, match=f"^{field}:"):
        StoreConfig(**kwargs)


def test_config_accepts_mode_as_text() -> None:
    config = StoreConfig(batch_mode="ITEMSIZE")  # type: ignore[arg-type]
    assert config.batch_mode is BatchMode.ITEMSIZE
    assert StoreConfig(buffer_size=1).buffer_size == 1


# ---- sequences, put and get (ITEMSIZE) ----


def test_sequences_start_at_minus_one_and_keep_order() -> None:
    s = store()
    assert s.sequences == (-1, -1, -1)
    assert s.try_put(entries(0, 5))
    batch = s.try_get(3)
    assert offsets(batch) == [0, 1, 2]
    assert (batch.first_seq, batch.last_seq) == (0, 2)
    assert s.sequences == (4, 2, -1)
    s.ack(1)
    assert s.sequences == (4, 2, 1)


def test_the_first_unacked_entrys_binlog_time_is_the_lags_base() -> None:
    s = store()
    assert s.first_unacked_ms() == 0  # nothing held
    assert s.try_put(entries(3, 3))  # binlog times 3000, 4000, 5000 ms
    assert s.first_unacked_ms() == 3000
    s.try_get(2)
    assert s.first_unacked_ms() == 3000, "taken but not acked: still pending"
    s.ack(0)
    assert s.first_unacked_ms() == 4000
    s.try_get(5)
    s.ack(2)
    assert s.first_unacked_ms() == 0


def test_empty_put_and_empty_get() -> None:
    s = store()
    assert s.try_put([]) and s.put([])
    batch = s.try_get(4)
    assert batch.entries == () and batch.position_range is None and len(batch) == 0
    assert (batch.first_seq, batch.last_seq) == (0, -1)
    assert s.sequences == (-1, -1, -1)


def test_bad_batch_size_is_refused() -> None:
    with pytest.raises(StoreError, match="batch_size"):
        store().try_get(0)


def test_wrap_around_reuses_slots_in_order() -> None:
    s = store(size=4)
    sent = 0
    received: list[int] = []
    for round_size in [3, 4, 1, 2, 4, 3, 4, 4, 1, 3] * 5:
        assert s.try_put(entries(sent, round_size))
        sent += round_size
        batch = s.try_get(4)
        received += offsets(batch)
        s.ack(batch.last_seq)
        assert held_slots(s) == 0
    assert received == list(range(sent))
    assert sent > 10 * 4  # sequences went round the ring many times
    assert s.sequences == (sent - 1, sent - 1, sent - 1)


def test_full_ring_refuses_until_ack_and_get_crosses_the_wrap() -> None:
    s = store(size=4)
    assert s.try_put(entries(0, 3))
    s.ack(s.try_get(2).last_seq)  # seqs 0, 1 acked; 2 still held
    assert s.try_put(entries(3, 3))  # seqs 3, 4, 5 -> slots 3, 0, 1
    assert not s.try_put([entry(6)])  # 4 held in 4 slots
    assert not s.put([entry(6)], timeout=0.01)
    assert offsets(s.try_get(4)) == [2, 3, 4, 5]
    assert not s.try_put([entry(6)])  # got is not acked: still no room
    s.ack(2)
    assert s.try_put([entry(6)])
    assert s.fill() == Fill(4, 400)


def test_batch_larger_than_the_ring_is_an_error_not_a_deadlock() -> None:
    s = store(size=4)
    with pytest.raises(StoreError, match="never fit"):
        s.put(entries(0, 5))
    with pytest.raises(StoreError, match="never fit"):
        s.try_put(entries(0, 5))
    assert s.try_put(entries(0, 4))  # exactly the slot count fits


def test_itemsize_ignores_bytes() -> None:
    s = store(size=4, mode=ITEM, memunit=1)
    assert s.try_put(entries(0, 4, size=1_000_000))
    assert offsets(s.try_get(2)) == [0, 1]


# ---- MEMSIZE accounting ----


def test_memsize_put_waits_at_the_budget_and_ack_frees() -> None:
    s = store(size=4, mode=MEM, memunit=100)  # budget 400 bytes
    assert s.try_put([entry(0, size=150)])
    assert s.try_put([entry(1, size=150)])
    assert s.fill() == Fill(2, 300)
    # 300 < 400: admitted, and the store ends above the budget (canal's check, before the put).
    assert s.try_put([entry(2, size=150)])
    assert s.fill() == Fill(3, 450)
    assert not s.try_put([entry(3, size=1)])  # a slot is free, the memory is not
    assert not s.put([entry(3, size=1)], timeout=0.01)
    batch = s.try_get(1)
    assert offsets(batch) == [0]
    assert not s.try_put([entry(3, size=1)])  # got but not acked still counts
    s.ack(batch.last_seq)
    assert s.fill() == Fill(2, 300)
    assert s.try_put([entry(3, size=1)])
    assert s.fill() == Fill(3, 301)


def test_memsize_single_entry_bigger_than_the_budget_is_stored() -> None:
    s = store(size=4, mode=MEM, memunit=100)
    assert s.try_put([entry(0, size=10)])
    s.ack(s.try_get(8).last_seq)
    huge = entry(9, size=10_000)
    assert s.try_put([huge])
    assert s.fill() == Fill(1, 10_000)
    assert not s.try_put([entry(10, size=1)])
    batch = s.get(1, timeout=5)
    assert batch.entries == (huge,)
    s.ack(batch.last_seq)
    assert s.fill() == Fill(0, 0)
    assert s.try_put([entry(10, size=1)])


def test_memsize_big_transaction_waits_for_the_store_to_drain_then_goes_in() -> None:
    s = store(size=8, mode=MEM, memunit=100)  # budget 800
    assert s.try_put(entries(0, 4, size=250))  # 1000 held: over budget
    big_txn = [entry(4, "begin", 500), entry(5, size=5000), entry(6, "end", 500)]
    call = Call(lambda: s.put(big_txn))
    assert call.still_blocked_after(0.1)
    s.ack(s.try_get(1).last_seq)  # 750 held: under budget again
    assert call.finish() is True
    assert s.fill() == Fill(6, 6750)


def test_memsize_get_includes_the_entry_that_crosses_the_limit() -> None:
    s = store(size=16, mode=MEM, memunit=100)
    assert s.try_put(entries(0, 6, size=60))
    assert offsets(s.try_get(1)) == [0, 1]  # 60 < 100, then 120: the crossing entry is in
    assert offsets(s.try_get(2)) == [2, 3, 4, 5]  # 240 >= 200 only with the fourth


def test_memsize_get_stops_when_the_limit_is_reached_exactly() -> None:
    # canal (<=) would take a third entry here; we stop at the limit (documented choice).
    s = store(size=16, mode=MEM, memunit=100)
    assert s.try_put(entries(0, 4, size=50))
    assert offsets(s.try_get(1)) == [0, 1]


def test_memsize_get_always_returns_at_least_one_entry() -> None:
    s = store(size=16, mode=MEM, memunit=100)
    assert s.try_put([entry(0, size=5000), entry(1, size=1)])
    assert offsets(s.try_get(1)) == [0]
    assert offsets(s.try_get(1)) == [1]


def test_memsize_blocking_get_waits_for_bytes_not_entries() -> None:
    s = store(size=16, mode=MEM, memunit=100)
    assert s.try_put(entries(0, 5, size=30))  # 150 bytes: less than 2 x 100
    call = Call(lambda: s.get(2, timeout=30))
    assert call.still_blocked_after(0.2)
    assert s.try_put(entries(5, 2, size=30))  # 210 bytes
    assert offsets(call.finish()) == list(range(7))


def test_memsize_rollback_restores_byte_counts() -> None:
    s = store(size=16, mode=MEM, memunit=100)
    assert s.try_put(entries(0, 6, size=50))
    first = s.try_get(1)
    second = s.try_get(1)
    assert offsets(first) == [0, 1] and offsets(second) == [2, 3]
    s.rollback_to(first.last_seq)
    assert offsets(s.get(1, timeout=5)) == [2, 3]  # a complete batch again: bytes were restored
    s.rollback()
    assert offsets(s.get(2, timeout=5)) == [0, 1, 2, 3]


# ---- DDL isolation ----


@pytest.mark.parametrize("mode", [ITEM, MEM])
def test_ddl_is_returned_alone(mode: BatchMode) -> None:
    s = store(size=16, mode=mode, memunit=10, ddl=True)
    batch_in = [entry(0), entry(1), entry(2, "ddl"), entry(3, "ddl"), entry(4), entry(5)]
    assert s.try_put(batch_in)
    assert offsets(s.try_get(100)) == [0, 1]  # stops before the DDL
    ddl = s.try_get(100)
    assert offsets(ddl) == [2] and ddl.entries[0].is_ddl
    assert offsets(s.try_get(100)) == [3]  # DDL first: alone, even with more behind it
    assert offsets(s.try_get(100)) == [4, 5]


@pytest.mark.parametrize("mode", [ITEM, MEM])
def test_without_ddl_isolation_ddl_shares_a_batch(mode: BatchMode) -> None:
    s = store(size=16, mode=mode, memunit=10, ddl=False)
    assert s.try_put([entry(0), entry(1, "ddl"), entry(2)])
    assert offsets(s.try_get(100)) == [0, 1, 2]


@pytest.mark.parametrize("mode", [ITEM, MEM])
def test_batch_cut_by_ddl_counts_as_complete(mode: BatchMode) -> None:
    s = store(size=16, mode=mode, memunit=10, ddl=True)
    assert s.try_put([entry(0), entry(1, "ddl")])
    started = time.monotonic()
    assert offsets(s.get(100, timeout=30)) == [0]
    assert offsets(s.get(100, timeout=30)) == [1]
    assert time.monotonic() - started < 5  # no waiting for a batch that could never grow


def test_ddl_tracking_survives_ack_and_rollback() -> None:
    s = store(size=4, mode=ITEM, ddl=True)
    for round_start in range(0, 40, 4):
        assert s.try_put([entry(round_start), entry(round_start + 1, "ddl"), *entries(round_start + 2, 2)])
        first = s.try_get(4)
        assert offsets(first) == [round_start]
        s.rollback()
        assert offsets(s.try_get(4)) == [round_start]
        assert offsets(s.try_get(4)) == [round_start + 1]
        last = s.try_get(4)
        assert offsets(last) == [round_start + 2, round_start + 3]
        s.ack(last.last_seq)
    assert not s._ddls


# ---- ack points and positions ----


def test_ack_point_is_the_last_boundary_in_the_batch() -> None:
    s = store(size=16)
    txn = [entry(0, "begin"), entry(1), entry(2), entry(3, "end"), entry(4, "begin"), entry(5)]
    assert s.try_put(txn)
    batch = s.try_get(16)
    assert batch.position_range is not None
    assert batch.position_range.start == txn[0].position
    assert batch.position_range.end == txn[5].position
    assert batch.position_range.ack == txn[4].position


def test_ack_point_end_and_ddl() -> None:
    s = store(size=16)
    txn = [entry(0), entry(1, "end"), entry(2), entry(3, "ddl"), entry(4)]
    assert s.try_put(txn[:3])
    batch = s.try_get(16)
    assert batch.position_range is not None and batch.position_range.ack == txn[1].position
    assert s.try_put(txn[3:])
    batch = s.try_get(16)
    assert batch.position_range is not None and batch.position_range.ack == txn[3].position


def test_no_ack_point_without_a_boundary() -> None:
    s = store(size=16)
    assert s.try_put(entries(0, 3))
    batch = s.try_get(16)
    assert batch.position_range is not None
    assert batch.position_range.ack is None
    assert batch.position_range.start.offset == 0 and batch.position_range.end.offset == 2


def test_first_and_latest_position() -> None:
    s = store(size=4)
    assert s.first_position() is None and s.latest_position() is None
    assert s.try_put(entries(0, 3))
    assert s.first_position() == entry(0).position
    assert s.latest_position() == entry(2).position
    s.ack(s.try_get(2).last_seq)
    assert s.first_position() == entry(2).position
    s.ack(s.try_get(2).last_seq)
    assert s.first_position() is None
    assert s.latest_position() == entry(2).position  # still known after everything is acked


# ---- ack and rollback ----


def test_ack_rules() -> None:
    s = store(size=8)
    assert s.try_put(entries(0, 4))
    with pytest.raises(StoreError, match="beyond what was read"):
        s.ack(0)
    batch = s.try_get(2)
    with pytest.raises(StoreError, match="beyond"):
        s.ack(batch.last_seq + 1)
    s.ack(batch.last_seq)
    s.ack(batch.last_seq)  # already acked: no-op
    s.ack(-1)
    assert s.sequences == (3, 1, 1)
    assert s.fill() == Fill(2, 200)


def test_ack_drops_references_to_acked_entries() -> None:
    s = store(size=8)
    assert s.try_put(entries(0, 6))
    s.try_get(4)
    assert held_slots(s) == 6
    s.ack(2)
    assert held_slots(s) == 3
    assert s.first_position() == entry(3).position


def test_partial_ack_of_a_batch() -> None:
    s = store(size=8)
    assert s.try_put(entries(0, 4))
    batch = s.try_get(4)
    s.ack(batch.first_seq + 1)
    s.rollback()
    assert offsets(s.try_get(4)) == [2, 3]


def test_rollback_returns_the_same_entries_in_the_same_order() -> None:
    s = store(size=8)
    sent = entries(0, 6)
    assert s.try_put(sent)
    first = s.try_get(2)
    s.ack(first.last_seq)
    second, third = s.try_get(2), s.try_get(2)
    assert offsets(second) + offsets(third) == [2, 3, 4, 5]
    s.rollback()
    assert s.sequences == (5, 1, 1)
    again = s.try_get(8)
    assert list(again.entries) == sent[2:]
    assert all(a is b for a, b in zip(again.entries, sent[2:], strict=True))


def test_rollback_to_undoes_only_later_batches() -> None:
    s = store(size=8)
    assert s.try_put(entries(0, 6))
    a, b, c = s.try_get(2), s.try_get(2), s.try_get(2)
    s.rollback_to(a.last_seq)
    assert offsets(s.try_get(8)) == offsets(b) + offsets(c)
    s.ack(a.last_seq)
    s.rollback_to(b.last_seq)
    assert offsets(s.try_get(8)) == offsets(c)
    for bad in (a.first_seq, c.last_seq + 1):  # below ack, beyond get
        with pytest.raises(StoreError, match="outside the unacked range"):
            s.rollback_to(bad)


def test_rollback_wakes_a_waiting_consumer() -> None:
    s = store(size=8)
    assert s.try_put(entries(0, 2))
    s.try_get(2)
    call = Call(lambda: s.get(2, timeout=30))
    assert call.still_blocked_after(0.1)
    s.rollback()
    assert offsets(call.finish()) == [0, 1]


# ---- blocking, timeouts, close ----


def test_get_with_timeout_returns_partial_batch_after_the_timeout() -> None:
    s = store(size=8)
    assert s.try_put(entries(0, 2))
    started = time.monotonic()
    batch = s.get(5, timeout=0.3)
    elapsed = time.monotonic() - started
    assert offsets(batch) == [0, 1]
    assert 0.3 <= elapsed < 5  # did not return early with a partial batch


def test_get_with_timeout_on_empty_store_returns_nothing() -> None:
    s = store(size=8)
    started = time.monotonic()
    batch = s.get(1, timeout=0.2)
    assert batch.entries == () and time.monotonic() - started >= 0.2
    assert s.sequences == (-1, -1, -1)


def test_blocking_get_waits_for_a_full_batch() -> None:
    s = store(size=8)
    assert s.try_put(entries(0, 2))
    call = Call(lambda: s.get(4))
    assert call.still_blocked_after(0.2)  # two entries are there, but not four
    assert s.try_put(entries(2, 1))
    assert call.still_blocked_after(0.05)
    assert s.try_put(entries(3, 3))
    assert offsets(call.finish()) == [0, 1, 2, 3]


def test_get_returns_when_the_producer_cannot_add_more() -> None:
    # A batch bigger than the store would otherwise wait for its timeout (or forever).
    s = store(size=4)
    assert s.try_put(entries(0, 4))
    call = Call(lambda: s.get(10))
    assert offsets(call.finish()) == [0, 1, 2, 3]


def test_get_returns_when_a_waiting_put_cannot_fit() -> None:
    s = store(size=4)
    assert s.try_put(entries(0, 2))
    getter = Call(lambda: s.get(10, timeout=30))
    assert getter.still_blocked_after(0.1)
    putter = Call(lambda: s.put(entries(2, 3)))  # needs 3 slots, 2 free
    assert offsets(getter.finish()) == [0, 1]
    assert putter.still_blocked_after(0.05)
    s.ack(1)
    assert putter.finish() is True


def test_memsize_get_returns_when_the_budget_is_reached() -> None:
    s = store(size=8, mode=MEM, memunit=10)  # budget 80
    assert s.try_put(entries(0, 1, size=100))
    call = Call(lambda: s.get(100, timeout=30))  # wants 1000 bytes, the store holds at most ~80 + 1
    assert offsets(call.finish()) == [0]


def test_put_with_timeout_returns_false_when_full() -> None:
    s = store(size=2)
    assert s.try_put(entries(0, 2))
    started = time.monotonic()
    assert s.put([entry(2)], timeout=0.2) is False
    assert time.monotonic() - started >= 0.2
    assert s.fill() == Fill(2, 200)


def test_blocked_put_resumes_after_ack() -> None:
    s = store(size=2)
    assert s.try_put(entries(0, 2))
    call = Call(lambda: s.put([entry(2)]))
    assert call.still_blocked_after(0.1)
    s.ack(s.try_get(1).last_seq)
    assert call.finish() is True
    assert offsets(s.try_get(4)) == [1, 2]


def test_close_unblocks_waiters_and_refuses_later_calls() -> None:
    s = store(size=2)
    full = store(size=2)
    assert full.try_put(entries(0, 2))
    getter = Call(lambda: s.get(1))
    putter = Call(lambda: full.put([entry(2)]))
    assert getter.still_blocked_after(0.1) and putter.still_blocked_after(0.0)
    s.close()
    full.close()
    for call in (getter, putter):
        with pytest.raises(StoreClosedError, match="closed"):
            call.finish()
    assert isinstance(getter.error, StoreError)
    for op in (lambda: s.try_get(1), lambda: s.try_put([entry(9)]), lambda: s.put([entry(9)], 1)):
        with pytest.raises(StoreClosedError):
            op()
    batch_holder = store(size=4)
    assert batch_holder.try_put(entries(0, 2))
    batch = batch_holder.try_get(2)
    batch_holder.close()
    batch_holder.ack(batch.last_seq)  # a publisher may finish the batch in hand
    batch_holder.rollback()
    assert batch_holder.closed and batch_holder.fill() == Fill(0, 0)
    s.close()  # idempotent


# ---- two threads, 100k entries ----

TOTAL = 100_000


def _produce(s: RingStore, items: list[Entry], seed: int) -> None:
    rng = random.Random(seed)
    i = 0
    while i < len(items):
        n = rng.randint(1, 5)
        chunk = items[i : i + n]
        if rng.random() < 0.5:
            assert s.put(chunk, timeout=30), "producer stuck for 30 s"
        else:
            while not s.put(chunk, timeout=0.001):
                pass  # exercise the timeout path; each failed try waited on the condition
        i += n


def _consume(s: RingStore, total: int, batch_size: int, seed: int) -> list[Entry]:
    ddl_isolation = s.config.ddl_isolation
    rng = random.Random(seed)
    got: list[Entry] = []
    deadline = time.monotonic() + 120
    while len(got) < total:
        assert time.monotonic() < deadline, f"consumer stuck at {len(got)} entries"
        batch = s.get(batch_size, timeout=0.05)
        if not batch.entries:
            continue
        if ddl_isolation and any(e.is_ddl for e in batch.entries):
            assert len(batch.entries) == 1, "a DDL shared its batch"
        if rng.random() < 0.05:
            s.rollback()  # as after a failed publish: these come back on the next get
            continue
        got.extend(batch.entries)
        s.ack(batch.last_seq)
    return got


@pytest.mark.parametrize(
    ("mode", "size", "batch_size", "ddl"),
    [(ITEM, 16, 10, False), (ITEM, 8, 50, True), (MEM, 32, 3, True), (MEM, 8, 2, False)],
)
def test_concurrent_put_get_moves_every_entry_once_in_order(
    mode: BatchMode, size: int, batch_size: int, ddl: bool
) -> None:
    kinds = ["row"] * 20 + ["begin", "end", "ddl"]
    rng = random.Random(7)
    items = [entry(i, rng.choice(kinds), rng.randint(1, 300)) for i in range(TOTAL)]
    s = store(size=size, mode=mode, memunit=100, ddl=ddl)
    producer = threading.Thread(target=_produce, args=(s, items, 1), daemon=True)
    producer.start()
    got = _consume(s, TOTAL, batch_size, 2)
    producer.join(30)
    assert not producer.is_alive()
    assert len(got) == TOTAL
    assert all(a is b for a, b in zip(got, items, strict=True))
    assert s.fill() == Fill(0, 0)
    assert held_slots(s) == 0
