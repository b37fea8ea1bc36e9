"""A topic's latest state as the ``Target`` of a comparison (``relay.ops.verify.target``).

Wraps a ``TopicIndex``: values are canal text, read again by offset for the keys compared in full. Runs on
the caller's thread.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from relay.ops.verify.digest import ABSENT, canal_row_hash
from relay.ops.verify.shards import JoinKey, Shard
from relay.ops.verify.target import Held, Identity, Multiset
from relay.ops.verify.topic import TopicIndex
from relay.ops.verify.topic_fork import begin
from relay.ops.verify.topic_values import parse_value


class TopicTarget:
    """A topic's latest state as the ``Target`` of a comparison."""

    def __init__(self, index: TopicIndex) -> None:
        self.index = index
        self.description = "topic " + ", ".join(index.topics)
        self.notes: list[str] = []

    def refresh(self) -> None:
        self.index.refresh()

    def begin_refresh(self) -> Callable[[], object]:
        """The first read split over forked processes (``relay.ops.verify.topic_fork``): forks now (the
        caller's thread must be the only one running), the returned call finishes it (on any thread)."""
        return begin(self.index)

    def latest(self, key: JoinKey) -> Identity | None:
        held = self.index.held.get(key)
        return None if held is None else held.identity

    def held(self, key: JoinKey) -> Held | None:
        return self.index.held.get(key)

    def behind(self, key: JoinKey) -> bool:
        return False

    def keys_of(self, shard: str) -> Iterable[JoinKey]:
        return self.index.by_shard.get(shard, ())

    def values(self, shard: Shard, keys: Sequence[JoinKey]) -> dict[JoinKey, dict[str, Any]]:
        places = {k: h.where for k in keys if (h := self.index.held.get(k)) is not None and not h.deleted}
        raw = self.index.fetch(places.values())
        out: dict[JoinKey, dict[str, Any]] = {}
        for key, where in places.items():
            value = raw.get(where)
            if value is not None:
                out[key] = parse_value(value)[1]
        return out

    def expected(self, shard: Shard, row: Sequence[str | None]) -> dict[str, Any]:
        return {n: None if v is None else str(v) for n, v in zip(shard.names, row, strict=True)}

    def same(self, shard: Shard, column: str, expected: Any, actual: Any) -> bool:
        return bool(expected == actual) and actual is not ABSENT

    def multiset(self, shard: Shard) -> Multiset:
        return self.index.multisets[shard.name]

    def row_digest(self, shard: Shard, row: tuple[Any, ...]) -> int:
        return canal_row_hash(shard.kinds, row)

    def close(self) -> None:
        return None
