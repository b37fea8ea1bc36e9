"""How a relay process runs: ``relay run``'s body for a loaded config, and its logging set-up.

Owns ``run_relay`` (used by ``relay run`` and by a cluster node's child, ``relay cluster child``) and the
process's log handler (text or JSON, secrets redacted). Runs on the CLI's main thread; installs the
graceful SIGTERM/SIGINT handlers of a running relay.
"""

from __future__ import annotations

import faulthandler
import json
import logging
import re
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING

from relay.common.redact import RedactingFormatter
from relay.common.retry import Backoff
from relay.config.load import RelayConfig
from relay.errors import LeadershipError, LeadershipUnavailableError, MissingTopicError, RelayError

if TYPE_CHECKING:
    from relay.daemon.pipeline import Relay

log = logging.getLogger("relay")

EXIT_LEADERSHIP_LOST = 3  # `relay run` lost its HA leadership or was fenced: restart it to stand by


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {
            "time": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            out["error"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


class RepeatFilter(logging.Filter):
    """A client library's repeated line (kazoo's "Connection dropped … Connection refused" several times
    a second while ZooKeeper is away) once per ``window`` seconds: the relay says what it waits for in
    its own line per attempt. Lines of our own loggers always pass."""

    def __init__(self, prefixes: tuple[str, ...] = ("kazoo",), window: float = 60.0) -> None:
        super().__init__()
        self.prefixes, self.window = prefixes, window
        self._last: dict[tuple[str, int, str], float] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith(self.prefixes):
            return True
        key = (record.name, record.levelno, re.sub(r"\d+", "N", str(record.msg)))
        now = time.monotonic()
        if now - self._last.get(key, -self.window) < self.window:
            return False
        self._last[key] = now
        return True


def setup_logging(level: str, fmt: str, verbose: int) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(RepeatFilter())
    if fmt == "json":
        handler.setFormatter(RedactingFormatter(_JsonFormatter()))
    else:
        handler.setFormatter(
            RedactingFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbose >= 2 else getattr(logging, level.upper()))


def run_relay(config: RelayConfig, verbose: int, started: Callable[[Relay], None] | None = None) -> int:
    """``relay run`` of a loaded config (also a cluster node's child, ``relay cluster child``):
    ``started`` is called with each relay once it is built (the child's node watchdog: its ``stop``, its
    ZooKeeper session).

    A start that fails on something that may come back — the broker, the source or ZooKeeper does not
    answer, a mapping store out of reach — is tried again with ``publish.retry``'s backoff, one warning line
    per attempt, until it starts or SIGTERM/SIGINT stops the waiting (exit 0). What a person must fix (a
    refused login, a missing topic with ``topics.create: false``, a bad mapping) stops it at once."""
    config.check_state_location()  # before anything is written: a moved position must not be left behind
    setup_logging(config.logging.level, config.logging.format, verbose)
    stopping = threading.Event()
    current: list[Relay] = []

    def stop(signum: int, frame: FrameType | None) -> None:
        log.info("signal %d: stopping at the next batch boundary", signum)
        stopping.set()
        for relay in current:
            relay.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    # SIGUSR1: every thread's Python stack to stderr (the log), written from the C signal handler — it
    # answers even when the main thread is stuck in a call that never returns to Python.
    faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)
    log.debug("effective configuration (secrets redacted): %s", config)
    backoff = config.publish.retry.start(sleep=stopping.wait)
    while not stopping.is_set():
        relay: Relay | None = None
        try:
            relay = _build(config)
            current[:] = [relay]
            if stopping.is_set():
                relay.stop()
            if started is not None:
                started(relay)
            point = relay.run()
        except LeadershipError as exc:
            if isinstance(exc, LeadershipUnavailableError) and not _published(relay):
                if not stopping.is_set():
                    _not_yet(config, exc, backoff)
                continue
            # HA: the term is over (session suspended or lost, lease expired). Nothing was acked after the
            # fence; a supervisor restarts the process, which then stands by (``relay.ha.leadership``).
            log.error("%s; exiting with status %d", exc, EXIT_LEADERSHIP_LOST)
            return EXIT_LEADERSHIP_LOST
        except RelayError as exc:
            if not exc.retriable or isinstance(exc, MissingTopicError) or _published(relay):
                raise
            if not stopping.is_set():
                _not_yet(config, exc, backoff)
            continue
        log.info("relay %s exited; saved position %s", config.instance, point)
        return 0
    log.info("relay %s stopped before it started", config.instance)
    return 0


def _build(config: RelayConfig) -> Relay:
    from mapping.store import keep_version
    from relay.kafka.topics import probe_brokers
    from relay.wiring import build_relay, mapping_store, publisher_config

    store = mapping_store(config)  # mapping.store: the file or the ZooKeeper node
    try:
        mapping = store.read()
        keep_version(store, mapping, f"read by relay {config.instance}")  # a restart may resume under it
    finally:
        store.close()
    # the brokers first: a start that cannot publish opens no source, starts no snapshot
    probe_brokers(publisher_config(config, mapping).admin_settings(), config.kafka.connect_timeout_seconds)
    return build_relay(config, mapping)


def _published(relay: Relay | None) -> bool:
    """Whether the relay got as far as publishing (then an error is the run's, not the start's)."""
    return relay is not None and relay.publishing


def _not_yet(config: RelayConfig, exc: RelayError, backoff: Backoff) -> None:
    """One line per failed start, then the backoff's wait (cut short by SIGTERM)."""
    delay = backoff.next_delay()
    log.warning(
        "relay %s cannot start yet (attempt %d): %s; trying again in %.1f s",
        config.instance,
        backoff.tries + 1,
        exc,
        delay,
    )
    backoff.tries += 1
    backoff.sleep(delay)
