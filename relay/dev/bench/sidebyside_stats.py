"""The side-by-side figures of ``relay bench --peers``: per workload, the relay, each peer and the ceiling.

Value types filled by ``relay.dev.bench.sidebyside`` on the bench's main thread, their JSON and their text
table (one per workload), the ratios relay/peer and the targets (the relay ahead of every peer in rows/s
and in CPU per row at a lower peak RSS; W2 and W3 at 0.6 of the produce-only ceiling or more). Pure
functions, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from relay.dev.bench.landed import Verdict
from relay.dev.bench.stats import Latency, Repeated, ratio

CEILING_TARGET = 0.6
CEILING_TARGET_WORKLOADS = ("W2", "W3")


@dataclass
class RunFigures:
    """One run of one system, measured from outside: rows/s on the broker's clock (first to last append),
    CPU seconds of its processes between the first and the last acknowledged record per row, peak RSS."""

    rows_per_s: float
    cpu_us_per_row: float
    peak_rss_mb: float
    verdict: Verdict


@dataclass
class SystemFigures:
    """A system's runs on one workload (medians in the table), its latency, or why it has none."""

    name: str  # "relay", or the peer's --peers name
    label: str
    rows_per_s: Repeated = field(default_factory=Repeated)
    cpu_us_per_row: Repeated = field(default_factory=Repeated)
    peak_rss_mb: Repeated = field(default_factory=Repeated)
    verdicts: list[Verdict] = field(default_factory=list)
    latency: Latency | None = None
    error: str = ""  # a run that failed: what happened (its figures are then missing)

    def add(self, run: RunFigures) -> None:
        self.rows_per_s.add(run.rows_per_s)
        self.cpu_us_per_row.add(run.cpu_us_per_row)
        self.peak_rss_mb.add(run.peak_rss_mb)
        self.verdicts.append(run.verdict)

    @property
    def verified(self) -> bool | None:
        """Every run's topics held every row change once and the sampled rows as SELECT has them."""
        return all(v.ok for v in self.verdicts) if self.verdicts else None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "label": self.label,
            "rows_per_s": self.rows_per_s.to_json(),
            "cpu_us_per_row": self.cpu_us_per_row.to_json(),
            "peak_rss_mb": self.peak_rss_mb.to_json(),
            "verified": self.verified,
            "verdicts": [v.to_json() for v in self.verdicts],
            "latency": asdict(self.latency) if self.latency is not None else None,
            "error": self.error,
        }


@dataclass
class SideBySide:
    """One workload: every system on the same backlog and broker, one after the other."""

    workload: str
    description: str
    rows: int
    systems: list[SystemFigures]  # the relay first
    # The relay's own records of the backlog, pre-encoded, produced and acknowledged alone (its rows/s and
    # CPU watched like every system's; its memory holds the whole backlog: not a figure to compare).
    ceiling: SystemFigures = field(default_factory=lambda: SystemFigures("ceiling", "produce-only ceiling"))

    @property
    def relay(self) -> SystemFigures:
        return self.systems[0]

    @property
    def peers(self) -> list[SystemFigures]:
        return self.systems[1:]

    def ratios(self, peer: SystemFigures) -> dict[str, float | None]:
        """relay/peer: rows/s (above 1: the relay faster), CPU per row and peak RSS (below 1: less)."""
        r = self.relay
        return {
            "rows_per_s": ratio(r.rows_per_s.median, peer.rows_per_s.median),
            "cpu_us_per_row": ratio(r.cpu_us_per_row.median, peer.cpu_us_per_row.median),
            "peak_rss_mb": ratio(r.peak_rss_mb.median, peer.peak_rss_mb.median),
        }

    @property
    def of_ceiling(self) -> float | None:
        return ratio(self.relay.rows_per_s.median, self.ceiling.rows_per_s.median)

    def to_json(self) -> dict[str, Any]:
        return {
            "workload": self.workload,
            "description": self.description,
            "rows": self.rows,
            "systems": [s.to_json() for s in self.systems],
            "produce_only": self.ceiling.to_json(),
            "relay_of_ceiling": self.of_ceiling,
            "relay_vs": {p.name: self.ratios(p) for p in self.peers},
            "targets": targets(self),
        }


