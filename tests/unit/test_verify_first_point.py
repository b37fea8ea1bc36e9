"""relay verify waits, up to --wait, for a relay that has not saved a position yet (just started)."""

from __future__ import annotations

import threading
from typing import Any

from relay.ops.verify.setup import StorePublished, first_point


class _Store:
    """A position store whose first saved position appears at its ``after``-th load."""

    def __init__(self, after: int | None) -> None:
        self.after, self.loads = after, 0

    def load(self) -> Any:
        self.loads += 1
        return "saved" if self.after is not None and self.loads >= self.after else None


def test_a_position_saved_within_the_wait_is_taken() -> None:
    store = _Store(after=3)
    assert first_point(StorePublished(store), 30.0) == "saved"  # type: ignore[arg-type]
    assert store.loads == 3


def test_no_position_within_the_wait_is_none_after_it() -> None:
    store = _Store(after=None)
    assert first_point(StorePublished(store), 0.6) is None  # type: ignore[arg-type]
    assert store.loads >= 2, "read again while waiting"


def test_a_stop_ends_the_wait() -> None:
    stop = threading.Event()
    stop.set()
    store = _Store(after=None)
    assert first_point(StorePublished(store), 600.0, stop) is None  # type: ignore[arg-type]
    assert store.loads == 1
