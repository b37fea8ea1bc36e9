"""Real local services for development and tests: MariaDB with a ROW binlog, Apache Kafka, ZooKeeper.

Finds the server binaries, prepares each service's directory, starts the server on a free loopback port,
waits until it answers (a deadline, never a blind sleep) and stops it (SIGTERM, then SIGKILL). Runs on the
caller's thread (pytest's main thread, or the ``relay dev`` command); it starts no threads of its own. It
hands the caller a ``Running`` handle whose ``service`` is a value type (``MySQLService``,
``KafkaService``, ``ZooKeeperService``) that round-trips through text and knows how to connect.

Two lifecycles. *Attached* (tests): every child gets ``PR_SET_PDEATHSIG=SIGKILL``, so it dies with the
thread that started it even when pytest is SIGKILLed. *Detached* (``relay dev up``): children run in their
own session and outlive the starter; ``relay.cli.dev`` records their pid and start time so another process
can stop them with ``stop_pid``. Linux only (``/proc``, ``prctl``).

One room per job, read in this order: ``endpoints`` (the value types), ``processes`` (spawn, identify,
stop), ``readiness`` (probes and the wait on them), ``launch`` (options, the handle, a free port),
``mariadb``, ``kafka`` (Apache Kafka, KRaft: one broker or a cluster), ``tansu`` (the other broker),
``zookeeper``, ``embedded`` (start/stop objects). This
package re-exports their public names: callers import from ``relay.dev.services``.
"""

from __future__ import annotations

from relay.dev.services.embedded import EmbeddedKafka, EmbeddedMySQL, EmbeddedZooKeeper
from relay.dev.services.endpoints import Flavor, KafkaService, MySQLService, ZooKeeperService
from relay.dev.services.kafka import KafkaCluster, KafkaNode, start_kafka
from relay.dev.services.launch import (
    LOOPBACK,
    Running,
    StartOptions,
    find_binary,
    free_port,
    start_on_free_port,
)
from relay.dev.services.mariadb import (
    REPLICATION_PASSWORD,
    REPLICATION_USER,
    ROOT_PASSWORD,
    create_replication_user,
    prepare_accounts,
    start_mysql,
)
from relay.dev.services.processes import ServiceProcess, log_tail, pid_alive, proc_start_time, spawn, stop_pid
from relay.dev.services.readiness import (
    kafka_answers,
    kafka_brokers,
    mysql_answers,
    port_open,
    wait_until,
    zookeeper_answers,
)
from relay.dev.services.tansu import start_tansu, tansu_binary
from relay.dev.services.zookeeper import ZOOKEEPER_CLASSPATH, start_zookeeper

__all__ = [
    "LOOPBACK",
    "REPLICATION_PASSWORD",
    "REPLICATION_USER",
    "ROOT_PASSWORD",
    "ZOOKEEPER_CLASSPATH",
    "EmbeddedKafka",
    "EmbeddedMySQL",
    "EmbeddedZooKeeper",
    "Flavor",
    "KafkaCluster",
    "KafkaNode",
    "KafkaService",
    "MySQLService",
    "Running",
    "ServiceProcess",
    "StartOptions",
    "ZooKeeperService",
    "create_replication_user",
    "find_binary",
    "free_port",
    "kafka_answers",
    "kafka_brokers",
    "log_tail",
    "mysql_answers",
    "pid_alive",
    "port_open",
    "prepare_accounts",
    "proc_start_time",
    "spawn",
    "start_kafka",
    "start_mysql",
    "start_on_free_port",
    "start_tansu",
    "start_zookeeper",
    "stop_pid",
    "tansu_binary",
    "wait_until",
    "zookeeper_answers",
]
