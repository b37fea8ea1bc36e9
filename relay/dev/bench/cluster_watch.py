"""The cluster bench's eyes on a hand-over: every version of the dead node's instances' position and
``running`` nodes, and when the dead node's own record went (its ZooKeeper session expired).

Owns ``HandoverWatch``, a thread that reads ``<root>/destinations/<instance>/position`` (JSON with the
writer's epoch) and ``…/running`` (the active relay's record) of the watched instances every ``interval``
seconds, keeping each version seen with ZooKeeper's own modification time, so that a figure is the server's
clock at the write, not the moment the bench noticed it. Runs on its own thread; ``handovers`` is called on
the bench's main thread after ``stop``.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError

from relay.cluster.layout import Paths
from relay.dev.bench.cluster_stats import Handover, PositionVersion, first_advance
from relay.ha.leadership import Layout


class HandoverWatch(threading.Thread):
    def __init__(
        self, client: KazooClient, root: str, node: str, epochs: dict[str, int], interval: float = 0.02
    ) -> None:
        super().__init__(name="bench-handover-watch", daemon=True)
        self.client, self.root, self.old_epochs, self.interval = client, root, dict(epochs), interval
        self.node_path = Paths(root).node(node)
        self.node_gone_at: float | None = None  # when the dead node's record was first seen gone (this clock)
        self.positions: dict[str, dict[int, PositionVersion]] = {name: {} for name in epochs}
        self.elected_ms: dict[str, int] = {}  # the new owner's running node: its creation time
        self.missed: list[str] = []
        self._stop_event = threading.Event()
        self._lock = threading.Lock()

    def run(self) -> None:
        while not self._stop_event.wait(self.interval):
            if self.node_gone_at is None:
                with contextlib.suppress(KazooException):
                    if self.client.exists(self.node_path) is None:
                        self.node_gone_at = time.time()
            for name in self.old_epochs:
                try:
                    self._read(name)
                except KazooException:
                    continue  # read again next round

    def _read(self, name: str) -> None:
        layout = Layout(self.root, name)
        try:
            data, stat = self.client.get(layout.position)
            record: dict[str, Any] = json.loads(data)
            seen = PositionVersion(
                stat.version,
                int(record.get("epoch") or 0),
                json.dumps(record.get("position"), sort_keys=True),
                int(stat.mtime),
            )
            with self._lock:
                self.positions[name].setdefault(seen.version, seen)
        except NoNodeError:
            pass
        if name in self.elected_ms:
            return
        try:
            data, stat = self.client.get(layout.running)
        except NoNodeError:
            return
        if int(json.loads(data).get("epoch") or 0) > self.old_epochs[name]:
            self.elected_ms[name] = int(stat.ctime)

    def has_base(self) -> bool:
        """Every watched instance's position has been read at least once (under the old epoch)."""
        with self._lock:
            return all(self.positions[name] for name in self.old_epochs)

    def done(self) -> bool:
        with self._lock:
            return all(
                name in self.elected_ms and first_advance(list(v.values()), self.old_epochs[name]) is not None
                for name, v in self.positions.items()
            )

    def stop(self) -> None:
        self._stop_event.set()
        self.join(10)

    def handovers(self, killed_at: float) -> list[Handover]:
        out = []
        with self._lock:
            for name, versions in sorted(self.positions.items()):
                found = first_advance(list(versions.values()), self.old_epochs[name])
                if found is None or name not in self.elected_ms:
                    continue
                first, gap = found
                if gap:
                    self.missed.append(name)
                gone = None if self.node_gone_at is None else self.node_gone_at - killed_at
                elected, acked = self.elected_ms[name] / 1000 - killed_at, first.mtime_ms / 1000 - killed_at
                out.append(Handover(name, elected, acked, gone))
        return out
