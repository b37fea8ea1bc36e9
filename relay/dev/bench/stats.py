"""The benchmark's arithmetic and its table: percentiles, medians of repetitions, ratios, rendering.

Pure functions and value types, no I/O: ``relay.dev.bench.runner`` fills ``WorkloadResult`` values on the
main thread, ``relay.cli.bench`` renders them with ``render_table`` or ``to_json``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

RSS_ALLOWANCE_MB = 200.0  # the relay's memory bound: the store's budget + this (README, "Memory")


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) by linear interpolation between closest ranks (numpy's default)."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be within 0..100, got {q}")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    lo = math.floor(rank)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (rank - lo)


def median(values: Sequence[float]) -> float:
    return percentile(values, 50)


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """``numerator / denominator``, None when either is unknown or the denominator is 0."""
    if numerator is None or not denominator:
        return None
    return numerator / denominator


@dataclass
class Repeated:
    """One figure measured several times; ``median`` is what the table shows."""

    samples: list[float] = field(default_factory=list)

    def add(self, value: float) -> None:
        self.samples.append(value)

    @property
    def median(self) -> float | None:
        return median(self.samples) if self.samples else None

    def to_json(self) -> dict[str, Any]:
        return {"median": self.median, "samples": self.samples}


@dataclass
class Latency:
    """Commit → Kafka-acknowledged latency at a fixed offered rate (seconds in, milliseconds out)."""

    offered_rows_per_s: float = 0.0
    achieved_rows_per_s: float = 0.0
    samples: int = 0
    missing: int = 0  # committed rows never seen acknowledged before the deadline
    p50_ms: float | None = None
    p99_ms: float | None = None
    max_ms: float | None = None

    @classmethod
    def from_seconds(
        cls, latencies: Sequence[float], offered: float, achieved: float, missing: int
    ) -> Latency:
        if not latencies:
            return cls(offered, achieved, 0, missing)
        ms = [x * 1000.0 for x in latencies]
        return cls(offered, achieved, len(ms), missing, percentile(ms, 50), percentile(ms, 99), max(ms))


@dataclass
class WorkloadResult:
    """Everything measured for one workload on one binlog backlog."""

    name: str
    description: str
    rows: int  # row changes in the backlog
    backlog_bytes: int
    relay: Repeated = field(default_factory=Repeated)  # end to end rows/s (Kafka acked, position saved)
    stock: Repeated = field(default_factory=Repeated)  # python-mysql-replication parse-only rows/s
    naive: Repeated = field(default_factory=Repeated)  # stock reader → JSON → produce → flush per txn
    ceiling: Repeated = field(default_factory=Repeated)  # the relay's own records, produce + ack only
    relay_rss_mb: Repeated = field(default_factory=Repeated)  # peak RSS of the relay process, MB
    relay_cpu_us_per_row: Repeated = field(default_factory=Repeated)
    latency: Latency | None = None
    rss_bound_mb: float | None = None  # the relay's memory bound (store budget + allowance), where a target

    @property
    def vs_stock(self) -> float | None:
        return ratio(self.relay.median, self.stock.median)

    @property
    def vs_naive(self) -> float | None:
        return ratio(self.relay.median, self.naive.median)

    @property
    def of_ceiling(self) -> float | None:
        """The relay's rate as a fraction of producing its pre-encoded records alone."""
        return ratio(self.relay.median, self.ceiling.median)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "rows": self.rows,
            "backlog_bytes": self.backlog_bytes,
            "relay_rows_per_s": self.relay.to_json(),
            "stock_parse_rows_per_s": self.stock.to_json(),
            "naive_relay_rows_per_s": self.naive.to_json(),
            "relay_vs_stock": self.vs_stock,
            "relay_vs_naive": self.vs_naive,
            "produce_only_rows_per_s": self.ceiling.to_json(),
            "relay_of_ceiling": self.of_ceiling,
            "relay_peak_rss_mb": self.relay_rss_mb.to_json(),
            "relay_cpu_us_per_row": self.relay_cpu_us_per_row.to_json(),
            "latency": asdict(self.latency) if self.latency is not None else None,
            "rss_bound_mb": self.rss_bound_mb,
            "rss_within_bound": self.rss_within_bound,
        }

    @property
    def rss_within_bound(self) -> bool | None:
        """Every relay drain's peak RSS within the bound (None: no bound, or nothing measured)."""
        if self.rss_bound_mb is None or not self.relay_rss_mb.samples:
            return None
        return max(self.relay_rss_mb.samples) <= self.rss_bound_mb


@dataclass
class StallResult:
    """Peak RSS of a relay whose broker is stopped (SIGSTOP) while a large backlog is written."""

    backlog_bytes: int
    peak_rss_mb: float
    store_budget_mb: float
    store_fill_mb: float
    acked_rows_during_stall: int
    seconds: float

    @property
    def limit_mb(self) -> float:
        return self.store_budget_mb + RSS_ALLOWANCE_MB

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "limit_mb": self.limit_mb, "within_limit": self.peak_rss_mb <= self.limit_mb}


