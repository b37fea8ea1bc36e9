"""What a failover drops of what the standby re-reads: by GTID (the half-read transaction's first entries)
and by fingerprint (the timestamp fallback: transactions already put from the master)."""

from __future__ import annotations

import pytest

from relay.binlog.events import RowImage
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
from relay.canal.sink import Sink
from relay.config.sections import FailoverConfig, SinkConfig, SourceConfig, StandbyConfig, StartConfig
from relay.errors import SourceError
from relay.positions.store import ResumePoint
from relay.source.binlog_time import TimeLocation, begun_before
from relay.source.failover import (
    Failover,
    FingerprintSkip,
    GtidSkip,
    History,
    SavedBoundary,
    StartBoundary,
    master_config,
    standby_config,
)
from relay.source.server import ServerInfo
from relay.source.start_point import StartPoint, resolve_start


def txn(server: str, offset: int, gtid: str, time_ms: int, rows: list[str], *, xid: str = "1") -> list[Entry]:
    """BEGIN, one INSERT entry per value, END: as a server at ``offset`` in its own binlog would give it."""
    ctx = TxnContext(EntryPosition(f"{server}-bin.000001", offset), gtid=gtid, mariadb=True)
    out: list[Entry] = []

    def header(i: int) -> Header:
        return Header(
            f"{server}-bin.000001", offset + 10 * i, 1, time_ms, 10, schema_name="s", table_name="t"
        )

    out.append(Entry(header(0), EntryType.TRANSACTIONBEGIN, TransactionBegin(), ctx, 0))
    for i, value in enumerate(rows, start=1):
        change = RowChange(EventType.INSERT, rows=(RowImage(None, (value,)),))
        out.append(Entry(header(i), EntryType.ROWDATA, change, ctx, i))
    end = TransactionEnd(transaction_id=xid)
    out.append(Entry(header(len(rows) + 1), EntryType.TRANSACTIONEND, end, ctx, len(rows) + 1, True))
    return out


def values(entries: list[Entry]) -> list[str]:
    out = []
    for e in entries:
        v = e.store_value
        out.append(
            str(v.rows[0].after[0]) if isinstance(v, RowChange) and v.rows[0].after else e.entry_type.name
        )
    return out


def test_gtid_skip_drops_the_entries_of_the_half_read_transaction_already_put() -> None:
    skip = GtidSkip("0-1-7", 2)  # BEGIN and the first row were put from the master
    first = txn("replica", 500, "0-1-7", 1000, ["a", "b", "c"])
    second = txn("replica", 900, "0-1-8", 1000, ["d"])
    assert values(skip.filter(first[:2])) == []
    assert values(skip.filter(first[2:] + second)) == [
        "b",
        "c",
        "TRANSACTIONEND",
        "TRANSACTIONBEGIN",
        "d",
        "TRANSACTIONEND",
    ]
    assert skip.done


def test_fingerprint_skip_drops_what_was_put_and_passes_what_is_new() -> None:
    history = History(window_ms=60_000)
    history.record(txn("master", 100, "", 5_000, ["a"], xid="11"))
    history.record(txn("master", 200, "", 6_000, ["b", "b2"], xid="12"))
    history.record(
        txn("master", 300, "", 7_000, ["c", "c2", "c3"], xid="13")[:3]
    )  # the master died inside it
    skip = FingerprintSkip(history)
    standby = (
        txn("replica", 50, "", 4_000, ["before-the-relay-started"])
        + txn("replica", 120, "", 5_000, ["a"], xid="901")  # other xids and offsets: same changes
        + txn("replica", 220, "", 6_000, ["b", "b2"], xid="902")
        + txn("replica", 320, "", 7_000, ["c", "c2", "c3"], xid="903")
        + txn("replica", 420, "", 7_000, ["new-in-the-same-second"])
        + txn("replica", 520, "", 8_000, ["d"])
    )
    out: list[Entry] = []
    for e in standby:  # one entry at a time, as the parser hands them over
        out += skip.filter([e])
    assert values(out) == [
        "c3",
        "TRANSACTIONEND",
        "TRANSACTIONBEGIN",
        "new-in-the-same-second",
        "TRANSACTIONEND",
        "TRANSACTIONBEGIN",
        "d",
        "TRANSACTIONEND",
    ]
    assert skip.done


