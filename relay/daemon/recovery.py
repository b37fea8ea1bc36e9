"""The publish loop's failure and stop paths: what happens to the batches in flight.

Owns ``Recovery``. Runs on the publisher thread (``Relay.run``). The contract (docs/architecture.md,
"Invariants"):

- no loss: a retriable failure aborts the batches in flight, rolls the store back to the saved position
  and resends after a backoff (``publish.retry``): failure → abort in flight → rollback → backoff;
- a record Kafka will never take stops the relay with a clear error (``RecordRejectedError``), unless
  a dead-letter topic is configured — never a retry spin. Before it stops, the records sent before
  the refused one are given ``publish.drain_seconds`` to land and the batches completed before it
  are acked, so the saved position ends right before the refused record's batch;
- ``stop()`` ends the loop at a batch boundary: batches in flight get ``publish.drain_seconds`` to be
  delivered and acked, the rest is rolled back, the position stays at the last acknowledged batch:
  stop → drain → ack → rollback;
- a fatal error (lost leadership included) saves what was acked and abandons the rest; with the
  leadership lost the open transaction is left to the successor, which aborts it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Protocol

from relay.common.retry import Backoff
from relay.config.load import RelayConfig
from relay.daemon.reload import HotReload
from relay.daemon.status import RelayStats
from relay.daemon.transactions import Transactions
from relay.errors import PublishError, RecordRejectedError, RelayError
from relay.kafka.publisher import KafkaPublisher
from relay.kafka.records import BatchHandle
from relay.source.instance import CanalInstance

log = logging.getLogger(__name__)


class Acks(Protocol):
    """The ack path (``relay.daemon.pipeline.BatchPath``) as recovery uses it."""

    def ack_delivered(self) -> int:
        """Ack the batches delivered so far (a prefix); how many."""
        ...

    def forget(self, batch_ids: Iterable[int]) -> None:
        """Batches rolled back: they will be sent again under new ids."""
        ...


class Recovery:
    """Retries, rollbacks and the drain at stop, for one relay."""

    def __init__(
        self,
        config: RelayConfig,
        instance: CanalInstance,
        publisher: KafkaPublisher,
        stats: RelayStats,
        reload: HotReload,
        acks: Acks,
        transactions: Transactions,
    ) -> None:
        self.config, self.stats = config, stats
        self._instance, self._publisher, self._reload = instance, publisher, reload
        self._acks, self._transactions = acks, transactions

    def recover(self, failed: BatchHandle, backoff: Backoff) -> None:
        """A batch failed: retry it (with every batch after it), or stop on an error that will not pass."""
        error = failed.error
        assert error is not None
        if not error.retriable:
            if isinstance(error, RecordRejectedError):
                self._settle()
            log.error("stopping: %s; the position stays at %s", error, self.saved())
            raise error
        self.retry(error, backoff)

    def retry(self, error: PublishError, backoff: Backoff) -> None:
        """Abort every batch in flight, roll the store back to the saved position, back off, go on."""
        aborted = self._publisher.abort_inflight()
        self._reload.rolled_back(self._instance.store.sequences[1])  # re-deliver these before a switch
        self._instance.rollback()
        self._acks.forget(aborted)
        self.stats.batches_rolled_back += len(aborted)
        self.stats.state = "retrying"
        log.warning(
            "%s; rolled back batches %s, the position stays at %s; retrying after a backoff",
            error,
            aborted,
            self.saved(),
        )
        if not backoff.wait():  # sleeps on the stop event: a stop cuts the wait short
            raise PublishError(f"gave up retrying: {error}") from error
        self.stats.state = "running"

    def _settle(self) -> None:
        """Stopping on a refused record: let what was sent before it land, ack the batches before it.

        The failed batch stays unacked (the position ends right before it); its records sent before
        the refused one are delivered too, and published again, identically, after a restart.
        """
        left = self._publisher.flush(self.config.publish.drain_seconds)
        self._acks.ack_delivered()
        if left:
            log.warning("%d records sent before the refused one were not delivered in time", left)

    def saved(self) -> str:
        """The position the relay would resume from now."""
        return str(self._instance.last_saved or self._instance.start_point)

    def drain(self) -> None:
        """Stopping: give batches in flight time to be delivered and acked, roll the rest back."""
        publisher = self._publisher
        deadline = time.monotonic() + self.config.publish.drain_seconds
        while publisher.inflight() and time.monotonic() < deadline and publisher.failed() is None:
            publisher.poll(0.1)
            if self._transactions.open():
                self._transactions.commit()
            self._acks.ack_delivered()
        self.abandon()
        log.info("relay %s stopped; position %s", self.config.instance, self.saved())

    def abandon(self, term_over: bool = False) -> None:
        """Save what was acked, roll back the rest; ``term_over`` (leadership lost): the open transaction
        is left to the successor, which aborts it (``KafkaPublisher.abort_inflight``)."""
        try:  # what was acked is delivered: its position is written before anything else happens
            self._instance.save_pending()
        except RelayError as exc:
            log.warning("could not save the position %s: %s", self._instance.saved_point, exc)
        try:
            aborted = self._publisher.abort_inflight(term_over=term_over)
            if aborted:
                self._instance.rollback()
                log.info(
                    "batches %s not acknowledged; the position stays at %s: they will be published again",
                    aborted,
                    self.saved(),
                )
        except RelayError as exc:
            log.warning("while abandoning the batches in flight: %s", exc)
