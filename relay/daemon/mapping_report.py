"""Which mapping a running relay uses, told where operators look: the status file, ZooKeeper, metrics.

Owns ``MappingState`` (the version in use, the one waiting for a switch, the last version refused and
why, a store that could not be read) and ``MappingAnnouncer``, which hands a changed state to the places
other processes read: the HA member node (``Leadership.announce``) and the ZooKeeper mapping store's
registry (``MappingStore.announce``). Runs on the publisher thread (``relay.daemon.reporting``'s
``StatusReporter``), writing only when the state changed; a failed announcement is logged once per
state, never fatal — it is a report, not a fence. ``relay status``, ``relay mapping history`` and
``relay.daemon.metrics`` read what it leaves.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mapping.store import MappingStore
from mapping.watch import Refusal
from relay.errors import RelayError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MappingState:
    version: int
    pending: int | None = None
    refused: Refusal | None = None
    store_error: str | None = None

    def to_status(self) -> dict[str, Any]:
        """The status file's keys (``relay status`` reads them back)."""
        return {
            "mapping_version": self.version,
            "mapping_pending": self.pending,
            "mapping_refused": None if self.refused is None else self.refused.to_dict(),
            "mapping_store_error": self.store_error,
        }


class MappingAnnouncer:
    """Announces a relay's ``MappingState`` when it changes. One caller thread (the publisher)."""

    def __init__(
        self,
        instance: str,
        member: str | None,
        announce_member: Callable[..., None] | None,
        store: Callable[[], MappingStore | None],
    ) -> None:
        self.relay_id = f"{instance}@{member or f'{socket.gethostname()}:{os.getpid()}'}"
        self._instance = instance
        self._announce_member = announce_member
        self._store = store
        self._last: MappingState | None = None

    def update(self, state: MappingState) -> None:
        if state == self._last:
            return
        self._last = state
        facts = {"mapping": state.to_status()}
        if self._announce_member is not None:
            self._announce_member(**facts)
        store = self._store()
        if store is None:
            return
        info = {
            "relay": self.relay_id,
            "instance": self._instance,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            **facts,
        }
        try:
            store.announce(self.relay_id, info)
        except RelayError as exc:
            log.warning("could not announce mapping version %d to %s: %s", state.version, store.name, exc)
