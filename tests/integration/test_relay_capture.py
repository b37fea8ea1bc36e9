"""Changes the relay cannot capture exactly stop it before anything wrong is published, on real MariaDB:
session row images that lack columns (binlog_row_image MINIMAL / NOBLOB), DML logged as a statement
(binlog_format STATEMENT / MIXED) — and XA transactions are published at XA COMMIT only, never when
prepared or rolled back, across a SIGKILL between PREPARE and COMMIT.

What reached Kafka is read back with an independent consumer and compared with SELECT on the source;
the saved position is read from the position file, not from log lines.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pymysql
import pytest

from relay.kafka.codec import sequence
from relay.positions.store import ResumePoint
from tests.integration.relay_harness import (
    REPO_ROOT,
    OneTableCase,
    Rec,
    RelayProcess,
    apply_records,
    check_exact_repeats,
    create_shards,
    drop_shards,
    master_position,
    read_topic,
    select_orders,
    wait_for,
)

SHARDS, TABLES = 1, 1
A_ROWS = {("100", "XA"), ("1", "XA-A")}  # what XA transaction 'a' writes
QUIET: dict[str, Any] = {"logging": {"level": "INFO"}, "publish": {"batch_size": 4}}


@dataclass
class Capture(OneTableCase):
    EXTRA: ClassVar[dict[str, Any]] = QUIET

    sessions: list[Any] = field(default_factory=list)

    def session(self, **kw: Any) -> Any:
        """A connection of its own, closed at the end of the test."""
        conn = self.mysql.connect(**kw)
        self.sessions.append(conn)
        return conn

    def insert(self, *ids: int, conn: Any = None) -> None:
        self.sql(*(f"INSERT INTO {self.table} VALUES ({i}, 'NEW', {i}.25, 'n{i}')" for i in ids), conn=conn)

    def rows(self, count: int, settle: float = 2.0, timeout: float = 30.0) -> list[Rec]:
        """The topic's row records (independent consumer, from the start): at least ``count``, and
        whatever else arrives within ``settle`` seconds after they are there (so an extra one is seen)."""
        done_at: list[float] = []

        def until(records: list[Rec]) -> bool:
            if _row_count(records) < count:
                return False
            if not done_at:
                done_at.append(time.monotonic() + settle)
            return time.monotonic() >= done_at[0]

        records = read_topic(self.bootstrap, self.topic, until=until, timeout=timeout)
        return [r for r in records if not r.json["isDdl"]]

    def caught_up(self, relay: RelayProcess, timeout: float = 60.0) -> ResumePoint:
        """Wait until the relay's saved (published) position reaches the binlog's current end."""
        end = master_position(self.conn)
        wait_for(lambda: _saved_seq(relay) >= _seq(end), timeout, f"position {end}")
        return ResumePoint.from_json(relay.position())


def _row_count(records: list[Rec]) -> int:
    return sum(not r.json["isDdl"] for r in records)


def _seq(point: tuple[str, int]) -> int:
    return sequence(point[0], point[1], 0)


def _saved_seq(relay: RelayProcess) -> int:
    text = relay.position()
    if not text:
        return -1
    point = ResumePoint.from_json(text)
    return _seq((point.journal, point.offset))


def ids_of(records: list[Rec]) -> list[str]:
    """``I1``, ``U2`` … (type initial + id) of each row record, sorted: partitions interleave freely."""
    return sorted(f"{r.json['type'][0]}{r.json['data'][0]['id']}" for r in records)


def per_key_in_offset_order(records: list[Rec]) -> dict[bytes, list[Rec]]:
    """Each key's records in the order of the partition's offsets (never re-sorted by our sequence)."""
    by_key: dict[bytes, list[Rec]] = {}
    for rec in sorted(records, key=lambda r: (r.partition, r.offset)):
        by_key.setdefault(rec.key or b"", []).append(rec)
    for recs in by_key.values():
        assert len({r.partition for r in recs}) == 1
        seqs = [int(r.json["sequence"]) for r in recs]
        assert seqs == sorted(seqs), "a key's sequences must grow with its partition offsets"
    return by_key


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "relay.cli", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def stopped_with(relay: RelayProcess, text: str, timeout: float = 60.0) -> str:
    """Wait for the relay to exit on its own (non-zero) and return its status file's error."""
    deadline = time.monotonic() + timeout
    while relay.alive():
        assert time.monotonic() < deadline, "the relay did not stop:\n" + relay.log()[-3000:]
        time.sleep(0.1)
    assert relay.wait(1) != 0
    status = json.loads(relay.status_path.read_text())
    assert status["state"] == "failed", status
    assert text in status["error"], status["error"]
    return str(status["error"])


