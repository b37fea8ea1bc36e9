"""The canal core end to end on a real server: a scripted workload yields exactly the expected entries,
and a consumer killed with SIGKILL inside and between batches resumes with no gap and no repeat."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from relay.canal.entry import Entry, EntryType, RowChange
from relay.config.sections import InstanceConfig, SinkConfig, SourceConfig, StartConfig, StoreConfig
from relay.positions.store import FilePositionStore, ResumePoint
from relay.wiring import canal_instance
from tests.integration.relay_harness import master_position

CHILD = Path(__file__).with_name("canal_child.py")
BIG_TXN_ROWS = 60


def run_sql(conn: Any, *statements: str) -> None:
    with conn.cursor() as cur:
        for sql in statements:
            cur.execute(sql)


@pytest.fixture()
def two_schemas(mysql_service: Any) -> Iterator[tuple[str, str]]:
    stamp = f"{int(time.time() * 1000) % 10**9}"
    a, b = f"ca_{stamp}", f"cb_{stamp}"
    conn = mysql_service.connect()
    for schema in (a, b):
        run_sql(
            conn,
            f"CREATE DATABASE {schema}",
            f"CREATE TABLE {schema}.t1 (id INT PRIMARY KEY, name VARCHAR(20), qty INT) ENGINE=InnoDB",
            f"CREATE TABLE {schema}.big (id INT PRIMARY KEY, payload VARCHAR(64)) ENGINE=InnoDB",
            f"CREATE TABLE {schema}.done_marker (id INT PRIMARY KEY) ENGINE=InnoDB",
        )
    yield a, b
    run_sql(conn, f"DROP DATABASE IF EXISTS {a}", f"DROP DATABASE IF EXISTS {b}")
    conn.close()


def scripted_workload(conn: Any, a: str, b: str) -> None:
    run_sql(conn, f"INSERT INTO {a}.t1 VALUES (1,'a',1),(2,'b',2),(3,'c',3)")
    run_sql(conn, f"INSERT INTO {b}.t1 VALUES (1,'x',1)")  # filtered out: an empty transaction
    run_sql(conn, f"UPDATE {a}.t1 SET qty = qty + 10 WHERE id <= 2")
    run_sql(
        conn,
        "BEGIN",
        f"DELETE FROM {a}.t1 WHERE id = 3",
        f"INSERT INTO {b}.t1 VALUES (2,'y',2)",
        "COMMIT",
    )
    run_sql(conn, f"ALTER TABLE {a}.t1 ADD COLUMN note VARCHAR(10)")
    run_sql(conn, f"INSERT INTO {a}.t1 VALUES (4,'d',4,NULL)")
    # One transaction of many rows events: larger than the 16-slot store the tests use.
    run_sql(
        conn, "BEGIN", *(f"INSERT INTO {a}.big VALUES ({i}, 'p{i}')" for i in range(BIG_TXN_ROWS)), "COMMIT"
    )
    run_sql(conn, f"INSERT INTO {a}.done_marker VALUES (1)")


def expected_entries(a: str) -> list[tuple[Any, ...]]:
    """(entry type, event type, table, rows) of every entry the workload yields for schema ``a``."""

    def txn(*rows: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        return [("TRANSACTIONBEGIN", None, None, None), *rows, ("TRANSACTIONEND", None, None, None)]

    out: list[tuple[Any, ...]] = []
    out += txn(
        (
            "ROWDATA",
            "INSERT",
            f"{a}.t1",
            [[None, ["1", "a", "1"]], [None, ["2", "b", "2"]], [None, ["3", "c", "3"]]],
        )
    )
    out += txn(
        (
            "ROWDATA",
            "UPDATE",
            f"{a}.t1",
            [[["1", "a", "1"], ["1", "a", "11"]], [["2", "b", "2"], ["2", "b", "12"]]],
        )
    )
    out += txn(("ROWDATA", "DELETE", f"{a}.t1", [[["3", "c", "3"], None]]))
    out += [("ROWDATA", "ALTER", f"{a}.t1", [])]
    out += txn(("ROWDATA", "INSERT", f"{a}.t1", [[None, ["4", "d", "4", None]]]))
    out += txn(*(("ROWDATA", "INSERT", f"{a}.big", [[None, [str(i), f"p{i}"]]]) for i in range(BIG_TXN_ROWS)))
    out += txn(("ROWDATA", "INSERT", f"{a}.done_marker", [[None, ["1"]]]))
    return out


def summary(entry: Entry) -> tuple[Any, ...]:
    value = entry.store_value
    if entry.entry_type != EntryType.ROWDATA:
        return (EntryType(entry.entry_type).name, None, None, None)
    assert isinstance(value, RowChange)
    table = f"{entry.header.schema_name}.{entry.header.table_name}"
    rows = [[list(r.before) if r.before else None, list(r.after) if r.after else None] for r in value.rows]
    return ("ROWDATA", value.event_type.name, table, rows)


def source_config(mysql_service: Any, start: tuple[str, int], server_id: int) -> SourceConfig:
    return SourceConfig(
        host=mysql_service.host,
        port=mysql_service.port,
        user=mysql_service.replication_user,
        password=mysql_service.replication_password,
        server_id=server_id,
        start=StartConfig(journal=start[0], offset=start[1]),
    )


def test_scripted_workload_yields_exactly_the_expected_entries(
    mysql_service: Any, two_schemas: tuple[str, str], tmp_path: Path
) -> None:
    a, b = two_schemas
    conn = mysql_service.connect()
    start = master_position(conn)
    scripted_workload(conn, a, b)
    instance = canal_instance(
        InstanceConfig(
            source=source_config(mysql_service, start, 7101),
            store=StoreConfig(buffer_size=16, batch_mode="ITEMSIZE", ddl_isolation=True),
            sink=SinkConfig(filter=f"{a}\\..*", empty_transaction_interval_ms=3_600_000),
        ),
        FilePositionStore(tmp_path / "pos.json"),
    )
    instance.start()
    got: list[Entry] = []
    batches: list[list[Entry]] = []
    expected = expected_entries(a)
    deadline = time.monotonic() + 60
    try:
        while len(got) < len(expected):
            assert time.monotonic() < deadline, f"only {len(got)} of {len(expected)} entries arrived"
            message = instance.get_without_ack(10, timeout=0.5)
            if message.entries:
                batches.append(list(message.entries))
                got.extend(message.entries)
                instance.ack(message.batch_id)
        extra = instance.get_without_ack(10, timeout=0.5).entries
        assert not extra, f"more entries than the workload wrote: {[summary(e) for e in extra]}"
    finally:
        instance.stop()
    assert [summary(e) for e in got] == expected
    ddl = [e for e in got if e.is_ddl]
    assert len(ddl) == 1
    assert "ADD COLUMN note" in ddl[0].store_value.sql  # type: ignore[union-attr]
    assert [e for batch in batches for e in batch if e.is_ddl and len(batch) > 1] == [], "DDL not isolated"
    # positions: every entry's offset lies within the stretch of binlog the workload wrote
    assert all(e.header.logfile_name >= start[0] for e in got)
    saved = FilePositionStore(tmp_path / "pos.json").load()
    assert saved is not None and saved.skip == 0
    assert saved.offset == got[-1].header.logfile_offset + got[-1].header.event_length


def _truncate_unacked(out: Path, saved: ResumePoint | None) -> None:
    """Drop output lines of entries the saved position does not cover: they were never acknowledged."""
    if not out.exists():
        return
    kept = []
    for line in out.read_text().splitlines():
        rec = json.loads(line)
        if saved is None:
            continue
        place = (rec["file"], rec["txn"])
        acked = place < (saved.journal, saved.offset) or (
            place == (saved.journal, saved.offset) and rec["idx"] < saved.skip
        )
        if acked:
            kept.append(line)
    out.write_text("".join(k + "\n" for k in kept))


def run_child(config: dict[str, Any], path: Path) -> int:
    path.write_text(json.dumps(config))
    proc = subprocess.run([sys.executable, str(CHILD), str(path)], timeout=120, check=False)
    return proc.returncode


def test_sigkill_inside_and_between_batches_resumes_without_gap_or_repeat(
    mysql_service: Any, two_schemas: tuple[str, str], tmp_path: Path
) -> None:
    a, b = two_schemas
    conn = mysql_service.connect()
    start = master_position(conn)
    scripted_workload(conn, a, b)
    base = {
        "mysql": {
            "host": mysql_service.host,
            "port": mysql_service.port,
            "user": mysql_service.replication_user,
            "password": mysql_service.replication_password,
            "server_id": 7201,
        },
        "schema": a,
        "start": list(start),
        "batch_size": 7,
        "buffer_size": 16,
    }
    # The reference: one clean run.
    ref_out = tmp_path / "ref.jsonl"
    ref = dict(base, positions=str(tmp_path / "ref-pos.json"), out=str(ref_out), kill={})
    assert run_child(ref, tmp_path / "ref.json") == 0
    reference = ref_out.read_text().splitlines()
    assert len(reference) == len(expected_entries(a))

    # Killed runs: inside batch 2 (written, not acked), after acking batch 3, inside batch 5 (which lies
    # inside the big transaction: a mid-transaction resume point), after acking 1, then to the end.
    out = tmp_path / "out.jsonl"
    pos = tmp_path / "pos.json"
    kills = [{"inside": [2]}, {"after_ack": [3]}, {"inside": [5]}, {"after_ack": [1]}, {"inside": [4]}, {}]
    mid_transaction_points = killed = 0
    for n, kill in enumerate(kills):
        saved = FilePositionStore(pos).load()
        mid_transaction_points += bool(saved and saved.skip)
        _truncate_unacked(out, saved)
        code = run_child(dict(base, positions=str(pos), out=str(out), kill=kill), tmp_path / f"run{n}.json")
        assert code in (0, -9), f"run {n} ended with {code}"
        if code == 0:  # reached the end of the workload before its kill point
            break
        killed += 1
    assert code == 0
    assert out.read_text().splitlines() == reference
    assert killed >= 3
    assert mid_transaction_points >= 1, "no kill left a position inside a transaction"


class CountingStore(FilePositionStore):
    """A file store that remembers every point written (in order)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.written: list[ResumePoint] = []

    def save(self, point: ResumePoint) -> None:
        super().save(point)
        self.written.append(point)


