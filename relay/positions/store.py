"""Resume points and the stores that keep them.

A ``ResumePoint`` is what survives a restart: the binlog place to read again from, and how many
entries of the transaction that starts there were already published (``skip``). Reading from a
transaction's start and skipping is the only safe way to continue inside a transaction (a dump that
starts mid-transaction lacks its TABLE_MAP), and it neither loses nor repeats entries because the
entry builder numbers a transaction's entries the same way every time (``Entry.txn_index``).

``resume_after(entry)`` computes the point after an acknowledged entry. ``FilePositionStore`` writes
it atomically (temp file, fsync, rename, fsync of the directory) as readable JSON. Other backends
(ZooKeeper) implement the same ``PositionStore`` protocol and pass the same contract tests.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from relay.binlog.gtid import GtidSet
from relay.canal.entry import Entry
from relay.common import binlog_names
from relay.common.atomic import atomic_write_text
from relay.errors import PositionError

FORMAT_VERSION = 1
# The generation is the top of a record sequence: 11 bits above the 20-bit file number and the 32-bit
# offset keep the sequence a non-negative signed 64-bit integer (``relay.kafka.codec``).
MAX_GENERATION = (1 << 11) - 1


@dataclass(frozen=True)
class SourceIdentity:
    """Which MySQL server a position belongs to."""

    host: str
    port: int
    server_id: int = 0
    server_uuid: str = ""

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class ResumePoint:
    """Where to continue: read from ``journal``:``offset`` and drop the first ``skip`` entries there.

    ``gtid_set`` is the executed GTID set before ``offset`` where it is known; ``timestamp`` (ms) and
    ``gtid`` describe the last acknowledged entry; ``source`` names the server.

    ``generation`` numbers the binlog history the point belongs to: it goes up by one whenever the relay
    continues on another history (a failover to the standby, ``relay positions set``), and is the top
    of every record sequence (``relay.kafka.codec``), so sequences keep growing across those switches.
    ``mapping_version`` is the mapping version the records after this point were, or will be, published
    under; None: not recorded (positions saved before it existed, or set by an operator). Both default
    so that a point saved by an older relay reads as generation 0 with no mapping version.
    ``xa_journal``:``xa_offset`` (with ``xa_gtid_set``, the GTID set before it), when set, is the start
    of the oldest XA transaction that was prepared but not yet committed or rolled back: its changes
    are published only at its XA COMMIT, so a restart reads again from there, keeps what it must
    (prepared transactions) and drops what was already published (everything up to ``journal``:
    ``offset`` + ``skip``). ``journal``/``offset``/``skip`` always mean "published up to here".
    """

    journal: str
    offset: int
    skip: int = 0
    gtid_set: str | None = None
    gtid: str = ""
    timestamp: int = 0
    server_id: int = 0
    source: SourceIdentity | None = None
    generation: int = 0
    mapping_version: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    xa_journal: str = ""
    xa_offset: int = 0
    xa_gtid_set: str | None = None

    def to_json(self) -> str:
        data = asdict(self)
        data["format"] = FORMAT_VERSION
        return json.dumps(data, indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str, where: str = "position") -> ResumePoint:
        try:
            data = json.loads(text)
            data.pop("format", None)
            src = data.pop("source", None)
            point = cls(**data)
            if src is not None:
                point = replace(point, source=SourceIdentity(**src))
        except (ValueError, TypeError) as exc:
            raise PositionError(f"{where}: not a saved resume point ({exc})") from exc
        if not point.journal or point.offset < 4 or point.skip < 0 or point.generation < 0:
            raise PositionError(f"{where}: journal/offset/skip out of range: {point}")
        return point

    def __str__(self) -> str:
        skip = f"+{self.skip}" if self.skip else ""
        held = f" (read from {self.xa_journal}:{self.xa_offset}: XA prepared)" if self.xa_journal else ""
        return f"{self.journal}:{self.offset}{skip}{held}"

    @property
    def read_from(self) -> ResumePoint:
        """Where reading must start: this point, or the held XA start with nothing to skip there."""
        if not self.xa_journal:
            return self
        return replace(
            self, journal=self.xa_journal, offset=self.xa_offset, skip=0, gtid_set=self.xa_gtid_set
        )


def next_generation(saved: ResumePoint | None) -> int:
    """The generation of a new binlog history continuing after ``saved``: one more than its generation
    (1 when nothing was saved: records of an unacknowledged start may exist under generation 0)."""
    generation = (0 if saved is None else saved.generation) + 1
    if generation > MAX_GENERATION:
        raise PositionError(
            f"generation {generation} is above {MAX_GENERATION}: record sequences cannot order another "
            "binlog history; publish to new topics (and start from generation 0 in a new position store)"
        )
    return generation


def resume_after(entry: Entry) -> ResumePoint:
    """The resume point once ``entry`` and everything before it has been acknowledged."""
    point = _resume_after(entry)
    hold = entry.xa_hold
    if hold is None:
        return point
    return replace(
        point, xa_journal=hold.start.journal, xa_offset=hold.start.offset, xa_gtid_set=hold.gtid_set_before
    )


def already_published(entry: Entry, point: ResumePoint) -> bool:
    """Whether ``entry`` lies before ``point`` (published up to ``journal``:``offset`` + ``skip``).

    Entries are compared by their transaction's start and their index in it, as ``resume_after``
    makes points: a transaction that starts before the point, or the first ``skip`` entries of the
    one that starts at it."""
    start = entry.txn.start
    here = (binlog_names.file_number(start.journal) or 0, start.offset)
    there = (binlog_names.file_number(point.journal) or 0, point.offset)
    return here < there or (here == there and entry.txn_index < point.skip)


def _resume_after(entry: Entry) -> ResumePoint:
    txn = entry.txn
    h = entry.header
    if entry.closes_txn:
        gtid_set = txn.gtid_set_before
        if gtid_set is not None and txn.gtid:
            gs = GtidSet.parse(gtid_set, txn.mariadb)
            gs.add(txn.gtid)
            gtid_set = str(gs)
        return ResumePoint(
            journal=h.logfile_name,
            offset=h.logfile_offset + h.event_length,
            skip=0,
            gtid_set=gtid_set,
            gtid=h.gtid,
            timestamp=h.execute_time,
            server_id=h.server_id,
            generation=entry.generation,
        )
    return ResumePoint(
        journal=txn.start.journal,
        offset=txn.start.offset,
        skip=entry.txn_index + 1,
        gtid_set=txn.gtid_set_before,
        gtid=h.gtid,
        timestamp=h.execute_time,
        server_id=h.server_id,
        generation=entry.generation,
    )


class PositionStore(Protocol):
    """Keeps one instance's resume point. ``save`` is atomic: a reader sees the old or the new point."""

    def load(self) -> ResumePoint | None: ...

    def save(self, point: ResumePoint) -> None: ...

    def describe(self) -> str: ...


class FilePositionStore:
    """A JSON file, replaced atomically on every save."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def describe(self) -> str:
        return f"file {self.path}"

    def load(self) -> ResumePoint | None:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise PositionError(f"cannot read position file {self.path}: {exc}") from exc
        return ResumePoint.from_json(text, where=str(self.path))

    def save(self, point: ResumePoint) -> None:
        try:
            atomic_write_text(self.path, point.to_json())
        except OSError as exc:
            raise PositionError(f"cannot write position file {self.path}: {exc}") from exc


class MemoryPositionStore:
    """Keeps the point in memory only: for one-off reads (``relay entries`` without a file) and tests."""

    def __init__(self, point: ResumePoint | None = None) -> None:
        self.point = point

    def describe(self) -> str:
        return "memory"

    def load(self) -> ResumePoint | None:
        return self.point

    def save(self, point: ResumePoint) -> None:
        self.point = point