@pytest.fixture
def cap(mysql_service: Any, kafka_service: Any, tmp_path: Path) -> Iterator[Capture]:
    prefix = f"cap{time.monotonic_ns() % 10**8}"
    conn = mysql_service.connect()
    create_shards(conn, prefix, SHARDS, TABLES)
    made = Capture(
        prefix, tmp_path, mysql_service, kafka_service.bootstrap_servers, conn, master_position(conn)
    )
    yield made
    for proc in made.procs:
        proc.stop()
    for session in made.sessions:
        session.close()
    with conn.cursor() as cur:  # a failed XA test leaves a prepared transaction holding its locks
        cur.execute("XA RECOVER")
        for _format, _glen, _blen, data in cur.fetchall():
            with contextlib.suppress(pymysql.err.MySQLError):
                cur.execute(f"XA ROLLBACK '{data.decode() if isinstance(data, bytes) else data}'")
    drop_shards(conn, prefix, SHARDS)
    conn.close()


# --- 1. incomplete row images --------------------------------------------------------------------


@pytest.mark.parametrize("image", ["MINIMAL", "NOBLOB"])
def test_incomplete_row_image_stops_before_its_transaction_and_restarts_refuse_it_again(
    cap: Capture, image: str
) -> None:
    cap.insert(1, 2, 3)
    before_bad = master_position(cap.conn)
    session = cap.mysql.connect()
    # One transaction: an INSERT naming every column (a complete after image even with MINIMAL), then
    # an UPDATE whose images lack columns. Neither may be published.
    # NOBLOB leaves out the unchanged TEXT column ``note``; MINIMAL every column it does not need.
    change = f"UPDATE {cap.table} SET status='PAID' WHERE id=1"
    cap.sql(
        f"SET SESSION binlog_row_image='{image}'",
        "BEGIN",
        f"INSERT INTO {cap.table} VALUES (10, 'NEW', 10.25, 'n10')",
        change,
        "COMMIT",
        conn=session,
    )
    session.close()
    cap.insert(20)

    cfg = cap.configure()
    relay = cap.relay(cfg)
    error = stopped_with(relay, "incomplete")
    assert f"{cap.table}" in error and "binlog_row_image=FULL" in error
    assert "note" in error and f"{before_bad[0]}:" in error
    if image == "MINIMAL":
        assert "amount" in error
    saved = ResumePoint.from_json(relay.position())
    assert _seq((saved.journal, saved.offset)) <= _seq(before_bad), f"{saved} passed the bad transaction"
    assert ids_of(cap.rows(3)) == ["I1", "I2", "I3"]

    # A restart reads it again and refuses it again: the same saved position, nothing more published.
    again = cap.relay(cfg)
    stopped_with(again, "incomplete")
    assert ResumePoint.from_json(again.position()) == saved
    assert ids_of(cap.rows(3)) == ["I1", "I2", "I3"]

    # The operator moves the position past it; the relay goes on from there.
    done = run_cli("positions", "set", "-c", str(cfg), "--file", *_past_bad(cap, before_bad))
    assert done.returncode == 0, done.stderr
    moved = cap.relay(cfg)
    cap.caught_up(moved)
    assert ids_of(cap.rows(4)) == ["I1", "I2", "I20", "I3"]


def test_a_transaction_too_large_to_hold_is_read_ahead_and_refused_before_any_of_it_is_published(
    cap: Capture,
) -> None:
    """A store of 64 slots holds back at most 32 entries of an open transaction: this one has 100 complete
    changes, then one from a MINIMAL session. The relay reads the rest of it ahead on a second connection
    before putting any of it, so the refusal still comes before anything of it is published."""
    cap.insert(1, 2, 3)
    before_bad = master_position(cap.conn)
    session = cap.mysql.connect()
    many = [f"INSERT INTO {cap.table} VALUES ({i}, 'NEW', {i}.25, 'n{i}')" for i in range(100, 200)]
    cap.sql(
        "BEGIN",
        *many,
        "SET SESSION binlog_row_image='MINIMAL'",
        f"UPDATE {cap.table} SET status='PAID' WHERE id=1",
        "COMMIT",
        conn=session,
    )
    session.close()
    cap.insert(20)

    cfg = cap.configure({"store": {"buffer_size": 64, "batch_mode": "ITEMSIZE"}})
    relay = cap.relay(cfg)
    error = stopped_with(relay, "incomplete")
    assert "binlog_row_image=FULL" in error
    saved = ResumePoint.from_json(relay.position())
    assert _seq((saved.journal, saved.offset)) <= _seq(before_bad), f"{saved} passed the bad transaction"
    # Nothing of the big transaction reached the topic (an independent consumer, from the start).
    assert ids_of(cap.rows(3)) == ["I1", "I2", "I3"]
    assert "reading ahead the large transaction" in relay.log()  # the case was exercised