def targets(sbs: SideBySide) -> dict[str, bool | None]:
    """Each target of the comparison: met (True), missed (False) or not measured (None)."""
    out: dict[str, bool | None] = {}
    for peer in sbs.peers:
        r = sbs.ratios(peer)
        speed, cpu, rss = r["rows_per_s"], r["cpu_us_per_row"], r["peak_rss_mb"]
        out[f"faster than {peer.name}"] = None if speed is None else speed > 1
        out[f"less CPU per row than {peer.name}"] = None if cpu is None else cpu < 1
        out[f"lower peak RSS than {peer.name}"] = None if rss is None else rss < 1
    if sbs.workload in CEILING_TARGET_WORKLOADS:
        share = sbs.of_ceiling
        out[f"at least {CEILING_TARGET:.0%} of the ceiling"] = (
            None if share is None else share >= CEILING_TARGET
        )
    return out


def _num(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _verified(system: SystemFigures) -> str:
    if system.error:
        return "failed"
    if not system.verdicts:
        return "-"
    v = system.verdicts[-1]
    mark = "ok" if system.verified else "WRONG"
    return f"{mark} ({v.rows:,}/{v.expected:,} rows, {v.sampled} sampled)"


HEADER = ("system", "rows/s", "CPU µs/row", "peak RSS MB", "p50 ms", "p99 ms", "topics vs SELECT")


def table_rows(sbs: SideBySide) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    for s in sbs.systems:
        lat = s.latency
        out.append(
            (
                s.label,
                _num(s.rows_per_s.median),
                _num(s.cpu_us_per_row.median, 1),
                _num(s.peak_rss_mb.median),
                _num(lat.p50_ms if lat else None, 1),
                _num(lat.p99_ms if lat else None, 1),
                _verified(s),
            )
        )
    c = sbs.ceiling
    out.append(
        (c.label, _num(c.rows_per_s.median), _num(c.cpu_us_per_row.median, 1), "", "", "", _verified(c))
    )
    for peer in sbs.peers:
        r = sbs.ratios(peer)
        lat_r = ratio(
            sbs.relay.latency.p99_ms if sbs.relay.latency else None,
            peer.latency.p99_ms if peer.latency else None,
        )
        row = ("relay / " + peer.name, _x(r["rows_per_s"]), _x(r["cpu_us_per_row"]), _x(r["peak_rss_mb"]))
        out.append((*row, "", _x(lat_r), ""))
    return out


def _aligned(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for n, row in enumerate(rows):
        cells = [row[0].ljust(widths[0]), *(c.rjust(w) for c, w in zip(row[1:-1], widths[1:-1], strict=True))]
        lines.append("  ".join([*cells, row[-1]]).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return lines


def render_side_by_side(results: Sequence[SideBySide], *, markdown: bool = False) -> str:
    """One table per workload, then its targets."""
    blocks = []
    for sbs in results:
        rows = [HEADER, *table_rows(sbs)]
        title = f"{sbs.workload}: {sbs.description} ({sbs.rows:,} row changes)"
        if markdown:
            lines = [
                f"**{title}**",
                "",
                "| " + " | ".join(HEADER) + " |",
                "|" + "|".join("---" for _ in HEADER) + "|",
            ]
            lines += ["| " + " | ".join(row) + " |" for row in rows[1:]] + [""]
        else:
            lines = [title, *_aligned(rows)]
        share = sbs.of_ceiling
        verdicts = [
            f"{name}: {'-' if ok is None else 'met' if ok else 'MISSED'}" for name, ok in targets(sbs).items()
        ]
        lines.append(
            f"relay at {'-' if share is None else f'{share:.0%}'} of the ceiling; targets: "
            + "; ".join(verdicts)
        )
        errors = [f"{s.name} failed: {s.error}" for s in sbs.systems if s.error]
        blocks.append("\n".join(lines + errors))
    return "\n\n".join(blocks)