def test_fingerprint_skip_releases_a_transaction_that_only_starts_like_one_put() -> None:
    history = History(window_ms=60_000)
    history.record(txn("master", 50, "", 5_000, ["x"]))
    history.record(txn("master", 100, "", 5_000, ["a", "b"]))
    history.record(txn("master", 200, "", 6_000, ["z"]))
    skip = FingerprintSkip(history)
    assert values(skip.filter(txn("replica", 60, "", 5_000, ["x"]))) == []  # the first one put
    diverging = txn("replica", 120, "", 5_000, ["a", "other"])
    assert values(skip.filter(diverging)) == ["TRANSACTIONBEGIN", "a", "other", "TRANSACTIONEND"]
    assert not skip.done


def test_fingerprint_skip_drops_what_precedes_the_first_transaction_put_in_its_second() -> None:
    # The relay started at the master's binlog end (an initial snapshot) under load: the transactions
    # just before its start have the same binlog time (seconds) as the first ones it put. The standby
    # re-reads them; they are no change to publish (the snapshot has their rows), whether they look
    # like nothing put or start like a transaction put.
    history = History(window_ms=60_000)
    history.record(txn("master", 300, "", 5_000, ["a", "a2"]))
    history.record(txn("master", 400, "", 5_000, ["b"]))
    skip = FingerprintSkip(history)
    standby = (
        txn("replica", 100, "", 5_000, ["before-the-start"])
        + txn("replica", 150, "", 5_000, ["a", "before-the-start-too"])
        + txn("replica", 200, "", 5_000, [])  # an empty one
        + txn("replica", 320, "", 5_000, ["a", "a2"])
        + txn("replica", 420, "", 5_000, ["b"])
        + txn("replica", 520, "", 5_000, ["new-in-the-same-second"])
    )
    out: list[Entry] = []
    for e in standby:
        out += skip.filter([e])
    assert values(out) == ["TRANSACTIONBEGIN", "new-in-the-same-second", "TRANSACTIONEND"]
    assert skip.done and skip.preceding == 3


def test_standby_config_takes_the_masters_account_unless_given_and_master_retries_are_bounded() -> None:
    cfg = SourceConfig(host="m", user="relay", password="pw", standby=StandbyConfig(host="r", port=3307))
    sb = standby_config(cfg)
    assert (sb.host, sb.port, sb.user, sb.password, sb.standby.host) == ("r", 3307, "relay", "pw", "")
    assert master_config(cfg).retry.max_tries == cfg.failover.attempts
    assert master_config(SourceConfig()) == SourceConfig()  # no standby: reconnect as configured


def test_fingerprint_skip_compares_after_the_sink_a_transaction_touching_filtered_tables() -> None:
    # The master's transaction touched a kept table (s.t) and a filtered one (s.x): what was put (after
    # the sink) holds only the kept rows; the standby's copy, filtered by the same sink before it is
    # compared, matches it and is dropped instead of being published a second time.
    sink = Sink(SinkConfig(filter="s\\.t"))

    def mixed(server: str, offset: int) -> list[Entry]:
        entries = txn(server, offset, "", 5_000, ["a", "b"], xid="7")
        filtered = Entry(
            Header(f"{server}-bin.000001", offset + 5, 1, 5_000, 5, schema_name="s", table_name="x"),
            EntryType.ROWDATA,
            RowChange(EventType.INSERT, rows=(RowImage(None, ("hidden",)),)),
            entries[0].txn,
            1,
        )
        return [entries[0], filtered, *entries[1:]]

    history = History(window_ms=60_000)
    history.record(sink.process(mixed("master", 100)))
    skip = FingerprintSkip(history)
    standby = mixed("replica", 300) + txn("replica", 500, "", 6_000, ["new"])
    assert values(skip.filter(Sink(SinkConfig(filter="s\\.t")).process(standby))) == [
        "TRANSACTIONBEGIN",
        "new",
        "TRANSACTIONEND",
    ]


