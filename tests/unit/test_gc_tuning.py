"""The relay's cycle-collector thresholds are set while it runs and restored after the last one stops."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

from relay.common.gc_tuning import gc_thresholds
from relay.daemon.pipeline import GC_THRESHOLDS


@pytest.fixture(autouse=True)
def own_thresholds() -> Iterator[tuple[int, int, int]]:
    before = gc.get_threshold()
    gc.set_threshold(701, 11, 12)
    yield (701, 11, 12)
    gc.set_threshold(*before)


def test_set_inside_and_restored_after(own_thresholds: tuple[int, int, int]) -> None:
    with gc_thresholds(GC_THRESHOLDS):
        assert gc.get_threshold() == GC_THRESHOLDS
    assert gc.get_threshold() == own_thresholds


def test_restored_when_the_relay_fails(own_thresholds: tuple[int, int, int]) -> None:
    with pytest.raises(RuntimeError), gc_thresholds(GC_THRESHOLDS):
        raise RuntimeError("the relay stopped on an error")
    assert gc.get_threshold() == own_thresholds


def test_two_relays_in_one_process_restore_after_the_last(own_thresholds: tuple[int, int, int]) -> None:
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    seen: list[tuple[int, int, int]] = []

    def first() -> None:
        with gc_thresholds(GC_THRESHOLDS):
            first_in.set()
            second_in.wait(10)
        first_out.set()

    def second() -> None:
        first_in.wait(10)
        with gc_thresholds(GC_THRESHOLDS):
            second_in.set()
            first_out.wait(10)
            seen.append(gc.get_threshold())  # the first one stopped: still the relay's

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert seen == [GC_THRESHOLDS]
    assert gc.get_threshold() == own_thresholds
