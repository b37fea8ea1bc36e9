"""Where a canal instance reads: the source, the server it is on, the start point, the failover filter and
the binlog generation — one small mutable record shared by the parts of ``relay.source.instance``.

Written by the start (caller's thread) and by a failover (parser thread); read by the snapshot control
(publisher thread) and the facade.
"""

from __future__ import annotations

from collections.abc import Callable

from relay.config.sections import SourceConfig
from relay.source.binlog_source import BinlogSource
from relay.source.failover import EntryFilter, standby_config
from relay.source.server import ServerInfo
from relay.source.start_point import StartPoint


class Reading:
    """The server being read and where reading started on it."""

    def __init__(self, config: SourceConfig, source: BinlogSource) -> None:
        self.config = config
        self.source = source
        self.info: ServerInfo | None = None
        self.start_point: StartPoint | None = None
        # What the standby must drop (set once reading the standby; ``relay.source.failover``).
        self.drop: EntryFilter | None = None
        # The binlog history being read (``ResumePoint.generation``): the saved one, + 1 on a failover.
        self.generation = 0
        # A move to a higher generation asked for (a repair of records beyond the relay's position,
        # ``SnapshotControl.request``), made by the parser at a transaction boundary; then ``after_move``.
        self.move_to: int | None = None
        self.after_move: Callable[[], object] | None = None

    def source_config(self) -> SourceConfig:
        """The server the snapshot readers read: the one the parser reads (the standby after a failover).
        On the master with the configured ``source.retry``: a reader that cannot reach it keeps trying
        (not just ``failover.attempts`` times) until the parser fails over and moves the snapshot."""
        if self.drop is not None:
            return standby_config(self.config)
        return self.config
