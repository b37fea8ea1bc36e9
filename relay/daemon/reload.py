"""Hot reload, from the publish loop's side: which mapping the relay publishes under, and when it switches.

Owns ``HotReload``: the mapping in use and the record encoder that applies it, the watcher of
``mapping.store`` (``mapping.watch``), a version waiting for a batch boundary, the switch rule
(``SwitchGate``), a switch that first moves tables' history to another topic (``relay.daemon.moves``),
and resuming under the mapping version the saved position names (a column hash's salt variable
unset refuses the start, and a version). Runs on the publisher thread (``Relay.run``); the watcher
reads the store on its own schedule but is only polled from here.

The contract: a new mapping version in ``mapping.store`` is switched to at a batch boundary, when no
batch is in flight and a rolled-back range has been re-delivered under the old one (the rule is in
``mapping.watch``), so no change is published under both; an invalid version is refused and logged.
The saved position names the mapping version of what follows it; a relay that starts or is elected
resumes under that version and switches to the current one by the same rule (``resume``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from mapping import Mapping
from mapping.watch import MappingWatcher, Refusal, SwitchGate, check_against_tables
from relay.common.binlog_names import file_order
from relay.config.load import RelayConfig
from relay.daemon.fence import Fence
from relay.daemon.mapping_report import MappingState
from relay.daemon.moves import MoveSwitch
from relay.errors import InvalidMappingError, MappingError
from relay.kafka.codec import RecordEncoder
from relay.kafka.columns import known_problems, salt_problems
from relay.kafka.history import MovePlan, TableMove
from relay.kafka.publisher import KafkaPublisher
from relay.source.instance import CanalInstance

log = logging.getLogger(__name__)


class HotReload:
    """The mapping a relay publishes under and its switches to new versions, for the publisher thread.

    ``read_mapping``: reads the mapping store's current mapping (None) or a version of its history (a
    number); None: the relay keeps the mapping it was given and cannot resume another. ``open_watcher``:
    opens the watcher once this process leads (None, or returning None: no hot reload). ``open_move``:
    starts the history copy of a switch that moves tables (None: ``mapping.move: switch``).
    ``on_switch(old, new)``: told after every switch (on-demand snapshots of newly routed tables).
    """

    def __init__(
        self,
        config: RelayConfig,
        mapping: Mapping,
        instance: CanalInstance,
        publisher: KafkaPublisher,
        fence: Fence,
        *,
        read_mapping: Callable[[int | None], Mapping] | None = None,
        open_watcher: Callable[[Mapping], MappingWatcher | None] | None = None,
        open_move: Callable[[MovePlan], TableMove] | None = None,
        on_switch: Callable[[Mapping, Mapping], None] | None = None,
    ) -> None:
        self.config, self.mapping = config, mapping
        self._instance, self._publisher, self._fence = instance, publisher, fence
        self._read_mapping, self._open_watcher, self._on_switch = read_mapping, open_watcher, on_switch
        self.watcher: MappingWatcher | None = None  # opened by ``start``
        self._encoder: RecordEncoder | None = None
        self._gate = SwitchGate()
        self._pending: Mapping | None = None  # a version waiting for the pipeline to be quiet
        # A switch that moves tables to another topic waits for their history to be copied there.
        self.moves = MoveSwitch(open_move, self._move_tables, config.source_id)
        self._checked: Mapping | None = None  # the pending version last checked against the live tables
        self._refusal: Refusal | None = None  # a version refused with no watcher to keep the record
        # Resuming under the mapping version the saved position names (``resume``): the source's binlog
        # end when this process started, past which no earlier process can have read.
        self._tail_end: tuple[str, int] | None = None

    # -- start and stop --------------------------------------------------------------------------
    def start(self) -> None:
        """Once this process leads and its instance runs: resume, open the watcher."""
        self.resume()
        if self._open_watcher is not None:
            self.watcher = self._open_watcher(self.mapping)

    def close(self) -> None:
        """Stop a history copy under way and close the watcher's store."""
        self.moves.abandon()
        if self.watcher is not None:
            self.watcher.store.close()

    def initial_topics(self) -> list[str]:
        """The topics to check (or create) before the first batch."""
        topics = list(self.mapping.topic_names())
        if self.config.kafka.ddl_topic:
            topics.append(self.config.kafka.ddl_topic)
        if self.config.kafka.transaction_topic:
            topics.append(self.config.kafka.transaction_topic)
        return topics

    def encoder(self) -> RecordEncoder:
        """The encoder of the mapping in use for the instance's current source (a new one after a
        MySQL failover: the records name the standby)."""
        encoder = self._encoder
        if encoder is None or encoder.source != self._instance.source.identity:
            encoder = self._encoder = RecordEncoder(
                self.mapping,
                self._instance.source.identity,
                ddl_topic=self.config.kafka.ddl_topic,
                partitions=self._publisher.partitions,
                source_id=self.config.source_id,
            )
        return encoder

    def _last_encoder(self) -> RecordEncoder:
        """The encoder the last batch was encoded with: its tables are the ones published so far."""
        return self._encoder if self._encoder is not None else self.encoder()

    def state(self) -> MappingState:
        """The mapping in use, the one waiting for a batch boundary, the last refused and why."""
        watcher = self.watcher
        refused = watcher.refusal if watcher is not None and watcher.refusal is not None else self._refusal
        return MappingState(
            self.mapping.version,
            None if self._pending is None else self._pending.version,
            refused,
            None if watcher is None else watcher.store_error,
        )

    def rolled_back(self, get_sequence: int) -> None:
        """Right before the store is rolled back: that range is re-delivered under this mapping first."""
        self._gate.rolled_back(get_sequence)

    # -- resuming --------------------------------------------------------------------------------
    def resume(self) -> None:
        """Start publishing under the mapping version the saved position names, switching to the
        current one later, at a batch boundary, by the hot-reload rule (``mapping.watch``).

        The current mapping is read again here, when this process starts to lead — a standby elected
        days after it started does not lead with the mapping it read then, whether or not
        ``mapping.reload`` is on. When the saved position names another version, the records after it
        that the previous process may have published (at most a store's worth of entries, and nothing
        past the source's binlog end as it is now) are published again under that version, byte for
        byte; the switch comes after them. A version the store no longer has stops the relay (fail
        closed): ``relay positions set`` starts afresh under the current mapping.
        """
        current = self.mapping if self._read_mapping is None else self._read_mapping(None)
        if current != self.mapping:
            log.info(
                "mapping version %d is current (this process read %d)", current.version, self.mapping.version
            )
        saved = self._instance.saved_point
        named = saved.mapping_version if saved is not None else None
        self.mapping = current
        salts = salt_problems(current)  # a hash without its salt: refuse to start (fail closed)
        if salts:
            raise InvalidMappingError(f"mapping version {current.version}", salts)
        if named is not None and named != current.version:
            self.mapping = self._named_version(named, current)
            self._pending = current
            self._gate.resumed(self._instance.store.config.buffer_size)
            info = self._instance.info
            self._tail_end = info.end if info is not None else None
            log.info(
                "resuming under mapping version %d (named by the saved position %s); switching to version "
                "%d once what an earlier process may have published after it is published again",
                named,
                saved,
                current.version,
            )
        self._instance.publish_under(self.mapping.version)

    def _named_version(self, named: int, current: Mapping) -> Mapping:
        """The version the saved position names, from the mapping store (fail closed without it)."""
        saved = self._instance.saved_point
        if self._read_mapping is None:
            raise MappingError(
                "mapping.version",
                f"the saved position {saved} was published under mapping version {named}; "
                f"this relay has only version {current.version}",
            )
        try:
            return self._read_mapping(named)
        except MappingError as exc:
            if exc.retriable:
                raise
            raise MappingError(
                "mapping.version",
                f"the saved position {saved} names mapping version {named}, which the mapping store "
                f"cannot give ({exc}); to start afresh under version {current.version}, move the "
                "position with `relay positions set`",
            ) from exc

    def _tail_covered(self) -> None:
        """Resuming: the tail is covered once the saved position reaches the binlog end seen at start."""
        end, saved = self._tail_end, self._instance.last_saved
        if end is None or saved is None or saved.source != self._instance.source.identity:
            return
        if (file_order(saved.journal), saved.offset) >= (file_order(end[0]), end[1]):
            self._gate.tail_covered()
            self._tail_end = None

    # -- switching -------------------------------------------------------------------------------
    def ready(self) -> bool:
        """At a batch boundary: switch to a new mapping version when the rule allows. Returns False
        while a pending switch waits for the batches in flight to drain: no new batch is taken then,
        so every batch is encoded under one mapping and none under both."""
        if self.watcher is not None:
            new = self.watcher.poll()
            if new is not None:
                self._pending = new
        if self._pending is None:
            return True
        self._tail_covered()
        if not self._history_copied(self._pending) or self._pending is None:
            return True  # the moved tables' history is still being copied (or the version was refused)
        ack = self._instance.acked_sequence
        if self._gate.may_switch(self._publisher.inflight(), ack):
            if not self.moves.finished():
                return False  # nothing in flight: the copy takes the last records, no batch is taken
            self._switch(self._pending)
            return True
        return not self._gate.hold_new_batches(True, ack)

    def _history_copied(self, new: Mapping) -> bool:
        """A version that moves tables to another topic waits until their history has been copied
        there (``relay.daemon.moves``); one that cannot be used for the live tables is refused first."""
        if self._checked is not new:  # once per pending version (``_switch`` checks again)
            self._checked = new
            problem = _problem(new, self._last_encoder())
            if problem is not None:
                self._refuse(new, problem)
                return True
        try:
            return self.moves.may_switch(self.mapping, new, self._instance.saved_point)
        except InvalidMappingError as exc:
            self._refuse(new, exc)
            return True

    def _move_tables(self) -> list[tuple[str, str]]:
        """The physical tables a move is planned over: the source's captured tables and the tables
        published since the last switch (a dropped one still has history)."""
        known = [(db, table) for db, table, _ in self._last_encoder().known_tables()]
        return [*self._instance.captured_tables(), *known]

    def _switch(self, new: Mapping) -> None:
        """Swap the mapping (nothing in flight), or refuse it when it fails on the tables seen so far."""
        encoder = self._last_encoder()
        problem = _problem(new, encoder)
        if problem is not None:
            self._refuse(new, problem)
            return
        self._publisher.ensure_topics(new.topic_names())  # may raise a retriable error: stays pending
        self._fence.check()
        self._instance.publish_under(new.version)  # a restart from here publishes under ``new``
        old, encoder.mapping, self.mapping = self.mapping, new, new
        self._pending = None
        self.moves.switched()
        if self._on_switch is not None:
            self._on_switch(old, new)
        if self.watcher is not None:
            self.watcher.accept(new)
        else:
            log.info("mapping switched from version %d to version %d", old.version, new.version)

    def _refuse(self, new: Mapping, problem: MappingError) -> None:
        """Keep the current mapping: ``new`` cannot be used (logged once; the status shows it)."""
        self._pending = None
        self.moves.refused()
        if self.watcher is not None:
            self.watcher.refuse(new, problem)
        else:
            self._refusal = Refusal.of(new.version, problem)
            log.error(
                "refused mapping version %d; keeping version %d: %s",
                new.version,
                self.mapping.version,
                problem,
            )


def _problem(new: Mapping, encoder: RecordEncoder) -> InvalidMappingError | None:
    """Why ``new`` cannot be switched to: what it gives on the tables seen so far (``check_against_tables``),
    its column controls on their columns, or a salt of its column hashes missing from the environment."""
    problem = check_against_tables(new, encoder.known_tables())
    more = [*known_problems(new, encoder.known_columns()), *salt_problems(new)]
    if not more:
        return problem
    return InvalidMappingError(
        f"mapping version {new.version}", [*(problem.errors if problem else ()), *more]
    )