def test_fingerprint_skip_passes_a_transaction_that_ends_short_of_the_one_put() -> None:
    history = History(window_ms=60_000)
    history.record(txn("master", 50, "", 5_000, ["x"]))
    history.record(txn("master", 100, "", 5_000, ["a", "b"]))
    history.record(txn("master", 200, "", 6_000, ["z"]))
    skip = FingerprintSkip(history)
    assert values(skip.filter(txn("replica", 60, "", 5_000, ["x"]))) == []  # the first one put
    shorter = txn("replica", 120, "", 5_000, ["a"])
    assert values(skip.filter(shorter)) == ["TRANSACTIONBEGIN", "a", "TRANSACTIONEND"]


def test_fingerprint_skip_passes_a_transaction_that_goes_on_past_a_closed_one_put() -> None:
    # The standby's transaction starts with the changes of a recorded transaction that was put whole
    # (its END too), then goes on: it is another transaction, new once something was matched. Matching
    # it on its first change would drop the rest of it ("b"): a loss.
    history = History(window_ms=60_000)
    history.record(txn("master", 50, "", 5_000, ["x"]))
    history.record(txn("master", 100, "", 5_000, ["a"]))
    history.record(txn("master", 200, "", 6_000, ["z"]))
    skip = FingerprintSkip(history)
    standby = (
        txn("replica", 60, "", 5_000, ["x"])  # the first one put
        + txn("replica", 90, "", 5_000, ["a", "b"])  # goes on past the recorded ["a"]
        + txn("replica", 120, "", 5_000, ["a"])  # the copy of the recorded ["a"]
        + txn("replica", 220, "", 6_000, ["z"])  # the last one put
        + txn("replica", 320, "", 6_000, ["new"])
    )
    out: list[Entry] = []
    for e in standby:  # one entry at a time, as the parser hands them over
        out += skip.filter([e])
    assert values(out) == [
        "TRANSACTIONBEGIN",
        "a",
        "b",
        "TRANSACTIONEND",
        "TRANSACTIONBEGIN",
        "new",
        "TRANSACTIONEND",
    ]
    assert skip.done and skip.preceding == 0


def test_fingerprint_skip_before_any_match_drops_one_going_on_past_a_closed_one_put() -> None:
    # Before the first match, a transaction that goes on past the first one put matches none: it
    # precedes the first one put (the class's rule), like any other unmatched one there.
    history = History(window_ms=60_000)
    history.record(txn("master", 100, "", 5_000, ["a"]))
    skip = FingerprintSkip(history)
    standby = (
        txn("replica", 90, "", 5_000, ["a", "before-the-start"])
        + txn("replica", 120, "", 5_000, ["a"])
        + txn("replica", 220, "", 5_000, ["new"])
    )
    assert values(skip.filter(standby)) == ["TRANSACTIONBEGIN", "new", "TRANSACTIONEND"]
    assert skip.done and skip.preceding == 1


def test_fingerprint_skip_a_partial_last_one_put_drops_just_its_recorded_entries() -> None:
    # The last recorded transaction is partial (the master died inside it, after "a"); a closed one
    # with the same first change was put before it. The standby's copy of the closed one ends with it;
    # the copy of the partial one goes on: its recorded change is dropped, the rest passes.
    history = History(window_ms=60_000)
    history.record(txn("master", 100, "", 5_000, ["a"]))
    history.record(txn("master", 200, "", 5_000, ["a", "b", "c"])[:2])
    skip = FingerprintSkip(history)
    standby = txn("replica", 120, "", 5_000, ["a"]) + txn("replica", 220, "", 5_000, ["a", "b", "c"])
    out: list[Entry] = []
    for e in standby:
        out += skip.filter([e])
    assert values(out) == ["b", "c", "TRANSACTIONEND"]
    assert skip.done
    # A copy of the partial one that ends right after its recorded changes: just its END passes.
    history = History(window_ms=60_000)
    history.record(txn("master", 200, "", 5_000, ["a", "b"])[:2])
    skip = FingerprintSkip(history)
    assert values(skip.filter(txn("replica", 220, "", 5_000, ["a"]))) == ["TRANSACTIONEND"]
    assert skip.done


# --- nothing put from the master's binlog since a start without a saved position ---------------------


def server(end: tuple[str, int], gtid: str, now_ms: int = 0) -> ServerInfo:
    return ServerInfo(
        version="10.11.6-MariaDB",
        mariadb=True,
        server_id=1,
        server_uuid="",
        time_zone_offset="+00:00",
        binlogs=((end[0], end[1]),),
        end=end,
        gtid_executed=gtid,
        now_ms=now_ms,
    )


