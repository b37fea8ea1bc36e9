"""When a node must stop its instances because its ZooKeeper session may end — or may have ended — without
it knowing: before the server can expire the session and another node can start them.

Owns the timing rule and the thread that applies it (``SessionWatch``, thread ``session-guard``).

The rule counts from the last moment the server is known to have heard from the node: the SEND time of
the last request that was answered (``heard``). The server expires the session a session timeout ``T``
after it last heard from the client, so never before ``heard + T``. The watch sends a request every
``T/10`` (``exists`` on the node's own record); when none has been answered for ``T/2`` (a network cut,
ZooKeeper down, the node frozen by SIGSTOP or a stalled VM) it SIGTERMs every instance process at once
(they drain if they still can) and SIGKILLs what is left at ``heard + 3T/4`` — before the earliest expiry,
so no other node can start an instance while this one still runs it (Curator's and Kafka Connect's rule:
give the work up at a safe fraction of the session). A node woken from a freeze longer than that finds
``heard`` old and stops them before anything else, SIGKILL at once when ``heard + 3T/4`` has passed.

Why not kazoo's SUSPENDED: kazoo declares a connection dead when a request (or its ping, sent after a third
of the session without traffic) goes unanswered for another third — measured from its last SEND, so in
the worst case it says SUSPENDED just as the server expires the session, too late to stop anything.

The watch runs on its own thread because the node's main thread blocks inside a ZooKeeper call while the
connection is cut (until kazoo gives up on it). It only signals the processes (``Children.signal_all``);
the main thread, first thing on each wake-up, takes the order (``take``): it wants no instance and reaps
them (``Children.stop_all``). Instances start again from a pass of the main thread once a request is
answered again (``tripped`` is then false): the same session, or a new one after LOST.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from kazoo.client import KazooClient

from relay.cluster.children import Children
from relay.common import zookeeper

log = logging.getLogger(__name__)

__all__ = ["SessionGuard", "SessionWatch", "StopOrder"]

PROBE_EVERY = 1 / 10  # of the session timeout: a request to ZooKeeper
TERM_AFTER = 1 / 2  # of the session timeout without an answered request: SIGTERM every instance
KILL_AFTER = 3 / 4  # of the session timeout after the last answered request: SIGKILL what is left


@dataclass(frozen=True)
class StopOrder:
    """Stop every instance now: SIGTERM, SIGKILL at ``kill_by`` (monotonic); ``why`` is for the log."""

    why: str
    kill_by: float


class SessionGuard:
    """The rule on a clock (injectable for the unit tests); safe to call from any thread."""

    def __init__(self, session_timeout: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.session_timeout = session_timeout
        self._clock = clock
        self._lock = threading.Lock()
        self._heard = clock()
        self._tripped = False  # an order was given, and no request answered since
        self._pending: StopOrder | None = None  # given, not yet taken by the main thread

    def heard(self, sent: float) -> None:
        """A request sent at ``sent`` (monotonic) was answered: the server heard from us then."""
        with self._lock:
            if sent > self._heard:
                self._heard = sent
                self._tripped = False

    def silent_for(self) -> float:
        with self._lock:
            return self._clock() - self._heard

    def check(self) -> StopOrder | None:
        """A new order when the silence reached ``T/2`` (once per silence), else None."""
        with self._lock:
            now = self._clock()
            silent = now - self._heard
            if self._tripped or silent < TERM_AFTER * self.session_timeout:
                return None
            self._tripped = True
            order = self._pending = StopOrder(
                f"no answer from ZooKeeper for {silent:.1f} s (its session may expire "
                f"{self.session_timeout:g} s after the last one)",
                max(now, self._heard + KILL_AFTER * self.session_timeout),
            )
        # said once, by whichever thread found it first (the watch, or the node's loop after a freeze)
        log.error("%s: stopping every instance it runs before its session can expire", order.why)
        return order

    def take(self) -> StopOrder | None:
        """The order the main thread has not carried out yet (checking first), handed out once."""
        self.check()
        with self._lock:
            order, self._pending = self._pending, None
            return order

    def tripped(self) -> bool:
        """Whether the node must run nothing: stopped for silence, and no request answered since."""
        with self._lock:
            return self._tripped


class SessionWatch(threading.Thread):
    """Probes ZooKeeper, and signals every instance process when the guard says so."""

    def __init__(
        self,
        client: KazooClient,
        path: str,
        guard: SessionGuard,
        children: Children,
        wake: Callable[[], None],
    ) -> None:
        super().__init__(name="session-guard", daemon=True)
        self._client, self._path, self._guard, self._children = client, path, guard, children
        self._wake = wake  # the node's loop: it takes the order
        self._done = threading.Event()

    def run(self) -> None:
        every = max(0.1, PROBE_EVERY * self._guard.session_timeout)
        while not self._done.wait(every):
            self._act()  # woken from a freeze: stop before asking ZooKeeper anything
            self._probe(every)
            self._act()

    def _act(self) -> None:
        order = self._guard.check()
        if order is not None:
            self._stop_instances(order)

    def _probe(self, timeout: float) -> None:
        sent = time.monotonic()
        try:
            self._client.exists_async(self._path).get(timeout=max(timeout, 1.0))
        except zookeeper.ERRORS:
            return
        self._guard.heard(sent)

    def _stop_instances(self, order: StopOrder) -> None:
        self._children.signal_all(signal.SIGTERM)
        self._wake()
        while time.monotonic() < order.kill_by and self._children.signal_all(0):
            if self._done.wait(0.05):
                return
        if self._children.signal_all(signal.SIGKILL):
            log.error(
                "instances still running %.1f s after the last answer: SIGKILL", self._guard.silent_for()
            )

    def close(self) -> None:
        self._done.set()
