"""One exception root for the whole project, one subclass per stage.

Every class says whether retrying can help (``retriable``): the caller decides what to do from that
flag alone, never from the message text. Foreign exceptions (PyMySQL, confluent-kafka, kazoo) are
translated into these at the boundary where the foreign library is called (``raise ... from exc``).
"""

from __future__ import annotations


class RelayError(Exception):
    """Root of every error this project raises on purpose."""

    retriable: bool = False


class ConfigError(RelayError):
    """A configuration value is missing or wrong; the message names the key. Never retriable."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key}: {problem}")
        self.key = key
        self.problem = problem


class SourceError(RelayError):
    """The MySQL source cannot be read as configured (server settings, purged binlog, bad position).

    Not retriable: a person has to change the server or the configuration; the message says what.
    """


class SourceConnectionError(SourceError):
    """The replication connection was lost or refused; reconnecting after a backoff may help."""

    retriable = True


class SourceUnavailableError(SourceError):
    """Reconnecting to the server ran out of its retry budget; with a standby configured, fail over to it."""


class DecodeError(SourceError):
    """A binlog event could not be decoded. Not retriable: reading it again gives the same bytes."""


class StoreError(RelayError):
    """Misuse of the ring store (bad sizes, ack beyond what was read)."""


class ServerError(RelayError):
    """Misuse of the streaming API: unknown batch id, acks out of order."""


class PositionError(RelayError):
    """A saved position cannot be read or written."""


class PositionConflictError(PositionError):
    """A compare-and-set on a position lost against another writer."""


class ServiceError(RelayError):
    """A local service (MariaDB, broker, ZooKeeper) for development or tests could not be provided."""


class MappingError(RelayError):
    """A mapping is invalid; the message names the offending key path. Never retriable."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key}: {problem}")
        self.key = key
        self.problem = problem


class PublishError(RelayError):
    """Kafka did not accept a batch (broker down, timeout, leader change): retrying after a backoff helps."""

    retriable = True


class RecordRejectedError(PublishError):
    """Kafka will never accept this record (too large, not authorized, unknown topic with creation off).

    Not retriable: the relay stops with this message, or routes the record to the dead-letter topic.
    """

    retriable = False

    def __init__(
        self,
        message: str,
        *,
        topic: str,
        key: bytes | None,
        size: int,
        reason: str,
        partition: int | None = None,
    ) -> None:
        super().__init__(message)
        self.topic = topic
        self.key = key
        self.size = size
        self.reason = reason
        self.partition = partition  # None: not assigned yet when it was refused


class LeadershipError(RelayError):
    """This process is not (or no longer) the active relay: stop publishing and acking."""
