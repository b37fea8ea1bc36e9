"""``relay_verify_*``: a verify run's outcome as Prometheus metrics, for a scheduled check to be alerted on.

A verify run is a batch job, so its metrics are written when it ends: to a file in Prometheus' text format
(``--metrics-file``, written atomically, for node_exporter's textfile collector) and/or pushed to a
Pushgateway (``--pushgateway``, job ``relay_verify``, grouped by instance and table). Labels: ``table``
(logical), ``target`` (``topic`` or ``mirror``), ``shard`` (physical, where per shard). Runs on the CLI's
thread.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge, push_to_gateway
from prometheus_client.exposition import generate_latest

from relay.ops.verify.report import Report

RESULTS = ("equal", "missing", "extra", "different", "skipped")


def registry_of(report: Report, instance: str) -> CollectorRegistry:
    registry = CollectorRegistry()
    target = "mirror" if report.target.startswith("mirror") else "topic"
    base = {"instance": instance, "table": report.table, "target": target}
    rows = Gauge(
        "relay_verify_rows",
        "Rows of the last verify run by result (equal, missing, extra, different, skipped), per shard",
        [*base, "shard", "result"],
        registry=registry,
    )
    compared = Gauge(
        "relay_verify_rows_compared", "Rows compared by the last verify run, per shard", [*base, "shard"],
        registry=registry,
    )  # fmt: skip
    chunks = Gauge(
        "relay_verify_chunks",
        "Chunks (or hash buckets) of the last verify run, all and those whose digests differed",
        [*base, "shard", "digests"],
        registry=registry,
    )
    for shard in report.shards:
        labels = {**base, "shard": shard.name}
        compared.labels(**labels).set(shard.rows)
        for result in RESULTS:
            rows.labels(**labels, result=result).set(getattr(shard, result))
        chunks.labels(**labels, digests="all").set(shard.chunks)
        chunks.labels(**labels, digests="differing").set(shard.chunks_differing)
    total = report.total
    single = [
        ("relay_verify_differences", "Rows that differ (missing, extra or different) in the last run",
         total.missing + total.extra + total.different),
        ("relay_verify_skipped", "Rows the last run could not compare (they kept changing)", total.skipped),
        ("relay_verify_equal", "1 if the last run found no difference, else 0", 1 if report.equal else 0),
        ("relay_verify_duration_seconds", "How long the last run took", report.seconds),
        ("relay_verify_rows_per_second", "Rows compared per second by the last run", report.rows_per_second),
        ("relay_verify_passes", "Passes the last run made (1 + re-checks of changing keys)", report.passes),
        ("relay_verify_last_run_timestamp_seconds", "When the last run ended (Unix time)", time.time()),
    ]  # fmt: skip
    if report.repair is not None:
        single.append(("relay_verify_repair_remaining", "Keys a repair left differing",
                       len(report.repair.get("remaining") or ())))  # fmt: skip
    for name, text, value in single:
        Gauge(name, text, list(base), registry=registry).labels(**base).set(value)
    return registry


def write_metrics(report: Report, path: str | None, gateway: str | None, *, instance: str) -> None:
    registry = registry_of(report, instance)
    if path:
        target = Path(path)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
        with os.fdopen(fd, "wb") as out:
            out.write(generate_latest(registry))
        os.replace(tmp, target)
    if gateway:
        push_to_gateway(
            gateway,
            job="relay_verify",
            registry=registry,
            grouping_key={"instance": instance, "table": report.table},
        )
