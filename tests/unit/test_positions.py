"""Resume points, and the contract every position store must keep (``tests/position_contract.py``), run
here against the file and memory backends; ``tests/integration/test_positions_zk.py`` runs the same
contract against the ZooKeeper store on a real server."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

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
from relay.errors import PositionError
from relay.positions.store import (
    MAX_GENERATION,
    FilePositionStore,
    MemoryPositionStore,
    PositionStore,
    ResumePoint,
    next_generation,
    resume_after,
)
from tests.position_contract import (  # noqa: F401  (the shared contract, run against this module's stores)
    POINT,
    test_contract_empty_store_loads_none,
    test_contract_last_save_wins,
    test_contract_save_then_load_round_trips,
)


@pytest.fixture(params=["file", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[PositionStore]:
    if request.param == "file":
        yield FilePositionStore(tmp_path / "sub" / "instance.json")
    else:
        yield MemoryPositionStore()


def test_file_store_is_readable_json_naming_the_source(tmp_path: Path) -> None:
    store = FilePositionStore(tmp_path / "p.json")
    store.save(POINT)
    data = json.loads((tmp_path / "p.json").read_text())
    assert data["journal"] == "mysql-bin.000003" and data["offset"] == 1234 and data["skip"] == 2
    assert data["source"] == {"host": "127.0.0.1", "port": 3306, "server_id": 1, "server_uuid": ""}


def test_file_store_leaves_no_temp_files_and_replaces_atomically(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    store = FilePositionStore(path)
    for offset in range(4, 400, 7):
        store.save(ResumePoint(journal="mysql-bin.000001", offset=offset))
    assert os.listdir(tmp_path) == ["p.json"]
    assert store.load() == ResumePoint(journal="mysql-bin.000001", offset=396)


def test_file_store_refuses_garbage_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text("{not json")
    with pytest.raises(PositionError, match=str(path)):
        FilePositionStore(path).load()
    path.write_text(json.dumps({"journal": "", "offset": 4}))
    with pytest.raises(PositionError, match="out of range"):
        FilePositionStore(path).load()


def _entry(kind: EntryType, offset: int, length: int, txn: TxnContext, idx: int, closes: bool) -> Entry:
    header = Header(
        logfile_name="mysql-bin.000002",
        logfile_offset=offset,
        server_id=1,
        execute_time=1000,
        event_length=length,
        gtid=txn.gtid,
    )
    value = (
        TransactionEnd(transaction_id="9")
        if kind == EntryType.TRANSACTIONEND
        else RowChange(EventType.INSERT)
    )
    return Entry(header, kind, value, txn, idx, closes)


def test_resume_after_a_closed_transaction_starts_after_it_and_adds_its_gtid() -> None:
    txn = TxnContext(
        EntryPosition("mysql-bin.000002", 500), gtid="0-1-8", gtid_set_before="0-1-7", mariadb=True
    )
    end = _entry(EntryType.TRANSACTIONEND, 900, 31, txn, 3, closes=True)
    point = resume_after(end)
    assert (point.journal, point.offset, point.skip) == ("mysql-bin.000002", 931, 0)
    assert point.gtid_set == "0-1-8"


def test_resume_inside_a_transaction_rereads_it_and_skips_what_was_acked() -> None:
    uuid = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
    txn = TxnContext(EntryPosition("mysql-bin.000002", 500), gtid=f"{uuid}:8", gtid_set_before=f"{uuid}:1-7")
    row = _entry(EntryType.ROWDATA, 700, 80, txn, 2, closes=False)
    point = resume_after(row)
    assert (point.journal, point.offset, point.skip) == ("mysql-bin.000002", 500, 3)
    assert point.gtid_set == f"{uuid}:1-7"


# -- generation and mapping version (the change identity across histories) -------------------------------


def test_resume_points_carry_the_generation_of_their_entry() -> None:
    txn = TxnContext(EntryPosition("mysql-bin.000002", 500))
    end = _entry(EntryType.TRANSACTIONEND, 900, 31, txn, 3, closes=True)
    row = _entry(EntryType.ROWDATA, 700, 80, txn, 2, closes=False)
    end.generation = row.generation = 4
    assert resume_after(end).generation == 4 and resume_after(row).generation == 4


def test_a_point_round_trips_with_generation_and_mapping_version() -> None:
    point = ResumePoint("mysql-bin.000005", 4, skip=2, generation=3, mapping_version=7)
    assert ResumePoint.from_json(point.to_json()) == point


def test_a_point_saved_before_generations_existed_reads_as_generation_0_without_mapping_version() -> None:
    old = {
        "format": 1,
        "journal": "mysql-bin.000123",
        "offset": 4567,
        "skip": 0,
        "gtid_set": None,
        "gtid": "",
        "timestamp": 1_763_700_000_000,
        "server_id": 1,
        "source": {"host": "db1", "port": 3306, "server_id": 1, "server_uuid": ""},
        "extra": {},
    }
    point = ResumePoint.from_json(json.dumps(old))
    assert (point.generation, point.mapping_version) == (0, None)
    assert str(point) == "mysql-bin.000123:4567"


def test_a_negative_generation_is_refused() -> None:
    with pytest.raises(PositionError):
        ResumePoint.from_json(ResumePoint("mysql-bin.000001", 4, generation=-1).to_json())


def test_next_generation_is_one_more_than_the_saved_one_and_bounded() -> None:
    assert next_generation(None) == 1
    assert next_generation(ResumePoint("mysql-bin.000001", 4)) == 1
    assert next_generation(ResumePoint("mysql-bin.000001", 4, generation=6)) == 7
    assert (
        next_generation(ResumePoint("mysql-bin.000001", 4, generation=MAX_GENERATION - 1)) == MAX_GENERATION
    )
    with pytest.raises(PositionError, match="generation"):
        next_generation(ResumePoint("mysql-bin.000001", 4, generation=MAX_GENERATION))
