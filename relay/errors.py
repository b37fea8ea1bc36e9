"""One exception root for the whole project, one subclass per stage — every class the project raises.

Every class says whether retrying can help (``retriable``, a class attribute: a retriable condition is a
subclass of its own): the caller decides what to do from the class alone, never from the message text.
Foreign exceptions (PyMySQL, confluent-kafka, kazoo) are translated into these at the boundary where the
foreign library is called (``raise ... from exc``). Errors that concern a configuration or mapping key
carry it (``key``) as given by the validator that checked it.

The stages, in data-flow order: config, source (binlog), canal store and server, positions, mapping,
Kafka (codec, publish), HA, Spark readers, development services.
"""

from __future__ import annotations

from collections.abc import Iterable


class RelayError(Exception):
    """Root of every error this project raises on purpose."""

    retriable: bool = False


# --- configuration -------------------------------------------------------------------------------


class ConfigError(RelayError):
    """A configuration value is missing or wrong; ``key`` names it (``source.port``). Never retriable."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key}: {problem}")
        self.key = key
        self.problem = problem


def problems_text(errors: tuple[ConfigError, ...] | tuple[MappingError, ...]) -> str:
    """One problem on the same line (``key: problem``); several as a count and one line each."""
    if len(errors) == 1:
        return str(errors[0])
    lines = "\n".join(f"  - {err}" for err in errors)
    return f"{len(errors)} problems:\n{lines}"


class InvalidConfigError(ConfigError):
    """Every problem found in a configuration at once. ``errors`` holds one ``ConfigError`` per problem,
    each naming its key path; ``key`` names the source (the file, or ``config``)."""

    def __init__(self, source: str, errors: Iterable[ConfigError]) -> None:
        flat: list[ConfigError] = []
        for err in errors:
            flat.extend(err.errors if isinstance(err, InvalidConfigError) else (err,))
        self.errors: tuple[ConfigError, ...] = tuple(flat)
        super().__init__(source, problems_text(self.errors))

    @staticmethod
    def raise_all(errors: Iterable[ConfigError], source: str = "config") -> None:
        """Nothing when ``errors`` is empty; the one error; else all of them as one ``InvalidConfigError``."""
        found = list(errors)
        if len(found) == 1 and not isinstance(found[0], InvalidConfigError):
            raise found[0]
        if found:
            raise InvalidConfigError(source, found)


class ArgumentError(ConfigError):
    """A command-line value is wrong (``--start-position f:abc``); ``key`` names the option. Never
    retriable: the command stops before doing anything, with exit status 2."""


# --- the MySQL source ----------------------------------------------------------------------------


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


class SchemaError(SourceError):
    """The schema history cannot give a table's definition exactly: a DDL the parser cannot apply, a
    TABLE_MAP that differs from the history, a table it never saw. Not retriable: reading the same
    binlog again gives the same answer; ``relay schema resync`` repairs the table's entry."""


class UnappliedDdlError(SchemaError):
    """A statement that changes a table's definition but could not be applied (``relay.schema.ddl``);
    ``tables`` names them. The schema tracker records them as broken from there (what it raises then, on
    their next TABLE_MAP, is a ``SchemaError``)."""

    def __init__(self, reason: str, tables: tuple[tuple[str, str], ...]) -> None:
        super().__init__(reason)
        self.reason = reason
        self.tables = tables


class TableMapMismatchError(SchemaError):
    """The schema history and a TABLE_MAP disagree; the text says how. The tracker learns the table from
    the event (full metadata, mode auto) or raises a ``SchemaError`` naming the table and the place."""


class NoSuchTableError(SourceError):
    """The table is gone (dropped or renamed since the snapshot listed it)."""


