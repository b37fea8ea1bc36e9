"""The verify workload (V): ``relay verify`` of the snapshot workload's table against its topic, against a
plain ``SELECT *`` of the same table (PyMySQL's buffered cursor) and a streaming one (its unbuffered cursor).

Runs after the snapshot workload (``relay.dev.bench.snapshot``), on what it left: the table (its rows
unchanged) and the topic the relay's snapshot filled, the relay stopped with its position saved. Each
run is a whole ``relay verify`` as the CLI runs it, in this process (``relay.ops.verify.setup``): the
shards planned, MySQL's chunk digests, the topic read from its start and every record hashed, the chunks
compared; rows/s = rows compared over the run's wall time. The baselines, measured again right before
each verify run so that the three figures of a round see the same machine load: a plain ``SELECT *``
through PyMySQL's default (buffered) cursor — the target's reference, verify at least half its rate — and
S's streaming ``SELECT *`` through an unbuffered cursor (rows/s a client that only reads gets). Each ratio
is the median of the rounds' ratios over ``--repeat`` rounds; the verify run's CPU seconds (this process,
its forked topic readers, not the servers) are reported too. The run must find the table equal, or the
figure is refused. Runs on the bench's main thread.
"""

from __future__ import annotations

import os
import resource
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from relay.dev.bench.common import Context
from relay.dev.bench.snapshot import TABLE, _relay_config, buffered_select, plain_select
from relay.errors import BenchError

CHUNK_ROWS = 10_000


@dataclass
class VerifyResult:
    rows: int
    selects: list[float] = field(default_factory=list)  # rows/s of each streaming SELECT
    plains: list[float] = field(default_factory=list)  # rows/s of each plain (buffered) SELECT *
    runs: list[float] = field(default_factory=list)  # rows/s of each verify run (after its SELECTs)
    cpu: list[float] = field(default_factory=list)  # CPU seconds of each verify run (process + children)
    topic_records: int = 0
    chunks: int = 0

    @property
    def rows_per_second(self) -> float:
        return statistics.median(self.runs) if self.runs else 0.0

    @property
    def select_rows_per_second(self) -> float:
        return statistics.median(self.selects) if self.selects else 0.0

    @property
    def plain_rows_per_second(self) -> float:
        return statistics.median(self.plains) if self.plains else 0.0

    @property
    def ratio(self) -> float:
        """Against the streaming SELECT."""
        pairs = [v / s for v, s in zip(self.runs, self.selects, strict=True) if s]
        return statistics.median(pairs) if pairs else 0.0

    @property
    def plain_ratio(self) -> float:
        """Against the plain (buffered) SELECT *: the target, at least 0.5."""
        pairs = [v / s for v, s in zip(self.runs, self.plains, strict=True) if s]
        return statistics.median(pairs) if pairs else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "select_rows_per_second": round(self.select_rows_per_second),
            "plain_select_rows_per_second": round(self.plain_rows_per_second),
            "verify_vs_plain_select": round(self.plain_ratio, 3),
            "verify_cpu_seconds": [round(c, 2) for c in self.cpu],
            "verify_rows_per_second": round(self.rows_per_second),
            "verify_runs": [round(r) for r in self.runs],
            "select_runs": [round(r) for r in self.selects],
            "verify_vs_select": round(self.ratio, 3),
            "topic_records": self.topic_records,
            "chunks": self.chunks,
        }


def render_verify(result: VerifyResult) -> str:
    return "\n".join(
        [
            f"V (relay verify of S's {result.rows:,} rows against their topic, {result.chunks} chunk "
            f"digests, {result.topic_records:,} records read):",
            f"  plain SELECT *          {result.plain_rows_per_second:>10,.0f} rows/s  (buffered cursor)",
            f"  streaming SELECT *      {result.select_rows_per_second:>10,.0f} rows/s  (unbuffered cursor)",
            f"  relay verify (topic)    {result.rows_per_second:>10,.0f} rows/s  "
            f"({result.plain_ratio:.2f}x the plain SELECT, {result.ratio:.2f}x the streaming one: medians of "
            f"{len(result.runs)} rounds; "
            f"{statistics.median(result.cpu) if result.cpu else 0:.1f} s CPU a run)",
        ]
    )


def _once(ctx: Context, config: Any, mapping: Any) -> tuple[float, Any, int]:
    from relay.ops.verify.engine import VerifyOptions
    from relay.ops.verify.setup import plan_shards, session, topic_target, verify

    began = time.perf_counter()
    with session(config, 0.0, "") as (reader, published):
        shards = plan_shards(config, mapping, f"bench.{TABLE}", reader, mirror=False, where="")
        target = topic_target(config, mapping, f"bench.{TABLE}", shards)
        report = verify(
            reader, published, target, shards, VerifyOptions(f"bench.{TABLE}", CHUNK_ROWS), config=config
        )
    elapsed = time.perf_counter() - began
    if not report.equal or report.total.skipped:
        raise BenchError(f"verify found the bench table unequal: {report.text(limit=5)}")
    return elapsed, report, target.index.records


def run_verify(ctx: Context, rows: int) -> VerifyResult:
    from mapping.load import parse_mapping
    from relay.config.load import parse_config
    from relay.dev.bench.harness import relay_mapping

    work = ctx.work / "snapshot"  # the snapshot workload's relay: its state directory holds the position
    config = parse_config(_relay_config(ctx, work), base_dir=str(work))
    mapping = parse_mapping(relay_mapping())
    result = VerifyResult(rows)
    for n in range(ctx.options.repeat):
        ctx.progress(
            f"[V] SELECT *, streaming SELECT, then relay verify, round {n + 1} of {ctx.options.repeat} …"
        )
        result.plains.append(buffered_select(ctx))
        result.selects.append(plain_select(ctx)[0])
        cpu = _cpu()
        elapsed, report, records = _once(ctx, config, mapping)
        result.cpu.append(_cpu() - cpu)
        result.runs.append(report.total.rows / elapsed)
        result.topic_records, result.chunks = records, report.total.chunks
    ctx.progress(
        f"[V] verify {result.rows_per_second:,.0f} rows/s, SELECT * {result.plain_rows_per_second:,.0f} "
        f"rows/s ({result.plain_ratio:.2f}x), streaming {result.select_rows_per_second:,.0f} "
        f"({result.ratio:.2f}x)"
    )
    return result


def _cpu() -> float:
    """CPU seconds of this process and its waited-for children (the verify's forked topic readers)."""
    own, children = os.times(), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.user + own.system + children.ru_utime + children.ru_stime