def test_acks_share_position_writes_and_stop_writes_the_last_acked_point(
    mysql_service: Any, two_schemas: tuple[str, str], tmp_path: Path
) -> None:
    a, b = two_schemas
    conn = mysql_service.connect()
    start = master_position(conn)
    scripted_workload(conn, a, b)
    store = CountingStore(tmp_path / "pos.json")
    instance = canal_instance(
        InstanceConfig(
            source=source_config(mysql_service, start, 7104),
            store=StoreConfig(buffer_size=16, batch_mode="ITEMSIZE", ddl_isolation=True),
            sink=SinkConfig(filter=f"{a}\\..*", empty_transaction_interval_ms=3_600_000),
            save_interval_seconds=5.0,  # longer than the test: only the first ack and the stop write
        ),
        store,
    )
    instance.start()
    acked: list[ResumePoint] = []
    expected = len(expected_entries(a))
    got = 0
    deadline = time.monotonic() + 60
    try:
        while got < expected:
            assert time.monotonic() < deadline, f"only {got} of {expected} entries arrived"
            message = instance.get_without_ack(2, timeout=0.5)
            if message.entries:
                got += len(message.entries)
                acked.append(instance.ack(message.batch_id))
        first_write = time.monotonic() + 30
        while not store.written:  # the writer thread writes the first acked point without waiting
            assert time.monotonic() < first_write, "the position writer wrote nothing"
            time.sleep(0.01)
    finally:
        instance.stop()
    assert len(acked) > 10
    assert store.written[0] in acked
    assert len(store.written) <= 3, "acks within the interval must share writes"
    assert store.written[-1] == acked[-1] == instance.last_saved
    assert store.load() == acked[-1]
    # every point written is one that was acked, in ack order: never ahead of Kafka, never backwards
    indexes = [acked.index(p) for p in store.written]
    assert indexes == sorted(indexes)


