"""Judging keys read in full, and tables without a key, against the target (``relay.ops.verify.engine``).

A key read in a ``Window`` is comparable only when the target can be held against that read: the relay
has published up to the window's end (``caught_up``), the topic's latest change of the key is older than
the window's start (else the key changed while it was read: ``changed``), and the target has applied that
change (a mirror may lag: ``behind``). A change at or beyond the *horizon* — the binlog end read after the
target was read, in the relay's generation — is none the relay can have published (a forged record, or
another source's under this source id): the key is a difference whatever its values, never "changed".
Then: no row on either side is equal; a row on one side only is
``missing`` or ``extra``; rows on both sides are compared column by column in the target's form
(``Target.expected`` / ``Target.same``) — canal text for a topic, the mirror's typed values for a mirror.

A table without a key is compared as a multiset: per hash bucket its rows' count and digest sum on both
sides, then the rows of the buckets that differ (every row where the target's digests are not exact).
Pure functions of the verifier's reader and target; the caller's thread.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Any, Protocol

from relay.ops.verify.digest import ABSENT
from relay.ops.verify.report import Difference, ShardResult
from relay.ops.verify.shards import JoinKey, Shard
from relay.ops.verify.source import Place, SourceReader, Window
from relay.ops.verify.target import ZERO, Identity, Target

Verdict = tuple[Any, ...]


class Context(Protocol):
    """What judging needs of the verifier (``relay.ops.verify.engine.Verifier``)."""

    reader: SourceReader
    target: Target

    @property
    def buckets_rows(self) -> int: ...

    @property
    def horizon(self) -> Identity: ...

    def start_identity(self, window: Window) -> Identity: ...
    def sync_or_note(self, high: Place) -> bool: ...
    def note_read(self, what: str, rows: int) -> None: ...
    def result(self, shard: str) -> ShardResult: ...


def plain(value: Any) -> Any:
    """A value as the report shows it (JSON-friendly)."""
    if value is None or isinstance(value, bool | int | float):
        return value
    if value is ABSENT:
        return "(no such column)"
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("latin-1")
    if isinstance(value, str):
        return str(value)
    iso = getattr(value, "isoformat", None)
    return iso() if callable(iso) else str(value)


def judge_keys(
    verifier: Context,
    shard: Shard,
    keys: Sequence[JoinKey],
    rows: dict[JoinKey, tuple[Sequence[str | None], bool]],
    window: Window,
    caught_up: bool,
) -> dict[JoinKey, Verdict]:
    """A verdict per key: ``equal``, ``out`` (outside ``--where``), ``gone`` (no row on either side any
    more: not a row of the table, not counted), ``changed`` / ``behind`` (no moment to
    compare at: again next pass), or a finding (``missing`` / ``extra`` / ``different``, what identifies
    it, the ``Difference``). Sides that agree are equal whenever they were read: only a disagreement needs
    the target to be comparable with the read."""
    target = verifier.target
    start = verifier.start_identity(window)
    out: dict[JoinKey, Verdict] = {}
    findings: dict[JoinKey, Verdict] = {}
    both: list[tuple[JoinKey, Sequence[str | None], Any]] = []
    for key in keys:
        found = rows.get(key)
        held = target.held(key)
        live = held is not None and not held.deleted
        identity = None if held is None else held.identity
        if found is not None and not found[1]:
            out[key] = ("out",)  # outside --where: not compared
        elif found is None:
            # no row on either side (deleted on both since it was read): nothing to count or compare
            findings[key] = (
                ("extra", identity, _difference(shard, key, "extra", identity)) if live else ("gone",)
            )
        elif not live:
            findings[key] = ("missing", identity, _difference(shard, key, "missing", identity))
        else:
            both.append((key, found[0], held))
    values = target.values(shard, [k for k, _, _ in both])
    for key, row, held in both:
        actual = values.get(key)
        if actual is None:  # the record could not be read again: look next pass
            out[key] = ("changed",)
            continue
        findings[key] = _compare(target, shard, key, row, actual, held)
    horizon = verifier.horizon
    for key, verdict in findings.items():
        latest = target.latest(key)
        held = target.held(key)
        foreign = max(latest or ZERO, held.identity if held is not None else ZERO)
        if foreign >= horizon and caught_up:
            out[key] = _foreign(shard, key, verdict, foreign, horizon)
        elif verdict[0] in ("equal", "gone"):
            out[key] = verdict
        elif not caught_up:
            out[key] = ("behind",)
        elif latest is not None and latest >= start:
            out[key] = ("changed",)
        elif target.behind(key):
            out[key] = ("behind",)
        else:
            out[key] = verdict
    return out


def _foreign(shard: Shard, key: JoinKey, verdict: Verdict, identity: Identity, horizon: Identity) -> Verdict:
    """A key whose latest change on the target is beyond what the relay can have published: a difference
    (``different``, first column ``(change identity)``), whatever else the values say."""
    mark = ("(change identity)", f"below {horizon[0]} (the relay's position)", f"{identity[0]}.{identity[1]}")
    columns: tuple[tuple[str, Any, Any], ...] = (mark,)
    if verdict[0] == "different":
        columns += verdict[2].columns
    elif verdict[0] in ("missing", "extra"):
        columns += ((f"(row {verdict[0]} on the target)", None, None),)
    diff = Difference(shard.name, "different", _key(shard, key), columns, identity, foreign=True)
    return ("different", (identity, tuple(c for c, _, _ in columns)), diff)


def _compare(
    target: Target, shard: Shard, key: JoinKey, row: Sequence[str | None], actual: dict[str, Any], held: Any
) -> Verdict:
    expected = target.expected(shard, row)
    columns = [
        (c, plain(row[i]), plain(actual.get(c, ABSENT)))
        for i, (c, e) in enumerate(expected.items())
        if not target.same(shard, c, e, actual.get(c, ABSENT)) and not _added_later(shard, c, row[i], actual)
    ]
    columns += [(c, plain(ABSENT), plain(v)) for c, v in actual.items() if c not in expected]
    if held.shard != shard.name:  # the key's row on the target comes from another shard
        columns.insert(0, ("(physical table)", shard.name, held.shard))
    if not columns:
        return ("equal",)
    names = tuple(c for c, _, _ in columns)
    diff = Difference(shard.name, "different", _key(shard, key), tuple(columns), held.identity)
    return ("different", (held.identity, names), diff)


def _added_later(shard: Shard, column: str, value: str | None, actual: dict[str, Any]) -> bool:
    """The target's record has no ``column`` (published before an ``ADD COLUMN``) and the source's row holds
    the column's literal default: what MySQL gave every existing row, so the record stands for it."""
    return (
        actual.get(column, ABSENT) is ABSENT and column in shard.defaults and shard.defaults[column] == value
    )


