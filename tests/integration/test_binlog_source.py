"""BinlogSource against real MariaDB servers: refusals, start precedence, the timestamp walk, the
current end, reconnects that neither lose nor repeat an event, our own replica id, TIMESTAMP zones.

Each concern that changes a server (SET GLOBAL, PURGE, many rotations, a stopped server) gets a private
embedded MariaDB (about a second to start), shared by the tests of this module where possible:
``stream_server`` (positions, reconnects), ``timeline_server`` (event timestamps across files) and
``tuned_server`` (started with TZ=Europe/Berlin and --default-time-zone=+08:00; settings changed with
SET GLOBAL and restored). Skipped where no ``mariadbd`` is installed.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pymysql
import pytest

from relay.binlog import events as ev
from relay.binlog.stream import BinlogStream, StreamConfig
from relay.common.mysql import binlog_status
from relay.common.retry import RetryPolicy
from relay.config.sections import SourceConfig, StartConfig
from relay.dev import services
from relay.dev.services import MySQLService
from relay.errors import ServiceError, SourceError
from relay.positions.store import ResumePoint
from relay.source.binlog_source import BinlogSource
from relay.source.binlog_time import find_by_timestamp, locate_by_timestamp
from relay.source.schema_start import ddls_between, gtid_start_place
from relay.source.server import inspect_server
from relay.source.start_point import StartPoint, resolve_start

_server_ids = itertools.count(52000)
FAST_RETRY = RetryPolicy(initial=0.05, maximum=0.5, jitter=0.0, deadline=30.0)


# --- servers ---------------------------------------------------------------------------------------


def start_server(directory: Path, *args: str, tz: str | None = None) -> services.Running[MySQLService]:
    try:
        services.find_binary("mariadbd")
    except ServiceError as exc:
        pytest.skip(str(exc))
    with pytest.MonkeyPatch.context() as mp:
        if tz is not None:
            mp.setenv("TZ", tz)  # inherited by mariadbd: its SYSTEM zone (this process never calls tzset)
        return services.start_mysql(services.StartOptions(directory, extra_args=args))


@pytest.fixture(scope="module")
def stream_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MySQLService]:
    with start_server(tmp_path_factory.mktemp("stream")) as running:
        yield running.service


@pytest.fixture(scope="module")
def timeline_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MySQLService]:
    with start_server(tmp_path_factory.mktemp("timeline")) as running:
        yield running.service


@pytest.fixture(scope="module")
def tuned_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MySQLService]:
    directory = tmp_path_factory.mktemp("tuned")
    with start_server(directory, "--default-time-zone=+08:00", tz="Europe/Berlin") as running:
        yield running.service


# --- helpers ---------------------------------------------------------------------------------------


def source_config(svc: MySQLService, **kw: Any) -> SourceConfig:
    args: dict[str, Any] = {
        "host": svc.host,
        "port": svc.port,
        "user": svc.replication_user,
        "password": svc.replication_password,
        "server_id": next(_server_ids),
        "heartbeat_seconds": 1.0,
        "read_timeout": 10.0,
        "retry": FAST_RETRY,
    }
    args.update(kw)
    return SourceConfig(**args)


def execute(svc: MySQLService, *sql: str) -> list[tuple[Any, ...]]:
    with contextlib.closing(svc.connect()) as conn, conn.cursor() as cur:
        result: list[tuple[Any, ...]] = []
        for statement in sql:
            cur.execute(statement)
            result = list(cur.fetchall())
        return result


def end_of(cur: Any) -> tuple[str, int]:
    row = binlog_status(cur)
    assert row is not None
    return str(row[0]), int(row[1])


@dataclass(frozen=True)
class Txn:
    """One committed single-row insert: where it starts and ends in the binlog, its GTID and time."""

    id: int
    file: str
    start: int
    end: int
    gtid: str
    timestamp: int


def insert(cur: Any, table: str, row_id: int, timestamp: int | None = None) -> Txn:
    """Insert one row in its own transaction, at ``timestamp`` (SET TIMESTAMP) when given."""
    file, start = end_of(cur)
    cur.execute(f"SET TIMESTAMP = {timestamp}" if timestamp else "SET TIMESTAMP = DEFAULT")
    cur.execute("SELECT UNIX_TIMESTAMP()")
    stamp = int(cur.fetchone()[0])
    cur.execute(f"INSERT INTO {table} (id) VALUES ({row_id})")
    end_file, end = end_of(cur)
    assert end_file == file
    cur.execute("SELECT @@global.gtid_binlog_pos")
    return Txn(row_id, file, start, end, str(cur.fetchone()[0]), stamp)


def after(position: tuple[str, int], event: ev.BinlogEvent) -> bool:
    h = event.header
    return not h.artificial and (h.log_file, h.log_pos) >= position


def read_through(
    read: Callable[[float], ev.BinlogEvent | None], end: tuple[str, int], limit: float = 60.0
) -> list[ev.BinlogEvent]:
    """Events (heartbeats left out) up to the one ending at ``end``."""
    out: list[ev.BinlogEvent] = []
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        event = read(1.0)
        if event is None or isinstance(event, ev.HeartbeatEvent):
            continue
        out.append(event)
        if after(end, event):
            return out
    raise AssertionError(f"did not reach {end}; last: {out[-1:]}")


def first_change(source: BinlogSource, limit: float = 20.0) -> tuple[ev.GtidEvent, ev.RowsEvent]:
    """The first transaction the source delivers: its GTID event and its first rows event."""
    gtid: ev.GtidEvent | None = None
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        event = source.read(1.0)
        if isinstance(event, ev.GtidEvent):
            assert gtid is None, f"a transaction without rows came first: {gtid}"
            gtid = event
        elif isinstance(event, ev.RowsEvent):
            assert gtid is not None, "a rows event before any GTID event"
            return gtid, event
    raise AssertionError("no transaction arrived")


def stream_first(cfg: SourceConfig, start: StartPoint) -> tuple[ev.GtidEvent, ev.RowsEvent]:
    source = BinlogSource(cfg)
    try:
        source.open(start)
        return first_change(source)
    finally:
        source.close()


def row_id(change: ev.RowsEvent) -> int:
    image = change.rows[0].after
    assert image is not None and image[0] is not None
    return int(image[0])


def dump_threads(svc: MySQLService) -> list[int]:
    rows = execute(svc, "SHOW PROCESSLIST")
    return [int(r[0]) for r in rows if r[4] == "Binlog Dump"]


def purge_to(cur: Any, newest: str) -> list[str]:
    """PURGE BINARY LOGS TO ``newest``; the binlog files left.

    MariaDB keeps a file until its binlog checkpoint passes it (InnoDB has flushed its transactions);
    FLUSH ENGINE LOGS hastens the checkpoint, which lands a moment later.
    """
    deadline = time.monotonic() + 20
    cur.execute("FLUSH ENGINE LOGS")
    while True:
        cur.execute(f"PURGE BINARY LOGS TO '{newest}'")
        cur.execute("SHOW BINARY LOGS")
        available = [str(r[0]) for r in cur.fetchall()]
        if available[0] == newest or time.monotonic() > deadline:
            return available
        time.sleep(0.1)  # polling a condition with a deadline


# --- refusals --------------------------------------------------------------------------------------

REFUSALS = [
    ("binlog_format", "STATEMENT", "ROW", "set binlog_format=ROW"),
    ("binlog_format", "MIXED", "ROW", "set binlog_format=ROW"),
    ("binlog_row_image", "MINIMAL", "FULL", "set binlog_row_image=FULL"),
    ("binlog_row_metadata", "MINIMAL", "FULL", "set binlog_row_metadata=FULL"),
]


@pytest.mark.parametrize(
    ("variable", "bad", "good", "fix"), REFUSALS, ids=[f"{r[0]}={r[1]}" for r in REFUSALS]
)
def test_an_unfit_server_is_refused_with_the_fix(
    tuned_server: MySQLService, variable: str, bad: str, good: str, fix: str
) -> None:
    cfg = source_config(tuned_server)
    execute(tuned_server, f"SET GLOBAL {variable} = {bad}")
    try:
        with pytest.raises(SourceError) as info:
            BinlogSource(cfg).check()
    finally:
        execute(tuned_server, f"SET GLOBAL {variable} = {good}")
    message = str(info.value)
    assert f"{variable} is {bad}" in message and fix in message, message
    assert not info.value.retriable
    BinlogSource(cfg).check()  # fit again once the setting is back


def test_a_server_started_with_statement_format_is_refused(
    mysql_server_factory: Callable[..., MySQLService],
) -> None:
    svc = mysql_server_factory("--binlog-format=STATEMENT")
    with pytest.raises(SourceError, match="binlog_format is STATEMENT; set binlog_format=ROW"):
        inspect_server(source_config(svc))


def test_a_saved_position_in_a_purged_file_names_the_oldest_available(tuned_server: MySQLService) -> None:
    execute(
        tuned_server, "CREATE DATABASE IF NOT EXISTS purge_db", "CREATE TABLE purge_db.t (id INT PRIMARY KEY)"
    )
    with contextlib.closing(tuned_server.connect()) as conn, conn.cursor() as cur:
        txn = insert(cur, "purge_db.t", 1)
        cur.execute("FLUSH BINARY LOGS")
        insert(cur, "purge_db.t", 2)
        cur.execute("FLUSH BINARY LOGS")
        newest, _ = end_of(cur)
        available = purge_to(cur, newest)
    assert txn.file not in available and available[0] == newest
    cfg = source_config(tuned_server)
    saved = ResumePoint(txn.file, txn.start)
    with pytest.raises(SourceError) as info:
        resolve_start(cfg, BinlogSource(cfg).check(), saved)
    message = str(info.value)
    assert (
        txn.file in message
        and "purged" in message
        and f"oldest binlog still available is {newest}" in message
    )
    assert not info.value.retriable
    future = ResumePoint("mysql-bin.999999", 4)
    with pytest.raises(
        SourceError, match=f"newer than every binlog.*oldest binlog still available is {newest}"
    ):
        resolve_start(cfg, inspect_server(cfg), future)


# --- where the stream starts -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def precedence(stream_server: MySQLService) -> Iterator[list[Txn]]:
    """Four transactions: T1..T3 at one second, T4 five seconds later."""
    execute(stream_server, "CREATE DATABASE prec", "CREATE TABLE prec.t (id INT PRIMARY KEY)")
    base = int(time.time()) + 100
    with contextlib.closing(stream_server.connect()) as conn, conn.cursor() as cur:
        txns = [insert(cur, "prec.t", i, base + (5 if i == 4 else 0)) for i in (1, 2, 3, 4)]
    yield txns


def test_start_precedence_saved_gtid_file_timestamp_end(
    stream_server: MySQLService, precedence: list[Txn]
) -> None:
    t1, t2, t3, t4 = precedence
    start = StartConfig(gtid=t1.gtid, journal=t3.file, offset=t3.start, timestamp=t4.timestamp * 1000)
    saved = ResumePoint(t1.file, t1.start)
    cases: list[tuple[StartConfig, ResumePoint | None, Txn | None, str]] = [
        (start, saved, t1, "saved position"),
        (start, None, t2, "configured GTID set"),
        (replace(start, gtid=None), None, t3, "configured position"),
        (replace(start, gtid=None, journal=None, offset=None), None, t4, "first transaction at or after"),
        (StartConfig(), None, None, "current end"),
    ]
    for config, point, planned, reason in cases:
        cfg = source_config(stream_server, start=config)
        info = inspect_server(cfg)
        resolved = resolve_start(cfg, info, point)
        assert resolved.reason.startswith(reason), (reason, resolved)
        expected = planned
        if expected is None:
            assert (resolved.journal, resolved.offset) == info.end
            with contextlib.closing(stream_server.connect()) as conn, conn.cursor() as cur:
                expected = insert(cur, "prec.t", 5)  # written after the start point was taken
        elif resolved.journal:
            assert (resolved.journal, resolved.offset) == (expected.file, expected.start), reason
        gtid, change = stream_first(cfg, resolved)
        assert (gtid.gtid, gtid.header.start, row_id(change)) == (
            expected.gtid,
            expected.start,
            expected.id,
        ), reason


def test_the_current_end_delivers_only_what_is_written_after_start(stream_server: MySQLService) -> None:
    execute(stream_server, "CREATE DATABASE IF NOT EXISTS ends", "CREATE TABLE ends.t (id INT PRIMARY KEY)")
    cfg = source_config(stream_server)
    source = BinlogSource(cfg)
    try:
        with contextlib.closing(stream_server.connect()) as conn, conn.cursor() as cur:
            insert(cur, "ends.t", 1)  # before the start: must not arrive
            source.open(resolve_start(cfg, source.check(), None))
            later = [insert(cur, "ends.t", i) for i in (2, 3)]
        events = read_through(source.read, (later[-1].file, later[-1].end))
    finally:
        source.close()
    assert [row_id(e) for e in events if isinstance(e, ev.RowsEvent)] == [2, 3]


@dataclass(frozen=True)
class Timeline:
    first_txn: tuple[str, int]  # the server's very first transaction (CREATE DATABASE)
    txns: dict[str, Txn]  # a1 a2 | b1 b2 | c1 c2 | d1, one binlog file per group


@pytest.fixture(scope="module")
def timeline(timeline_server: MySQLService) -> Timeline:
    """Groups of transactions in four binlog files, at chosen seconds (SET TIMESTAMP):

    file 1: a1 a2 @base · file 2: b1 b2 @base+3 · file 3: c1 @base+3, c2 @base+6 · file 4: d1 @base+9.
    c1 shares its second with the end of file 2 (and file 3's header), so a walk that stops at the
    first file starting at or before a target misses b1 and b2.
    """
    base = int(time.time()) + 100
    plan = [("a1", 0), ("a2", 0), None, ("b1", 3), ("b2", 3), None, ("c1", 3), ("c2", 6), None, ("d1", 9)]
    txns: dict[str, Txn] = {}
    with contextlib.closing(timeline_server.connect()) as conn, conn.cursor() as cur:
        first_txn = end_of(cur)
        cur.execute("CREATE DATABASE tl")
        cur.execute("CREATE TABLE tl.t (id INT PRIMARY KEY)")
        for n, step in enumerate(plan):
            if step is None:  # at the second of the last transaction, like a rotation by size
                cur.execute("FLUSH BINARY LOGS")
                continue
            name, offset = step
            txns[name] = insert(cur, "tl.t", n, base + offset)
    assert len({t.file for t in txns.values()}) == 4
    return Timeline(first_txn, txns)


def test_event_headers_carry_the_session_timestamp(timeline_server: MySQLService, timeline: Timeline) -> None:
    a1, d1 = timeline.txns["a1"], timeline.txns["d1"]
    with BinlogStream(
        StreamConfig(
            timeline_server.host,
            timeline_server.port,
            timeline_server.replication_user,
            timeline_server.replication_password,
            server_id=next(_server_ids),
            heartbeat_seconds=1.0,
            read_timeout=10.0,
        )
    ) as stream:
        stream.open_at(a1.file, a1.start)
        events = read_through(stream.read, (d1.file, d1.end))
    stamps = {e.gtid: e.header.timestamp for e in events if isinstance(e, ev.GtidEvent)}
    assert {t.gtid: t.timestamp for t in timeline.txns.values()} == stamps


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ((0, 0), "uncovered"),  # before the server's binlog began: what preceded it cannot be told
        ((1, 500), "b1"),  # between the groups of files 1 and 2
        ((3, 0), "b1"),  # the second file 2 ends and file 3 starts with
        ((4, 0), "c2"),  # inside file 3
        ((6, 0), "c2"),
        ((7, 0), "d1"),
        ((10, 0), "end"),
    ],
)
def test_timestamp_start_is_the_first_transaction_at_or_after_it(
    timeline_server: MySQLService, timeline: Timeline, target: tuple[int, int], expected: str
) -> None:
    base = timeline.txns["a1"].timestamp
    seconds, ms = target
    target_ms = 0 if target == (0, 0) else (base + seconds) * 1000 + ms
    cfg = source_config(timeline_server, start=StartConfig(timestamp=target_ms))
    info = inspect_server(cfg)
    if expected == "uncovered":
        with pytest.raises(SourceError, match=f"first transaction at or after {target_ms} ms cannot be told"):
            find_by_timestamp(cfg, info, target_ms)
        with pytest.raises(SourceError, match="cannot be told"):
            resolve_start(cfg, info, None)
        return
    found = find_by_timestamp(cfg, info, target_ms)
    if expected == "end":
        assert found == info.end
        return
    txn = timeline.txns[expected]
    assert found == (txn.file, txn.start)
    gtid, change = stream_first(cfg, resolve_start(cfg, info, None))
    assert (gtid.gtid, gtid.header.log_file, row_id(change)) == (txn.gtid, txn.file, txn.id)
    assert gtid.header.timestamp * 1000 >= target_ms


def test_a_time_before_the_oldest_binlog_after_a_purge_stops_instead_of_skipping(
    mysql_server_factory: Callable[..., MySQLService],
) -> None:
    # A transaction at the target, then a new binlog file begun 2 s later, a transaction 2 s after that,
    # and the first file purged (times chosen with SET TIMESTAMP, which the new file's first event takes
    # too, as a rotation would at that second): the first transaction at or after the target is gone.
    svc = mysql_server_factory()
    base = int(time.time()) + 100
    with contextlib.closing(svc.connect()) as conn, conn.cursor() as cur:
        cur.execute("CREATE DATABASE pg")
        cur.execute("CREATE TABLE pg.t (id INT PRIMARY KEY)")
        purged = insert(cur, "pg.t", 1, base)
        cur.execute(f"SET TIMESTAMP = {base + 2}")
        cur.execute("FLUSH BINARY LOGS")
        kept = insert(cur, "pg.t", 2, base + 4)
        available = purge_to(cur, kept.file)
    assert available[0] == kept.file and purged.file not in available
    cfg = source_config(svc)
    info = inspect_server(cfg)
    for target_ms in (base * 1000, (base + 2) * 1000):  # the file was begun in the second of the latter
        with pytest.raises(SourceError) as raised:
            find_by_timestamp(cfg, info, target_ms)
        message = str(raised.value)
        assert cfg.address in message and f"at or after {target_ms} ms" in message, message
        assert f"{kept.file}, was begun at {(base + 2) * 1000} ms" in message, message
        assert f"first transaction is at {(base + 4) * 1000} ms" in message and "purged" in message, message
    # After the file's first second: it was begun before the target, nothing at or after it is missing.
    assert find_by_timestamp(cfg, info, (base + 3) * 1000) == (kept.file, kept.start)


def test_lookups_beside_a_streaming_source_leave_its_dump_alone(stream_server: MySQLService) -> None:
    """The short reads that locate a time or a GTID set and find DDL for the schema history (at start, in
    a failover, from ``relay positions set --timestamp`` while the relay runs) use the side server id: a
    replication connection with the dump's own id would make the server end the dump."""
    execute(
        stream_server,
        "CREATE DATABASE IF NOT EXISTS lk",
        "CREATE TABLE IF NOT EXISTS lk.t (id INT PRIMARY KEY)",
    )
    cfg = source_config(stream_server)
    info = inspect_server(cfg)
    source = BinlogSource(cfg)
    try:
        source.open(StartPoint(*info.end, 0))
        with contextlib.closing(stream_server.connect()) as conn, conn.cursor() as cur:
            first = insert(cur, "lk.t", 1)
        read_through(source.read, (first.file, first.end))
        dump = source.connection_id
        assert dump is not None and dump in dump_threads(stream_server)
        locate_by_timestamp(cfg, info, first.timestamp * 1000)
        gtid_start_place(cfg, info, str(execute(stream_server, "SELECT @@global.gtid_binlog_pos")[0][0]))
        ddls_between(cfg, info, info.end, (first.file, first.end))
        with contextlib.closing(stream_server.connect()) as conn, conn.cursor() as cur:
            second = insert(cur, "lk.t", 2)
        events = read_through(source.read, (second.file, second.end))
        assert source.connection_id == dump, "the dump was ended and reopened"
        assert dump in dump_threads(stream_server)
        assert [row_id(e) for e in events if isinstance(e, ev.RowsEvent)] == [2]
    finally:
        source.close()


def test_a_gtid_start_survives_a_connection_lost_before_any_transaction(stream_server: MySQLService) -> None:
    execute(stream_server, "CREATE DATABASE IF NOT EXISTS gt", "CREATE TABLE gt.t (id INT PRIMARY KEY)")
    gtid = str(execute(stream_server, "SELECT @@global.gtid_binlog_pos")[0][0])
    source = BinlogSource(source_config(stream_server))
    try:
        source.open(StartPoint("", 0, 0, gtid))
        event = None
        deadline = time.monotonic() + 10
        while not isinstance(event, ev.HeartbeatEvent) and time.monotonic() < deadline:
            event = source.read(1.0)
        execute(stream_server, f"KILL CONNECTION {source.connection_id}")
        with contextlib.closing(stream_server.connect()) as conn, conn.cursor() as cur:
            txns = [insert(cur, "gt.t", i) for i in (1, 2)]
        events = read_through(source.read, (txns[-1].file, txns[-1].end))
    finally:
        source.close()
    assert source.reconnects == 1
    assert [e.gtid for e in events if isinstance(e, ev.GtidEvent)] == [t.gtid for t in txns]
    assert [row_id(e) for e in events if isinstance(e, ev.RowsEvent)] == [1, 2]


# --- staying connected -----------------------------------------------------------------------------

BIG_ROWS = 4000  # 8 KB each: ~32 MB, more than the socket buffers, so a kill lands inside it


@dataclass(frozen=True)
class Workload:
    start: tuple[str, int]
    end: tuple[str, int]
    big: tuple[str, int, int]  # file, start and end offset of the big transaction


@pytest.fixture(scope="module")
def workload(stream_server: MySQLService) -> Workload:
    execute(
        stream_server,
        "CREATE DATABASE IF NOT EXISTS wl",
        "CREATE TABLE wl.small (id INT PRIMARY KEY)",
        "CREATE TABLE wl.big (id INT PRIMARY KEY, pad LONGBLOB)",
    )
    with contextlib.closing(stream_server.connect()) as conn, conn.cursor() as cur:
        start = end_of(cur)
        for i in range(1, 6):
            insert(cur, "wl.small", i)
        big_file, big_start = end_of(cur)
        cur.execute("BEGIN")
        for first in range(0, BIG_ROWS, 20):
            rows = ", ".join(f"({first + k}, REPEAT('x', 8000))" for k in range(20))
            cur.execute(f"INSERT INTO wl.big VALUES {rows}")
        cur.execute("COMMIT")
        big_end = end_of(cur)
        assert big_end[0] == big_file
        for i in range(6, 11):
            insert(cur, "wl.small", i)
        cur.execute("FLUSH BINARY LOGS")
        for i in range(11, 14):
            insert(cur, "wl.small", i)
        end = end_of(cur)
    return Workload(start, end, (big_file, big_start, big_end[1]))


def label(event: ev.BinlogEvent) -> tuple[str, str, int]:
    return type(event).__name__, event.header.log_file, event.header.start


def kill_dump(svc: MySQLService, source: BinlogSource) -> None:
    """KILL the source's replication connection, found among the server's Binlog Dump threads."""
    assert source.connection_id is not None and source.connection_id in dump_threads(svc)
    execute(svc, f"KILL CONNECTION {source.connection_id}")


def drain(
    svc: MySQLService,
    source: BinlogSource,
    got: list[ev.BinlogEvent],
    end: tuple[str, int],
    kill_at: list[int],
) -> list[tuple[ev.BinlogEvent, ev.BinlogEvent]]:
    """Read into ``got`` up to ``end``, killing the connection once ``got`` reaches each ``kill_at`` count.

    Returns (last event before, first event after) each reconnect.
    """
    pending = list(kill_at)
    seams: list[tuple[ev.BinlogEvent, ev.BinlogEvent]] = []
    deadline = time.monotonic() + 90

    def step() -> None:
        before = source.reconnects
        event = source.read(1.0)
        if event is None or isinstance(event, ev.HeartbeatEvent):
            return
        if source.reconnects != before and got:
            seams.append((got[-1], event))
        got.append(event)

    while not (got and after(end, got[-1])) and time.monotonic() < deadline:
        if pending and len(got) >= pending[0]:
            pending.pop(0)
            kill_dump(svc, source)
            kills = source.reconnects
            while source.reconnects == kills and time.monotonic() < deadline:
                step()  # events buffered before the kill arrive first; the source reconnects after them
        else:
            step()
    return seams


def test_reconnects_resume_exactly_where_the_stream_stopped(
    stream_server: MySQLService, workload: Workload, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = source_config(stream_server)

    def uninterrupted(end: tuple[str, int]) -> list[ev.BinlogEvent]:
        config = StreamConfig(cfg.host, cfg.port, cfg.user, cfg.password, next(_server_ids), 1.0, 10.0, 30.0)
        with BinlogStream(config) as stream:
            stream.open_at(*workload.start)
            return read_through(stream.read, end)

    big_file, big_start, big_end = workload.big
    phase1 = uninterrupted(workload.end)
    big_rows = [i for i, e in enumerate(phase1) if isinstance(e, ev.RowsEvent) and e.header.start > big_start]
    caplog.set_level(logging.INFO, logger="relay.source.binlog_source")
    source = BinlogSource(cfg)
    got: list[ev.BinlogEvent] = []
    try:
        source.open(StartPoint(*workload.start))
        # Killed before, early in and halfway through the big transaction (the socket buffers hold
        # less than it, so the loss is noticed inside it).
        seams = drain(
            stream_server, source, got, workload.end, [3, big_rows[1], big_rows[len(big_rows) // 2]]
        )
        kill_dump(stream_server, source)  # idle, at a transaction boundary: nothing to replay
        with contextlib.closing(stream_server.connect()) as conn, conn.cursor() as cur:
            cur.execute("FLUSH BINARY LOGS")
            rotated = end_of(cur)
            seams += drain(stream_server, source, got, rotated, [])
            kill_dump(stream_server, source)  # just after a file switch
            last = [insert(cur, "wl.small", i) for i in (14, 15, 16)][-1]
        seams += drain(stream_server, source, got, (last.file, last.end), [])
    finally:
        source.close()
    reference = uninterrupted((last.file, last.end))
    assert source.reconnects == 5
    assert [label(e) for e in got] == [label(e) for e in reference]
    assert got == reference  # the same decoded values too
    in_big = [
        (a, b)
        for a, b in seams
        if a.header.log_file == big_file and big_start < a.header.start and b.header.log_pos < big_end
    ]
    assert len(in_big) >= 2, f"reconnects did not land inside the big transaction: {seams}"
    assert caplog.text.count("reconnecting (try 1)") == 5


def test_a_server_that_stays_away_ends_in_a_non_retriable_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    policy = RetryPolicy(initial=0.1, maximum=0.4, multiplier=2.0, jitter=0.0, max_tries=4)
    with start_server(tmp_path / "gone") as running:
        cfg = source_config(running.service, retry=policy)
        source = BinlogSource(cfg)
        source.open(resolve_start(cfg, source.check(), None))
        beat = None
        deadline = time.monotonic() + 10
        while not isinstance(beat, ev.HeartbeatEvent) and time.monotonic() < deadline:
            beat = source.read(1.0)  # until a heartbeat: the dump is established
        assert isinstance(beat, ev.HeartbeatEvent)
        running.stop()
        caplog.set_level(logging.WARNING, logger="relay.source.binlog_source")
        began = time.monotonic()
        with pytest.raises(SourceError) as info:
            while time.monotonic() < deadline + 20:
                source.read(1.0)
        elapsed = time.monotonic() - began
    assert not info.value.retriable and "gave up reconnecting after 4 tries" in str(info.value)
    tries = [r.getMessage() for r in caplog.records if "reconnecting (try" in r.getMessage()]
    assert [m[m.index("(try") :] for m in tries] == [f"(try {n})" for n in (1, 2, 3, 4)]
    assert elapsed >= 0.1 + 0.2 + 0.4  # the backoff's sleeps, not an immediate spin
    with pytest.raises(SourceError):
        source.read(0.1)  # stays failed rather than reconnecting behind the caller's back


def test_two_sources_with_their_own_ids_stream_concurrently(stream_server: MySQLService) -> None:
    execute(stream_server, "CREATE DATABASE IF NOT EXISTS two", "CREATE TABLE two.t (id INT PRIMARY KEY)")
    sources = [BinlogSource(source_config(stream_server)) for _ in range(2)]
    try:
        for s in sources:
            s.open(resolve_start(s.config, s.check(), None))
        ids = {int(r[0]) for r in execute(stream_server, "SHOW SLAVE HOSTS")}
        assert {s.config.server_id for s in sources} <= ids
        assert {s.connection_id for s in sources} <= set(dump_threads(stream_server))
        with contextlib.closing(stream_server.connect()) as conn, conn.cursor() as cur:
            last = [insert(cur, "two.t", i) for i in (1, 2, 3)][-1]
        seen = [read_through(s.read, (last.file, last.end)) for s in sources]
    finally:
        for s in sources:
            s.close()
    for events in seen:
        assert [row_id(e) for e in events if isinstance(e, ev.RowsEvent)] == [1, 2, 3]
    assert [s.reconnects for s in sources] == [0, 0]


# --- TIMESTAMP rendering ---------------------------------------------------------------------------

WINTER, SUMMER = "2024-01-15 12:00:00", "2024-07-15 12:00:00"


def load_zone(svc: MySQLService, file: str, name: str) -> None:
    """Load one zone from the system tz database into the server's tz tables, under ``name``."""
    tool = services.find_binary("mariadb-tzinfo-to-sql")
    sql = subprocess.run([tool, f"/usr/share/zoneinfo/{file}", name], capture_output=True, check=True).stdout
    client_flag = pymysql.constants.CLIENT.MULTI_STATEMENTS
    with (
        contextlib.closing(svc.connect(database="mysql", client_flag=client_flag)) as conn,
        conn.cursor() as cur,
    ):
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute(sql.decode())
        while cur.nextset():
            pass


def rendered(
    svc: MySQLService, zone_query: str, first_id: int
) -> tuple[list[tuple[str, ...]], list[tuple[str, ...]]]:
    """Insert a winter and a summer TIMESTAMP in a new session (global zone); (SELECT text, binlog text)."""
    cfg = source_config(svc)
    source = BinlogSource(cfg)
    info = source.check()
    assert info.time_zone == zone_query
    with contextlib.closing(svc.connect()) as conn, conn.cursor() as cur:
        start = end_of(cur)
        cur.execute(f"INSERT INTO zones.t VALUES ({first_id}, '{WINTER}'), ({first_id + 1}, '{SUMMER}')")
        end = end_of(cur)
        cur.execute(
            f"SELECT id, DATE_FORMAT(ts, '%Y-%m-%d %H:%i:%s') FROM zones.t WHERE id >= {first_id} ORDER BY id"
        )
        selected: list[tuple[str, ...]] = [(str(a), str(b)) for a, b in cur.fetchall()]
    try:
        source.open(StartPoint(*start))
        events = read_through(source.read, end)
    finally:
        source.close()
    decoded = [
        tuple(str(v) for v in r.after or ()) for e in events if isinstance(e, ev.RowsEvent) for r in e.rows
    ]
    return selected, decoded


def test_timestamps_render_in_the_server_zone_across_dst(tuned_server: MySQLService) -> None:
    execute(
        tuned_server,
        "CREATE DATABASE IF NOT EXISTS zones",
        "CREATE TABLE zones.t (id INT PRIMARY KEY, ts TIMESTAMP NULL)",
    )
    load_zone(tuned_server, "Europe/Berlin", "Europe/Berlin")
    try:
        selected, decoded = rendered(tuned_server, "+08:00", 1)  # --default-time-zone=+08:00
        assert decoded == selected == [("1", WINTER), ("2", SUMMER)]
        execute(tuned_server, "SET GLOBAL time_zone = 'Europe/Berlin'")  # a named zone, with DST
        selected, decoded = rendered(tuned_server, "Europe/Berlin", 3)
        assert decoded == selected == [("3", WINTER), ("4", SUMMER)]
        execute(tuned_server, "SET GLOBAL time_zone = 'SYSTEM'")  # TZ=Europe/Berlin: system_time_zone CET
        selected, decoded = rendered(tuned_server, "CET", 5)
        assert decoded == selected == [("5", WINTER), ("6", SUMMER)]
    finally:
        execute(tuned_server, "SET GLOBAL time_zone = '+08:00'")
    # The texts depend on the zone: Berlin's summer noon (10:00 UTC) is 18:00 at +08:00.
    assert execute(tuned_server, "SELECT DATE_FORMAT(ts, '%H:%i') FROM zones.t WHERE id = 4")[0][0] == "18:00"


def test_a_server_zone_the_relay_cannot_follow_is_refused(tuned_server: MySQLService) -> None:
    load_zone(tuned_server, "America/New_York", "EST")  # Python's EST is a fixed -05:00
    load_zone(tuned_server, "Asia/Tokyo", "Mars/Olympus")  # unknown to Python
    cfg = source_config(tuned_server)
    try:
        for zone in ("EST", "Mars/Olympus"):
            execute(tuned_server, f"SET GLOBAL time_zone = '{zone}'")
            with pytest.raises(SourceError, match=f"time_zone={zone}.*set source.timezone"):
                inspect_server(cfg)
        info = inspect_server(replace(cfg, timezone="America/New_York"))  # told explicitly: trusted
        assert info.time_zone == "America/New_York"
    finally:
        execute(tuned_server, "SET GLOBAL time_zone = '+08:00'")
