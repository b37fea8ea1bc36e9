"""Session fixtures for real services: MySQL/MariaDB, Apache Kafka, ZooKeeper.

Each service is started lazily, once per test session, the first time a test asks for it. Where it comes
from, in this order:

1. the environment: ``RELAY_TEST_MYSQL=mysql://user:pass@host:port``, ``RELAY_TEST_KAFKA=host:port``,
   ``RELAY_TEST_ZK=host:port`` (e.g. the addresses ``relay dev up`` prints);
2. testcontainers (MySQL 8.4 — ``RELAY_TEST_MYSQL_IMAGE=mysql:9.4`` runs the same tests on MySQL 9 —,
   Apache Kafka in KRaft mode, ZooKeeper) when a Docker daemon answers — ``RELAY_TEST_DOCKER=0`` skips
   this step;
3. the embedded servers of ``relay.dev.services`` (MariaDB, Apache Kafka in KRaft mode from the jars
   ``scripts/bootstrap`` resolved, Debian's ZooKeeper), started attached to this process so that they die
   with it.

``spare_kafka``: a second embedded Apache Kafka (one broker, started the first time a test asks for it) that
tests freeze, kill and restart — never the session's shared broker; ``spare_broker`` hands it to one test and
makes sure it runs again, thawed, afterwards. ``tansu_broker``: the Tansu broker, which shows aborted records
to read_committed consumers, for the test of exactly-once mode's refusal of such a broker.

``spark``: ONE local SparkSession (local[2], Spark's Kafka, Delta and s3a connectors from ``.jars/``, the
relay's Python source ``relay-kafka`` registered) for the whole test session, started
the first time a test asks for it (so sessions without such a test start no JVM); the test is skipped
where pyspark or pyarrow is not installed.

Tests under ``tests/integration/`` get the ``integration`` marker automatically.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from relay.dev import services
from relay.dev.services import KafkaService, MySQLService, ZooKeeperService
from relay.errors import ServiceError

_INTEGRATION_DIR = Path(__file__).parent / "integration"
_READY_TIMEOUT = 120.0
_MYSQL8_FLAGS = (
    "--log-bin --binlog-format=ROW --binlog-row-image=FULL --binlog-row-metadata=FULL "
    "--server-id=1 --gtid-mode=ON --enforce-gtid-consistency=ON"
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.is_relative_to(_INTEGRATION_DIR):
            item.add_marker(pytest.mark.integration)


@functools.cache
def docker_available() -> bool:
    """True when a Docker daemon answers a ping within a few seconds."""
    if os.environ.get("RELAY_TEST_DOCKER", "1") == "0":
        return False
    try:
        import docker  # type: ignore[import-untyped,unused-ignore]
        from docker.errors import DockerException  # type: ignore[import-untyped,unused-ignore]
    except ImportError:
        return False
    try:
        client = docker.from_env(timeout=3)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except (DockerException, OSError):  # requests' ConnectionError is an OSError
        return False


# ---------------------------------------------------------------------------------------------------------
# MySQL / MariaDB
# ---------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def mysql_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MySQLService]:
    """A MySQL-protocol server with a ROW / FULL binlog: ``.connect()`` as admin, ``.replication_user``."""
    named = os.environ.get("RELAY_TEST_MYSQL")
    if named:
        yield MySQLService.parse(named).with_server_info()
    elif docker_available():
        yield from _mysql_container()
    else:
        with services.start_mysql(services.StartOptions(tmp_path_factory.mktemp("mysql"))) as running:
            yield running.service


def _mysql_container() -> Iterator[MySQLService]:
    try:
        from testcontainers.community.mysql import MySqlContainer  # testcontainers >= 4.14
    except ImportError:
        from testcontainers.mysql import MySqlContainer

    image = os.environ.get("RELAY_TEST_MYSQL_IMAGE", "mysql:8.4")
    container = MySqlContainer(image, root_password=services.ROOT_PASSWORD).with_command(_MYSQL8_FLAGS)
    container.start()
    try:
        port = int(container.get_exposed_port(3306))
        root = MySQLService(container.get_container_host_ip(), port, "root", services.ROOT_PASSWORD, "mysql")
        services.wait_until(lambda: services.mysql_answers(root), _READY_TIMEOUT, "MySQL container")
        yield services.create_replication_user(root).with_server_info()
    finally:
        container.stop()


@pytest.fixture
def fresh_schema(mysql_service: MySQLService, request: pytest.FixtureRequest) -> Iterator[str]:
    """The name of a new, empty database for this test; dropped afterwards."""
    base = re.sub(r"[^a-z0-9_]+", "_", request.node.name.lower())[:40]
    name = f"t_{base}_{uuid.uuid4().hex[:8]}"
    with contextlib.closing(mysql_service.connect()) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{name}`")
    try:
        yield name
    finally:
        with contextlib.closing(mysql_service.connect()) as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{name}`")


@pytest.fixture
def mysql_server_factory(tmp_path: Path) -> Iterator[Callable[..., MySQLService]]:
    """Start a private embedded MariaDB with extra server options, e.g. a misconfigured one:

    ``mysql_server_factory("--binlog-format=STATEMENT")``. Stopped at the end of the test. Skips the test
    where no ``mariadbd`` is installed (e.g. when the suite runs against servers named in the environment).
    """
    started: list[services.Running[MySQLService]] = []

    def start(*extra_args: str) -> MySQLService:
        directory = tmp_path / f"mysql{len(started)}"
        try:
            services.find_binary("mariadbd")
        except ServiceError as exc:
            pytest.skip(str(exc))
        running = services.start_mysql(services.StartOptions(directory, extra_args=tuple(extra_args)))
        started.append(running)
        return running.service

    try:
        yield start
    finally:
        for running in started:
            running.stop(remove_dir=True)


# ---------------------------------------------------------------------------------------------------------
# Kafka-protocol broker
# ---------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def kafka_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaService]:
    """Apache Kafka: named in the environment, a container, or the embedded single KRaft broker."""
    named = os.environ.get("RELAY_TEST_KAFKA")
    if named:
        service = KafkaService.parse(named)
        services.wait_until(lambda: services.kafka_answers(service), 30.0, f"broker {named}")
        yield service
    elif docker_available():
        yield from _kafka_container()
    else:
        with services.start_kafka(services.StartOptions(tmp_path_factory.mktemp("kafka"))) as running:
            yield running.service


@pytest.fixture(scope="session")
def spare_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[services.KafkaCluster]:
    """An embedded Apache Kafka of its own (one broker), for the tests that freeze, kill or restart one."""
    with services.start_kafka(services.StartOptions(tmp_path_factory.mktemp("spare-kafka"))) as cluster:
        assert isinstance(cluster, services.KafkaCluster)
        yield cluster


@pytest.fixture
def spare_broker(spare_kafka: services.KafkaCluster) -> Iterator[services.KafkaCluster]:
    """``spare_kafka`` for one test; afterwards it runs again, thawed, whatever the test did to it."""
    yield spare_kafka
    spare_kafka.thaw(1)
    process = spare_kafka.node(1).process
    if process is None or not process.alive():
        spare_kafka.start_node(1)


@pytest.fixture
def tansu_broker(tmp_path: Path) -> Iterator[KafkaService]:
    """A Tansu broker (memory storage) for one test: a Kafka-protocol broker that shows aborted records."""
    with services.start_tansu(services.StartOptions(tmp_path / "tansu")) as running:
        yield running.service


def _kafka_container() -> Iterator[KafkaService]:
    try:
        from testcontainers.community.kafka import KafkaContainer  # testcontainers >= 4.14
    except ImportError:
        from testcontainers.kafka import KafkaContainer

    container = KafkaContainer("confluentinc/cp-kafka:7.6.0").with_kraft()
    container.start(timeout=int(_READY_TIMEOUT))
    try:
        service = KafkaService(container.get_bootstrap_server())
        services.wait_until(lambda: services.kafka_answers(service), _READY_TIMEOUT, "Kafka container")
        yield service
    finally:
        container.stop()


# ---------------------------------------------------------------------------------------------------------
# ZooKeeper
# ---------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def zk_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperService]:
    """A ZooKeeper ensemble; ``.hosts`` is a kazoo connection string."""
    named = os.environ.get("RELAY_TEST_ZK")
    if named:
        service = ZooKeeperService.parse(named)
        services.wait_until(lambda: services.zookeeper_answers(service), 30.0, f"ZooKeeper {named}")
        yield service
    elif docker_available():
        yield from _zookeeper_container()
    else:
        with services.start_zookeeper(services.StartOptions(tmp_path_factory.mktemp("zk"))) as running:
            yield running.service


def _zookeeper_container() -> Iterator[ZooKeeperService]:
    from testcontainers.core.container import DockerContainer

    container = DockerContainer("zookeeper:3.8").with_exposed_ports(2181)
    container.start()
    try:
        port = int(container.get_exposed_port(2181))
        service = ZooKeeperService(f"{container.get_container_host_ip()}:{port}")
        services.wait_until(
            lambda: services.zookeeper_answers(service), _READY_TIMEOUT, "ZooKeeper container"
        )
        yield service
    finally:
        container.stop()


# ---------------------------------------------------------------------------------------------------------
# Spark
# ---------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The session's local SparkSession with Spark's connectors (``relay.spark.session.CONNECTORS``) and
    ``relay-kafka`` registered; stopped at the end of the session."""
    pytest.importorskip("pyspark")
    pytest.importorskip("pyarrow")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from relay.spark import register
    from relay.spark.mirror import local_session

    session = local_session(app="relay-tests")
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()