MASTER = server(("mysql-bin.000120", 900), "0-1-50", now_ms=1_000_000_000)
STANDBY = server(("replica-bin.000003", 5_000), "0-1-80")  # it has what the relay never read: 51..80


class AtTime(Failover):
    """``Failover`` whose standby binlog lookup by time is a table (the rest is the real policy).

    ``begun``: the second the standby's oldest binlog was begun; a target at or before it is not
    ``covered`` (transactions at or after the target may have been purged)."""

    def __init__(self, cfg: SourceConfig, begun: int = 0) -> None:
        super().__init__(cfg)
        self.asked: list[int] = []
        self.begun = begun

    def _locate(self, cfg: SourceConfig, info: ServerInfo, target_ms: int) -> TimeLocation:
        self.asked.append(target_ms)
        covered = begun_before(target_ms, self.begun)
        return TimeLocation(
            "replica-bin.000002", 4_000, covered, "replica-bin.000002", self.begun, self.begun
        )


def started(mode: str, start: StartConfig | None = None, master: ServerInfo = MASTER) -> AtTime:
    """A failover policy after the relay started on ``master`` without a saved position."""
    cfg = SourceConfig(
        host="m",
        standby=StandbyConfig(host="r"),
        failover=FailoverConfig(mode=mode, fallback_interval_seconds=60.0),
        start=start or StartConfig(),
    )
    failover = AtTime(cfg)
    if cfg.start.timestamp is not None:  # resolve_start would look it up on the master
        begun = StartPoint(
            "mysql-bin.000120", 4, 0, None, f"first transaction at or after {cfg.start.timestamp}"
        )
    else:
        begun = resolve_start(cfg, master, None)
    failover.track(master, begun)
    return failover


def test_nothing_read_yet_by_gtid_the_standby_continues_from_the_gtid_set_of_the_start() -> None:
    # The relay started at the master's end (GTID position 0-1-50) and put nothing from its binlog (only
    # snapshot chunks, or nothing) before the master died: the standby must stream after 0-1-50, not
    # from its own end (0-1-80), which would skip 0-1-51..80.
    for mode in ("gtid", "auto"):
        failover = started(mode)
        start, drop = failover._where(standby_config(failover.config), STANDBY, None)
        assert (start.journal, start.gtid_set) == ("", "0-1-50"), mode
        assert drop.done and not failover.asked


def test_nothing_read_yet_by_timestamp_the_standby_is_read_from_the_start_minus_the_fallback() -> None:
    failover = started("timestamp")
    start, drop = failover._where(standby_config(failover.config), STANDBY, None)
    since = MASTER.now_ms - 60_000
    assert failover.asked == [since] and (start.journal, start.offset) == ("replica-bin.000002", 4_000)
    assert isinstance(drop, StartBoundary)
    older = txn("replica", 100, "", since - 1_000, ["long-before-the-start"])
    empty = txn("replica", 150, "", MASTER.now_ms, [])  # no change: nothing to decide
    assert values(drop.filter(older + empty)) == [] and not drop.done
    after = txn("replica", 200, "", MASTER.now_ms + 1_000, ["after-the-start"])
    again = txn("replica", 300, "", MASTER.now_ms, ["after-it-too"])  # an earlier time, later in the log
    assert values(drop.filter(after + again)) == values(after + again)
    assert drop.done and drop.preceding == 1


def test_nothing_read_yet_by_timestamp_a_change_near_the_start_stops_the_relay() -> None:
    # In the start's second, or within the fallback interval before it, a change may precede the start
    # (the snapshot has it) or follow it (never published): time cannot tell, the relay stops.
    for at in (MASTER.now_ms + 999, MASTER.now_ms - 30_000):
        failover = started("timestamp")
        _, drop = failover._where(standby_config(failover.config), STANDBY, None)
        near = txn("replica", 100, "", at, ["near-the-start"])
        assert values(drop.filter(near[:1])) == []  # its BEGIN: no change yet
        try:
            drop.filter(near[1:])
        except SourceError as exc:
            assert "may precede the start" in str(exc) and "snapshot" in str(exc)
        else:
            raise AssertionError(f"a change at {at} ms near the start at {MASTER.now_ms} ms passed")