class IncompleteRowImageError(SourceError):
    """A rows event whose before or after image lacks columns (the writing session used
    ``binlog_row_image=MINIMAL`` or ``NOBLOB``): the change cannot be published exactly.

    Not retriable: re-reading the event gives the same image. ``where`` is the event's
    ``file:offset`` (filled in by the parser, which knows it).
    """

    def __init__(self, table: str, image: str, missing: tuple[str, ...], where: str = "") -> None:
        self.table = table
        self.image = image
        self.missing = missing
        self.where = where
        at = f"{where}: " if where else ""
        super().__init__(
            f"{at}the rows event for {table} has an incomplete {image} image: column(s) "
            f"{', '.join(missing)} missing (the session that wrote it had binlog_row_image=MINIMAL or "
            "NOBLOB). The relay publishes only complete changes and stops here; nothing of this "
            "transaction was published and the saved position stays before it. Fix: set "
            "binlog_row_image=FULL for that session/user (and globally); this transaction cannot be "
            "re-read any other way, so re-snapshot the affected rows and move the position past it "
            "with `relay positions set`"
        )

    def at(self, where: str) -> IncompleteRowImageError:
        """The same error, located at ``where`` (``file:offset``)."""
        return IncompleteRowImageError(self.table, self.image, self.missing, where)


class StatementDmlError(SourceError):
    """A data change logged as an SQL statement (``binlog_format=STATEMENT``, or MIXED choosing a
    statement) in a captured schema: its rows are not in the binlog, so they cannot be published.

    Not retriable: re-reading gives the same statement. ``source.statement_dml: skip`` lets it pass
    to the DDL audit topic only.
    """


class XaBufferFullError(SourceError):
    """Prepared-but-undecided XA transactions hold more entry bytes than ``source.xa_buffer_bytes``.

    Not retriable as such: re-reading buffers the same transactions again. Raise the limit, or decide
    (XA COMMIT / XA ROLLBACK) the transactions the message names.
    """


# --- canal's store and server ---------------------------------------------------------------------


class StoreError(RelayError):
    """Misuse of the ring store (bad sizes, ack beyond what was read)."""


class StoreClosedError(StoreError):
    """The store was closed: the thread that got this should stop."""

    def __init__(self) -> None:
        super().__init__("closed")


class ServerError(RelayError):
    """Misuse of the streaming API: unknown batch id, acks out of order."""


class ProtoDecodeError(RelayError):
    """Bytes that are not the canal message they should be. Not retriable: the bytes stay the same."""


# --- positions ------------------------------------------------------------------------------------


class PositionError(RelayError):
    """A saved position cannot be read or written."""


class PositionConflictError(PositionError):
    """A compare-and-set on a position lost against another writer."""


# --- mapping --------------------------------------------------------------------------------------


class MappingError(RelayError):
    """A mapping is invalid; ``key`` names the offending key path. Never retriable."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key}: {problem}")
        self.key = key
        self.problem = problem


class InvalidMappingError(MappingError):
    """Every problem found in a mapping at once. ``errors`` holds one ``MappingError`` per problem,
    each naming its YAML key path; ``key`` names the source (file, node, ``mapping``); ``version`` the
    version the text says it is, when it says one (what a relay reports as refused)."""

    def __init__(self, source: str, errors: Iterable[MappingError], *, version: int | None = None) -> None:
        flat: list[MappingError] = []
        for err in errors:
            flat.extend(err.errors if isinstance(err, InvalidMappingError) else (err,))
        self.errors: tuple[MappingError, ...] = tuple(flat)
        self.version = version
        super().__init__(source, problems_text(self.errors))


class MappingConflictError(MappingError):
    """A compare-and-set lost: the stored mapping changed since the edit read it. Nothing was stored;
    read the new version and edit again."""


class MappingStoreError(MappingError):
    """The store cannot be read or written (I/O, permissions, a node that is not a mapping)."""


class MappingStoreUnavailableError(MappingStoreError):
    """The store's server (ZooKeeper) did not answer; trying again later may help."""

    retriable = True


# --- Kafka ----------------------------------------------------------------------------------------


class CodecError(RelayError):
    """A change cannot be encoded (a topic without partitions…). Not retriable: the input stays the same."""


class SequenceError(CodecError):
    """A binlog position cannot be turned into a sequence (no numeric file suffix, offset ≥ 2^32)."""


class PublishError(RelayError):
    """Kafka did not accept a batch (broker down, timeout, leader change): retrying after a backoff helps."""

    retriable = True


class MissingTopicError(PublishError):
    """A topic the relay publishes to does not exist and ``topics.create`` is off. Retriable: the batch is
    rolled back and sent again after the ``publish.retry`` backoff (a metadata glitch passes; a topic
    that is really gone waits for an operator to create it). Never a rejection of the records."""


class ProducerFatalError(PublishError):
    """The producer instance is unusable (fenced, an unrepairable sequence gap): stop. Not retriable."""

    retriable = False


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