def _num(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


def _times(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}x"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


TABLE_HEADER = (
    "workload",
    "rows",
    "relay rows/s",
    "stock parse rows/s",
    "naive relay rows/s",
    "ceiling rows/s",
    "vs stock",
    "vs naive",
    "of ceiling",
    "p50 ms",
    "p99 ms",
    "peak RSS MB",
    "CPU µs/row",
)


def table_rows(results: Sequence[WorkloadResult]) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    for r in results:
        lat = r.latency
        out.append(
            (
                r.name,
                _num(r.rows),
                _num(r.relay.median),
                _num(r.stock.median),
                _num(r.naive.median),
                _num(r.ceiling.median),
                _times(r.vs_stock),
                _times(r.vs_naive),
                _share(r.of_ceiling),
                _num(lat.p50_ms if lat else None, 1),
                _num(lat.p99_ms if lat else None, 1),
                _num(r.relay_rss_mb.median),
                _num(r.relay_cpu_us_per_row.median),
            )
        )
    return out


def render_table(results: Sequence[WorkloadResult], *, markdown: bool = False) -> str:
    """The results as an aligned text table (or a Markdown table for the README)."""
    rows = [TABLE_HEADER, *table_rows(results)]
    if markdown:
        lines = ["| " + " | ".join(rows[0]) + " |", "|" + "|".join("---" for _ in rows[0]) + "|"]
        lines += ["| " + " | ".join(row) + " |" for row in rows[1:]]
        return "\n".join(lines)
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]

    def line(row: Sequence[str]) -> str:
        first = row[0].ljust(widths[0])
        return "  ".join([first, *(cell.rjust(w) for cell, w in zip(row[1:], widths[1:], strict=True))])

    return "\n".join([line(rows[0]), "  ".join("-" * w for w in widths), *(line(r) for r in rows[1:])])


# Issue 17's targets: the relay vs the stock parse-only reader, and p99 commit → ack at 1,000 rows/s;
# issue 32's: W5 (one bulk transaction) 3x the stock reader with the relay's peak RSS within its bound.
VS_STOCK_TARGETS = {"W1": 5.0, "W2": 3.0, "W3": 3.0, "W4": 1.5, "W5": 3.0}
P99_TARGET_MS = 50.0
LATENCY_WORKLOADS = ("W1", "W2", "W3", "W4")  # offered at a fixed rate; W5 is one bulk transaction


def render_targets(results: Sequence[WorkloadResult]) -> str:
    """One line per workload: each target, the figure, met or not (a figure not measured says so)."""
    lines = []
    for r in results:
        want = VS_STOCK_TARGETS.get(r.name)
        parts = []
        if want is not None:
            got = r.vs_stock
            verdict = "not measured" if got is None else ("met" if got >= want else "MISSED")
            parts.append(f"vs stock {_times(got)} (target {want:.1f}x): {verdict}")
        lat = r.latency
        p99 = lat.p99_ms if lat else None
        if r.name in LATENCY_WORKLOADS or p99 is not None:
            verdict = "not measured" if p99 is None else ("met" if p99 <= P99_TARGET_MS else "MISSED")
            parts.append(f"p99 {_num(p99, 1)} ms (target {P99_TARGET_MS:.0f} ms): {verdict}")
        if r.rss_bound_mb is not None:
            within = r.rss_within_bound
            verdict = "not measured" if within is None else ("within" if within else "OVER")
            peak = max(r.relay_rss_mb.samples) if r.relay_rss_mb.samples else None
            parts.append(
                f"peak RSS {_num(peak)} MB (bound {r.rss_bound_mb:,.0f} MB: store budget "
                f"{r.rss_bound_mb - RSS_ALLOWANCE_MB:,.0f} + {RSS_ALLOWANCE_MB:.0f}): {verdict}"
            )
        if r.of_ceiling is not None:
            parts.append(f"{_share(r.of_ceiling)} of the produce-only ceiling")
        lines.append(f"{r.name}: " + "; ".join(parts))
    return "\n".join(lines)


def render_stall(stall: StallResult) -> str:
    verdict = "within" if stall.peak_rss_mb <= stall.limit_mb else "OVER"
    return (
        f"broker stalled (SIGSTOP) under a {stall.backlog_bytes / 2**20:,.0f} MB backlog for "
        f"{stall.seconds:.0f} s: relay peak RSS {stall.peak_rss_mb:,.0f} MB, store budget "
        f"{stall.store_budget_mb:,.0f} MB (filled {stall.store_fill_mb:,.1f} MB) + "
        f"{RSS_ALLOWANCE_MB:.0f} MB = "
        f"{stall.limit_mb:,.0f} MB: {verdict}; rows acked while stalled: {stall.acked_rows_during_stall}"
    )
