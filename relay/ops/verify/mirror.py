"""The mirror side of ``relay verify``: a Delta Lake or Iceberg mirror table as the ``Target``.

What the mirror holds per key comes from its rows and tombstones (their ``_key`` is the record key's
values in column-name order, with the ``_shard`` value; ``_sequence``/``_part`` the identity of the change
applied). When a key last changed comes from the topic (``TopicIndex``, identities only), the stream the
mirror job applies: a key whose latest change on the topic is not the one the mirror holds is *behind* —
unless the mirror's last commit says it applied the topic past that record's offset, in which case what it
holds is what it has (a row lost or altered in its files is a difference, not a lag). Values are compared
in the mirror's types: the source row goes through the Spark job's conversion (``MirrorReader.typed``);
digests use the mirror's values written back as canal text (``MirrorReader`` / ``MirrorContents.canal``),
so a rendering that does not round-trip costs a full comparison, never a false report.

The reader is ``relay.spark.verify_mirror.MirrorReader`` (pyarrow, no Spark), handed in by the CLI and used
here through the ``MirrorReader`` protocol: ``relay.ops`` does not import ``relay.spark``. A table without a
key is compared as a SET of rows: the mirror identifies such rows by all their values, so equal rows
collapse into one there. Runs on the caller's thread.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from relay.ops.verify.digest import ABSENT, canal_row_hash
from relay.ops.verify.shards import MULTISET, JoinKey, Shard
from relay.ops.verify.target import ZERO, Held, Identity, Multiset
from relay.ops.verify.topic import TopicIndex

Meta = tuple[str, str, int, int, str]  # (_key, _source, _sequence, _part, _source_id)


class MirrorContents(Protocol):
    rows: list[Meta]
    tombstones: list[Meta]
    missing: list[str]
    offsets: dict[str, dict[str, int]]

    def typed(self, index: int) -> tuple[Any, ...]: ...
    def canal(self, index: int) -> tuple[str | None, ...]: ...


class MirrorReader(Protocol):
    description: str

    def read(
        self, table: str, columns: Sequence[tuple[str, str]], zone: str = "server"
    ) -> MirrorContents: ...
    def typed(self, mysql_type: str, text: str | None, micros: int | None = None) -> Any: ...
    def same(self, mysql_type: str, expected: Any, actual: Any) -> bool: ...


def _order(shard: Shard) -> list[int]:
    """Where each join key part sits in the mirror's ``_key`` (names sorted, ``_shard`` among them)."""
    names = (["_shard"] if shard.shard_value is not None else []) + list(shard.key_names)
    ranked = sorted(range(len(names)), key=lambda i: names[i])
    return [ranked.index(i) for i in range(len(names))]


