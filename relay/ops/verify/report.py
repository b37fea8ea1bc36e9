"""What ``relay verify`` found: per shard and in total, each difference by key and column, and how to
read it as text or JSON. Values only; built by ``relay.ops.verify.engine``, printed by the CLI.

Categories, per row (a row is a key of the source or of the target):

- ``equal``: the target holds the source's row (or neither holds the key any more);
- ``missing``: the source has the row, the target has none (never published, or deleted on the target);
- ``extra``: the target has a row the source does not;
- ``different``: both have it, with other values in the named columns;
- ``skipped``: not verified — the key changed during every pass of the check, or the target had not
  applied its latest change within ``--wait``, so no moment was found at which both sides could be
  compared.

A difference is reported only after two reads of the key at two binlog positions, each after the target
had applied the stream up to that position for the key, agreed on it. A run is *equal* only when every key
was compared and none differs; with no difference but keys left skipped it is *not verified* (exit status
3), never equal.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

KINDS = ("missing", "extra", "different")


@dataclass(frozen=True)
class Difference:
    shard: str
    kind: str  # missing / extra / different
    key: dict[str, Any]  # the key columns (a keyless table: the whole row)
    columns: tuple[tuple[str, Any, Any], ...] = ()  # (column, source value, target value)
    target_identity: tuple[int, int] | None = None  # (sequence, part) of the change the target holds
    count: int = 1  # a keyless table's row: how many copies differ
    foreign: bool = False  # the target's change is beyond the relay's position: not the relay's record

    def line(self) -> str:
        key = ", ".join(f"{k}={_show(v)}" for k, v in self.key.items())
        if self.kind == "different":
            cols = "; ".join(f"{c}: source {_show(s)}, target {_show(t)}" for c, s, t in self.columns)
            return f"different  {self.shard}  {key}  —  {cols}"
        times = f" ×{self.count}" if self.count != 1 else ""
        where = "on the source, not on the target" if self.kind == "missing" else "on the target only"
        return f"{self.kind:<10} {self.shard}  {key}{times}  —  {where}"


@dataclass(frozen=True)
class Skipped:
    shard: str
    key: dict[str, Any]
    reason: str


@dataclass
class ShardResult:
    name: str
    method: str
    reason: str
    rows: int = 0
    equal: int = 0
    missing: int = 0
    extra: int = 0
    different: int = 0
    skipped: int = 0
    chunks: int = 0
    chunks_differing: int = 0

    def add(self, other: ShardResult) -> None:
        for name in (
            "rows",
            "equal",
            "missing",
            "extra",
            "different",
            "skipped",
            "chunks",
            "chunks_differing",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))


@dataclass
class Report:
    table: str
    target: str
    source: str
    shards: list[ShardResult] = field(default_factory=list)
    differences: list[Difference] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    passes: int = 0
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    repair: dict[str, Any] | None = None

    @property
    def total(self) -> ShardResult:
        out = ShardResult("total", "", "")
        for s in self.shards:
            out.add(s)
        return out

    @property
    def equal(self) -> bool:
        """Every key compared, none different."""
        return not self.differences and self.verified

    @property
    def verified(self) -> bool:
        """Every key was compared (none skipped)."""
        return not self.skipped

    @property
    def rows_per_second(self) -> float:
        return self.total.rows / self.seconds if self.seconds > 0 else 0.0

    def repair_keys(self) -> list[dict[str, Any]]:
        """The differing keys as ``relay snapshot run --keys`` reads them (not the rows of tables without
        a key: those are snapshotted whole)."""
        whole = {s.name for s in self.shards if s.method == "multiset"}
        return [{"shard": d.shard, "key": d.key} for d in self.differences if d.shard not in whole]

    def to_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "target": self.target,
            "source": self.source,
            "equal": self.equal,
            "verified": self.verified,
            "not_verified": len(self.skipped),
            "total": asdict(self.total),
            "shards": [asdict(s) for s in self.shards],
            "differences": [asdict(d) for d in self.differences],
            "repair_keys": self.repair_keys(),
            "skipped": [asdict(s) for s in self.skipped],
            "passes": self.passes,
            "seconds": round(self.seconds, 3),
            "rows_per_second": round(self.rows_per_second, 1),
            "notes": self.notes,
            "repair": self.repair,
        }

    def text(self, limit: int = 50) -> str:
        lines = [f"relay verify {self.table}: source {self.source} against {self.target}"]
        lines += [f"  note: {n}" for n in self.notes]
        head = f"  {'shard':<32} {'rows':>9} {'equal':>9} {'missing':>8} {'extra':>6} {'different':>9}"
        lines.append(head + f" {'skipped':>8}  method")
        for s in [*self.shards, self.total]:
            lines.append(
                f"  {s.name:<32} {s.rows:>9,} {s.equal:>9,} {s.missing:>8,} {s.extra:>6,} {s.different:>9,} "
                f"{s.skipped:>8,}  {s.reason}"
            )
        if self.differences:
            lines.append(f"differences ({len(self.differences)}):")
            lines += [f"  {d.line()}" for d in self.differences[:limit]]
            if len(self.differences) > limit:
                lines.append(f"  … and {len(self.differences) - limit} more (--json lists them all)")
        if self.skipped:
            lines.append(f"skipped ({len(self.skipped)}), not compared — not verified:")
            for skip in self.skipped[:limit]:
                key = ", ".join(f"{k}={_show(v)}" for k, v in skip.key.items())
                lines.append(f"  {skip.shard}  {key}  —  {skip.reason}")
        if self.repair is not None:
            lines.append(f"repair: {self.repair.get('summary', '')}")
        verdict = "equal"
        if self.differences:
            verdict = f"{len(self.differences)} difference(s)"
        elif self.skipped:
            verdict = f"not verified: {len(self.skipped)} key(s) not compared (listed above)"
        lines.append(
            f"result: {verdict}; {self.total.rows:,} rows in {self.seconds:.1f} s "
            f"({self.rows_per_second:,.0f} rows/s, {self.passes} pass(es))"
        )
        return "\n".join(lines)


def _show(value: Any) -> str:
    if value is None:
        return "NULL"
    text = value if isinstance(value, str) else repr(value)
    if len(text) > 60:
        text = text[:57] + "…"
    return json.dumps(text, ensure_ascii=False) if isinstance(value, str) else text
