"""The cycle collector's thresholds while a relay runs, restored when the last one stops.

``gc.set_threshold`` is process-wide: a relay started in a process that does other work (tests, an
embedding application, ``relay bench``) must not leave it changed. ``gc_thresholds`` sets them on the
first entry and puts back what was there on the last exit; relays running side by side in one process
share one setting (the first one's thresholds), counted under a lock. Any thread (each relay's run
thread enters it once).
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

# A process that builds a large index of long-lived objects (the relay's pipeline, verify's topic read): at
# Python's (700, 10, 10) every young collection walks the growing heap again.
RELAY_THRESHOLDS = (1_000_000, 50, 100)

_lock = threading.Lock()
_users = 0
_saved: tuple[int, int, int] = gc.get_threshold()


@contextmanager
def gc_thresholds(thresholds: tuple[int, int, int]) -> Iterator[None]:
    """``thresholds`` while inside (nested or concurrent entries share the first one's); then back."""
    global _users, _saved
    with _lock:
        if _users == 0:
            _saved = gc.get_threshold()
            gc.set_threshold(*thresholds)
        _users += 1
    try:
        yield
    finally:
        with _lock:
            _users -= 1
            if _users == 0:
                gc.set_threshold(*_saved)
