"""The one retry policy: exponential backoff with jitter, a cap, an optional deadline, an injectable sleep.

Every loop that waits for something to come back (a lost MySQL connection, a broker that refuses
records) asks a ``Backoff`` made from a ``RetryPolicy`` how long to wait, instead of keeping its own
counters.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class RetryPolicy:
    """Backoff settings. ``max_tries`` 0 means unbounded; ``deadline`` (seconds) 0 means none."""

    initial: float = 0.2
    maximum: float = 30.0
    multiplier: float = 2.0
    jitter: float = 0.2
    max_tries: int = 0
    deadline: float = 0.0

    def start(self, sleep: Callable[[float], object] = time.sleep) -> Backoff:
        return Backoff(self, sleep)


@dataclass
class Backoff:
    """One run of retries under a policy. ``wait()`` sleeps and returns False once the budget is spent."""

    policy: RetryPolicy
    sleep: Callable[[float], object] = time.sleep
    tries: int = 0
    started: float = field(default_factory=time.monotonic)

    def next_delay(self) -> float:
        p = self.policy
        base = min(p.maximum, p.initial * (p.multiplier ** max(0, self.tries - 1)))
        return max(0.0, base * (1.0 + random.uniform(-p.jitter, p.jitter)))

    def exhausted(self) -> bool:
        p = self.policy
        if p.max_tries and self.tries >= p.max_tries:
            return True
        return bool(p.deadline and time.monotonic() - self.started >= p.deadline)

    def wait(self) -> bool:
        """Count one failed try; sleep before the next one. False when no try is left."""
        self.tries += 1
        if self.exhausted():
            return False
        self.sleep(self.next_delay())
        return True

    def reset(self) -> None:
        self.tries = 0
        self.started = time.monotonic()