# --- high availability and ZooKeeper -------------------------------------------------------------


class ZooKeeperUnavailableError(RelayError):
    """ZooKeeper did not answer in time (connect, session); trying again later may help."""

    retriable = True


class LeadershipError(RelayError):
    """This process is not (or no longer) the active relay: stop publishing and acking."""


class LeadershipUnavailableError(LeadershipError):
    """Leadership cannot be decided now (ZooKeeper unreachable); a later attempt may be elected."""

    retriable = True


class ProducerFencedError(ProducerFatalError, LeadershipError):
    """Transactional mode: a newer producer with this ``transactional.id`` (a successor relay) fenced ours.

    Both a fatal producer error and the end of this relay's term: ``relay run`` exits with status 3 as
    when ZooKeeper leadership is lost, and nothing is acked after it (the transaction never commits).
    """


# --- the cluster: instances as data, placed over nodes -----------------------------------------


class ClusterError(RelayError):
    """The cluster's stored data refuses a request (``relay.cluster``): an instance that exists already,
    a definition that is not stored, an unknown version. Not retriable as such: the message says why."""


class InstanceNotFoundError(ClusterError):
    """No instance of that name is defined (never added, or removed); the message lists the ones that are."""


class InstanceConflictError(ClusterError):
    """The stored definition changed since the edit read it (another edit won the compare-and-set);
    nothing of this edit was stored. Read it again and redo the edit."""


class ClusterUnavailableError(ClusterError):
    """ZooKeeper, where the cluster's data lives, did not answer; trying again later may help."""

    retriable = True


# --- Spark readers ---------------------------------------------------------------------------------


class SparkSourceError(RelayError):
    """The ``relay-kafka`` source cannot read as asked (bad option, lost data, broker trouble)."""


class OptionError(SparkSourceError):
    """An option value is wrong; the message names the option. Never retriable."""


class MirrorDdlError(SparkSourceError):
    """A schema change the mirror cannot apply so that its rows equal the source's (an expression default,
    a narrowing type change; ``relay.spark.ddl``): the message names the table and the statement. The
    mirror stops before writing anything of the batch. Never retriable."""


class CutError(SparkSourceError):
    """No consistent cut of a mirror can be given as asked (none complete yet, a cut across sources, a
    source without transaction boundaries, a table written without them); the message says which and what
    to change. Never retriable as asked (a later call may find a newer cut)."""


class DataLossError(SparkSourceError):
    """Records the query needs are gone (deleted by retention, topic recreated). Never retriable;
    ``failOnDataLoss=false`` turns it into a warning and reading goes on from what is retained."""


# --- development services, demo, benchmark --------------------------------------------------------


class SnapshotRequestError(RelayError):
    """``relay snapshot run|cancel`` got no answer or a refusal from the running relay (none runs, a
    snapshot is already running, the table is unknown). Not retriable as such: the message says why."""


class VerifyError(RelayError):
    """``relay verify`` could not compare (the source, the topic or the mirror could not be read, the relay
    names no position, a table is unknown). Not retriable as such: the message says what and where. A
    difference found is no error: it is the report's finding (exit status 1)."""


class ReplayGapError(RelayError):
    """``relay replay``: records a checkpoint still needed were deleted (retention, DeleteRecords) before they
    were replayed. Not retriable: the message names each gap and the two ways on (``--accept-gaps``,
    ``--restart``)."""


class ConsoleError(ConfigError):
    """``relay console`` cannot start or do what was asked: a bad option, users file or address to bind, a
    user unknown to the users file; ``key`` names the option or field to fix. Never retriable."""


class ServiceError(RelayError):
    """A local service (MariaDB, broker, ZooKeeper) for development or tests could not be provided."""


class JarsError(RelayError):
    """Java artifacts (relay.common.jars) are unknown, not resolved yet, or Maven could not resolve them; the
    message names the command that resolves them."""


class PortInUseError(ServiceError):
    """The free port we picked was taken before the server bound it; starting again on another helps."""

    retriable = True


class DemoError(RelayError):
    """The demo could not finish (the relay failed or did not catch up, a topic stayed short)."""


class BenchError(RelayError):
    """The benchmark could not measure something (a worker failed, a service did not start)."""
