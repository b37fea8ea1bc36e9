"""librdkafka's own log lines through Python logging, at DEBUG.

Without a ``logger`` in its settings a confluent-kafka client writes librdkafka's log straight to stderr:
``%3|1796589369.918|FAIL|rdkafka#consumer-1| … Connect to ipv4#127.0.0.1:1 failed: Connection refused``,
several times a second while a broker is unreachable — dozens of lines before the command's own one-line
error, hundreds a minute in ``relay run``'s log. ``quiet(settings)`` adds a logger that hands them to the
``relay.librdkafka`` Python logger at DEBUG (seen with ``-vv`` / ``logging.level: debug``); what a failure
means is said by the code that sees it, once per attempt. A ``logger`` the caller set is kept.

Pure function plus a stateless adapter; any thread (confluent-kafka calls it from the thread that polls).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

LOG = logging.getLogger("relay.librdkafka")
# For consumers that read a topic through (verify, Spark's relay-kafka reader): a partition whose local queue
# was full is fetched again after this, not librdkafka's 1 s (fetch.queue.backoff.ms); a read that outran the
# fetches stood waiting for them (a 100,000-record verify read took 22 % longer).
FETCH_QUEUE_BACKOFF_MS = 10


class _Debug:
    """What confluent-kafka calls: ``log(level, format, *args)`` (syslog levels), sent to DEBUG."""

    def log(self, level: int, msg: str, *args: Any) -> None:
        if LOG.isEnabledFor(logging.DEBUG):
            LOG.debug(msg, *args)


_ADAPTER = _Debug()


def quiet(settings: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a client's ``settings`` whose librdkafka log goes to ``relay.librdkafka`` at DEBUG."""
    return {"logger": _ADAPTER, **settings}
