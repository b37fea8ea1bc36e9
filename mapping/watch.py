"""Hot reload: notice a new mapping version in a store, validate it, and say when it may be switched to.

Owns ``MappingWatcher`` (polled by the relay's publisher thread at each batch boundary: a cheap
fingerprint compare — a ``stat`` of the file, or the node version kazoo's data watch recorded — and a
read + validation only when it changed) and ``SwitchGate`` (the rule for WHEN a relay may switch).
Hands the relay a validated ``Mapping``; an invalid or unreadable new version is logged once, naming
the offending keys, and the relay keeps the mapping it has (fail closed: it never guesses).

The switch rule, "no record is published under both mappings": a batch is encoded entirely under one
mapping, and the relay switches only when the pipeline is quiet —

1. no batch is in flight (every record sent under the old mapping has been delivered and acked), and
2. everything taken from the store before the last rollback has been acknowledged again — and, after
   a restart or takeover under the version the saved position names (``ResumePoint.mapping_version``),
   everything the previous process can have published past that position (``SwitchGate.resumed``).

Rule 2 matters because a batch that failed may have been partly delivered before it was rolled back:
re-encoding it under the new mapping would put some of its changes in the old topic AND the new one.
So after a rollback the relay re-delivers the rolled-back range under the old mapping first (a
re-publication to the same topic with the same sequence, which consumers de-duplicate), and switches
after. While a switch is pending and the range is settled, the relay takes no new batch, so the
batches in flight drain and the switch happens within about one delivery round trip.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from mapping.diff import logical_changes
from mapping.model import Mapping, route_codec_conflicts
from mapping.store import MappingStore, keep_version
from relay.errors import InvalidMappingError, MappingError

__all__ = ["MappingWatcher", "Refusal", "SwitchGate", "check_against_tables"]

log = logging.getLogger(__name__)
_UNREAD = object()


@dataclass(frozen=True)
class Refusal:
    """A mapping version a relay refused and kept running without: what ``relay status``, the status
    file, the metrics and ``relay mapping history`` show. ``version`` None: the text says none (or
    cannot be read far enough to say)."""

    version: int | None
    reason: str
    at: float  # wall time

    @classmethod
    def of(cls, version: int | None, error: MappingError) -> Refusal:
        return cls(version, str(error), time.time())

    def to_dict(self) -> dict[str, Any]:
        return {"version": self.version, "reason": self.reason, "at": self.at}

    @classmethod
    def from_dict(cls, data: object) -> Refusal | None:
        if not isinstance(data, dict) or not isinstance(data.get("reason"), str):
            return None
        version = data.get("version")
        at = data.get("at")
        return cls(
            version if isinstance(version, int) else None,
            str(data["reason"]),
            float(at) if isinstance(at, int | float) else 0.0,
        )

    def summary(self) -> str:
        """One line: ``version 4 at 2026-…: <every problem, joined>``."""
        what = f"version {self.version}" if self.version is not None else "a new version"
        when = time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(self.at)) if self.at else "?"
        reason = " ".join(line.strip() for line in self.reason.splitlines() if line.strip())
        return f"{what} at {when}: {reason}"


class MappingWatcher:
    """Watches one store on behalf of one relay. Not thread-safe: one caller thread (the relay's)."""

    def __init__(
        self,
        store: MappingStore,
        current: Mapping,
        *,
        interval_seconds: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self._current = current
        self._interval = interval_seconds
        self._clock = clock
        self._next_check = 0.0
        # Unread: the first check reads the store, so a version stored between the relay's own read
        # and this watcher's start is not missed (an equal mapping is no switch).
        self._fingerprint: object = _UNREAD
        store.fingerprint()  # start watching now (a ZooKeeper data watch)
        self._refused: object = None  # the fingerprint of a version already reported as invalid
        self.rejected: MappingError | None = None  # why the stored version is not used (None: it is)
        self.refusal: Refusal | None = None  # the last version refused, kept after later switches
        self.store_error: str | None = None  # the store could not be read at the last check

    def current(self) -> Mapping:
        return self._current

    def poll(self) -> Mapping | None:
        """A new, valid mapping different from the current one, or None. Cheap when nothing changed."""
        now = self._clock()
        if now < self._next_check:
            return None
        self._next_check = now + self._interval
        fingerprint = self.store.fingerprint()
        if fingerprint == self._fingerprint:
            return None
        if fingerprint is None:  # nothing stored (file or node absent): keep what runs, say so once
            self._fingerprint = None
            log.warning("no mapping in %s; keeping version %d", self.store.name, self._current.version)
            return None
        try:
            new = self.store.read()
        except MappingError as exc:
            self._refuse(fingerprint, exc)
            return None
        self._fingerprint = fingerprint
        self.rejected = None
        self.store_error = None
        if new == self._current:
            return None
        keep_version(self.store, new, "read by a relay")  # so a restart can resume under it
        return new

    def refuse(self, new: Mapping, error: MappingError) -> None:
        """The relay found ``new`` unusable for its live tables: keep the current one, say why once."""
        self.rejected = error
        self.refusal = Refusal.of(new.version, error)
        log.error(
            "refused mapping version %d from %s; keeping version %d: %s",
            new.version,
            self.store.name,
            self._current.version,
            error,
        )

    def accept(self, new: Mapping) -> None:
        """The relay switched to ``new``: log old → new version and what changed."""
        old = self._current
        self._current = new
        log.info(
            "mapping switched from version %d to version %d (%s)", old.version, new.version, self.store.name
        )
        for line in logical_changes(old, new):
            log.info("mapping change: %s", line)

    def _refuse(self, fingerprint: object, exc: MappingError) -> None:
        self.rejected = exc
        if exc.retriable:  # the store is unreachable: try again at the next check, say so once
            self.store_error = str(exc)
            if self._refused != ("unreachable",):
                log.warning(
                    "cannot read the mapping from %s, keeping version %d: %s",
                    self.store.name,
                    self._current.version,
                    exc,
                )
                self._refused = ("unreachable",)
            return
        self._fingerprint = fingerprint  # do not re-read the same bad version at every check
        self.store_error = None
        if self._refused != fingerprint:
            self.refusal = Refusal.of(getattr(exc, "version", None), exc)
            log.error(
                "refused the new mapping in %s; keeping version %d: %s",
                self.store.name,
                self._current.version,
                exc,
            )
            self._refused = fingerprint


class SwitchGate:
    """When a relay may switch mappings (see the module docstring). Store sequences, not batch ids."""

    def __init__(self) -> None:
        self._settle_to = -1  # the highest store get sequence taken before the last rollback
        self._tail = -1  # the last store sequence of a previous process's possible tail (``resumed``)

    def rolled_back(self, get_sequence: int) -> None:
        """Call right before rolling the store back, with the store's get sequence at that moment."""
        self._settle_to = max(self._settle_to, get_sequence)

    def resumed(self, tail_entries: int) -> None:
        """A relay (re)started under the mapping version its saved position names, with another one
        pending. The process before it may have published up to ``tail_entries`` entries past that
        position (its store's capacity) under that version: they are re-delivered under it first, as
        after a rollback (rule 2), unless ``tail_covered`` says the tail is shorter."""
        self._tail = max(self._tail, tail_entries - 1)

    def tail_covered(self) -> None:
        """Everything the previous process can have read is acknowledged again (the position reached
        the source's binlog end as it was when this process started)."""
        self._tail = -1

    def settled(self, ack_sequence: int) -> bool:
        """Everything taken before the last rollback, and a previous process's tail, has been
        acknowledged again."""
        return ack_sequence >= self._settle_to and ack_sequence >= self._tail

    def may_switch(self, inflight: int, ack_sequence: int) -> bool:
        return inflight == 0 and self.settled(ack_sequence)

    def hold_new_batches(self, pending: bool, ack_sequence: int) -> bool:
        """With a switch pending: stop taking batches once the rolled-back range is settled, so that
        the batches in flight drain. Before that, batches must still be taken to re-deliver it."""
        return pending and self.settled(ack_sequence)


def check_against_tables(
    new: Mapping, tables: Iterable[tuple[str, str, Sequence[str] | None]]
) -> InvalidMappingError | None:
    """What static checks cannot see: the tables the relay already publishes, resolved under ``new`` —
    a table two logical tables now claim, a topic template that expands to a bad name, a key column
    (or ``key_shard`` column) the table lacks. ``tables`` are (db, table, column names or None when
    unknown), and two of them now in one topic with different codecs. None: all fine."""
    errors: list[MappingError] = []
    routes = []
    for db, table, columns in tables:
        try:
            route = new.resolve(db, table)
            if route is not None and columns is not None:
                route.check_columns(columns)
                route.check_shard_column(columns)
            if route is not None:
                routes.append(route)
        except MappingError as exc:
            errors.extend(getattr(exc, "errors", (exc,)))
    errors.extend(route_codec_conflicts(routes))
    return InvalidMappingError(f"mapping version {new.version}", errors) if errors else None
