"""The ZooKeeper position store on a real ZooKeeper: the same contract as the file store
(``tests/position_contract.py``), compare-and-set against a concurrent writer, and epoch fencing
enforced by ZooKeeper itself, not by the writer's good manners."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient

from relay.config.sections import HAConfig
from relay.dev.services import ZooKeeperService
from relay.errors import LeadershipError, PositionConflictError
from relay.ha.leadership import Leadership
from relay.positions.store import PositionStore, ResumePoint
from relay.positions.zookeeper import FenceToken, ZooKeeperPositionStore, read_position_node
from tests.position_contract import (  # noqa: F401  (the shared contract, run against the ZooKeeper store)
    POINT,
    test_contract_empty_store_loads_none,
    test_contract_last_save_wins,
    test_contract_save_then_load_round_trips,
)


@pytest.fixture(scope="module")
def zk(zk_service: ZooKeeperService) -> Iterator[KazooClient]:
    client = KazooClient(hosts=zk_service.hosts, timeout=10.0)
    client.start(timeout=30)
    yield client
    client.stop()
    client.close()


def _root() -> str:
    return f"/relay-test/{uuid.uuid4().hex}"


@pytest.fixture
def store(zk: KazooClient) -> PositionStore:
    return ZooKeeperPositionStore(zk, f"{_root()}/destinations/t/position")


class StaticFence:
    """A zombie's view: the token it got while it led, handed out without any local check."""

    def __init__(self, token: FenceToken) -> None:
        self.token = token

    def guard(self) -> FenceToken:
        return self.token


def test_a_concurrent_writer_loses_the_compare_and_set(zk: KazooClient) -> None:
    path = f"{_root()}/position"
    first, second = ZooKeeperPositionStore(zk, path), ZooKeeperPositionStore(zk, path)
    first.save(POINT)
    assert second.load() == POINT and first.load() == POINT
    later = ResumePoint(journal="mysql-bin.000004", offset=4)
    second.save(later)
    with pytest.raises(PositionConflictError, match="another writer"):
        first.save(ResumePoint(journal="mysql-bin.000009", offset=4))
    assert ZooKeeperPositionStore(zk, path).load() == later
    assert first.load() == later  # re-reading adopts the new version: the next write goes through
    first.save(POINT)
    assert second.load() == POINT


def test_a_zombie_leader_cannot_move_the_position(zk_service: ZooKeeperService, zk: KazooClient) -> None:
    config = HAConfig(enabled=True, zookeeper=zk_service.hosts, root=_root(), session_timeout_seconds=6.0)
    old = Leadership(config, "t")
    old.start()
    assert old.acquire(_never())
    old_token = old.guard()
    ZooKeeperPositionStore(zk, old.layout.position, fence=StaticFence(old_token)).save(POINT)
    _, epoch = read_position_node(zk, old.layout.position)
    assert epoch == old.epoch

    # The old leader's term ends without it noticing (its running node is gone, as after a session
    # expiry); a new leader is elected and writes.
    zk.delete(old.layout.running)
    new = Leadership(config, "t")
    new.start()
    try:
        assert new.acquire(_never())
        assert new.epoch == old.epoch + 1
        ZooKeeperPositionStore(zk, new.layout.position, fence=new).save(POINT)
        newer = ResumePoint(journal="mysql-bin.000004", offset=4)
        ZooKeeperPositionStore(zk, new.layout.position, fence=new).save(newer)

        zombie = ZooKeeperPositionStore(zk, old.layout.position, fence=StaticFence(old_token))
        zombie.load()  # even knowing the node's current version
        with pytest.raises(LeadershipError, match=f"epoch {old.epoch} is over"):
            zombie.save(ResumePoint(journal="mysql-bin.000099", offset=4))
        assert read_position_node(zk, new.layout.position) == (newer, new.epoch)
    finally:
        new.close()
        old.close()


def _never() -> threading.Event:
    return threading.Event()  # a stop flag nobody sets
