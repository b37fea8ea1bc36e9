"""Start/stop objects over the ``start_*`` functions, for callers that hold a server as an object (the demo).

Owns ``EmbeddedMySQL``, ``EmbeddedKafka`` and ``EmbeddedZooKeeper``: idempotent ``start`` / ``stop``, the
directory removed on stop by default. Runs on the caller's thread.
"""

from __future__ import annotations

from pathlib import Path
from typing import Generic

from relay.dev.services.endpoints import KafkaService, MySQLService, ZooKeeperService
from relay.dev.services.kafka import start_kafka
from relay.dev.services.launch import Running, S, StartOptions
from relay.dev.services.mariadb import start_mysql
from relay.dev.services.zookeeper import start_zookeeper


class _Embedded(Generic[S]):
    """A start/stop lifecycle over one ``start_*`` function, for callers that hold a server as an object."""

    def __init__(
        self, directory: Path, detached: bool = False, extra_args: tuple[str, ...] = (), timeout: float = 60.0
    ) -> None:
        self.options = StartOptions(Path(directory), detached, timeout, tuple(extra_args))
        self.running: Running[S] | None = None

    def _start(self, opts: StartOptions) -> Running[S]:
        raise NotImplementedError

    def start(self) -> S:
        if self.running is None:
            self.running = self._start(self.options)
        return self.running.service

    def is_started(self) -> bool:
        return self.running is not None and self.running.process.alive()

    def stop(self, remove_dir: bool = True) -> None:
        """Stop the server (idempotent) and, by default, delete its directory."""
        running, self.running = self.running, None
        if running is not None:
            running.stop(remove_dir=remove_dir)


class EmbeddedMySQL(_Embedded[MySQLService]):
    def _start(self, opts: StartOptions) -> Running[MySQLService]:
        return start_mysql(opts)


class EmbeddedKafka(_Embedded[KafkaService]):
    def _start(self, opts: StartOptions) -> Running[KafkaService]:
        return start_kafka(opts)


class EmbeddedZooKeeper(_Embedded[ZooKeeperService]):
    def _start(self, opts: StartOptions) -> Running[ZooKeeperService]:
        return start_zookeeper(opts)