def _past_bad(cap: Capture, before_bad: tuple[str, int]) -> list[str]:
    """--file/--offset of the transaction after the bad one (the INSERT of id 20)."""
    with cap.conn.cursor() as cur:
        cur.execute(f"SHOW BINLOG EVENTS IN '{before_bad[0]}' FROM {before_bad[1]}")
        events = cur.fetchall()
    # Event rows: Log_name, Pos, Event_type, Server_id, End_log_pos, Info. The bad transaction ends with
    # the first Xid event after ``before_bad``.
    xid = next(e for e in events if e[2] == "Xid")
    return [before_bad[0], "--offset", str(xid[4])]


# --- 2. statement-logged DML ---------------------------------------------------------------------


def test_statement_logged_dml_stops_but_statements_that_only_look_like_it_pass(cap: Capture) -> None:
    other = f"{cap.prefix}_x"
    cap.sql(f"CREATE DATABASE {other}", f"CREATE TABLE {other}.t (id INT PRIMARY KEY)")
    try:
        # The session's current database is the captured one: the audit topic keeps its statements.
        session = cap.session(database=f"{cap.prefix}_00")
        cap.insert(1)
        # Not data changes, or not captured: none of these may stop the relay.
        cap.sql(
            "BEGIN",
            f"/* why */ INSERT INTO {cap.table} VALUES (2, 'NEW', 2.25, 'n2')",
            "SAVEPOINT sp1",
            f"# comment\nUPDATE {cap.table} SET status='PAID' WHERE id=2",
            "ROLLBACK TO SAVEPOINT sp1",
            "COMMIT",
            f"CREATE TABLE {cap.prefix}_00.copy SELECT * FROM {cap.table}",  # ROW: CREATE + rows
            "SET SESSION binlog_format='STATEMENT'",
            f"INSERT INTO {other}.t VALUES (1)",  # a schema the filter does not capture
            conn=session,
        )
        before_bad = master_position(cap.conn)
        cap.sql("INSERT INTO orders_00 VALUES (3, 'NEW', 3.25, 'n3')", conn=session)
        cap.sql("SET SESSION binlog_format='ROW'", conn=session)
        cap.insert(4)

        cfg = cap.configure()
        relay = cap.relay(cfg)
        error = stopped_with(relay, "logged as a statement")
        assert f"{before_bad[0]}:" in error and cap.table in error and "binlog_format=ROW" in error
        saved = ResumePoint.from_json(relay.position())
        assert _seq((saved.journal, saved.offset)) <= _seq(before_bad)
        assert ids_of(cap.rows(2)) == ["I1", "I2"]
        again = cap.relay(cfg)
        stopped_with(again, "logged as a statement")
        # An empty (filtered-out) transaction before the statement may move it on; never past it.
        moved = ResumePoint.from_json(again.position())
        assert _seq((saved.journal, saved.offset)) <= _seq((moved.journal, moved.offset)) <= _seq(before_bad)
        assert ids_of(cap.rows(2)) == ["I1", "I2"]

        # statement_dml: skip — the statement goes to the audit topic only, the relay goes on.
        skip = cap.configure({"source": {"statement_dml": "skip"}})
        relay = cap.relay(skip)
        cap.caught_up(relay)
        assert relay.alive()
        rows = cap.rows(3)
        assert ids_of(rows) == ["I1", "I2", "I4"]
        audit = read_topic(
            cap.bootstrap,
            f"{cap.prefix}.ddl",
            until=lambda rs: any("VALUES (3," in r.json["sql"] for r in rs),
        )
        assert [r.json["type"] for r in audit if "VALUES (3," in r.json["sql"]] == ["QUERY"]
        assert "NOT published" in relay.log()
        # What SELECT shows differs by exactly the skipped row: that is what skip means.
        state = select_orders(cap.conn, cap.prefix, SHARDS, TABLES)
        assert set(state) - set(apply_records(rows)) == {"3"}
    finally:
        cap.sql(f"DROP DATABASE {other}")