class MirrorTarget:
    """A mirror table as the ``Target`` of a comparison."""

    buckets_exact = False  # the digests of its rows are best effort: keyless tables compared whole
    multiset_counts = False  # equal rows of a keyless table are one row in the mirror

    def __init__(
        self, reader: MirrorReader, index: TopicIndex, table: str, source_id: str, zone: str = "server"
    ) -> None:
        self.reader, self.index, self.table, self.source_id, self.zone = reader, index, table, source_id, zone
        self.description = reader.description
        self.notes: list[str] = []
        self.shards: dict[str, Shard] = {}
        self._held: dict[JoinKey, tuple[Held, int]] = {}
        self._by_shard: dict[str, list[JoinKey]] = {}
        self._multisets: dict[str, Multiset] = {}
        self._contents: MirrorContents | None = None
        self._columns: list[tuple[str, str]] = []

    def use(self, shards: Sequence[Shard]) -> None:
        self.shards = {s.name: s for s in shards}
        seen: dict[str, str] = {}
        for shard in shards:
            for column in shard.spec.columns:
                seen.setdefault(column.name, column.mysql_type)
        self._columns = list(seen.items())

    # -- reading --------------------------------------------------------------------------------------
    def refresh(self) -> None:
        self.index.refresh()
        contents = self.reader.read(self.table, self._columns, self.zone)
        self._contents = contents
        held: dict[JoinKey, tuple[Held, int]] = {}
        multisets = {name: Multiset() for name, s in self.shards.items() if s.method == MULTISET}
        for index, meta in enumerate(contents.rows):
            self._take(meta, index, False, held, multisets)
        for meta in contents.tombstones:
            self._take(meta, -1, True, held, multisets)
        by: dict[str, list[JoinKey]] = {}
        for key, (h, _) in held.items():
            by.setdefault(h.shard, []).append(key)
        self._held, self._by_shard, self._multisets = held, by, multisets

    def _take(
        self,
        meta: Meta,
        index: int,
        deleted: bool,
        held: dict[JoinKey, tuple[Held, int]],
        multisets: dict[str, Multiset],
    ) -> None:
        key_json, source, seq, part, source_id = meta
        shard = self.shards.get(source)
        if shard is None or (source_id and source_id != self.source_id):
            return
        ident = (seq, part)
        if shard.method == MULTISET:
            state = multisets[shard.name]
            state.latest = max(state.latest, ident)
            if not deleted:
                state.rows[self._row(shard, index)] += 1
            return
        try:
            values = json.loads(key_json)
        except ValueError:
            return
        if not isinstance(values, list):
            return
        order = _order(shard)
        if len(values) != len(order):
            return
        key = tuple(None if values[i] is None else str(values[i]) for i in order)
        cur = held.get(key)
        if cur is not None and cur[0].identity > ident:
            return
        digest = 0 if deleted else self._digest(shard, index)
        held[key] = (Held(ident, deleted, shard.name, digest), index)

    def _positions(self, shard: Shard) -> list[int]:
        where = {name: i for i, (name, _) in enumerate(self._columns)}
        return [where[n] for n in shard.names]

    def _row(self, shard: Shard, index: int) -> tuple[Any, ...]:
        assert self._contents is not None
        values = self._contents.typed(index)
        return tuple(values[i] for i in self._positions(shard))

    def _digest(self, shard: Shard, index: int) -> int:
        assert self._contents is not None
        texts = self._contents.canal(index)
        missing = set(self._contents.missing)
        row = [
            ABSENT if n in missing else texts[i]
            for n, i in zip(shard.names, self._positions(shard), strict=True)
        ]
        return canal_row_hash(shard.kinds, row)

    # -- the Target -----------------------------------------------------------------------------------
    def latest(self, key: JoinKey) -> Identity | None:
        held = self.index.held.get(key)
        return None if held is None else held.identity

    def held(self, key: JoinKey) -> Held | None:
        found = self._held.get(key)
        return None if found is None else found[0]

    def behind(self, key: JoinKey) -> bool:
        topic = self.index.held.get(key)
        mine = self._held.get(key)
        if topic is None or (mine is not None and mine[0].identity >= topic.identity):
            return False
        return not self._applied_past(topic.where)

    def _applied_past(self, where: Any) -> bool:
        """Whether the mirror's last commit applied the topic past the record at ``where``."""
        if self._contents is None or not where:
            return False
        topic, partition, offset = where
        done = self._contents.offsets.get(topic, {}).get(str(partition))
        return done is not None and int(done) >= offset

    def keys_of(self, shard: str) -> Iterable[JoinKey]:
        return self._by_shard.get(shard, ())

    def values(self, shard: Shard, keys: Sequence[JoinKey]) -> dict[JoinKey, dict[str, Any]]:
        assert self._contents is not None
        missing = set(self._contents.missing)
        out = {}
        for key in keys:
            found = self._held.get(key)
            if found is None or found[0].deleted:
                continue
            row = self._row(shard, found[1])
            out[key] = {n: ABSENT if n in missing else v for n, v in zip(shard.names, row, strict=True)}
        return out

    def expected(self, shard: Shard, row: Sequence[str | None]) -> dict[str, Any]:
        out = {}
        for column, value in zip(shard.spec.columns, row, strict=True):
            micros = getattr(value, "micros", None)
            out[column.name] = self.reader.typed(
                column.mysql_type, None if value is None else str(value), micros
            )
        return out

    def same(self, shard: Shard, column: str, expected: Any, actual: Any) -> bool:
        if actual is ABSENT:
            return False
        mysql = next(c.mysql_type for c in shard.spec.columns if c.name == column)
        return self.reader.same(mysql, expected, actual)

    def multiset(self, shard: Shard) -> Multiset:
        mine = self._multisets.get(shard.name, Multiset())
        topic = self.index.multisets.get(shard.name)
        latest = topic.latest if topic is not None else ZERO
        behind = mine.latest < latest and not self._applied_past(topic.where if topic is not None else None)
        return Multiset(Counter(dict.fromkeys(mine.rows, 1)), latest, behind=behind)

    def row_digest(self, shard: Shard, row: tuple[Any, ...]) -> int:
        return 0  # not exact (``buckets_exact`` False): keyless tables are compared whole

    def close(self) -> None:
        return None
