"""A running relay's reports to the outside: the status file, the mapping announcements, snapshot requests.

Owns ``StatusReporter``: it writes the status file (``relay status`` reads it) every
``status.interval_seconds`` and at every change of state, announces the mapping state where other
processes look (``relay.daemon.mapping_report``), and takes on-demand snapshot requests at batch
boundaries (``relay.daemon.snapshot_requests.SnapshotDesk``), answering in the status file. Runs on the
publisher thread (``Relay.run``); a status file that cannot be written is logged, never fatal.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import replace

from relay.config.load import RelayConfig
from relay.config.state import STATUS_FILE
from relay.daemon.mapping_report import MappingAnnouncer
from relay.daemon.reload import HotReload
from relay.daemon.snapshot_requests import SnapshotDesk
from relay.daemon.status import RelayStats, write_status
from relay.ha.leadership import Leadership
from relay.kafka.publisher import KafkaPublisher
from relay.source.instance import CanalInstance

log = logging.getLogger(__name__)


class StatusReporter:
    """Reports one relay's state; ``stats`` is the relay's (the publisher thread is its only writer)."""

    def __init__(
        self,
        config: RelayConfig,
        instance: CanalInstance,
        publisher: KafkaPublisher,
        stats: RelayStats,
        reload: HotReload,
        desk: SnapshotDesk,
        leadership: Leadership | None = None,
    ) -> None:
        self.config, self.stats = config, stats
        self._instance, self._publisher, self._reload, self._desk = instance, publisher, reload, desk
        self._leadership = leadership
        self._announcer = MappingAnnouncer(
            config.instance,
            leadership.member if leadership is not None else None,
            leadership.announce if leadership is not None else None,
            lambda: reload.watcher.store if reload.watcher is not None else None,
        )
        self._next_status = 0.0

    def state(self, name: str) -> None:
        """The relay entered state ``name`` (standby, starting, running, …): written at once."""
        self.stats.state = name
        self.write(force=True)

    def snapshot_requests(self) -> None:
        """At a batch boundary: carry out a waiting ``relay snapshot run|cancel`` request and answer it."""
        if self._desk.take(self._reload.mapping):
            self.write(force=True)

    def write(self, force: bool = False) -> None:
        """Write the status file when ``status.interval_seconds`` have passed since the last (or now)."""
        now = time.monotonic()
        if not force and now < self._next_status:
            return
        self._next_status = now + self.config.status.interval_seconds
        instance = self._instance
        fill = instance.store.fill()
        store = instance.store.config
        saved = instance.last_saved
        mapping = self._reload.state()
        self._announcer.update(mapping)
        data = self.stats.snapshot(
            caught_up=instance.caught_up(),
            saved_ms=0 if saved is None else saved.timestamp,
            pending_ms=instance.oldest_pending_ms(),
            instance=self.config.instance,
            source=self.config.source.address,
            position=None if saved is None else json.loads(replace(saved, source=None).to_json()),
            store_entries=fill.entries,
            store_bytes=fill.bytes,
            store_slots=store.buffer_size,
            store_budget=store.memory_budget,
            store_mode=store.batch_mode.value,
            inflight_batches=self._publisher.inflight(),
            **mapping.to_status(),
            kafka_mode=self.config.kafka.mode,
            transactional_id=self._publisher.transactional_id,
            snapshot=instance.snapshot_status(),
            snapshot_request=self._desk.answer,
            mapping_move=self._reload.moves.progress(),
            **self._ha_status(),
        )
        try:
            write_status(self.config.state_path(STATUS_FILE), data)
        except OSError as exc:
            log.warning("cannot write the status file: %s", exc)

    def _ha_status(self) -> dict[str, object]:
        lead = self._leadership
        return {} if lead is None else {"ha_member": lead.member, "ha_epoch": lead.epoch or None}