# --- 3. XA ---------------------------------------------------------------------------------------


def test_xa_is_published_at_commit_only_across_a_sigkill_between_prepare_and_commit(cap: Capture) -> None:
    cfg = cap.configure()
    relay = cap.relay(cfg)
    xa_a, xa_b, xa_c = cap.session(), cap.session(), cap.session()
    cap.insert(1, 2)
    # A: prepared, decided only after a SIGKILL and a restart. B: rolled back. C: one phase.
    cap.sql(
        "XA START 'a'",
        f"INSERT INTO {cap.table} VALUES (100, 'XA', 100.25, 'a')",
        f"UPDATE {cap.table} SET status='XA-A' WHERE id=1",
        "XA END 'a'",
        "XA PREPARE 'a'",
        conn=xa_a,
    )
    cap.sql(f"UPDATE {cap.table} SET status='PAID' WHERE id=2")
    cap.sql(
        "XA START 'b'",
        f"INSERT INTO {cap.table} VALUES (200, 'XA', 200.25, 'b')",
        "XA END 'b'",
        "XA PREPARE 'b'",
        conn=xa_b,
    )
    cap.insert(3)
    cap.sql("XA ROLLBACK 'b'", conn=xa_b)
    cap.sql(
        "XA START 'c'",
        f"INSERT INTO {cap.table} VALUES (300, 'XA', 300.25, 'c')",
        "XA END 'c'",
        "XA COMMIT 'c' ONE PHASE",
        conn=xa_c,
    )
    saved = cap.caught_up(relay)
    assert saved.xa_journal, f"the saved point must hold the undecided PREPARE: {saved}"
    assert _seq((saved.xa_journal, saved.xa_offset)) < _seq((saved.journal, saved.offset))
    early = cap.rows(5)
    assert ids_of(early) == ["I1", "I2", "I3", "I300", "U2"], "A is only prepared: nothing of it published"

    relay.signal(signal.SIGKILL)
    assert relay.wait(10) == -signal.SIGKILL
    cap.insert(4)
    relay = cap.relay(cfg)
    cap.caught_up(relay)
    assert "I100" not in ids_of(cap.rows(6)), "still undecided after the restart: not published"

    cap.sql("XA COMMIT 'a'", conn=xa_a)
    cap.sql(f"UPDATE {cap.table} SET status='AFTER' WHERE id=1")  # the same key, after the XA COMMIT
    cap.caught_up(relay)
    final = ResumePoint.from_json(relay.position())
    assert not final.xa_journal, f"nothing undecided any more: {final}"
    relay.signal(signal.SIGTERM)
    assert relay.wait(30) == 0, relay.log()[-3000:]

    records = cap.rows(9)
    check_exact_repeats(records)  # a repeat can only be a byte-identical re-publication
    distinct = {int(r.json["sequence"]): r for r in records}
    assert ids_of(list(distinct.values())) == ["I1", "I100", "I2", "I3", "I300", "I4", "U1", "U1", "U2"]
    assert "I200" not in ids_of(records), "rolled back: never published"
    assert apply_records(records) == select_orders(cap.conn, cap.prefix, SHARDS, TABLES)
    by_key = per_key_in_offset_order(records)
    key1 = list({int(r.json["sequence"]): r.json for r in by_key[b'{"id":"1"}']}.values())
    assert [(m["type"], m["data"][0]["status"]) for m in key1] == [
        ("INSERT", "NEW"),
        ("UPDATE", "XA-A"),
        ("UPDATE", "AFTER"),
    ]
    # A's rows are published at the XA COMMIT's place in the stream: after id 4, committed before it,
    # wherever they share a partition.
    a_rows = [
        r
        for r in records
        if r.json["data"][0]["status"] in ("XA", "XA-A") and r.json["data"][0]["id"] != "300"
    ]
    four = [r for r in records if r.json["data"][0]["id"] == "4"]
    assert len(a_rows) >= 2 and four
    for rec in a_rows:
        for other in four:
            if rec.partition == other.partition:
                assert rec.offset > other.offset
