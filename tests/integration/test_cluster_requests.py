"""Requests to a cluster instance through ZooKeeper (``relay.cluster.remote`` asking,
``relay.cluster.requests`` on the node answering), on a real ZooKeeper, with the relay's side played
by the test (it reads the request file and answers in the status record, as ``SnapshotDesk`` does):

- a request is handed to the running relay's file and its answer comes back naming the node; the
  request and answer nodes are gone afterwards;
- a request made while no node runs the instance is not lost: the node that runs it later takes it;
- the instance moves after its node handed a request over: the next node does not hand it again when
  the relay already carries it out (its snapshot has the request's id), and does when it never did;
- a request no node takes before the deadline is withdrawn (nothing done, said so); a relay that does
  not take its file in time gets it removed and the request refused.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from relay.cluster.definition import parse_definition
from relay.cluster.layout import Paths
from relay.cluster.remote import ClusterAddress, RemoteInstance
from relay.cluster.requests import RequestDesk
from relay.cluster.store import ZooKeeperInstanceStore
from relay.config.state import SNAPSHOT_REQUEST_FILE
from relay.errors import InstanceNotFoundError, SnapshotRequestError
from tests.integration.relay_harness import wait_for

DEFINITION = """\
source: {host: db.internal, port: 3306, user: relay, password: "${PW}", server_id: 7301}
positions: {backend: zookeeper}
mapping: {store: zookeeper}
kafka: {bootstrap_servers: "k1:9092"}
"""


@pytest.fixture
def address(zk_service: Any) -> ClusterAddress:
    made = ClusterAddress(str(zk_service.hosts), f"/relay-test-{uuid.uuid4().hex[:10]}", timeout=15.0)
    store = ZooKeeperInstanceStore(made.hosts, made.root)
    try:
        store.add(parse_definition("shop", DEFINITION))
    finally:
        store.close()
    return made


@pytest.fixture
def client(address: ClusterAddress) -> Iterator[KazooClient]:
    made = KazooClient(hosts=address.hosts)
    made.start(timeout=15)
    yield made
    made.stop()
    made.close()


class Asker(threading.Thread):
    """``relay snapshot run --instance shop`` in the background."""

    def __init__(self, address: ClusterAddress, timeout: float = 60.0) -> None:
        super().__init__(daemon=True)
        self.address, self.timeout = address, timeout
        self.answer: dict[str, Any] | None = None
        self.error: Exception | None = None

    def run(self) -> None:
        try:
            with RemoteInstance(self.address, "shop") as remote:
                self.answer = remote.ask({"action": "run", "table": "shop.orders", "where": ""}, self.timeout)
        except Exception as exc:  # handed to the test's thread
            self.error = exc


def _running(pid: int = 4242, **relay: Any) -> dict[str, Any]:
    return {"process": "running", "pid": pid, "relay": {"pid": pid, "state": "running", **relay}}


def _file(state_dir: Path) -> Path:
    return state_dir / "shop" / SNAPSHOT_REQUEST_FILE


def _pending(client: KazooClient, root: str) -> list[str]:
    path = Paths(root).requests("shop")
    return client.get_children(path) if client.exists(path) else []


def test_handed_to_the_relay_and_answered_naming_the_node(
    address: ClusterAddress, client: KazooClient, tmp_path: Path
) -> None:
    desk = RequestDesk("a", Paths(address.root), tmp_path)
    record = _running()
    asker = Asker(address)
    asker.start()

    def relay_took_it() -> bool:
        desk.serve(client, {"shop": record})
        return _file(tmp_path).exists()

    wait_for(relay_took_it, 30, "the request handed to the relay's file")
    request = json.loads(_file(tmp_path).read_text())
    assert request["action"] == "run" and request["table"] == "shop.orders"
    _file(tmp_path).unlink()  # the relay takes it at a batch boundary and answers in its status
    record["relay"]["snapshot_request"] = {"id": request["id"], "accepted": True, "reason": None}

    def answered() -> bool:
        desk.serve(client, {"shop": record})
        return not asker.is_alive()

    wait_for(answered, 30, "the CLI got the answer")
    assert asker.error is None and asker.answer is not None
    assert asker.answer["accepted"] is True and asker.answer["node"] == "a"
    assert asker.answer["id"] == request["id"]
    assert _pending(client, address.root) == []
    assert client.get_children(Paths(address.root).answers("shop")) == []  # the CLI removed its answer


def test_a_request_waits_for_a_node_and_moves_are_not_applied_twice(
    address: ClusterAddress, client: KazooClient, tmp_path: Path
) -> None:
    asker = Asker(address)
    asker.start()
    wait_for(lambda: len(_pending(client, address.root)) == 1, 30, "the request in ZooKeeper")
    # Node a's relay is standing by: nothing is handed over, the request stays.
    a = RequestDesk("a", Paths(address.root), tmp_path / "a")
    a.serve(client, {"shop": {**_running(), "relay": {"pid": 4242, "state": "standby"}}})
    assert not _file(tmp_path / "a").exists() and len(_pending(client, address.root)) == 1
    # a's relay becomes active: a hands it over, then the instance moves before the answer.
    a.serve(client, {"shop": _running()})
    request_id = json.loads(_file(tmp_path / "a").read_text())["id"]
    a.serve(client, {})  # moved away: a lets it go, the request stays for the next node
    assert len(_pending(client, address.root)) == 1
    assert not _file(tmp_path / "a").exists(), "the file a's relay did not take is removed"
    # b runs it now; its relay continued the snapshot that request started (from the saved position):
    # answered from that, never handed over again.
    b = RequestDesk("b", Paths(address.root), tmp_path / "b")
    continued = _running(pid=5151, snapshot={"id": request_id, "tables": {}})
    wait_for(lambda: (b.serve(client, {"shop": continued}), not asker.is_alive())[1], 30, "b's answer")
    assert asker.error is None and asker.answer is not None
    assert asker.answer["accepted"] is True and asker.answer["continued"] is True
    assert asker.answer["node"] == "b"
    assert not _file(tmp_path / "b").exists(), "handed over twice"
    assert _pending(client, address.root) == []

    # Another request, handed over by a whose relay never took it (a died): b hands it over again.
    second = Asker(address)
    second.start()
    wait_for(lambda: len(_pending(client, address.root)) == 1, 30, "the second request")
    a = RequestDesk("a", Paths(address.root), tmp_path / "a2")
    a.serve(client, {"shop": _running()})
    assert _file(tmp_path / "a2").exists()
    b = RequestDesk("b", Paths(address.root), tmp_path / "b")
    record = _running(pid=5151)
    wait_for(lambda: (b.serve(client, {"shop": record}), _file(tmp_path / "b").exists())[1], 30, "b hands it")
    second_id = json.loads(_file(tmp_path / "b").read_text())["id"]
    _file(tmp_path / "b").unlink()
    record["relay"]["snapshot_request"] = {"id": second_id, "accepted": False, "reason": "a snapshot runs"}
    wait_for(lambda: (b.serve(client, {"shop": record}), not second.is_alive())[1], 30, "the refusal")
    assert second.answer is not None and second.answer["accepted"] is False
    assert second.answer["reason"] == "a snapshot runs" and second.answer["node"] == "b"


def test_withdrawn_when_no_node_takes_it_and_refused_when_the_relay_does_not(
    address: ClusterAddress, client: KazooClient, tmp_path: Path
) -> None:
    with RemoteInstance(address, "shop") as remote, pytest.raises(SnapshotRequestError) as caught:
        remote.ask({"action": "cancel"}, 1.0)
    assert "withdrawn, nothing was done" in str(caught.value)
    assert "instance shop is assigned to no node" in str(caught.value)
    assert _pending(client, address.root) == []

    desk = RequestDesk("a", Paths(address.root), tmp_path, answer_timeout=0.5)
    asker = Asker(address)
    asker.start()
    wait_for(lambda: (desk.serve(client, {"shop": _running()}), not asker.is_alive())[1], 30, "refused")
    assert asker.answer is not None and asker.answer["accepted"] is False
    assert "did not take the request within" in asker.answer["reason"]
    assert not _file(tmp_path).exists(), "the untaken request file is removed"
    assert _pending(client, address.root) == []


def test_an_unknown_instance_is_named_with_the_defined_ones(address: ClusterAddress) -> None:
    with pytest.raises(InstanceNotFoundError) as caught:
        RemoteInstance(address, "nope")
    assert "nope: no such instance" in str(caught.value) and "defined instances: shop" in str(caught.value)


def test_a_child_that_ended_before_answering_gets_it_again_from_zookeeper(
    address: ClusterAddress, client: KazooClient, tmp_path: Path
) -> None:
    desk = RequestDesk("a", Paths(address.root), tmp_path)
    asker = Asker(address)
    asker.start()
    wait_for(
        lambda: (desk.serve(client, {"shop": _running(pid=1)}), _file(tmp_path).exists())[1], 30, "handed"
    )
    first = json.loads(_file(tmp_path).read_text())["id"]
    _file(tmp_path).unlink()  # the child took it, then crashed before answering; its node restarts it
    record = _running(pid=2)
    wait_for(lambda: (desk.serve(client, {"shop": record}), _file(tmp_path).exists())[1], 30, "handed again")
    assert json.loads(_file(tmp_path).read_text())["id"] == first
    _file(tmp_path).unlink()
    record["relay"]["snapshot_request"] = {"id": first, "accepted": True, "reason": None}
    wait_for(lambda: (desk.serve(client, {"shop": record}), not asker.is_alive())[1], 30, "answered")
    assert asker.answer is not None and asker.answer["accepted"] is True
    assert _pending(client, address.root) == []
