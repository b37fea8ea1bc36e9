"""Heartbeats (``kafka.heartbeat_topic``, ``heartbeat_seconds``, ``heartbeat_query``): the relay says where
it is while nothing captured changes.

Owns ``Heartbeats``, an observer of the publish loop (``RelayObserver``: started and stopped with it, so
only the leading process beats) with a thread of its own, ``heartbeat-<instance>``, which every
``heartbeat_seconds``:

1. runs ``heartbeat_query`` (Debezium's ``heartbeat.action.query``) on its own connection to the server
   the parser reads (``source.user``; after a failover, the standby), so a server where nothing else
   writes still writes a binlog event that moves the saved position and the lag. It must succeed once
   when the relay starts, or the relay refuses to start (``ConfigError`` naming the key and the server's
   message: a typo or a missing grant is found at once); a later failure (a restart of the server) is
   logged and counted, the connection dropped, and the query tried again at the next beat;
2. publishes a heartbeat record to ``heartbeat_topic`` with the position saved after the last
   acknowledged batch (``CanalInstance.saved_point``): every captured row before it is in Kafka (in
   exactly-once mode, committed), so a consumer that has read the data topics up to a heartbeat's time
   knows nothing before its position is missing. No record before a position exists (a first start with
   nothing acknowledged yet), as Debezium sends none without an offset.

The record follows Debezium's heartbeat (``io.debezium.heartbeat.HeartbeatImpl``; the MySQL connector's
documentation, "heartbeat.interval.ms" and "topic.heartbeat.prefix"): partition 0, key ``{"serverName":
<name>}`` — here the source id — and a value whose ``ts_ms`` is the time the heartbeat was made by the
relay. Debezium carries the binlog offset (``file``, ``pos``, ``gtids``, ``server_id``, ``ts_sec``) as
the Connect record's source offset; a Kafka consumer never sees that, so here the same names sit in the
value beside ``ts_ms``, with ours: ``skip`` (entries of the transaction at ``pos`` already published),
``generation``, ``position_ts_ms`` (binlog time of the last acknowledged entry; while a snapshot runs
and that entry is a chunk, which has no binlog time, the time its rows were read — never 0, so lag
computed from it is real; ``ts_sec`` is the same in seconds), ``source_ts_ms`` (binlog time of the last
event read, captured or not) and ``instance``. The topic is created when missing (one
partition, compacted: the latest heartbeat per source is what matters). The records go through a
producer of their own (idempotent, ``acks=all``, never transactional): a heartbeat is never part of a
data batch, so it can neither hold back nor roll back data, and a failed one is logged, counted and
replaced by the next.

Progress through filtered-out traffic does not depend on any of this: the parser puts the last empty
transaction the filters dropped when it reaches the binlog end (``relay.canal.sink``), and the batch it
makes is acknowledged, and its position saved, in order with every other batch.

Counters go to the status file (``RelayStats.heartbeats``: ``relay status``). Threads: ``start`` and
``stop`` on the publisher thread; the beats on ``heartbeat-<instance>``; it reads the instance's saved
point and last event time (plain attribute reads) and writes only its own counters.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import pymysql
from confluent_kafka import KafkaError, KafkaException, Producer

from relay.common.kafka_log import quiet
from relay.common.mysql import connect
from relay.config.load import RelayConfig
from relay.daemon.status import RelayStats
from relay.errors import ConfigError, PublishError, RelayError
from relay.kafka.compacted import CompactedTopic, CompactedTopicConfig
from relay.positions.store import ResumePoint
from relay.source.instance import CanalInstance
from relay.source.snapshot_checkpoint import READ_MS_KEY

log = logging.getLogger(__name__)

QUERY_TIMEOUT_SECONDS = 30.0  # connect, read and write timeouts of the heartbeat query's connection


@dataclass(frozen=True)
class HeartbeatConfig:
    """What the heartbeats need; ``producer`` are the librdkafka settings (the publisher's, not
    transactional), ``None`` topic: no records, ``None`` query: no query."""

    instance: str
    source_id: str
    seconds: float
    topic: str | None
    query: str | None
    bootstrap_servers: str
    producer: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, config: RelayConfig, producer: dict[str, Any]) -> HeartbeatConfig:
        settings = {k: v for k, v in producer.items() if not k.startswith("transaction")}
        settings["client.id"] = f"{settings.get('client.id', 'canal-relay')}-heartbeat"
        k = config.kafka
        return cls(
            instance=config.instance,
            source_id=config.source_id,
            seconds=k.heartbeat_seconds,
            topic=k.heartbeat_topic,
            query=k.heartbeat_query,
            bootstrap_servers=k.bootstrap_servers,
            producer=settings,
        )


def heartbeat_key(source_id: str) -> bytes:
    """Debezium's heartbeat key: ``{"serverName": <name>}``."""
    return json.dumps({"serverName": source_id}, separators=(",", ":")).encode()


def position_ms(point: ResumePoint) -> int:
    """The time of a saved position: the binlog time of its last entry, or when that entry is a snapshot
    chunk (no binlog time) the time its rows were read; 0 only for a point that records neither (one
    saved by an earlier version after a chunk, or set by an operator)."""
    if point.timestamp > 0:
        return point.timestamp
    read = point.extra.get(READ_MS_KEY)
    return int(read) if isinstance(read, int | float) and read > 0 else 0


