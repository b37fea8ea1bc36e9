"""The embedded Apache Kafka's settings (``relay.dev.services.kafka``): one broker, or a replicated cluster.

No broker runs here: the generated ``server.properties`` is read back as Kafka reads it (last key wins).
The brokers themselves start in tests/integration/test_services.py and the broker-failure tests.
"""

from __future__ import annotations

from pathlib import Path

from relay.dev.services.kafka import KafkaNode, Tuning, broker_properties, new_cluster_id


def settings(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.partition("=")
        out[key] = value  # a later line overrides an earlier one, as in Java's Properties
    return out


def test_one_broker_is_its_own_controller_with_replication_one(tmp_path: Path) -> None:
    node = KafkaNode(1, 19092, 19093, tmp_path / "node-1")
    got = settings(broker_properties(node, "1@127.0.0.1:19093", Tuning(1)))
    assert got["process.roles"] == "broker,controller" and got["node.id"] == "1"
    assert got["listeners"] == "PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093"
    assert got["advertised.listeners"] == "PLAINTEXT://127.0.0.1:19092"
    assert got["log.dirs"] == str(tmp_path / "node-1" / "data")
    for key in ("default.replication.factor", "offsets.topic.replication.factor",
                "transaction.state.log.replication.factor", "min.insync.replicas",
                "transaction.state.log.min.isr"):  # fmt: skip
        assert got[key] == "1", key
    assert got["unclean.leader.election.enable"] == "false"
    assert got["group.initial.rebalance.delay.ms"] == "0"


def test_three_brokers_replicate_three_times_and_need_two_in_sync(tmp_path: Path) -> None:
    voters = "1@127.0.0.1:1,2@127.0.0.1:2,3@127.0.0.1:3"
    node = KafkaNode(2, 29092, 2, tmp_path / "node-2")
    got = settings(broker_properties(node, voters, Tuning(3)))
    assert got["controller.quorum.voters"] == voters and got["node.id"] == "2"
    assert got["default.replication.factor"] == got["offsets.topic.replication.factor"] == "3"
    assert got["transaction.state.log.replication.factor"] == "3"
    assert got["min.insync.replicas"] == got["transaction.state.log.min.isr"] == "2"


def test_cluster_ids_are_kraft_uuids() -> None:
    ids = {new_cluster_id() for _ in range(500)}
    assert len(ids) == 500
    assert all(len(i) == 22 and "=" not in i for i in ids)  # 16 bytes, base64url, unpadded
    assert not any(i.startswith("-") for i in ids)  # a command line would read it as an option
