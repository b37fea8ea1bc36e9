"""Prometheus metrics and the ``/health`` and ``/ready`` endpoints of a running relay.

Owned here: ``MetricsExporter`` (a ``RelayObserver``) and its collector; the ``metrics:`` settings are
``relay.config.sections.MetricsConfig``.
Threads: ``Relay.run`` (the publisher thread) starts and stops the exporter and reports each batch sent
and acknowledged (``batch_sent`` / ``batch_acked``: the publish latency histogram). The HTTP server
runs on a thread of its own; every scrape reads the relay's live state there — ``RelayStats``, the
store's fill, the saved position, the mapping version, the leadership — so a metric is never a stale
copy. What needs the MySQL server (bytes behind the binlog end, retention runway) is fetched at most
every ``server_check_seconds`` and cached; a failed check sets ``relay_source_up`` to 0.

Lag in seconds is now − the binlog time of the oldest change not yet acknowledged (the first one the
store holds, else the last event read; the last acknowledged change's, or the saved position's, when
neither is known), and 0 when the relay is caught up or the saved position is the server's binlog end: an
idle source is not lag, and a change after a quiet hour lags by its own age, not the hour.
Nothing leaves here unredacted: label values go through ``relay.common.redact.redact``.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from relay.common.binlog_names import bytes_behind, file_number
from relay.common.redact import redact
from relay.config.sections import MetricsConfig
from relay.daemon.mapping_report import MappingState
from relay.errors import ConfigError, RelayError
from relay.source.retention import RetentionProbe
from relay.source.server import inspect_server

if TYPE_CHECKING:
    from relay.daemon.pipeline import Relay
    from relay.positions.store import ResumePoint

log = logging.getLogger(__name__)

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


@dataclass
class ServerView:
    """What the MySQL server said at the last check (cached between checks)."""

    checked: float = 0.0
    up: bool = False
    lag_bytes: int | None = None
    runway: float | None = None
    expire_seconds: float | None = None


class MetricsExporter:
    """Serves ``/metrics``, ``/health`` and ``/ready`` for one relay on ``metrics.host``:``metrics.port``."""

    def __init__(self, config: MetricsConfig, relay: Relay) -> None:
        self.config = config
        self.relay = relay
        self.registry = CollectorRegistry(auto_describe=False)
        self.latency = Histogram(
            "relay_publish_latency_seconds",
            "Time from sending a batch to Kafka until every record of it was acknowledged",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.collector = RelayCollector(self)
        self.registry.register(self.collector)
        self._sent: dict[int, float] = {}
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def enabled(self) -> bool:
        return self.config.port != 0

    @property
    def port(self) -> int | None:
        return None if self._server is None else int(self._server.server_address[1])

    def start(self) -> None:
        if not self.enabled or self._server is not None:
            return
        try:
            self._server = ThreadingHTTPServer((self.config.host, self.config.port), _handler(self))
        except OSError as exc:
            raise ConfigError(
                "metrics.port", f"cannot listen on {self.config.host}:{self.config.port}: {exc}"
            ) from exc
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="metrics-http", daemon=True)
        self._thread.start()
        log.info("metrics on http://%s:%d/metrics (/health, /ready)", self.config.host, self.port)

    def stop(self) -> None:
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(5.0)
        self._server = self._thread = None

    # -- called by the publisher thread ------------------------------------------------------------
    def batch_sent(self, batch_id: int) -> None:
        self._sent[batch_id] = time.monotonic()

    def batch_acked(self, batch_id: int) -> None:
        sent = self._sent.pop(batch_id, None)
        if sent is not None:
            self.latency.observe(time.monotonic() - sent)
        # Rolled-back batches never ack: forget sends older than any ack can be (ids only grow).
        for stale in [b for b in self._sent if b < batch_id]:
            del self._sent[stale]

    # -- health ------------------------------------------------------------------------------------
    def health(self) -> tuple[bool, str]:
        state = self.relay.stats.state
        return state != "failed", f"state {state}"

    def readiness(self) -> tuple[bool, str]:
        state = self.relay.stats.state
        if state != "running":
            return False, f"not active: state {state}"
        if not self.collector.leader():
            return False, "not the active relay (standing by or fenced)"
        lag = self.collector.lag_seconds(self.collector.server())
        if lag is not None and lag > self.config.ready_max_lag_seconds:
            return False, f"behind: lag {lag:.1f} s > {self.config.ready_max_lag_seconds:g} s"
        return True, "active and caught up"


class RelayCollector(Collector):
    """Builds every relay metric from the relay's live state at scrape time."""

    def __init__(self, exporter: MetricsExporter) -> None:
        self.exporter = exporter
        self.relay = exporter.relay
        self._probe = RetentionProbe(self.relay.config.source)
        self._view = ServerView()
        self._lock = threading.Lock()

    def saved(self) -> ResumePoint | None:
        inst = self.relay.instance
        return inst.saved_point

    def leader(self) -> bool:
        leadership = getattr(self.relay, "leadership", None)
        if leadership is None:  # no HA: the one relay is the active one while it runs
            return self.relay.stats.state in ("running", "retrying")
        return bool(leadership.fenced() is None)

    def server(self) -> ServerView:
        """The cached server view, refreshed when older than ``server_check_seconds``."""
        with self._lock:
            now = time.monotonic()
            if now - self._view.checked >= self.exporter.config.server_check_seconds:
                self._view = self._check_server(now)
            return self._view

    def _check_server(self, now: float) -> ServerView:
        point = self.saved()
        start = self.relay.instance.start_point
        journal, offset = (
            (point.journal, point.offset) if point else (start.journal, start.offset) if start else ("", 0)
        )
        try:
            info = inspect_server(
                self.relay.config.source, schema_history=self.relay.config.schema.history != "off"
            )
            view = ServerView(checked=now, up=True)
            if journal:
                view.lag_bytes = bytes_behind(info.binlogs, journal, offset)
                retention = self._probe.check(journal)
                view.runway, view.expire_seconds = retention.runway(), retention.expire_seconds
            return view
        except RelayError as exc:
            log.warning("metrics: cannot check the MySQL server: %s", exc)
            return ServerView(checked=now, up=False)

    def lag_seconds(self, view: ServerView) -> float | None:
        """The status file's lag (``relay.daemon.status.lag_seconds``); also 0 when the server says the
        saved position is its binlog end, as ``relay status`` says."""
        point = self.saved()
        caught_up = view.lag_bytes == 0 or self.relay.instance.caught_up()
        instance = self.relay.instance
        return self.relay.stats.lag_seconds(
            caught_up, point.timestamp if point is not None else 0, instance.oldest_pending_ms()
        )

    def collect(self) -> Iterator[Metric]:
        yield from self._counters()
        yield from self._gauges()
        yield from self._snapshot_gauges()
        yield from self._server_gauges(self.server())

    def _counters(self) -> Iterator[Metric]:
        s = self.relay.stats
        for name, doc, value in (
            ("relay_rows_published", "Row changes published and acknowledged by Kafka", s.rows_published),
            ("relay_records_published", "Kafka records published and acknowledged", s.records_published),
            ("relay_batches_acked", "Batches acknowledged to the store (position saved)", s.batches_acked),
            (
                "relay_batches_rolled_back",
                "Batches rolled back after a failed delivery",
                s.batches_rolled_back,
            ),
        ):
            yield CounterMetricFamily(name, doc, value=value)
        if s.heartbeats is not None:  # relay.daemon.heartbeats: records sent, queries run, their failures
            beats = CounterMetricFamily(
                "relay_heartbeats", "Heartbeat records and queries done, and their failures", labels=["kind"]
            )
            for kind in ("records", "record_failures", "queries", "query_failures"):
                beats.add_metric([kind], s.heartbeats.get(kind, 0))
            yield beats

    def _gauges(self) -> Iterator[Metric]:
        relay, s = self.relay, self.relay.stats
        yield _gauge(
            "relay_publish_rate_records",
            "Records acknowledged per second over the last 10 s",
            s.publish_rate(),
        )
        fill = relay.instance.store.fill()
        yield _gauge("relay_store_entries", "Entries held by the ring store (put, not acked)", fill.entries)
        yield _gauge(
            "relay_store_bytes",
            "Bytes held by the ring store (as it weighs entries: store.entry_weight)",
            fill.bytes,
        )
        store = relay.instance.store.config
        yield _gauge("relay_store_slots", "Ring store capacity in entries", store.buffer_size)
        yield _gauge(
            "relay_store_budget_bytes", "Ring store capacity in bytes (MEMSIZE mode)", store.memory_budget
        )
        yield _gauge("relay_mapping_version", "Version of the mapping in use", _number(relay.mapping.version))
        yield from _mapping_gauges(relay.mapping_state())
        yield _gauge(
            "relay_leader", "1 while this process is the active relay of its instance", int(self.leader())
        )
        state = GaugeMetricFamily(
            "relay_state", "The relay's state (1 for the current one)", labels=["state"]
        )
        state.add_metric([redact(s.state)], 1)
        yield state
        point = self.saved()
        if point is not None:
            pos = GaugeMetricFamily(
                "relay_position_offset", "Offset of the saved position", labels=["journal"]
            )
            pos.add_metric([redact(point.journal)], point.offset)
            yield pos
            yield _gauge(
                "relay_position_file_index",
                "Number of the saved position's binlog file",
                _file_index(point.journal),
            )
            if point.timestamp:
                yield _gauge(
                    "relay_position_timestamp_seconds",
                    "Binlog time of the saved position",
                    point.timestamp / 1000,
                )

    def _snapshot_gauges(self) -> Iterator[Metric]:
        snap = self.exporter.relay.instance.snapshot_status()
        if snap is None:
            return
        rows = GaugeMetricFamily(
            "relay_snapshot_rows", "Snapshot rows put into the store, per physical table", labels=["table"]
        )
        chunks = GaugeMetricFamily(
            "relay_snapshot_chunks", "Snapshot chunks read, per table", labels=["table"]
        )
        for name, t in snap["tables"].items():
            rows.add_metric([redact(name)], t["rows"])
            chunks.add_metric([redact(name)], t["chunks"])
        yield rows
        yield chunks
        yield _gauge("relay_snapshot_acked_rows", "Snapshot rows acknowledged by Kafka", snap["acked_rows"])
        remaining = sum(1 for t in snap["tables"].values() if not t["done"])
        yield _gauge("relay_snapshot_tables_remaining", "Tables the snapshot has still to read", remaining)
        yield _gauge("relay_snapshot_rows_per_second", "Snapshot read rate", snap["rows_per_second"])
        yield _gauge(
            "relay_snapshot_read_percent",
            "Share of the snapshot's estimated rows read (100: done)",
            snap["percent"],
        )
        if snap["eta_seconds"] is not None:
            yield _gauge(
                "relay_snapshot_eta_seconds", "Estimated time to finish the snapshot", snap["eta_seconds"]
            )

    def _server_gauges(self, view: ServerView) -> Iterator[Metric]:
        yield _gauge("relay_source_up", "1 when the last check of the MySQL server succeeded", int(view.up))
        lag = self.lag_seconds(view)
        if lag is not None:
            yield _gauge(
                "relay_lag_seconds",
                "Now minus the binlog time of the oldest change not yet acknowledged (0 while caught up)",
                lag,
            )
        if view.lag_bytes is not None:
            yield _gauge("relay_lag_bytes", "Binlog bytes written after the saved position", view.lag_bytes)
        if view.runway is not None:
            yield _gauge(
                "relay_retention_runway_seconds",
                "Seconds until the binlog file holding the saved position may be purged (+Inf: never)",
                view.runway - (time.monotonic() - view.checked)
                if math.isfinite(view.runway)
                else view.runway,
            )
        if view.expire_seconds is not None:
            yield _gauge(
                "relay_binlog_expire_seconds",
                "The server's binlog expiry period (0: never)",
                view.expire_seconds,
            )


