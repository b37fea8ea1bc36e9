"""The transaction topic (``kafka.transaction_topic``) from the publish loop's side: when BEGIN and END
records go out, and what survives a rollback or a restart.

Owns ``TransactionTopic``, a room of ``relay.daemon.pipeline.BatchPath`` (only when the setting is on). The
records themselves are ``relay.kafka.txn_meta``'s. The rules (docs/architecture.md, "Transaction metadata"):

- BEGIN: made with the transaction's first data record and put right before it in the same batch, so it is
  produced before any row of the transaction is sent.
- END: made when the entry closing the transaction is encoded (batch N, maybe later than the batches
  holding its rows), but produced only once every record of batch N and of every batch before it was
  acknowledged by Kafka (``KafkaPublisher.append``): it becomes a record of batch N, so batch N — and
  the position after the transaction — is acked to the store only after the END is delivered too. A crash
  before that re-publishes the transaction's last batch and its END (at-least-once, like any record); an
  END is never produced before the rows it counts were acknowledged.
- Transactional and exactly-once modes: the END goes into the same Kafka transaction as batch N. Before the
  transaction commits the loop waits for its records and adds the ENDs that are due
  (``before_commit``); the commit waits while one cannot be added.
- A rollback (retry) restores the state as it was after the last acknowledged batch: the batches are sent
  again, with their BEGIN/END again where they fall.
- A batch ending inside a transaction saves the transaction's state (counts, orders, identity range) in the
  resume point after it (``ResumePoint.extra["transaction"]``, ``CanalInstance.carry``): a restart there
  continues the counts, so the END of a transaction cut by a restart counts all of it. Resumed inside a
  transaction without that state (the setting was just turned on, ``relay positions set``), the relay
  cannot count that transaction whole: its rows get no transaction metadata and it has no BEGIN/END
  (logged); the next transactions have.

Runs on the publisher thread.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from mapping.model import Mapping
from relay.canal.entry import Entry
from relay.kafka.publisher import KafkaPublisher
from relay.kafka.records import Record
from relay.kafka.txn_meta import EXTRA_KEY, OpenTxn, TransactionMeta
from relay.source.instance import CanalInstance

log = logging.getLogger(__name__)

_State = tuple[OpenTxn | None, tuple[str, int, int] | None]
_CODECS_CACHED = 65536  # physical tables whose codec is remembered (as the encoder's plan cache)


class TransactionTopic:
    """BEGIN/END records and transaction headers for the batches of one relay (module docstring)."""

    def __init__(
        self,
        topic: str,
        source_id: str,
        instance: CanalInstance,
        publisher: KafkaPublisher,
        delivery_timeout_seconds: float,
    ) -> None:
        self.topic = topic
        self._meta = TransactionMeta(topic, source_id)
        self._instance, self._publisher = instance, publisher
        self._timeout = delivery_timeout_seconds
        self._acked: _State = (None, None)  # the state after the last acknowledged batch
        self._sent: dict[int, _State] = {}  # batch id → the state after it
        self._ends: dict[int, list[Record]] = {}  # batch id → its END records, not yet produced
        self._pending: list[Record] = []  # ENDs of the batch being encoded
        self._codecs: dict[tuple[str, str], bool] = {}
        self._codecs_of: Mapping | None = None

    def start(self) -> None:
        """Continue the transaction the saved position is inside of, if any (before the first batch)."""
        point = self._instance.saved_point
        self._meta.open = self._meta.unaccounted = None
        if point is not None and point.skip > 0:
            state = OpenTxn.from_extra(point.extra.get(EXTRA_KEY))
            if state is not None and (state.journal, state.offset, state.generation) == (
                point.journal,
                point.offset,
                point.generation,
            ):
                self._meta.open = state
            else:
                self._meta.unaccounted = (point.journal, point.offset, point.generation)
                log.warning(
                    "resuming inside the transaction at %s:%d without its saved counts (saved without "
                    "kafka.transaction_topic, or set by an operator): its rows are published without "
                    "transaction metadata and it gets no BEGIN/END record",
                    point.journal,
                    point.offset,
                )
        self._acked = self._state()

    def follow(self, mapping: Mapping, entry: Entry, records: list[Record]) -> list[Record]:
        """The records of one entry of the batch being encoded, with the transaction's headers and BEGIN."""
        out, end = self._meta.follow(entry, records, self._debezium(mapping, entry))
        if end is not None:
            self._pending.append(end)
        return out

    def batch_sent(self, batch_id: int) -> None:
        """Batch ``batch_id`` was encoded: its ENDs wait for it to be delivered; the point after it keeps
        the open transaction's state."""
        state = self._state()
        self._sent[batch_id] = state
        if self._pending:
            self._ends[batch_id], self._pending = self._pending, []
        open_txn = state[0]
        self._instance.carry(batch_id, EXTRA_KEY, None if open_txn is None else open_txn.to_extra())

    def release(self) -> bool:
        """Produce the ENDs whose batches (and every batch before them) are delivered; True when none
        waits any more."""
        for batch_id in list(self._ends):
            if not self._publisher.append(batch_id, self._ends[batch_id]):
                return False
            records = self._ends.pop(batch_id)
            log.debug("batch %d delivered: %d END records sent with it", batch_id, len(records))
        return True

    def before_commit(self) -> bool:
        """Transactional mode, right before a commit: wait for the transaction's records, add the ENDs
        that are due; False (do not commit yet) while an END cannot be added."""
        if not self._ends:
            return True
        self._publisher.flush(self._timeout)
        return self.release()

    def acked(self, batch_ids: Iterable[int]) -> None:
        for batch_id in batch_ids:
            state = self._sent.pop(batch_id, None)
            if state is not None:
                self._acked = state
            if self._ends.pop(batch_id, None):  # cannot be: release() runs before every ack
                log.error("batch %d acked with its END records not produced", batch_id)

    def forget(self, batch_ids: Iterable[int]) -> None:
        """Rolled back: every batch not acknowledged is handed out again (the store rolls back whole):
        continue from the state after the last acknowledged one."""
        del batch_ids  # all outstanding ones are, whichever the publisher still had
        self._sent.clear()
        self._ends.clear()
        self._pending = []
        open_txn, unaccounted = self._acked
        self._meta.open = None if open_txn is None else open_txn.copy()
        self._meta.unaccounted = unaccounted

    def _state(self) -> _State:
        open_txn = self._meta.open
        return (None if open_txn is None else open_txn.copy(), self._meta.unaccounted)

    def _debezium(self, mapping: Mapping, entry: Entry) -> bool:
        """Whether the entry's table is published as debezium-json under ``mapping``."""
        if mapping is not self._codecs_of or len(self._codecs) >= _CODECS_CACHED:
            self._codecs.clear()
            self._codecs_of = mapping
        h = entry.header
        key = (h.schema_name, h.table_name)
        known = self._codecs.get(key)
        if known is None:
            route = mapping.resolve(*key) if key[0] and key[1] else None
            known = self._codecs[key] = route is not None and route.codec == "debezium-json"
        return known
