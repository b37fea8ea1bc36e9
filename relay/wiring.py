"""The composition root: the only place that builds the relay's parts from its configuration.

Every choice a config makes between implementations is made here and nowhere else: which position store
(a file, a ZooKeeper node fenced by the leadership, or — exactly-once mode — a compacted Kafka topic
written inside the publisher's transactions), the schema history's store beside it (a file, znodes
fenced by the same leadership, a compacted topic), which mapping store (the YAML file or a ZooKeeper node),
the ZooKeeper session they share, the Kafka producer's settings (idempotent or transactional), the
canal instance, the metrics exporter. ``build_relay`` hands them, built, to
``relay.daemon.pipeline.Relay`` with the rooms its loop runs in (``RelayRooms.build``: the HA fence or
none, hot reload, transactions, the batch path, recovery, status reporting), so that ``Relay`` creates
nothing of its own. Runs on the thread that starts the relay (the CLI's, a test's, the benchmark worker's).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient

from mapping.model import Mapping
from mapping.store import FileMappingStore, MappingStore, keep_version
from mapping.store_zk import ZooKeeperMappingStore, ZooKeeperStoreConfig
from mapping.watch import MappingWatcher
from relay.canal.captures import CapturedTables
from relay.canal.ring_store import RingStore
from relay.canal.server import EmbeddedServer
from relay.canal.sink import NameFilter, Sink
from relay.config.load import RelayConfig
from relay.config.sections import InstanceConfig, SinkConfig
from relay.config.state import MAPPING_HISTORY_DIR, POSITION_FILE, SCHEMA_HISTORY_FILE
from relay.daemon.heartbeats import HeartbeatConfig, Heartbeats
from relay.daemon.metrics import MetricsExporter
from relay.daemon.pipeline import Relay, RelayParts, RelayRooms
from relay.errors import ConfigError, MappingStoreError
from relay.ha.leadership import Layout, Leadership, connect
from relay.kafka.commit_intent import Settler
from relay.kafka.history import MovePlan, TableMove, move_publisher_config
from relay.kafka.history_copy import CopySettings
from relay.kafka.positions import KafkaPositionConfig, KafkaPositionStore, prove_aborted_records_hidden
from relay.kafka.publisher import KafkaPublisher
from relay.kafka.schema_history import KafkaSchemaHistory, KafkaSchemaHistoryConfig
from relay.kafka.settings import PublisherConfig, TopicDefaults
from relay.positions.lock import InstanceLock
from relay.positions.store import FilePositionStore, MemoryPositionStore, PositionStore
from relay.positions.zookeeper import Fence, ZooKeeperPositionStore
from relay.schema.history import FileSchemaHistory, SchemaHistory
from relay.schema.zookeeper import ZooKeeperSchemaHistory
from relay.source.acks import AckPath
from relay.source.binlog_source import BinlogSource
from relay.source.failover import Failover, master_config
from relay.source.instance import CanalInstance, InstanceParts
from relay.source.parser import ParserLoop
from relay.source.reading import Reading
from relay.source.snapshot_control import SnapshotControl


# --- mapping store ---------------------------------------------------------------------------------
def open_mapping_store(
    kind: str,
    file: str,
    zookeeper: ZooKeeperStoreConfig | None = None,
    history: Path | None = None,
    setting: str = "mapping.file",
) -> MappingStore:
    """The mapping store named by ``kind``: ``file`` (the YAML file, its versions in ``history``: the
    state directory's ``mapping-history``) or ``zookeeper`` (a node)."""
    if kind == "file":
        if history is None:
            raise MappingStoreError("mapping.file", "no history directory given")
        return FileMappingStore(file, history, setting)
    if kind == "zookeeper":
        if zookeeper is None:
            raise MappingStoreError("mapping.zookeeper", "no ZooKeeper settings given")
        return ZooKeeperMappingStore(zookeeper)
    raise MappingStoreError("mapping.store", f"unknown store {kind!r}; known: file, zookeeper")


def mapping_store(config: RelayConfig) -> MappingStore:
    """The mapping store ``mapping.store`` names (a ZooKeeper store connects here)."""
    z = config.mapping.zookeeper
    zk = ZooKeeperStoreConfig(z.hosts, z.path, z.auth, z.timeout_seconds)
    file = str(config.config_path(config.mapping.file))
    return open_mapping_store(config.mapping.store, file, zk, config.state_path(MAPPING_HISTORY_DIR))


def file_positions(config: RelayConfig) -> FilePositionStore:
    """``position.json`` in the state directory; refused (``ConfigError``) while an earlier version's
    position waits at the old place (``relay.config.state``), so nothing starts from scratch by mistake."""
    config.check_state_location()
    return FilePositionStore(config.state_path(POSITION_FILE))


def position_file_or_memory(path: str | None) -> PositionStore:
    """``relay entries``' store: the position file ``path`` names (its ``--positions``), else one in memory
    that forgets everything when the command ends."""
    return FilePositionStore(path) if path else MemoryPositionStore()


# --- positions -------------------------------------------------------------------------------------
def position_node(config: RelayConfig) -> str:
    return Layout(config.ha.root, config.instance).position


@contextlib.contextmanager
def open_positions(config: RelayConfig) -> Iterator[PositionStore]:
    """The position store ``positions.backend`` names, unfenced: for operators (show, set, status)."""
    if config.positions.backend == "file":
        yield file_positions(config)
        return
    if config.positions.backend == "kafka":
        yield KafkaPositionStore(kafka_position_config(config))  # unbound: a save is its own transaction
        return
    client = connect(config.ha)
    try:
        yield ZooKeeperPositionStore(client, position_node(config))
    finally:
        client.stop()
        client.close()


@contextlib.contextmanager
def holding_positions(config: RelayConfig) -> Iterator[bool]:
    """While an operator writes the position (``relay positions set``, ``relay snapshot cancel``): with the
    file backend the position file's lock is held, so a relay starting meanwhile refuses to start (True);
    the other backends are guarded by ZooKeeper or Kafka themselves (False). Open the store inside it
    (``open_positions``)."""
    if config.positions.backend != "file":
        yield False
        return
    with InstanceLock(config.state_path(POSITION_FILE)):
        yield True


@dataclass
class _Coordination:
    """What a relay's config asks of ZooKeeper: leadership (``ha.enabled``) and/or the position node
    and the schema history beside it, sharing one session so their writes are fenced by the
    leadership's epoch."""

    leadership: Leadership | None
    positions: PositionStore
    client: KazooClient | None = None


def commit_settler(config: RelayConfig) -> Settler:
    """How transactional mode settles a commit intent at start (``relay.kafka.commit_intent``): the relay's
    Kafka client settings, and the exactly-once start-up proof on ``{kafka.positions_topic}.probe``."""
    k = config.kafka
    client = {**k.settings, "bootstrap.servers": k.bootstrap_servers}
    positions = kafka_position_config(config)
    return Settler(client, positions.timeout_s, lambda: prove_aborted_records_hidden(positions))


def kafka_position_config(config: RelayConfig) -> KafkaPositionConfig:
    k = config.kafka
    return KafkaPositionConfig(
        bootstrap_servers=k.bootstrap_servers,
        topic=k.positions_topic,
        instance=config.instance,
        transactional_id=transactional_id(config) or "",
        kafka=dict(k.settings),
    )


def _coordination(config: RelayConfig) -> _Coordination:
    config.check_state_location()
    own: PositionStore = FilePositionStore(config.state_path(POSITION_FILE))
    if config.positions.backend == "kafka":
        # Exactly-once: fenced by the transactional producer's epoch, written only in its transactions.
        own = KafkaPositionStore(kafka_position_config(config), bound=True)
    if not config.ha.enabled and config.positions.backend != "zookeeper":
        return _Coordination(None, own)
    client: KazooClient = connect(config.ha)
    leadership = None
    if config.ha.enabled:
        leadership = Leadership(config.ha, config.instance, client, owns_client=True)
    positions: PositionStore = own
    if config.positions.backend == "zookeeper":
        positions = ZooKeeperPositionStore(client, position_node(config), fence=leadership)
    return _Coordination(leadership, positions, client)


# --- the canal instance and Kafka ------------------------------------------------------------------
def sink_config(config: RelayConfig) -> SinkConfig:
    f = config.filter
    return SinkConfig(
        filter=f.include,
        black_filter=f.exclude,
        empty_transaction_interval_ms=f.empty_transaction_interval_ms,
        empty_transaction_threshold=f.empty_transaction_threshold,
    )


def instance_config(config: RelayConfig, mapping: Mapping | None = None) -> InstanceConfig:
    """The canal instance's settings; with ``mapping``, snapshots cover the tables it and the filters keep."""
    return InstanceConfig(
        name=config.instance,
        source=config.source,
        store=config.store_config(),
        sink=sink_config(config),
        schema_history=config.schema.history,
        # Exactly-once: the position is committed with the records; its store only checks each save.
        save_interval_seconds=0.0 if config.kafka.exactly_once else config.positions.save_interval_seconds,
        snapshot=config.snapshot,
        captures=None if mapping is None else snapshot_captures(config, mapping),
    )


def canal_instance(
    config: InstanceConfig, positions: PositionStore, schema_history: SchemaHistory | None = None
) -> CanalInstance:
    """One canal instance and its parts (``relay.source.instance``): where it reads, the ring store and
    its server, the ack path, snapshot control and the parser loop, sharing one stop flag."""
    stopping = threading.Event()
    source = BinlogSource(master_config(config.source))
    failover = Failover(config.source)
    # Names and keys where the server writes no full row metadata; kept and checked against FULL
    # metadata where it does (relay.source.schema_start).
    source.accept_schema_history = schema_history is not None and config.schema_history != "off"
    failover.accept_schema_history = source.accept_schema_history
    reading = Reading(config.source, source)
    store = RingStore(config.store)
    server = EmbeddedServer(store)
    sink = Sink(config.sink)
    acks = AckPath(config.name, positions, server, store, config.save_interval_seconds, stopping)
    snapshots = SnapshotControl(config.name, config.snapshot, config.captures, sink, reading, acks)
    parser = ParserLoop(config, reading, failover, store, sink, acks, snapshots, stopping, schema_history)
    parts = InstanceParts(reading, store, server, acks, snapshots, parser, stopping, schema_history)
    return CanalInstance(config, parts)


def schema_node(config: RelayConfig) -> str:
    """The znode under which ``positions.backend: zookeeper`` keeps the schema history."""
    return f"{Layout(config.ha.root, config.instance).base}/schema"


def schema_history(
    config: RelayConfig, client: KazooClient | None = None, fence: Fence | None = None
) -> SchemaHistory | None:
    """The schema history beside the positions (None with ``schema.history: off``): the file
    ``schema.path`` (file backend), nodes under ``schema_node`` written with the leadership's fence
    (zookeeper; ``client`` is the session the positions use), or the compacted topic ``schema.topic``
    (kafka). Nothing is read until the relay starts (``SchemaHistory.load``)."""
    if config.schema.history == "off":
        return None
    backend = config.positions.backend
    if backend == "zookeeper":
        assert client is not None, "the ZooKeeper schema history needs the positions' session"
        return ZooKeeperSchemaHistory(client, schema_node(config), fence)
    if backend == "kafka":
        k = config.kafka
        return KafkaSchemaHistory(
            KafkaSchemaHistoryConfig(
                k.bootstrap_servers, config.schema.topic, config.instance, kafka=dict(k.settings)
            )
        )
    config.check_state_location()
    return FileSchemaHistory(config.state_path(SCHEMA_HISTORY_FILE))


@contextlib.contextmanager
def open_schema_history(config: RelayConfig) -> Iterator[SchemaHistory]:
    """The schema history for operators (``relay schema``), read, unfenced (no relay may hold the instance
    to write it); ConfigError with ``schema.history: off``."""
    if config.schema.history == "off":
        raise ConfigError("schema.history", "is off: there is no schema history")
    client = connect(config.ha) if config.positions.backend == "zookeeper" else None
    history = schema_history(config, client)
    assert history is not None
    try:
        history.load()
        yield history
    finally:
        history.close()
        if client is not None:
            client.stop()
            client.close()


def snapshot_captures(config: RelayConfig, mapping: Mapping) -> CapturedTables:
    """Which physical tables the relay captures (a snapshot reads, the schema history must follow): those
    the sink filters keep and the mapping routes (a hot reload gives it the new mapping)."""
    sink = sink_config(config)
    include = NameFilter("filter.include", sink.filter, empty_value=True)
    exclude = NameFilter("filter.exclude", sink.black_filter, empty_value=False)
    return CapturedTables(include, exclude, mapping)


def transactional_id(config: RelayConfig) -> str | None:
    """The instance's stable ``transactional.id`` (None: idempotent mode)."""
    k = config.kafka
    return k.transactional_id.format(instance=config.instance) if k.transactions else None


def publisher_config(config: RelayConfig, mapping: Mapping) -> PublisherConfig:
    k = config.kafka
    topics = mapping.topics
    return PublisherConfig(
        bootstrap_servers=k.bootstrap_servers,
        client_id=k.client_id.format(instance=config.instance),
        kafka=dict(k.settings),
        delivery_timeout_s=k.delivery_timeout_seconds,
        admin_timeout_s=k.connect_timeout_seconds,
        dead_letter_topic=k.dead_letter_topic,
        dead_letter_value_bytes=k.dead_letter_value_bytes,
        create_topics=topics.create,
        topic_defaults=TopicDefaults(topics.partitions, topics.replication_factor, topics.topic_config()),
        transactional_id=transactional_id(config),
    )


def consumer_settings(config: RelayConfig) -> dict[str, Any]:
    """What a consumer of the relay's own topics needs: the brokers and the security settings of
    ``kafka.settings``; ``read_committed`` where the relay publishes in transactions."""
    k = config.kafka
    settings: dict[str, Any] = {
        key: value for key, value in k.settings.items() if key.startswith(("security.", "sasl.", "ssl."))
    }
    settings["bootstrap.servers"] = k.bootstrap_servers
    if k.transactions:
        settings["isolation.level"] = "read_committed"
    return settings


def move_opener(config: RelayConfig, leadership: Leadership | None) -> Callable[[MovePlan], TableMove] | None:
    """How the relay copies a moved table's history (``mapping.move: copy``); None with ``switch``."""
    if config.mapping.move != "copy":
        return None

    def open_move(plan: MovePlan) -> TableMove:
        settings = CopySettings(
            consumer=consumer_settings(config),
            publisher=move_publisher_config(publisher_config(config, plan.new)),
            retry=config.publish.retry,
            rate=config.mapping.move_rate,
        )
        fence = leadership.check if leadership is not None else (lambda: None)
        return TableMove(plan, settings, fence=fence, name=f"move-{config.instance}")

    return open_move


# --- the relay -------------------------------------------------------------------------------------
def build_relay(
    config: RelayConfig,
    mapping: Mapping,
    *,
    publisher: KafkaPublisher | None = None,
    positions: PositionStore | None = None,
) -> Relay:
    """The relay the config describes, every part built (``publisher``/``positions``: use these instead)."""
    coordination = _coordination(config)
    store = positions or coordination.positions
    lock = InstanceLock(store.path) if isinstance(store, FilePositionStore) else None

    def watcher(current: Mapping) -> MappingWatcher | None:
        if not config.mapping.reload:
            return None
        return MappingWatcher(
            mapping_store(config), current, interval_seconds=config.mapping.reload_check_seconds
        )

    def read_mapping(number: int | None) -> Mapping:
        store = mapping_store(config)
        try:
            if number is not None:
                return store.version(number)
            current = store.read()
            keep_version(store, current, f"read by relay {config.instance}")  # a restart may resume under it
            return current
        finally:
            store.close()

    settings = instance_config(config, mapping)
    parts = RelayParts(
        instance=canal_instance(
            settings,
            store,
            schema_history(config, coordination.client, coordination.leadership),
        ),
        positions=store,
        publisher=publisher or KafkaPublisher(publisher_config(config, mapping)),
        leadership=coordination.leadership,
        lock=lock,
        open_watcher=watcher,
        exactly_once=store if isinstance(store, KafkaPositionStore) and store.bound else None,
        commit_intents=commit_settler(config) if config.kafka.transactions else None,
        read_mapping=read_mapping,
        open_move=move_opener(config, coordination.leadership),
        captures=settings.captures if isinstance(settings.captures, CapturedTables) else None,
    )
    relay = Relay(config, mapping, parts, RelayRooms.build(config, mapping, parts))
    relay.observe(MetricsExporter(config.metrics, relay))
    if config.kafka.heartbeats:
        beats = HeartbeatConfig.of(config, publisher_config(config, mapping).producer_settings())
        relay.observe(Heartbeats(beats, relay.instance, relay.stats))
    return relay
