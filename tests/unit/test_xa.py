"""XA transactions through the entry builder and ``XaBuffer``: held at PREPARE, released at XA COMMIT in
commit order, dropped at XA ROLLBACK, bounded, and the resume points that keep a restart from losing or
repeating them. Events laid out as MariaDB 10.11 and MySQL 8 write them (checked on MariaDB)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from relay.binlog.events import (
    INSERT,
    BinlogEvent,
    GtidEvent,
    QueryEvent,
    RowImage,
    RowsEvent,
    XaPrepareEvent,
    XidEvent,
)
from relay.canal.entry import Entry, EntryType, EventType, RowChange
from relay.canal.entry_builder import BuilderConfig, EntryBuilder
from relay.canal.xa import XaBuffer, normalize_xid
from relay.errors import SourceError, XaBufferFullError
from relay.positions.store import ResumePoint, already_published, resume_after
from tests.unit.test_entry_builder import Log, table

MAX = 1 << 30
seq = 0


def gtid(log: Log, *, standalone: bool = False, xa: bool = False, mariadb: bool = True) -> GtidEvent:
    global seq
    seq += 1
    return GtidEvent(log.header(42), f"0-1-{seq}", mariadb=mariadb, standalone=standalone, xa_prepared=xa)


def rows(log: Log, *ids: int) -> list[BinlogEvent]:
    tm = table(log)
    return [tm, *(RowsEvent(log.header(50), INSERT, tm, (RowImage(None, (str(i), "NEW")),)) for i in ids)]


def maria_prepare(log: Log, xid: str, *ids: int) -> list[BinlogEvent]:
    """MariaDB: GTID (FL_PREPARED_XA), rows, XA END, XA_PREPARE — no XA START query."""
    return [
        gtid(log, xa=True),
        *rows(log, *ids),
        QueryEvent(log.header(84), 5, 0, 0, "shop_07", f"XA END {xid}"),
        XaPrepareEvent(log.header(38), False, xid),
    ]


def maria_decide(log: Log, xid: str, commit: bool = True) -> list[BinlogEvent]:
    word = "COMMIT" if commit else "ROLLBACK"
    return [gtid(log, standalone=True), QueryEvent(log.header(87), 5, 0, 0, "shop_07", f"XA {word} {xid}")]


def maria_txn(log: Log, *ids: int) -> list[BinlogEvent]:
    return [gtid(log), *rows(log, *ids), XidEvent(log.header(31), 7)]


class Run:
    def __init__(self, limit: int = MAX) -> None:
        self.builder = EntryBuilder(BuilderConfig(mariadb=True))
        self.xa = XaBuffer(limit)

    def feed(self, events: list[BinlogEvent]) -> list[Entry]:
        out: list[Entry] = []
        for event in events:
            out.extend(self.xa.process(event, self.builder.build(event)))
        return out


def row_ids(entries: list[Entry]) -> list[str]:
    out = []
    for e in entries:
        v = e.store_value
        if isinstance(v, RowChange) and v.event_type == EventType.INSERT:
            out.extend(str(r.after[0]) for r in v.rows if r.after)
    return out


X1, X2 = "X'7831',X'',1", "X'7832',X'',1"


def test_prepared_rows_wait_for_commit_and_go_out_in_commit_order() -> None:
    log, run = Log(), Run()
    assert row_ids(run.feed(maria_prepare(log, X1, 1, 2))) == []
    assert run.xa.prepared == [X1]
    assert row_ids(run.feed(maria_txn(log, 3))) == ["3"]
    out = run.feed(maria_decide(log, X1))
    assert row_ids(out) == ["1", "2"]
    assert run.xa.prepared == [] and run.xa.held_bytes == 0
    # One transaction: the XA COMMIT's, numbered from 0 (BEGIN of the prepared part), commit last.
    assert {e.txn.start for e in out} == {out[-1].txn.start}
    assert [e.txn_index for e in out] == list(range(len(out)))
    assert out[0].entry_type == EntryType.TRANSACTIONBEGIN and out[-1].closes_txn
    assert isinstance(out[-1].store_value, RowChange) and out[-1].store_value.event_type == EventType.XACOMMIT
    # The rows keep their own binlog positions (their records' sequences), from the PREPARE.
    assert out[1].header.logfile_offset < out[-1].header.logfile_offset


def test_rollback_drops_and_one_phase_is_a_normal_transaction() -> None:
    log, run = Log(), Run()
    run.feed(maria_prepare(log, X2, 5))
    out = run.feed(maria_decide(log, X2, commit=False))
    assert row_ids(out) == [] and run.xa.prepared == []
    assert (
        isinstance(out[-1].store_value, RowChange) and out[-1].store_value.event_type == EventType.XAROLLBACK
    )
    # MariaDB writes XA COMMIT … ONE PHASE as an ordinary transaction; MySQL as XA_PREPARE(one_phase).
    assert row_ids(run.feed(maria_txn(log, 6))) == ["6"]
    mysql = Run()
    mysql.builder = EntryBuilder(BuilderConfig(mariadb=False))
    events: list[BinlogEvent] = [
        gtid(log, mariadb=False),
        QueryEvent(log.header(70), 5, 0, 0, "shop_07", "XA START X'7833',X'',1"),
        *rows(log, 7),
        QueryEvent(log.header(70), 5, 0, 0, "shop_07", "XA END X'7833',X'',1"),
    ]
    assert row_ids(mysql.feed(events)) == []
    assert row_ids(mysql.feed([XaPrepareEvent(log.header(38), True, "X'7833',X'',1")])) == ["7"]


def test_interleaved_prepares_hold_the_resume_point_at_the_oldest_undecided() -> None:
    log, run = Log(), Run()
    run.feed(maria_prepare(log, X1, 1))
    first_start = log.offset
    run.feed(maria_prepare(log, X2, 2))
    normal = run.feed(maria_txn(log, 3))
    point = resume_after(normal[-1])
    x1_start = 4  # the first GTID event of the log
    assert (point.xa_journal, point.xa_offset) == (log.file, x1_start)
    assert point.read_from.offset == x1_start and point.read_from.skip == 0
    out = run.feed(maria_decide(log, X2))  # X2 decided first: X1 still holds
    assert row_ids(out) == ["2"]
    assert all(e.xa_hold is not None and e.xa_hold.start.offset == x1_start for e in out)
    out = run.feed(maria_decide(log, X1))
    assert row_ids(out) == ["1"]
    mid = resume_after(out[1])  # inside the XA COMMIT's transaction: X1's PREPARE must be re-read
    assert mid.xa_offset == x1_start and mid.skip == 2
    end = resume_after(out[-1])
    assert end.xa_journal == "" and end.skip == 0
    assert first_start > x1_start


def test_restart_from_the_held_point_publishes_nothing_twice_and_loses_nothing() -> None:
    log = Log()
    events = [
        *maria_prepare(log, X1, 1, 2),
        *maria_txn(log, 3),
        *maria_prepare(log, X2, 4),
        *maria_decide(log, X2),
        *maria_txn(log, 5),
        *maria_decide(log, X1),
        *maria_txn(log, 6),
    ]
    whole = Run().feed(events)
    assert row_ids(whole) == ["3", "4", "5", "1", "2", "6"]
    for acked in range(len(whole)):
        point = resume_after(whole[acked])
        start = point.read_from
        # Read again from where the point says (events from that offset on), dropping what is published.
        again = Run().feed([e for e in events if e.header.start >= start.offset])
        rest = [e for e in again if not already_published(e, point)]
        assert [(e.header.logfile_offset, e.txn_index) for e in rest] == [
            (e.header.logfile_offset, e.txn_index) for e in whole[acked + 1 :]
        ], f"after entry {acked}"


def test_memory_is_bounded_and_the_error_names_the_key() -> None:
    log, run = Log(), Run(limit=150)
    with pytest.raises(XaBufferFullError, match=r"source\.xa_buffer_bytes") as err:
        run.feed(maria_prepare(log, X1, 1, 2, 3))
    assert isinstance(err.value, SourceError) and not err.value.retriable


def test_commit_of_an_unseen_prepare_publishes_only_the_statement() -> None:
    log, run = Log(), Run()
    out = run.feed(maria_decide(log, X1))
    assert [e.entry_type for e in out] == [EntryType.ROWDATA] and row_ids(out) == []


@pytest.mark.parametrize(
    "text", ["'x1'", "X'7831'", "X'7831',X''", "X'7831',X'',1", "0x7831,'',1", "'x1' ONE PHASE"]
)
def test_xid_spellings(text: str) -> None:
    assert normalize_xid(text) == "X'7831',X'',1"


def test_resume_point_round_trips_its_hold() -> None:
    point = ResumePoint(
        "mysql-bin.000003", 900, 2, xa_journal="mysql-bin.000002", xa_offset=120, xa_gtid_set="0-1-5"
    )
    again = ResumePoint.from_json(point.to_json())
    assert again == point
    assert str(point) == "mysql-bin.000003:900+2 (read from mysql-bin.000002:120: XA prepared)"
    assert again.read_from == replace(point, journal="mysql-bin.000002", offset=120, skip=0, gtid_set="0-1-5")
