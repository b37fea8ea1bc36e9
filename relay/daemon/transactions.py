"""Kafka transactions, from the publish loop's side (``kafka.transactions``, ``kafka.exactly_once``).

Owns ``Transactions``: fencing older producers when this process starts to lead, deciding when the open
transaction is due, and committing it — in exactly-once mode with the resume point after its last batch
inside it (``relay.kafka.positions``). Runs on the publisher thread (``Relay.run``). In idempotent mode
the publisher has no transaction: ``due`` is always False and ``start`` only checks the fence.

The contract: after the election, ``init_transactions`` fences every older producer of this instance's
``transactional.id`` (a zombie's queued records are refused by the broker, its open transaction
aborted). Consecutive batches share one Kafka transaction, committed when it holds
``publish.max_inflight_batches`` batches or has been open ``kafka.transaction_linger_seconds`` — the
fence is checked first; a batch is acked (and its position saved) only once its transaction committed.
A failed transaction is aborted and its batches rolled back and resent after a backoff
(``relay.daemon.recovery``); a fenced producer stops the relay like lost leadership
(``ProducerFencedError``, exit status 3). Exactly-once mode first proves that the broker hides aborted
records (or refuses to start).

Transactional mode (the position outside Kafka) writes a commit intent before each commit and settles one
left by a predecessor at start, after ``init_transactions`` and before the instance reads its position
(``relay.kafka.commit_intent``): a transaction that committed is never published again by a successor.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from relay.config.load import RelayConfig
from relay.daemon.fence import Fence
from relay.kafka.commit_intent import Probe, Settler, intent, pending, settle
from relay.kafka.positions import KafkaPositionStore, prove_aborted_records_hidden
from relay.kafka.publisher import KafkaPublisher
from relay.kafka.records import Record
from relay.positions.store import PositionStore, ResumePoint
from relay.source.instance import CanalInstance

log = logging.getLogger(__name__)


class Transactions:
    """When and how the publisher's open transaction commits. ``exactly_once``: the Kafka position
    store whose records go into the transactions (None: not exactly-once mode). ``settler``:
    transactional mode's commit intents (how to settle one at start), with ``positions`` (None: no
    intents: idempotent or exactly-once mode)."""

    def __init__(
        self,
        config: RelayConfig,
        instance: CanalInstance,
        publisher: KafkaPublisher,
        fence: Fence,
        exactly_once: KafkaPositionStore | None = None,
        intents: tuple[PositionStore, Settler] | None = None,
    ) -> None:
        self._max_batches = config.publish.max_inflight_batches
        self._linger = config.kafka.transaction_linger_seconds
        self._instance, self._publisher, self._fence = instance, publisher, fence
        self._exactly_once = exactly_once
        self._intents = intents if exactly_once is None else None
        # Called right before a commit (the transaction topic's ENDs, ``relay.daemon.txn_topic``);
        # False: not yet, the transaction stays open.
        self.before_commit: Callable[[], bool] | None = None

    def start(self) -> None:
        """Exactly-once: prove the broker hides aborted records (or refuse, before fencing anyone);
        transactional: fence older producers of our ``transactional.id`` before reading any position."""
        if self._exactly_once is not None:
            prove_aborted_records_hidden(self._exactly_once.config)
        self._fence.check()
        self._publisher.init_transactions()
        if self._intents is not None:
            self._settle(*self._intents)

    def _settle(self, positions: PositionStore, settler: Settler) -> None:
        """A commit intent left by a predecessor (its transaction now committed or aborted, by our
        ``init_transactions``): the position becomes the point after it or before it."""
        saved = positions.load()
        if saved is None or pending(saved) is None:
            return
        point, why = settle(saved, settler)
        self._fence.check()
        positions.save(point)
        log.warning("a commit intent was saved before the last stop: %s", why)

    def due(self) -> bool:
        """A transaction commits when it holds ``max_inflight_batches`` batches or is ``linger`` old."""
        age = self._publisher.transaction_age()
        if age is None:
            return False
        return self._publisher.inflight() >= self._max_batches or age >= self._linger

    def open(self) -> bool:
        """A transaction is open (draining: commit it before the batches in it can be acked)."""
        return self._publisher.transaction_age() is not None

    def commit(self) -> bool:
        """Commit the open transaction (exactly-once: with the resume point after its last batch); False
        when it did not (a failure: ``failed()`` says why; or ``before_commit`` asked to wait)."""
        if self.before_commit is not None and not self.before_commit():
            return False
        ids = self._publisher.batch_ids()
        if not ids:
            return False  # nothing in flight, nothing to commit
        extra: list[Record] = []
        point = self._instance.resume_point(ids[-1])
        eos = self._exactly_once
        if eos is not None:
            extra.append(eos.record(point, self._fence.epoch))
        self._fence.check()
        before_end = None if self._intents is None else (lambda landed: self._intend(point, landed))
        committed = self._publisher.commit(extra, before_end)
        if committed and eos is not None:
            eos.committed(point)
        return committed

    def _intend(self, after: ResumePoint, landed: Any) -> None:
        """Before the commit: the intent naming the transaction (one of its records) and the point after
        it. A transaction without a record has nothing a successor could publish twice: no intent."""
        if landed is None:
            return
        probe = Probe(landed.topic(), landed.partition(), landed.offset())  # a confluent_kafka Message
        self._fence.check()
        self._instance.intend(lambda before: intent(before, after, probe))
