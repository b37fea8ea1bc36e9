"""The node's session-loss rule (``relay.cluster.session_guard``): on a hand-driven clock, the SIGTERM order
comes after half the session timeout without an answered request and its SIGKILL bound is three quarters
after the last answer — before the earliest expiry; an answer clears it; a node woken from a long freeze
is ordered to stop at once, SIGKILL included; each order is handed out once. And the watch thread on real
processes with a fake ZooKeeper client that stops answering: it SIGTERMs the instances, SIGKILLs one that
ignores SIGTERM by the bound, and wakes the node's loop."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from relay.cluster.children import Children
from relay.cluster.node_config import ChildrenConfig
from relay.cluster.session_guard import SessionGuard, SessionWatch


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def test_silent_for_half_the_session_stops_before_the_earliest_expiry(clock: Clock) -> None:
    guard = SessionGuard(6.0, clock)
    clock.now += 1.0
    guard.heard(1000.5)  # a request sent at 1000.5 was answered
    clock.now = 1003.4
    assert guard.check() is None and not guard.tripped()
    clock.now = 1003.5  # 3 s (T/2) after the last answered send
    order = guard.check()
    assert order is not None and "no answer from ZooKeeper for 3.0 s" in order.why
    assert order.kill_by == pytest.approx(1000.5 + 4.5)  # 3T/4 after it
    assert order.kill_by < 1000.5 + 6.0  # the server cannot expire the session before this
    assert guard.tripped()
    assert guard.check() is None  # once per silence
    assert guard.take() is order and guard.take() is None
    guard.heard(1000.4)  # a late answer to an older request proves nothing new
    assert guard.tripped()
    guard.heard(1003.0)  # the server heard a request sent at 1003.0: the session lived then
    assert guard.tripped() is False
    clock.now = 1006.0
    assert guard.check() is not None  # a new silence, a new order (3 s after 1003.0)


def test_an_answer_in_time_stops_nothing(clock: Clock) -> None:
    guard = SessionGuard(6.0, clock)
    for _ in range(20):
        clock.now += 0.6
        guard.heard(clock.now - 0.1)
        assert guard.take() is None
    assert not guard.tripped()


def test_woken_from_a_freeze_the_order_is_at_once_and_kills_at_once(clock: Clock) -> None:
    guard = SessionGuard(6.0, clock)
    guard.heard(clock.now)
    clock.now += 20.0  # SIGSTOPped for 20 s
    order = guard.take()
    assert order is not None and "for 20.0 s" in order.why
    assert order.kill_by == clock.now  # the session may be gone: no grace


class _Answer:
    def __init__(self, answering: threading.Event) -> None:
        self._answering = answering

    def get(self, timeout: float) -> None:
        if not self._answering.is_set():
            time.sleep(min(timeout, 0.2))
            from kazoo.handlers.threading import KazooTimeoutError

            raise KazooTimeoutError("no answer")


class _Client:
    """Answers ``exists_async`` while ``answering`` is set (a cut otherwise)."""

    def __init__(self) -> None:
        self.answering = threading.Event()
        self.answering.set()

    def exists_async(self, path: str) -> Any:
        return _Answer(self.answering)


def test_the_watch_signals_the_instances_and_wakes_the_node(tmp_path: Path) -> None:
    scripts = {
        "quiet": "import time\nwhile True: time.sleep(0.05)\n",
        "stubborn": "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('ready', flush=True)\nwhile True: time.sleep(0.05)\n",
    }
    children = Children(lambda name, _v: [sys.executable, "-c", scripts[name]], tmp_path, ChildrenConfig())
    children.want({"quiet": 1, "stubborn": 1})
    children.poll()
    deadline = time.monotonic() + 30
    while "ready" not in (tmp_path / "stubborn" / "relay.log").read_text(errors="replace"):
        assert time.monotonic() < deadline, "the stubborn child did not start"
        time.sleep(0.05)
    client = _Client()
    guard = SessionGuard(2.0)  # probes every 0.2 s, SIGTERM after 1 s of silence, SIGKILL by 1.5 s
    woken = threading.Event()
    watch = SessionWatch(client, "/n", guard, children, woken.set)  # type: ignore[arg-type]
    watch.start()
    try:
        assert children.signal_all(0) == 2
        cut = time.monotonic()
        client.answering.clear()
        assert woken.wait(10), "the node's loop was not woken"
        assert 0.8 < time.monotonic() - cut < 3.0
        while children.signal_all(0):
            assert time.monotonic() - cut < 10, "an instance outlived the SIGKILL bound"
            time.sleep(0.02)
        gone = time.monotonic() - cut
        assert gone < 2.0 + 0.5, f"the stubborn instance was killed {gone:.1f} s after the cut"
        children.poll()  # reaped as stopped on request, not as crashes: started again at once, no backoff
        report = children.report()
        assert [report[n]["restarts"] for n in ("quiet", "stubborn")] == [0, 0], report
        assert children.signal_all(0) == 2
        assert guard.tripped()
        client.answering.set()
        deadline = time.monotonic() + 10
        while guard.tripped():
            assert time.monotonic() < deadline, "an answer did not clear the guard"
            time.sleep(0.05)
    finally:
        watch.close()
        watch.join(10)
        children.stop_all(time.monotonic() + 1)
