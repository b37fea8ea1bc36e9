"""Whether a starting service answers yet: one probe per kind of server, and the wait on them.

Owns ``port_open``, ``mysql_answers``, ``kafka_answers``, ``kafka_brokers``, ``zookeeper_answers`` and
``wait_until`` (a probe polled with backoff until a deadline, failing early with the server's log tail when
its process died, as ``PortInUseError`` when the port was taken). Runs on the caller's thread.
"""

from __future__ import annotations

import contextlib
import re
import socket
from collections.abc import Callable
from typing import Any

import pymysql
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from relay.common.kafka_log import quiet
from relay.common.retry import RetryPolicy
from relay.dev.services.endpoints import KafkaService, MySQLService, ZooKeeperService
from relay.dev.services.processes import ServiceProcess
from relay.errors import PortInUseError, ServiceError


def port_open(host: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def mysql_answers(service: MySQLService, timeout: float = 2.0, **connect_kw: Any) -> bool:
    try:
        with contextlib.closing(service.connect(connect_timeout=max(1, int(timeout)), **connect_kw)) as conn:
            conn.ping(reconnect=False)
        return True
    except pymysql.err.MySQLError:
        return False


def kafka_answers(service: KafkaService, timeout: float = 2.0) -> bool:
    # A TCP check first keeps librdkafka from logging "connection refused" while the broker starts.
    first = service.bootstrap_servers.split(",")[0]
    host, _, port = first.rpartition(":")
    if not port_open(host, int(port), timeout):
        return False
    try:
        AdminClient(quiet(service.client_config())).list_topics(timeout=timeout)
        return True
    except KafkaException:
        return False


def kafka_brokers(service: KafkaService, timeout: float = 2.0) -> int:
    """How many brokers the cluster's metadata lists (0 while the first bootstrap server does not answer)."""
    first = service.bootstrap_servers.split(",")[0]
    host, _, port = first.rpartition(":")
    if not port_open(host, int(port), timeout):
        return 0
    config = {**service.client_config(), "bootstrap.servers": first}
    try:
        return len(AdminClient(config).list_topics(timeout=timeout).brokers)
    except KafkaException:
        return 0


def zookeeper_answers(service: ZooKeeperService, timeout: float = 2.0) -> bool:
    """True once ``srvr`` (allowed by default, served before the server is ready) answers "Mode:"."""
    host, _, port = service.hosts.split(",")[0].rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout) as sock:
            sock.sendall(b"srvr")
            answer = b""
            while chunk := sock.recv(4096):
                answer += chunk
    except OSError:
        return False
    return b"Mode:" in answer


def wait_until(
    probe: Callable[[], bool], timeout: float, what: str, proc: ServiceProcess | None = None
) -> None:
    """Poll ``probe`` until it is true; fail at the deadline, or as soon as ``proc`` has died."""
    backoff = RetryPolicy(initial=0.05, maximum=0.5, deadline=timeout).start()
    while not probe():
        if proc is not None and not proc.alive():
            raise _died(proc, what)
        if not backoff.wait():
            detail = f"\n--- {proc.log_path} ---\n{proc.log_tail()}" if proc else ""
            raise ServiceError(f"{what} did not answer within {timeout:.0f}s{detail}")


def _died(proc: ServiceProcess, what: str) -> ServiceError:
    tail = proc.log_tail()
    message = f"{what} exited during start-up\n--- {proc.log_path} ---\n{tail}"
    # mariadbd and Java say "Address already in use", Tansu says "Address in use".
    if re.search(r"address (already )?in use", tail, re.IGNORECASE):
        return PortInUseError(message)
    return ServiceError(message)