def _key(shard: Shard, key: JoinKey) -> dict[str, Any]:
    return {k: plain(v) for k, v in shard.key_dict(key).items()}


def _difference(shard: Shard, key: JoinKey, kind: str, identity: Any) -> Difference:
    return Difference(shard.name, kind, _key(shard, key), (), identity)


def multiset(verifier: Context, shard: Shard) -> tuple[int, list[Difference]] | None:
    """(source rows, differences) of a keyless shard, or None when it changed during the read or the
    target had not caught up (it is read again next pass)."""
    reader, target = verifier.reader, verifier.target
    buckets = max(1, math.ceil(max(shard.spec.estimated_rows, 1) / verifier.buckets_rows))
    low = reader.binlog_end()
    digests = reader.bucket_digests(shard, buckets)
    high = reader.binlog_end()
    result = verifier.result(shard.name)
    result.chunks += buckets
    rows = sum(n for n, _ in digests.values())
    verifier.note_read(f"{shard.name} bucket digests", rows)
    if not _comparable(verifier, shard, Window(low, high)):
        return None
    held = target.multiset(shard)
    mine: dict[int, tuple[int, int]] = {}
    for row, count in held.rows.items():
        digest = target.row_digest(shard, row)
        n, s = mine.get(digest % buckets, (0, 0))
        mine[digest % buckets] = (n + count, s + count * digest)
    differing = sorted(b for b in set(digests) | set(mine) if digests.get(b, (0, 0)) != mine.get(b, (0, 0)))
    result.chunks_differing = len(differing)
    if not differing:
        return rows, []
    exact = getattr(target, "buckets_exact", True)
    wanted = differing if exact else list(range(buckets))
    low = reader.binlog_end()
    source_rows = reader.bucket_rows(shard, buckets, wanted)
    high = reader.binlog_end()
    if not _comparable(verifier, shard, Window(low, high)):
        return None
    held = target.multiset(shard)
    chosen = set(wanted)
    mine_rows = Counter(
        {r: c for r, c in held.rows.items() if not exact or target.row_digest(shard, r) % buckets in chosen}
    )
    theirs = Counter(tuple(target.expected(shard, r).values()) for r in source_rows)
    if not getattr(target, "multiset_counts", True):  # the mirror keeps one of several equal rows
        theirs = Counter(dict.fromkeys(theirs, 1))
    return rows, _multiset_differences(shard, theirs, mine_rows)


def _comparable(verifier: Context, shard: Shard, window: Window) -> bool:
    if not verifier.sync_or_note(window.high):
        return False
    held = verifier.target.multiset(shard)
    return not held.behind and held.latest < verifier.start_identity(window)


def _multiset_differences(shard: Shard, source: Counter[Any], target: Counter[Any]) -> list[Difference]:
    out = []
    for row in sorted(set(source) | set(target), key=repr):
        s, t = source.get(row, 0), target.get(row, 0)
        if s == t:
            continue
        values = {n: plain(v) for n, v in zip(shard.names, row, strict=True)}
        kind = "missing" if s > t else "extra"
        out.append(Difference(shard.name, kind, values, (), None, abs(s - t)))
    return out