def test_nothing_read_yet_from_a_configured_start() -> None:
    # source.start.timestamp: the standby's first transaction at or after it, as on the master; all new.
    failover = started("timestamp", StartConfig(timestamp=123_000))
    start, drop = failover._where(standby_config(failover.config), STANDBY, None)
    assert failover.asked == [123_000] and start.journal == "replica-bin.000002" and drop.done
    # source.start.gtid: that set, by GTID.
    failover = started("auto", StartConfig(gtid="0-1-40"))
    start, drop = failover._where(standby_config(failover.config), STANDBY, None)
    assert start.gtid_set == "0-1-40" and drop.done
    # A master file and offset: no place on the standby by time, no GTID set: stop, never skip.
    for mode in ("gtid", "timestamp", "auto"):
        failover = started(mode, StartConfig(journal="mysql-bin.000120", offset=4))
        try:
            failover._where(standby_config(failover.config), STANDBY, None)
        except SourceError as exc:
            assert "nothing read from the master's binlog since the relay started" in str(exc), exc
        else:
            raise AssertionError(f"{mode}: a failover from a configured master file did not stop")


def test_master_unreachable_at_the_first_start_without_source_start_begins_at_the_standbys_end() -> None:
    cfg = SourceConfig(host="m", standby=StandbyConfig(host="r"))
    start, drop = Failover(cfg)._where(standby_config(cfg), STANDBY, None)
    assert (start.journal, start.offset) == STANDBY.end and drop.done


# --- a standby whose binlog may have been purged after the target ------------------------------------


def test_a_binlog_file_begun_in_the_targets_second_does_not_cover_it() -> None:
    # A transaction purged with the file before has a binlog time at most the next file's first second.
    assert begun_before(5_001, 5) and begun_before(6_000, 5)
    assert not begun_before(5_000, 5) and not begun_before(4_000, 5) and not begun_before(5_000, None)


def test_fingerprint_skip_on_a_purged_standby_stops_unless_it_holds_a_copy_of_one_put() -> None:
    history = History(window_ms=60_000)
    history.record(txn("master", 100, "", 5_000, ["a"]))
    history.record(txn("master", 200, "", 6_000, ["b"]))
    # The standby's binlog begins after the re-read's start, and its first transaction is newer than
    # the last one put: what followed the last one put may have been purged. Stop, never pass it.
    skip = FingerprintSkip(history, covered=False, address="r:3306")
    try:
        skip.filter(txn("replica", 300, "", 9_000, ["after-a-gap?"]))
    except SourceError as exc:
        assert "r:3306" in str(exc) and "purged" in str(exc) and "GTID" in str(exc), exc
    else:
        raise AssertionError("a standby transaction after a possible gap passed")
    # Same second as the last one put, not its copy, no copy before it: dropped as preceding the first
    # one put (the covered rule) only if a copy follows; the next newer transaction stops the relay.
    skip = FingerprintSkip(history, covered=False, address="r:3306")
    assert values(skip.filter(txn("replica", 300, "", 6_000, ["c"]))) == []
    try:
        skip.filter(txn("replica", 400, "", 7_000, ["d"]))
    except SourceError:
        pass
    else:
        raise AssertionError("no copy of a transaction put, yet the standby's transactions passed")
    # It holds the copy of the last one put (the first one was purged): gap-free from there, exact.
    skip = FingerprintSkip(history, covered=False, address="r:3306")
    standby = txn("replica", 300, "", 6_000, ["b"]) + txn("replica", 400, "", 7_000, ["new"])
    assert values(skip.filter(standby)) == ["TRANSACTIONBEGIN", "new", "TRANSACTIONEND"]
    assert skip.done


