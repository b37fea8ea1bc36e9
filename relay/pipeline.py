"""The relay: the one place that wires the canal instance, the mapping, the codecs and Kafka together.

Threads: the canal instance's parser thread fills the ring store; ``Relay.run`` is the publisher
thread. It takes batches from the store (``get_without_ack``), encodes every row change into records
under the current mapping, sends them, and acknowledges a batch to the store — which saves the
resume point — only once Kafka has accepted every record of it and of every batch before it
(``KafkaPublisher.completed_prefix``). That is the relay contract of ARCHITECTURE.md:

- no loss: nothing is acked past an undelivered record; a retriable failure aborts the batches in
  flight, rolls the store back and resends after a backoff (``publish.retry``);
- a record Kafka will never take stops the relay with a clear error (``RecordRejectedError``), unless
  a dead-letter topic is configured — never a retry spin. Before it stops, the records sent before
  the refused one are given ``publish.drain_seconds`` to land and the batches completed before it
  are acked, so the saved position ends right before the refused record's batch;
- fail closed: a mapping error (a key column missing from a table) stops the relay without acking.

``stop()`` (from a signal handler via the CLI) ends the loop at a batch boundary: batches in flight
get ``publish.drain_seconds`` to be delivered and acked, the rest is rolled back, the position stays
at the last acknowledged batch, and ``run`` returns normally.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import replace

from mapping import Mapping
from relay.codec import RecordEncoder
from relay.config import RelayConfig
from relay.errors import PublishError, RecordRejectedError, RelayError
from relay.instance import CanalInstance, InstanceConfig
from relay.positions import FilePositionStore, PositionStore, ResumePoint
from relay.protocol import Entry, RowChange
from relay.publisher import BatchHandle, KafkaPublisher, PublisherConfig, Record, TopicDefaults
from relay.retry import Backoff
from relay.status import RelayStats, write_status

log = logging.getLogger(__name__)


def publisher_config(config: RelayConfig, mapping: Mapping) -> PublisherConfig:
    k = config.kafka
    topics = mapping.topics
    return PublisherConfig(
        bootstrap_servers=k.bootstrap_servers,
        client_id=k.client_id.format(instance=config.instance),
        kafka=dict(k.settings),
        delivery_timeout_s=k.delivery_timeout_seconds,
        dead_letter_topic=k.dead_letter_topic,
        dead_letter_value_bytes=k.dead_letter_value_bytes,
        create_topics=topics.create,
        topic_defaults=TopicDefaults(topics.partitions, topics.replication_factor, topics.topic_config()),
    )


class Relay:
    """One relay process for one MySQL source. ``run()`` blocks until ``stop()`` or a fatal error."""

    def __init__(
        self,
        config: RelayConfig,
        mapping: Mapping,
        *,
        positions: PositionStore | None = None,
        publisher: KafkaPublisher | None = None,
    ) -> None:
        self.config = config
        self.mapping = mapping
        self.positions = positions or FilePositionStore(config.path(config.positions.path))
        self.instance = CanalInstance(
            InstanceConfig(
                name=config.instance,
                source=config.source,
                store=config.store_config(),
                sink=config.sink_config(),
            ),
            self.positions,
        )
        self.publisher = publisher or KafkaPublisher(publisher_config(config, mapping))
        self.stats = RelayStats()
        self._stopping = threading.Event()
        self._encoder: RecordEncoder | None = None
        self._batch_rows: dict[int, tuple[int, int, int]] = {}  # batch id → (records, rows, last event ms)
        self._next_status = 0.0

    def stop(self) -> None:
        self._stopping.set()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    # -- the loop --------------------------------------------------------------------------------
    def run(self) -> ResumePoint | None:
        """Relay until stopped; returns the last saved position. Raises the error that stopped it."""
        self.instance.start()
        self._encoder = RecordEncoder(
            self.mapping,
            self.instance.source.identity,
            ddl_topic=self.config.kafka.ddl_topic,
            partitions=self.publisher.partitions,
        )
        self.publisher.ensure_topics(self._initial_topics())
        log.info(
            "relay %s: publishing from %s to %s",
            self.config.instance,
            self.instance.start_point,
            self.config.kafka.bootstrap_servers,
        )
        self.stats.state = "running"
        backoff = self.config.publish.retry.start(sleep=self._stopping.wait)
        try:
            while not self._stopping.is_set():
                try:
                    if self._step():
                        backoff.reset()
                except PublishError as exc:
                    # A delivery failure is handled just below; anything else raised while sending is a
                    # topic that could not be checked or created (the broker is away): roll back, retry.
                    if self.publisher.failed() is None:
                        if not exc.retriable:
                            raise
                        self._retry(exc, backoff)
                failed = self.publisher.failed()
                if failed is not None:
                    self._recover(failed, backoff)
                self._write_status()
            self._drain()
        except BaseException as exc:
            self.stats.state, self.stats.error = "failed", str(exc)
            self._abandon()
            raise
        finally:
            self.instance.stop()
            self.publisher.close(timeout=1.0)
            self._write_status(force=True)
        self.stats.state = "stopped"
        self._write_status(force=True)
        return self.instance.last_saved

    def _initial_topics(self) -> list[str]:
        topics = list(self.mapping.topic_names())
        if self.config.kafka.ddl_topic:
            topics.append(self.config.kafka.ddl_topic)
        return topics

    def _step(self) -> bool:
        """Send one batch if the window allows, serve deliveries, ack the delivered prefix."""
        p = self.config.publish
        sent = False
        if self.publisher.inflight() < p.max_inflight_batches:
            message = self.instance.get_without_ack(p.batch_size, timeout=p.batch_wait_seconds)
            if message.entries:
                self._send(message.batch_id, message.entries)
                sent = True
        self.publisher.poll(0 if sent else p.batch_wait_seconds)
        return self._ack_delivered() > 0

    def _send(self, batch_id: int, entries: Sequence[Entry]) -> None:
        """Encode and send one batch; every log line about it names its binlog positions (``where``)."""
        assert self._encoder is not None
        records: list[Record] = []
        rows = 0
        for entry in entries:
            records.extend(self._encoder.encode(entry))
            value = entry.store_value
            if isinstance(value, RowChange) and not value.is_ddl:
                rows += len(value.rows)
        last_ms = entries[-1].header.execute_time
        new_topics = self._encoder.topics()
        if new_topics:
            self.publisher.ensure_topics(new_topics)
        self._batch_rows[batch_id] = (len(records), rows, last_ms)
        where = _span(entries[0], entries[-1])
        self.publisher.send(batch_id, records, where)
        log.debug("batch %d (%s): sent %d records (%d rows)", batch_id, where, len(records), rows)

    def _ack_delivered(self) -> int:
        done: list[BatchHandle] = self.publisher.completed_prefix()
        for handle in done:
            point = self.instance.ack(handle.batch_id)
            records, rows, last_ms = self._batch_rows.pop(handle.batch_id, (0, 0, 0))
            self.stats.acked(records, rows, str(point), last_ms)
            log.debug("%s: %d records delivered; acked, position %s saved", handle.label, records, point)
        return len(done)

    # -- failures --------------------------------------------------------------------------------
    def _recover(self, failed: BatchHandle, backoff: Backoff) -> None:
        error = failed.error
        assert error is not None
        if not error.retriable:
            if isinstance(error, RecordRejectedError):
                self._settle()
            log.error("stopping: %s; the position stays at %s", error, self._saved())
            raise error
        self._retry(error, backoff)

    def _retry(self, error: PublishError, backoff: Backoff) -> None:
        """Abort every batch in flight, roll the store back to the saved position, back off, go on."""
        aborted = self.publisher.abort_inflight()
        self.instance.rollback()
        for bid in aborted:
            self._batch_rows.pop(bid, None)
        self.stats.batches_rolled_back += len(aborted)
        self.stats.state = "retrying"
        log.warning(
            "%s; rolled back batches %s, the position stays at %s; retrying after a backoff",
            error,
            aborted,
            self._saved(),
        )
        if not backoff.wait():  # sleeps on the stop event: a stop cuts the wait short
            raise PublishError(f"gave up retrying: {error}") from error
        self.stats.state = "running"

    def _settle(self) -> None:
        """Stopping on a refused record: let what was sent before it land, ack the batches before it.

        The failed batch stays unacked (the position ends right before it); its records sent before
        the refused one are delivered too, and published again, identically, after a restart.
        """
        left = self.publisher.flush(self.config.publish.drain_seconds)
        self._ack_delivered()
        if left:
            log.warning("%d records sent before the refused one were not delivered in time", left)

    def _saved(self) -> str:
        return str(self.instance.last_saved or self.instance.start_point)

    def _drain(self) -> None:
        """Stopping: give batches in flight time to be delivered and acked, roll the rest back."""
        deadline = time.monotonic() + self.config.publish.drain_seconds
        while self.publisher.inflight() and time.monotonic() < deadline and self.publisher.failed() is None:
            self.publisher.poll(0.1)
            self._ack_delivered()
        self._abandon()
        log.info("relay %s stopped; position %s", self.config.instance, self._saved())

    def _abandon(self) -> None:
        try:
            aborted = self.publisher.abort_inflight()
            if aborted:
                self.instance.rollback()
                log.info(
                    "batches %s not acknowledged; the position stays at %s: they will be published again",
                    aborted,
                    self._saved(),
                )
        except RelayError as exc:
            log.warning("while abandoning the batches in flight: %s", exc)

    # -- status ----------------------------------------------------------------------------------
    def _write_status(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now < self._next_status:
            return
        self._next_status = now + self.config.status.interval_seconds
        fill = self.instance.store.fill()
        store = self.instance.store.config
        saved = self.instance.last_saved
        data = self.stats.snapshot(
            instance=self.config.instance,
            source=self.config.source.address,
            position=None if saved is None else json.loads(replace(saved, source=None).to_json()),
            store_entries=fill.entries,
            store_bytes=fill.bytes,
            store_slots=store.buffer_size,
            store_budget=store.memory_budget,
            store_mode=store.batch_mode.value,
            inflight_batches=self.publisher.inflight(),
            mapping_version=self.mapping.version,
        )
        try:
            write_status(self.config.path(self.config.status.file), data)
        except OSError as exc:
            log.warning("cannot write the status file: %s", exc)


def _span(first: Entry, last: Entry) -> str:
    """``mysql-bin.000003:4567..9876``: the binlog positions of a batch's first and last entry."""
    a, b = first.header, last.header
    end = f"{b.logfile_offset}"
    if b.logfile_name != a.logfile_name:
        end = f"{b.logfile_name}:{end}"
    return f"{a.logfile_name}:{a.logfile_offset}..{end}"
