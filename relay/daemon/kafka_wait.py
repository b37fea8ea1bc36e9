"""A batch waiting for Kafka longer than it should: the relay says why, in its log and in ``relay status``.

Owns ``KafkaWait``. While nothing is acknowledged the relay keeps its position and waits (librdkafka retries,
then the publish loop rolls back and resends: ``relay.daemon.recovery``); until a delivery times out
(``kafka.delivery_timeout_seconds``, 120 s by default) nothing in that says why. So once the oldest batch in
flight has waited ``REPORT_AFTER_S``, and every ``REPEAT_S`` after that while it still waits, the publisher
is asked what the cluster's metadata shows (``KafkaPublisher.diagnose``: a partition without a leader, a
broker gone, fewer in-sync replicas than ``min.insync.replicas``), and the answer goes to a warning and to
the status (``kafka_waiting``: the batch, how long, why). When batches are acknowledged again it says so
once and the status entry goes.

Runs on the publisher thread, between steps of the publish loop; the diagnosis blocks for up to a few
seconds, only while the relay waits on Kafka anyway.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from relay.daemon.status import RelayStats
from relay.kafka.publisher import KafkaPublisher

log = logging.getLogger(__name__)

REPORT_AFTER_S = 5.0  # a batch unacknowledged this long is reported
REPEAT_S = 10.0  # and reported again this often while it waits
NOTHING_SEEN = "the cluster's metadata shows nothing wrong: a slow or frozen broker, or the network"


class KafkaWait:
    """Reports the oldest batch in flight once it waited too long (see the module docstring)."""

    def __init__(
        self,
        publisher: KafkaPublisher,
        stats: RelayStats,
        oldest: Callable[[], tuple[int, float] | None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._publisher, self._stats, self._oldest, self._clock = publisher, stats, oldest, clock
        self._next = 0.0  # when the waiting batch is reported again
        self._why = ""

    def check(self) -> None:
        oldest, now = self._oldest(), self._clock()
        waited = 0.0 if oldest is None else now - oldest[1]
        if oldest is None or waited < REPORT_AFTER_S:
            if self._stats.kafka_waiting is not None:
                log.info("Kafka acknowledges again (%s)", self._stats.kafka_waiting["why"])
                self._stats.kafka_waiting = None
            self._next = 0.0
            return
        batch_id = oldest[0]
        if now >= self._next:
            self._why = "; ".join(self._publisher.diagnose()) or NOTHING_SEEN
            self._next = self._clock() + REPEAT_S
            log.warning(
                "batch %d sent %.0f s ago and not acknowledged yet (%d batches in flight): %s",
                batch_id,
                waited,
                self._publisher.inflight(),
                self._why,
            )
        self._stats.kafka_waiting = {"batch": batch_id, "seconds": round(waited, 1), "why": self._why}