def test_failover_by_timestamp_on_a_purged_standby() -> None:
    saved = ResumePoint("mysql-bin.000120", 900, timestamp=MASTER.now_ms)
    # With transactions put: FingerprintSkip, told that the standby's binlog begins after the target.
    failover = started("timestamp")
    failover.begun = MASTER.now_ms // 1000
    failover.record(txn("master", 900, "", MASTER.now_ms, ["a"]))
    _, drop = failover._where(standby_config(failover.config), STANDBY, saved)
    assert isinstance(drop, FingerprintSkip) and not drop.covered
    # Placed by time alone (a start, a saved position with nothing put since): a stop at once.
    for after in (None, saved):
        failover = started("timestamp")
        failover.begun = MASTER.now_ms // 1000
        try:
            failover._where(standby_config(failover.config), STANDBY, after)
        except SourceError as exc:
            message = str(exc)
            assert "replica-bin.000002" in message and str(MASTER.now_ms - 60_000) in message, message
            assert f"begun at {MASTER.now_ms // 1000 * 1000} ms" in message and "snapshot" in message
        else:
            raise AssertionError(f"{after}: a start past a possible gap on the standby")


# --- a saved position with nothing put from the master's binlog since --------------------------------

SAVED = ResumePoint("mysql-bin.000120", 700, timestamp=900_000_000, generation=3)


def saved_then_failover(master_reachable: bool) -> AtTime:
    """The relay restarted from ``SAVED`` (by timestamp): the master read and then dead before anything
    more was put, or not reachable at the restart (``CanalInstance._switch(saved)``)."""
    cfg = SourceConfig(
        host="m",
        standby=StandbyConfig(host="r"),
        failover=FailoverConfig(mode="timestamp", fallback_interval_seconds=60.0),
    )
    failover = AtTime(cfg)
    if master_reachable:
        failover.track(MASTER, resolve_start(cfg, MASTER, SAVED))
    return failover


def test_saved_position_nothing_put_since_drops_what_precedes_it_and_passes_what_follows() -> None:
    t = SAVED.timestamp
    for reachable in (True, False):
        failover = saved_then_failover(reachable)
        start, drop = failover._where(standby_config(failover.config), STANDBY, SAVED)
        assert failover.asked == [t - 60_000] and start.journal == "replica-bin.000002", reachable
        older = txn("replica", 100, "", t - 61_000, ["published-before-the-saved-point"])
        empty = txn("replica", 150, "", t, [])
        assert values(drop.filter(older + empty)) == [] and not drop.done
        later = txn("replica", 200, "", t + 61_000, ["after-the-saved-point"])
        again = txn("replica", 300, "", t, ["after-it-too"])  # an earlier time, later in the log
        assert values(drop.filter(later + again)) == values(later + again)
        assert drop.done


def test_saved_position_nothing_put_since_a_change_time_cannot_place_stops_the_relay() -> None:
    # Binlog times are statement starts, not commits: within the fallback interval either side of the
    # saved point's time (its own second included), a change may precede the point (published: again
    # it would be a duplicate under a new identity) or follow it (never published).
    t = SAVED.timestamp
    for reachable in (True, False):
        for at in (t - 60_000, t - 1_000, t, t + 999, t + 60_999):
            failover = saved_then_failover(reachable)
            _, drop = failover._where(standby_config(failover.config), STANDBY, SAVED)
            near = txn("replica", 100, "", at, ["near-the-saved-point"])
            assert values(drop.filter(near[:1])) == []
            try:
                drop.filter(near[1:])
            except SourceError as exc:
                message = str(exc)
                assert "may precede the saved position" in message and str(SAVED) in message, message
                assert "GTID" in message and "snapshot" in message
            else:
                raise AssertionError(f"a change at {at} ms near the saved point at {t} ms passed")
    assert isinstance(drop, SavedBoundary)


def test_saved_position_without_a_binlog_time_stops_the_failover() -> None:
    # Acked snapshot chunks left the saved point (a chunk has no binlog time: timestamp 0): reading the
    # standby from its oldest transaction would publish everything again. Stop, saying what to do.
    chunk = ResumePoint("mysql-bin.000120", 700, timestamp=0, generation=1)
    for reachable in (True, False):
        failover = saved_then_failover(reachable)
        try:
            failover._where(standby_config(failover.config), STANDBY, chunk)
        except SourceError as exc:
            message = str(exc)
            assert "no binlog time" in message and str(chunk) in message and "snapshot" in message, message
        else:
            raise AssertionError("a failover from a saved point without a time did not stop")
        assert not failover.asked