def test_a_point_that_catches_up_is_written_without_waiting_for_the_interval(
    mysql_service: Any, two_schemas: tuple[str, str], tmp_path: Path
) -> None:
    """Behind, acks share a write per ``save_interval_seconds``; the ack that leaves the relay caught up
    (the parser waiting at the binlog end, nothing in the store, nothing outstanding) is written at once,
    while the instance runs on (not by the stop)."""
    a, b = two_schemas
    conn = mysql_service.connect()
    start = master_position(conn)
    scripted_workload(conn, a, b)
    store = CountingStore(tmp_path / "pos.json")
    instance = canal_instance(
        InstanceConfig(
            source=source_config(mysql_service, start, 7105),
            store=StoreConfig(buffer_size=16, batch_mode="ITEMSIZE", ddl_isolation=True),
            sink=SinkConfig(filter=f"{a}\\..*", empty_transaction_interval_ms=3_600_000),
            save_interval_seconds=600.0,  # far longer than the test: only caught-up points are written
        ),
        store,
    )
    instance.start()
    acked: list[ResumePoint] = []
    expected = len(expected_entries(a))
    got = 0
    deadline = time.monotonic() + 60
    try:
        while got < expected:
            assert time.monotonic() < deadline, f"only {got} of {expected} entries arrived"
            message = instance.get_without_ack(2, timeout=0.5)
            if message.entries:
                got += len(message.entries)
                acked.append(instance.ack(message.batch_id))
        assert instance.store.sequences[0] == instance.store.sequences[1]  # nothing left to take
        while not store.written or store.written[-1] != acked[-1]:
            assert time.monotonic() < deadline, (
                f"the caught-up point {acked[-1]} was not written (written: {store.written})"
            )
            time.sleep(0.01)
        assert instance.running
        assert store.load() == acked[-1]
    finally:
        instance.stop()
    # at most: the first point (nothing written before), the first caught-up point, the last one
    assert len(store.written) <= 3
    indexes = [acked.index(p) for p in store.written]
    assert indexes == sorted(indexes)
