"""Where a development service is and how to reach it: ``MySQLService``, ``KafkaService`` and
``ZooKeeperService``.

Frozen values that round-trip through text (``parse(str(s)) == s``): the form the tests' ``RELAY_TEST_*``
variables, ``relay dev up``'s state file and the CLI's ``--mysql`` options use. ``MySQLService`` also opens
PyMySQL connections on the caller's thread; nothing here starts a process or a thread.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, replace
from typing import Any, Literal
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

import pymysql

from relay.errors import ConfigError

Flavor = Literal["mariadb", "mysql"]


@dataclass(frozen=True)
class MySQLService:
    """A MySQL/MariaDB server and the accounts to use on it.

    ``url`` is the plain ``mysql://user:pass@host:port`` form; ``str()`` adds what ``url`` cannot carry
    (flavor, version, the replication account) as a query string, and ``parse(str(s)) == s``.
    """

    host: str
    port: int
    user: str
    password: str
    flavor: Flavor = "mysql"
    version: str = ""
    replication_user: str = ""
    replication_password: str = ""

    def __post_init__(self) -> None:
        # A service named in the environment has one account: it serves as the replication account too.
        if not self.replication_user:
            object.__setattr__(self, "replication_user", self.user)
            object.__setattr__(self, "replication_password", self.password)

    @property
    def url(self) -> str:
        return _mysql_url(self.user, self.password, self.host, self.port)

    @property
    def replication_url(self) -> str:
        return _mysql_url(self.replication_user, self.replication_password, self.host, self.port)

    def __str__(self) -> str:
        query: dict[str, str] = {"flavor": self.flavor}
        if self.version:
            query["version"] = self.version
        if self.replication_user != self.user or self.replication_password != self.password:
            query["replication_user"] = self.replication_user
            query["replication_password"] = self.replication_password
        return f"{self.url}?{urlencode(query)}"

    @classmethod
    def parse(cls, text: str) -> MySQLService:
        parts = urlsplit(text.strip())
        if parts.scheme != "mysql" or not parts.hostname or parts.username is None:
            raise ConfigError("mysql url", f"expected mysql://user:password@host:port, got {text!r}")
        query = dict(parse_qsl(parts.query))
        flavor = query.get("flavor", "mysql")
        if flavor not in ("mysql", "mariadb"):
            raise ConfigError("mysql url", f"flavor must be mysql or mariadb, got {flavor!r}")
        try:
            port = parts.port or 3306
        except ValueError as exc:
            raise ConfigError("mysql url", f"bad port in {text!r}") from exc
        return cls(
            host=parts.hostname,
            port=port,
            user=unquote(parts.username),
            password=unquote(parts.password or ""),
            flavor="mariadb" if flavor == "mariadb" else "mysql",
            version=query.get("version", ""),
            replication_user=query.get("replication_user", ""),
            replication_password=query.get("replication_password", ""),
        )

    def connect(self, **kw: Any) -> pymysql.connections.Connection:
        """A PyMySQL connection (autocommit, utf8mb4); ``kw`` overrides any argument, e.g. ``database``."""
        args: dict[str, Any] = {
            "host": self.host,
            "port": self.port,
            "user": self.user,
            "password": self.password,
            "autocommit": True,
            "charset": "utf8mb4",
            "connect_timeout": 10,
        }
        args.update(kw)
        return pymysql.connect(**args)

    def connect_replication(self, **kw: Any) -> pymysql.connections.Connection:
        return self.connect(user=self.replication_user, password=self.replication_password, **kw)

    def with_server_info(self) -> MySQLService:
        """Ask the server what it is, and return a copy with ``flavor`` and ``version`` filled in."""
        with contextlib.closing(self.connect()) as conn, conn.cursor() as cur:
            cur.execute("SELECT VERSION()")
            row = cur.fetchone()
        version = str(row[0]) if row else ""
        flavor: Flavor = "mariadb" if "mariadb" in version.lower() else "mysql"
        return replace(self, flavor=flavor, version=version)


def _mysql_url(user: str, password: str, host: str, port: int) -> str:
    return f"mysql://{quote(user, safe='')}:{quote(password, safe='')}@{host}:{port}"


def _check_hosts(key: str, text: str) -> str:
    text = text.strip()
    for hostport in text.split(","):
        host, _, port = hostport.rpartition(":")
        if not host or not port.isdigit():
            raise ConfigError(key, f"expected host:port[,host:port...], got {text!r}")
    return text


@dataclass(frozen=True)
class KafkaService:
    """A Kafka-protocol cluster; the text form is the bootstrap list ``host:port[,host:port]``."""

    bootstrap_servers: str

    def __str__(self) -> str:
        return self.bootstrap_servers

    @classmethod
    def parse(cls, text: str) -> KafkaService:
        return cls(_check_hosts("kafka bootstrap servers", text))

    def client_config(self) -> dict[str, str | int | float | bool]:
        """The librdkafka settings every client needs; callers copy it and add their own."""
        return {"bootstrap.servers": self.bootstrap_servers}


@dataclass(frozen=True)
class ZooKeeperService:
    """A ZooKeeper ensemble; the text form is kazoo's connection string ``host:port[,host:port]``."""

    hosts: str

    def __str__(self) -> str:
        return self.hosts

    @classmethod
    def parse(cls, text: str) -> ZooKeeperService:
        return cls(_check_hosts("zookeeper hosts", text))