def test_fingerprint_skip_matches_a_transaction_put_with_a_later_time_than_the_last_one_put() -> None:
    # Binlog times are statement starts: "z" started first and committed last, so the transaction put
    # before it ("y") has a later time. The standby's copy of "y" is newer than the last one put, yet
    # it was put: it must be matched and dropped, not end the filtering (which published "y" and "z"
    # again under the standby's generation).
    history = History(window_ms=60_000)
    history.record(txn("master", 100, "", 5_000, ["a"]))
    history.record(txn("master", 200, "", 7_000, ["y"]))
    history.record(txn("master", 300, "", 6_000, ["z"]))
    skip = FingerprintSkip(history)
    standby = (
        txn("replica", 120, "", 5_000, ["a"])
        + txn("replica", 220, "", 7_000, ["y"])
        + txn("replica", 320, "", 6_000, ["z"])
        + txn("replica", 420, "", 8_000, ["new"])
    )
    out: list[Entry] = []
    for e in standby:
        out += skip.filter([e])
    assert values(out) == ["TRANSACTIONBEGIN", "new", "TRANSACTIONEND"]
    assert skip.done


# --- what matching holds: bounded (issue 32) -------------------------------------------------------------


def _feed(skip: FingerprintSkip, entries: list[Entry]) -> list[Entry]:
    out: list[Entry] = []
    for e in entries:  # one at a time, as the parser hands them over
        out += skip.filter([e])
    return out


def test_a_large_transaction_put_whole_is_matched_without_holding_it_whole() -> None:
    rows = [f"r{i}" for i in range(200)]
    history = History(window_ms=60_000)
    history.record(txn("master", 100, "", 5_000, rows))
    skip = FingerprintSkip(history, hold_bytes=20 * 1_000)  # about 25 entries
    out = _feed(skip, txn("replica", 120, "", 5_000, rows) + txn("replica", 9_000, "", 6_000, ["new"]))
    assert values(out) == ["TRANSACTIONBEGIN", "new", "TRANSACTIONEND"]
    assert skip.discards == 1 and skip.done
    assert not skip._held  # nothing left held


def test_the_rest_of_a_large_transaction_put_in_part_passes_after_matching_beyond_the_hold() -> None:
    rows = [f"r{i}" for i in range(200)]
    history = History(window_ms=60_000)
    history.record(txn("master", 100, "", 5_000, rows)[:151])  # BEGIN + 150 rows: the master died there
    skip = FingerprintSkip(history, hold_bytes=20 * 1_000)
    out = _feed(skip, txn("replica", 120, "", 5_000, rows))
    assert values(out) == [f"r{i}" for i in range(150, 200)] + ["TRANSACTIONEND"]
    assert skip.discards == 1 and skip.done


def test_a_transaction_that_differs_after_more_than_the_hold_stops_instead_of_guessing() -> None:
    rows = [f"r{i}" for i in range(100)]
    history = History(window_ms=60_000)
    history.record(txn("master", 50, "", 5_000, ["x"]))
    history.record(txn("master", 100, "", 5_000, rows))
    history.record(txn("master", 900, "", 6_000, ["z"]))
    skip = FingerprintSkip(history, hold_bytes=20 * 1_000, address="standby:3306")
    assert _feed(skip, txn("replica", 60, "", 5_000, ["x"])) == []
    other = txn("replica", 120, "", 5_000, [*rows[:60], "other"])
    with pytest.raises(
        SourceError, match=r"standby:3306: the re-read transaction at replica-bin\.000001:120"
    ):
        _feed(skip, other)
    # Within the hold, the same divergence is released whole, as before.
    history2 = History(window_ms=60_000)
    history2.record(txn("master", 50, "", 5_000, ["x"]))
    history2.record(txn("master", 100, "", 5_000, rows))
    roomy = FingerprintSkip(history2)
    _feed(roomy, txn("replica", 60, "", 5_000, ["x"]))
    assert values(_feed(roomy, other)) == ["TRANSACTIONBEGIN", *rows[:60], "other", "TRANSACTIONEND"]


def test_history_keeps_sixteen_bytes_a_change() -> None:
    history = History(window_ms=60_000)
    history.record(txn("master", 100, "", 5_000, [f"r{i}" for i in range(1000)]))
    (recorded,) = history.txns
    assert recorded.changes == 1000 and len(recorded.digests) == 16_000
