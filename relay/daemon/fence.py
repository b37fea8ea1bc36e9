"""The publish loop's view of HA leadership (``ha.enabled``, ``relay.ha.leadership``): standing by until
elected, and the fence checked before every send, every ack and every commit.

Owned here: ``Fence`` (the interface), ``Unfenced`` (no HA: every check passes, no standby) and
``LeaderFence`` (HA). ``relay.wiring`` picks one, so the publish loop reads no HA flag on its hot path.
Runs on the publisher thread (``Relay.run``); ``stand_by`` blocks it until ZooKeeper elects this process
(status ``standby``), and the relay then starts its instance from the position saved in ZooKeeper.

Once fenced (session SUSPENDED or LOST, lease expired) ``check`` raises ``LeadershipError``: the relay
stops without acking anything more — the batches in flight are abandoned, the new leader publishes them
again from the saved position — and ``relay run`` exits with status 3.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol

from relay.ha.leadership import Leadership


class Fence(Protocol):
    """What the publish loop asks of HA leadership."""

    @property
    def epoch(self) -> int:
        """The leadership epoch that goes into an exactly-once position record (0 without HA)."""
        ...

    def stand_by(self, stopping: threading.Event, report: Callable[[str], None]) -> bool:
        """Wait until this process may lead (``report``: each state it passes through); False when
        stopped first."""
        ...

    def check(self) -> None:
        """Before every send, ack and commit: raise ``LeadershipError`` once this process may not lead."""
        ...

    def note(self) -> str:
        """For the send and ack log lines: when the check that allowed the step passed ("" without HA)."""
        ...

    def close(self) -> None:
        """Resign (when still the leader: a standby takes over at once) and close the session."""
        ...


class Unfenced:
    """No HA: this process leads from the start; every check passes."""

    epoch = 0

    def stand_by(self, stopping: threading.Event, report: Callable[[str], None]) -> bool:
        return True

    def check(self) -> None:
        pass

    def note(self) -> str:
        return ""

    def close(self) -> None:
        pass


class LeaderFence:
    """HA: ZooKeeper's election decides who leads; the leadership's fence is checked before each step."""

    def __init__(self, leadership: Leadership) -> None:
        self.leadership = leadership
        # The wall time the last check passed. The send and ack log lines carry it: a process can be
        # frozen between a check and what it allows, so a line stamped after a resume may stand for a
        # step its leadership allowed before the freeze.
        self.passed = 0.0

    @property
    def epoch(self) -> int:
        return self.leadership.epoch

    def stand_by(self, stopping: threading.Event, report: Callable[[str], None]) -> bool:
        """Wait until ZooKeeper elects this process (status ``standby``)."""
        self.leadership.start()
        report("standby")
        elected = self.leadership.acquire(stopping, lambda active: report("standby"))
        report("starting" if elected else "stopped")
        return elected

    def check(self) -> None:
        self.leadership.check()
        self.passed = time.time()

    def note(self) -> str:
        return f" (fence passed at {self.passed:.3f})"

    def close(self) -> None:
        self.leadership.close()


def fence_for(leadership: Leadership | None) -> Fence:
    """The fence of a relay with this leadership (None: no HA)."""
    return Unfenced() if leadership is None else LeaderFence(leadership)
