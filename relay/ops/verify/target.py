"""What ``relay verify`` compares the source with: the target's side of the comparison.

A target (``relay.ops.verify.topic.TopicTarget``, ``relay.ops.verify.mirror.MirrorTarget``) reads what it
holds now (``refresh``) and answers, per join key (``relay.ops.verify.shards``), what it holds: ``Held``
— the change identity (sequence, part) of the change it holds for the key, whether that change deleted
the row, the physical table it came from, and the row's digest (``relay.ops.verify.digest``). Both judge
*when* a key changed by the topic's records (``TopicIndex``: the latest change of each key the relay
published), the one stream every target is built from; the mirror adds whether it has applied that
change. Full values are read only for the few keys whose digests differ (``values``), in the target's
own form, and the source's row is put in that form to be compared (``expected`` / ``same``).

A table without a usable key has no per-key state: ``multiset`` gives its rows (in the target's form)
with their counts, and the identity of its latest change. Runs on the caller's thread.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from relay.ops.verify.shards import JoinKey, Shard

Identity = tuple[int, int]  # (sequence, part): the order of a key's changes
ZERO: Identity = (-1, -1)


@dataclass(slots=True)
class Held:
    """What a target holds for one key: the change it applied last, and the row it left."""

    identity: Identity
    deleted: bool
    shard: str  # the physical "db.table" of that change
    digest: int  # the row's digest (0 for a deleted row)
    where: Any = None  # how the target finds the full row again (a topic's (partition, offset), …)


@dataclass
class Multiset:
    """A keyless table's rows on the target (as tuples in the target's form) and its latest change."""

    rows: Counter[tuple[Any, ...]] = field(default_factory=Counter)
    latest: Identity = ZERO
    behind: bool = False  # the target has not applied the topic's latest change of the table
    where: Any = None  # the topic record of ``latest`` (topic, partition, offset)


class Target(Protocol):
    """One side of the comparison: a topic's latest state, or a mirror table."""

    description: str

    def refresh(self) -> None:
        """Read what the target holds now (what the relay published before the call is in it)."""

    def latest(self, key: JoinKey) -> Identity | None:
        """The identity of the latest change of ``key`` the relay published (the topic's)."""

    def held(self, key: JoinKey) -> Held | None:
        """What the target holds for ``key`` (None: nothing)."""

    def behind(self, key: JoinKey) -> bool:
        """Whether the target has not yet applied the latest change the topic holds for ``key``."""

    def keys_of(self, shard: str) -> Iterable[JoinKey]:
        """The keys whose held row (live or deleted) came from ``shard``."""

    def values(self, shard: Shard, keys: Sequence[JoinKey]) -> dict[JoinKey, dict[str, Any]]:
        """The full rows the target holds for live ``keys``, column → value in the target's form."""

    def expected(self, shard: Shard, row: Sequence[str | None]) -> dict[str, Any]:
        """A source row (canal text, instants attached) as the target should hold it."""

    def same(self, shard: Shard, column: str, expected: Any, actual: Any) -> bool:
        """Whether a column's value on the target is the expected one."""

    def multiset(self, shard: Shard) -> Multiset:
        """The rows of a keyless ``shard`` (``Shard.method`` MULTISET)."""

    def row_digest(self, shard: Shard, row: tuple[Any, ...]) -> int:
        """The digest of a multiset row (in the target's form), comparable with the source's."""

    def close(self) -> None: ...
