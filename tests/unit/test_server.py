"""Unit tests of the embedded streaming API: batch ids, in-order acks, rollback of one batch and the
ones after it, rollback of all, several outstanding batches, empty gets, timeouts, two threads."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Sequence

import pytest

from relay.canal.entry import (
    Entry,
    EntryPosition,
    EntryType,
    EventType,
    Header,
    RowChange,
    TransactionEnd,
    TxnContext,
)
from relay.canal.ring_store import Events, Fill, RingStore
from relay.canal.server import EMPTY_BATCH_ID, EmbeddedServer, Message
from relay.config.sections import BatchMode, StoreConfig
from relay.errors import ServerError

JOURNAL = "mysql-bin.000007"


def entry(offset: int, end: bool = False) -> Entry:
    """A small ROWDATA (or TRANSACTIONEND) entry identified by its binlog offset."""
    header = Header(JOURNAL, offset, 1, offset, 100, EventType.INSERT, "db", "t")
    if end:
        return Entry(
            header, EntryType.TRANSACTIONEND, TransactionEnd(), TxnContext(EntryPosition(JOURNAL, 0))
        )
    value = RowChange(EventType.INSERT)
    return Entry(header, EntryType.ROWDATA, value, TxnContext(EntryPosition(JOURNAL, 0)))


def entries(start: int, count: int) -> list[Entry]:
    return [entry(i) for i in range(start, start + count)]


def offsets(message: Message | Sequence[Entry]) -> list[int]:
    items = message.entries if isinstance(message, Message) else message
    return [e.header.logfile_offset for e in items]


def server(size: int = 16, *items: Entry) -> EmbeddedServer:
    store = RingStore(StoreConfig(buffer_size=size, batch_mode=BatchMode.ITEMSIZE))
    if items:
        assert store.try_put(list(items))
    return EmbeddedServer(store)


def test_batch_ids_increase_from_one() -> None:
    srv = server(16, *entries(0, 6))
    messages = [srv.get_without_ack(2) for _ in range(3)]
    assert [m.batch_id for m in messages] == [1, 2, 3]
    assert [offsets(m) for m in messages] == [[0, 1], [2, 3], [4, 5]]
    assert srv.outstanding() == [1, 2, 3]
    first = messages[0].position_range
    assert first is not None and (first.start.offset, first.end.offset, first.ack) == (0, 1, None)


def test_empty_get_returns_minus_one_and_registers_nothing() -> None:
    srv = server(16)
    message = srv.get_without_ack(10)
    assert message.batch_id == EMPTY_BATCH_ID == -1
    assert message.entries == () and message.position_range is None and message.is_empty
    assert srv.outstanding() == []
    assert srv.store.try_put(entries(0, 1))
    assert srv.get_without_ack(10).batch_id == 1  # the empty get used no id


def test_acks_must_be_in_order() -> None:
    srv = server(16, *entries(0, 6))
    for _ in range(3):
        srv.get_without_ack(2)
    with pytest.raises(ServerError, match="expected batch 1"):
        srv.ack(2)
    with pytest.raises(ServerError, match="expected batch 1"):
        srv.ack(99)
    assert srv.outstanding() == [1, 2, 3]
    assert srv.store.fill() == Fill(6, 600)  # nothing was freed by the refused acks
    srv.ack(1)
    assert srv.store.fill() == Fill(4, 400)
    with pytest.raises(ServerError, match="expected batch 2"):
        srv.ack(1)  # already acked
    srv.ack(2)
    srv.ack(3)
    assert srv.outstanding() == []
    assert srv.store.fill() == Fill(0, 0)
    with pytest.raises(ServerError, match="no batch is outstanding"):
        srv.ack(4)


def test_ack_returns_the_batch_position_range() -> None:
    srv = server(16, entry(0), entry(1, end=True), entry(2))
    message = srv.get_without_ack(3)
    acked = srv.ack(message.batch_id)
    assert acked == message.position_range
    assert acked is not None and acked.ack is not None and acked.ack.offset == 1


def test_rollback_of_a_batch_keeps_earlier_ones() -> None:
    srv = server(16, *entries(0, 8))
    b1, b2, b3 = (srv.get_without_ack(2) for _ in range(3))
    srv.rollback(b2.batch_id)
    assert srv.outstanding() == [b1.batch_id]
    again = srv.get_without_ack(16)
    assert again.batch_id == 4
    assert offsets(again) == offsets(b2) + offsets(b3) + [6, 7]  # same entries, same order
    assert all(a is b for a, b in zip(again.entries, b2.entries + b3.entries, strict=False))
    srv.ack(b1.batch_id)
    srv.ack(again.batch_id)
    assert srv.store.fill() == Fill(0, 0)


def test_rollback_of_the_oldest_batch_undoes_all() -> None:
    srv = server(16, *entries(0, 4))
    b1 = srv.get_without_ack(2)
    srv.get_without_ack(2)
    srv.rollback(b1.batch_id)
    assert srv.outstanding() == []
    assert offsets(srv.get_without_ack(16)) == [0, 1, 2, 3]


def test_rollback_all() -> None:
    srv = server(16, *entries(0, 6))
    b1 = srv.get_without_ack(2)
    srv.ack(b1.batch_id)
    srv.get_without_ack(2)
    srv.get_without_ack(2)
    srv.rollback()
    assert srv.outstanding() == []
    assert offsets(srv.get_without_ack(16)) == [2, 3, 4, 5]
    srv.rollback()
    srv.rollback()  # nothing outstanding: no-op
    assert offsets(srv.get_without_ack(16)) == [2, 3, 4, 5]


def test_rollback_of_an_unknown_batch_is_refused() -> None:
    srv = server(16, *entries(0, 4))
    with pytest.raises(ServerError, match="no batch is outstanding"):
        srv.rollback(1)
    b1 = srv.get_without_ack(2)
    srv.get_without_ack(2)
    srv.ack(b1.batch_id)
    with pytest.raises(ServerError, match="not outstanding"):
        srv.rollback(b1.batch_id)
    with pytest.raises(ServerError, match="not outstanding"):
        srv.rollback(7)
    assert srv.outstanding() == [2]


def test_several_outstanding_batches_interleaved_with_puts() -> None:
    srv = server(8, *entries(0, 3))
    b1 = srv.get_without_ack(2)
    assert srv.store.try_put(entries(3, 3))
    b2 = srv.get_without_ack(3)
    b3 = srv.get_without_ack(3)
    assert (offsets(b1), offsets(b2), offsets(b3)) == ([0, 1], [2, 3, 4], [5])
    assert srv.outstanding() == [1, 2, 3]
    srv.ack(1)
    srv.rollback(3)
    assert srv.store.try_put(entries(6, 1))
    b4 = srv.get_without_ack(8)
    assert offsets(b4) == [5, 6]
    srv.ack(2)
    srv.ack(4)
    assert srv.store.sequences == (6, 6, 6)


def test_get_acks_at_once() -> None:
    srv = server(16, *entries(0, 4))
    message = srv.get(3)
    assert message.batch_id == 1 and offsets(message) == [0, 1, 2]
    assert srv.outstanding() == []
    assert srv.store.fill() == Fill(1, 100)
    assert srv.get(3).batch_id == 2
    assert srv.get(3).batch_id == EMPTY_BATCH_ID


def test_get_with_auto_ack_refused_while_batches_are_outstanding() -> None:
    srv = server(16, *entries(0, 4))
    srv.get_without_ack(2)
    with pytest.raises(ServerError, match="outstanding"):
        srv.get(2)
    assert srv.outstanding() == [1]
    assert srv.store.sequences == (3, 1, -1)


class RecordingStore(RingStore):
    """Records which store call the server made for each timeout."""

    def __init__(self) -> None:
        super().__init__(StoreConfig(buffer_size=16, batch_mode=BatchMode.ITEMSIZE))
        self.calls: list[tuple[str, float | None]] = []

    def get(self, batch_size: int, timeout: float | None = None) -> Events:
        self.calls.append(("get", timeout))
        return super().get(batch_size, timeout)

    def try_get(self, batch_size: int) -> Events:
        self.calls.append(("try_get", None))
        return super().try_get(batch_size)


def test_timeout_selects_the_store_call_as_canal() -> None:
    store = RecordingStore()
    srv = EmbeddedServer(store)
    assert store.try_put(entries(0, 8))
    srv.get(2)
    srv.get(2, timeout=None)
    srv.get(2, timeout=0)
    srv.get(2, timeout=1.5)
    assert store.calls == [("try_get", None), ("try_get", None), ("get", None), ("get", 1.5)]


def test_timeout_none_takes_what_is_there() -> None:
    srv = server(16, *entries(0, 2))
    started = time.monotonic()
    assert offsets(srv.get_without_ack(10)) == [0, 1]
    assert time.monotonic() - started < 5


def test_positive_timeout_waits_then_returns_a_partial_batch() -> None:
    srv = server(16, *entries(0, 2))
    started = time.monotonic()
    message = srv.get_without_ack(10, timeout=0.3)
    assert 0.3 <= time.monotonic() - started < 5
    assert offsets(message) == [0, 1] and message.batch_id == 1


def test_zero_timeout_waits_for_a_full_batch() -> None:
    srv = server(16, *entries(0, 2))
    results: queue.Queue[Message] = queue.Queue()
    thread = threading.Thread(target=lambda: results.put(srv.get_without_ack(4, timeout=0)), daemon=True)
    thread.start()
    thread.join(0.2)
    assert thread.is_alive()  # two entries are not a full batch of four
    assert srv.store.try_put(entries(2, 2))
    assert offsets(results.get(timeout=10)) == [0, 1, 2, 3]


def test_ack_from_another_thread_does_not_wait_for_a_blocking_get() -> None:
    srv = server(16, *entries(0, 2))
    b1 = srv.get_without_ack(2)
    results: queue.Queue[Message] = queue.Queue()
    getter = threading.Thread(target=lambda: results.put(srv.get_without_ack(4, timeout=30)), daemon=True)
    getter.start()
    getter.join(0.1)
    assert getter.is_alive()
    started = time.monotonic()
    srv.ack(b1.batch_id)  # the getter holds no lock the ack needs
    assert time.monotonic() - started < 5
    assert srv.store.try_put(entries(2, 4))
    assert offsets(results.get(timeout=10)) == [2, 3, 4, 5]


def test_pipelined_publisher_acks_on_another_thread() -> None:
    """Getter thread hands batches to an acker thread, failing now and then: every entry acked once."""
    total = 20_000
    items = entries(0, total)
    srv = server(64)
    acked: list[Entry] = []
    handoff: queue.Queue[Message | None] = queue.Queue(maxsize=4)

    def produce() -> None:
        for i in range(0, total, 7):
            assert srv.store.put(items[i : i + 7], timeout=30)

    def ack_batches() -> None:
        while (message := handoff.get(timeout=30)) is not None:
            acked.extend(message.entries)
            srv.ack(message.batch_id)

    threads = [threading.Thread(target=f, daemon=True) for f in (produce, ack_batches)]
    for t in threads:
        t.start()
    failures, deadline = 0, time.monotonic() + 60
    while srv.store.sequences[2] + 1 < total:  # until the acker has acked the last entry
        assert time.monotonic() < deadline, "pipeline stuck"
        message = srv.get_without_ack(20, timeout=0.05)
        if message.is_empty:
            continue
        if message.batch_id % 97 == 0:  # a failed publish: undo it (and nothing earlier)
            failures += 1
            srv.rollback(message.batch_id)
            continue
        handoff.put(message, timeout=30)
    handoff.put(None)
    for t in threads:
        t.join(30)
        assert not t.is_alive()
    assert failures > 0
    assert all(a is b for a, b in zip(acked, items, strict=True))
    assert srv.outstanding() == [] and srv.store.fill() == Fill(0, 0)
