"""What a failover drops of what the standby re-reads: by GTID (the half-read transaction's first entries)
and by fingerprint (the timestamp fallback: transactions already put from the master)."""

from __future__ import annotations

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
from relay.canal.sink import Sink, SinkConfig
from relay.config.sections import SourceConfig, StandbyConfig
from relay.source.failover import FingerprintSkip, GtidSkip, History, master_config, standby_config


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
