"""Heartbeat settings and records: the keys refused by name, the record's Debezium-shaped key and value."""

from __future__ import annotations

import json
import socket
from typing import Any

import pytest

from relay.config.load import parse_config
from relay.config.sections import SourceConfig
from relay.daemon.heartbeats import HeartbeatConfig, Heartbeats, heartbeat_key, heartbeat_value
from relay.daemon.status import RelayStats
from relay.errors import ConfigError
from relay.positions.store import ResumePoint
from relay.source.snapshot_checkpoint import READ_MS_KEY


@pytest.mark.parametrize(
    ("kafka", "key", "says"),
    [
        ({"heartbeat_topic": "bad topic"}, "kafka.heartbeat_topic", "not allowed"),
        ({"heartbeat_topic": ""}, "kafka.heartbeat_topic", "empty"),
        ({"heartbeat_topic": "hb", "heartbeat_seconds": 0}, "kafka.heartbeat_seconds", "0.1..3600"),
        ({"heartbeat_seconds": 7200}, "kafka.heartbeat_seconds", "0.1..3600"),
        ({"heartbeat_query": "  "}, "kafka.heartbeat_query", "SQL statement"),
        ({"heartbeat_topic": "relay.ddl"}, "kafka.heartbeat_topic", "also kafka.ddl_topic"),
    ],
)
def test_heartbeat_settings_are_refused_naming_the_key(kafka: dict[str, Any], key: str, says: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config({"kafka": kafka})
    assert info.value.key == key
    assert says in info.value.problem


def test_heartbeats_are_off_by_default_and_on_with_a_topic_or_a_query() -> None:
    assert not parse_config({}).kafka.heartbeats
    assert parse_config({"kafka": {"heartbeat_topic": "relay.heartbeats"}}).kafka.heartbeats
    assert parse_config({"kafka": {"heartbeat_query": "UPDATE hb.beat SET at = NOW()"}}).kafka.heartbeats


def test_the_heartbeat_producer_is_never_transactional() -> None:
    config = parse_config({"instance": "main", "source": {"id": "shop"}, "kafka": {"heartbeat_topic": "hb"}})
    producer = {"client.id": "canal-relay-main", "transactional.id": "x", "transaction.timeout.ms": 60000}
    beats = HeartbeatConfig.of(config, producer)
    assert beats.producer == {"client.id": "canal-relay-main-heartbeat"}
    assert (beats.source_id, beats.instance, beats.topic, beats.seconds) == ("shop", "main", "hb", 10.0)


def test_the_record_is_debeziums_heartbeat_with_our_position_beside_it() -> None:
    config = parse_config({"instance": "main", "source": {"id": "shop"}, "kafka": {"heartbeat_topic": "hb"}})
    beats = HeartbeatConfig.of(config, {})
    assert json.loads(heartbeat_key("shop")) == {"serverName": "shop"}
    point = ResumePoint(
        "mysql-bin.000007", 4567, 2, gtid_set="0-1-42", timestamp=1_700_000_001_000, server_id=1, generation=3
    )
    value = json.loads(heartbeat_value(beats, point, 1_700_000_002_000, 1_700_000_003_123))
    assert value == {
        "ts_ms": 1_700_000_003_123,
        "file": "mysql-bin.000007",
        "pos": 4567,
        "skip": 2,
        "gtids": "0-1-42",
        "server_id": 1,
        "ts_sec": 1_700_000_001,
        "position_ts_ms": 1_700_000_001_000,
        "source_ts_ms": 1_700_000_002_000,
        "generation": 3,
        "instance": "main",
    }
    no_gtids = json.loads(heartbeat_value(beats, ResumePoint("mysql-bin.000001", 4), 0, 1))
    assert "gtids" not in no_gtids and no_gtids["source_ts_ms"] is None
    # After a snapshot chunk (no binlog time): the time its rows were read, not 0.
    chunk = ResumePoint("mysql-bin.000007", 4567, extra={READ_MS_KEY: 1_700_000_000_500})
    after_chunk = json.loads(heartbeat_value(beats, chunk, 0, 1_700_000_003_123))
    assert (after_chunk["position_ts_ms"], after_chunk["ts_sec"]) == (1_700_000_000_500, 1_700_000_000)


class _Source:
    def __init__(self, config: SourceConfig) -> None:
        self.config = config


class _Instance:
    """What the heartbeats read of a canal instance: the saved point, the last event's time, the source."""

    def __init__(self, config: SourceConfig) -> None:
        self.saved_point: ResumePoint | None = None
        self.last_event_ms = 0
        self.source = _Source(config)


def test_a_query_that_fails_after_the_start_is_counted_and_tried_again() -> None:
    with socket.socket() as s:  # a port nothing listens on: the server went away
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    source = SourceConfig(host="127.0.0.1", port=port, user="relay", connect_timeout=1.0)
    config = parse_config({"kafka": {"heartbeat_query": "UPDATE hb.beat SET at = NOW() WHERE id = 1"}})
    stats = RelayStats()
    beats = Heartbeats(HeartbeatConfig.of(config, {}), _Instance(source), stats)  # type: ignore[arg-type]
    beats.beat()
    beats.beat()  # never raises: logged, counted, tried again
    assert stats.heartbeats is not None
    assert stats.heartbeats["query_failures"] == 2 and stats.heartbeats["queries"] == 0
    assert f"127.0.0.1:{port}" in stats.heartbeats["last_error"]
    assert stats.heartbeats["records"] == 0 and stats.heartbeats["last_position"] is None  # no topic
