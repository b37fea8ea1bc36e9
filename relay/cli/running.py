"""How a relay process runs: ``relay run``'s body for a loaded config, and its logging set-up.

Owns ``run_relay`` (used by ``relay run`` and by a cluster node's child, ``relay cluster child``) and the
process's log handler (text or JSON, secrets redacted). Runs on the CLI's main thread; installs the
graceful SIGTERM/SIGINT handlers of a running relay.
"""

from __future__ import annotations

import faulthandler
import json
import logging
import signal
import sys
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING

from relay.common.redact import RedactingFormatter
from relay.config.load import RelayConfig
from relay.errors import LeadershipError

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


def setup_logging(level: str, fmt: str, verbose: int) -> None:
    handler = logging.StreamHandler(sys.stderr)
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
    ``started`` is called with the relay once it is built (the child's node watchdog: its ``stop``, its
    ZooKeeper session)."""
    from mapping.store import keep_version
    from relay.wiring import build_relay, mapping_store

    config.check_state_location()  # before anything is written: a moved position must not be left behind
    setup_logging(config.logging.level, config.logging.format, verbose)
    store = mapping_store(config)  # mapping.store: the file or the ZooKeeper node
    try:
        mapping = store.read()
        keep_version(store, mapping, f"read by relay {config.instance}")  # a restart may resume under it
    finally:
        store.close()
    log.debug("effective configuration (secrets redacted): %s", config)
    relay = build_relay(config, mapping)

    def stop(signum: int, frame: FrameType | None) -> None:
        log.info("signal %d: stopping at the next batch boundary", signum)
        relay.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    # SIGUSR1: every thread's Python stack to stderr (the log), written from the C signal handler — it
    # answers even when the main thread is stuck in a call that never returns to Python.
    faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)
    if started is not None:
        started(relay)
    try:
        point = relay.run()
    except LeadershipError as exc:
        # HA: the term is over (session suspended or lost, lease expired). Nothing was acked after the
        # fence; a supervisor restarts the process, which then stands by (``relay.ha.leadership``).
        log.error("%s; exiting with status %d", exc, EXIT_LEADERSHIP_LOST)
        return EXIT_LEADERSHIP_LOST
    log.info("relay %s exited; saved position %s", config.instance, point)
    return 0