REASON_LABEL_CHARS = 300  # a refusal's reason as a label: its problems on one line, cut here


def _mapping_gauges(state: MappingState) -> Iterator[Metric]:
    """A version waiting for a batch boundary; the last version refused, when and why (an info metric:
    the reason is a label, as short as Prometheus labels should be)."""
    if state.pending is not None:
        yield _gauge(
            "relay_mapping_pending_version", "Mapping version waiting to be switched to", state.pending
        )
    refused = state.refused
    if refused is None:
        return
    version = -1 if refused.version is None else refused.version
    yield _gauge("relay_mapping_refused_version", "Last mapping version refused (-1: it named none)", version)
    yield _gauge(
        "relay_mapping_refused_timestamp_seconds", "When the last mapping version was refused", refused.at
    )
    reason = " ".join(line.strip() for line in refused.reason.splitlines() if line.strip())
    info = GaugeMetricFamily(
        "relay_mapping_refused_info",
        "The last mapping version refused and why (always 1)",
        labels=["version", "reason"],
    )
    info.add_metric([str(version), redact(reason)[:REASON_LABEL_CHARS]], 1)
    yield info


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


def _number(version: Any) -> float:
    try:
        return float(version)
    except (TypeError, ValueError):
        return math.nan


def _file_index(journal: str) -> float:
    number = file_number(journal)
    return float(number) if number is not None else math.nan


def _handler(exporter: MetricsExporter) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, generate_latest(exporter.registry), CONTENT_TYPE_LATEST)
            elif path in ("/health", "/ready"):
                ok, why = exporter.health() if path == "/health" else exporter.readiness()
                self._send(200 if ok else 503, (redact(why) + "\n").encode(), "text/plain; charset=utf-8")
            else:
                self._send(404, b"not found: try /metrics, /health or /ready\n", "text/plain")

        def _send(self, code: int, body: bytes, content_type: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("metrics http: " + format, *args)

    return Handler