def heartbeat_value(config: HeartbeatConfig, point: ResumePoint, source_ms: int, now_ms: int) -> bytes:
    """Debezium's ``ts_ms`` (the relay's time), the binlog offset under Debezium's offset names, ours."""
    at_ms = position_ms(point)
    value: dict[str, Any] = {
        "ts_ms": now_ms,
        "file": point.journal,
        "pos": point.offset,
        "skip": point.skip,
        "server_id": point.server_id,
        "ts_sec": at_ms // 1000,
        "position_ts_ms": at_ms,
        "source_ts_ms": source_ms or None,
        "generation": point.generation,
        "instance": config.instance,
    }
    if point.gtid_set:
        value["gtids"] = point.gtid_set
    return json.dumps(value, separators=(",", ":")).encode()


class Heartbeats:
    """The heartbeat thread of one relay (module docstring). A ``RelayObserver``."""

    def __init__(self, config: HeartbeatConfig, instance: CanalInstance, stats: RelayStats) -> None:
        self.config = config
        self._instance, self._stats = instance, stats
        self._topic = (
            CompactedTopic(
                CompactedTopicConfig(
                    config.bootstrap_servers, config.topic, config.instance, kafka=config.producer
                ),
                PublishError,
            )
            if config.topic
            else None
        )
        self._producer: Producer | None = None
        self._conn: Any = None  # the query's connection (PyMySQL), opened on demand
        self._conn_address = ""
        self._halt = threading.Event()
        self._thread: threading.Thread | None = None
        self.counts = {"records": 0, "record_failures": 0, "queries": 0, "query_failures": 0}
        self.last_error = ""
        self.last_position = ""

    # -- RelayObserver ------------------------------------------------------------------------------
    def start(self) -> None:
        """Check the topic (create it) and run the query once: a topic that cannot be had or a query
        that fails stops the start (``PublishError``, ``ConfigError`` naming the key)."""
        if self._topic is not None:
            try:
                self._topic.ensure()
            except RelayError as exc:  # the broker away, or no right to create it: say which setting
                raise PublishError(f"kafka.heartbeat_topic {self.config.topic!r}: {exc}") from exc
            self._producer = Producer(quiet(self.config.producer))
        if self.config.query:
            problem = self._run_query()
            if problem is not None:
                self.stop()
                raise ConfigError("kafka.heartbeat_query", problem)
        self._halt.clear()
        self._thread = threading.Thread(
            target=self._run, name=f"heartbeat-{self.config.instance}", daemon=True
        )
        self._thread.start()
        log.info(
            "heartbeats every %.1f s%s%s",
            self.config.seconds,
            f" to {self.config.topic}" if self.config.topic else "",
            " with the heartbeat query" if self.config.query else "",
        )

    def stop(self) -> None:
        self._halt.set()
        if self._thread is not None:
            self._thread.join(QUERY_TIMEOUT_SECONDS + 5)
            self._thread = None
        self._close_connection()
        if self._producer is not None:
            self._producer.flush(5.0)
            self._producer = None

    def batch_sent(self, batch_id: int) -> None:
        pass

    def batch_acked(self, batch_id: int) -> None:
        pass

    # -- the beats (heartbeat thread) ---------------------------------------------------------------
    def _run(self) -> None:
        while not self._halt.wait(self.config.seconds):
            try:
                self.beat()
            except Exception as exc:  # a heartbeat must never end the relay: logged, counted, next beat
                log.exception("heartbeat failed: %s", exc)
                self.last_error = str(exc)

    def beat(self) -> None:
        """One heartbeat: the query, then the record (each only where configured)."""
        if self.config.query:
            problem = self._run_query()
            if problem is not None:
                log.warning("heartbeat query: %s", problem)
        if self._producer is not None:
            self._publish()
        self._report()

    def _publish(self) -> None:
        assert self._producer is not None and self._topic is not None
        point = self._instance.saved_point
        if point is None:
            return  # nothing acknowledged or saved yet: no position to report (as Debezium)
        value = heartbeat_value(self.config, point, self._instance.last_event_ms, int(time.time() * 1000))
        try:
            key = heartbeat_key(self.config.source_id)
            errors, left = self._topic.produce(self._producer, [(key, value)])
        except (KafkaException, BufferError) as exc:
            errors, left = [KafkaError(KafkaError._FAIL, str(exc))], 0
        if errors or left:
            self.counts["record_failures"] += 1
            self.last_error = str(errors[0].str() if errors else f"{left} record(s) undelivered")
            log.warning("heartbeat to %s not delivered: %s", self.config.topic, self.last_error)
            return
        self.counts["records"] += 1
        self.last_position = str(point)
        log.debug("heartbeat to %s: position %s", self.config.topic, point)

    def _run_query(self) -> str | None:
        """Run the heartbeat query on the server read now; the problem, or None."""
        assert self.config.query
        source = self._instance.source.config
        address = source.address
        try:
            if self._conn is None or self._conn_address != address:
                self._close_connection()
                self._conn = connect(
                    source.host,
                    source.port,
                    source.user,
                    source.password,
                    tls=source.tls,
                    connect_timeout=QUERY_TIMEOUT_SECONDS,
                    read_timeout=QUERY_TIMEOUT_SECONDS,
                    write_timeout=QUERY_TIMEOUT_SECONDS,
                )
                self._conn_address = address
            with self._conn.cursor() as cur:
                cur.execute(self.config.query)
                cur.fetchall()
        except (RelayError, pymysql.err.MySQLError) as exc:
            self._close_connection()
            self.counts["query_failures"] += 1
            self.last_error = f"{address}: {exc}"
            return self.last_error
        self.counts["queries"] += 1
        return None

    def _close_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(pymysql.err.Error):
                conn.close()

    def _report(self) -> None:
        self._stats.heartbeats = {
            **self.counts,
            "last_position": self.last_position or None,
            "last_error": self.last_error or None,
        }
