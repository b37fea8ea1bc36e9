"""The contract every ``PositionStore`` backend must keep, run unchanged against each of them.

A test module imports these functions and defines a ``store`` fixture that yields an empty store of its
backend: ``tests/unit/test_positions.py`` (file, memory) and ``tests/integration/test_positions_zk.py``
(ZooKeeper, on a real server). pytest collects the imported functions in each importing module.
"""

from __future__ import annotations

from relay.positions.store import PositionStore, ResumePoint, SourceIdentity

POINT = ResumePoint(
    journal="mysql-bin.000003",
    offset=1234,
    skip=2,
    gtid_set="0-1-17",
    gtid="0-1-18",
    timestamp=1763700000000,
    server_id=1,
    source=SourceIdentity("127.0.0.1", 3306, 1, ""),
)


def test_contract_empty_store_loads_none(store: PositionStore) -> None:
    assert store.load() is None


def test_contract_save_then_load_round_trips(store: PositionStore) -> None:
    store.save(POINT)
    assert store.load() == POINT


def test_contract_last_save_wins(store: PositionStore) -> None:
    store.save(POINT)
    later = ResumePoint(journal="mysql-bin.000004", offset=4)
    store.save(later)
    assert store.load() == later
