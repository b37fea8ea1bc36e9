"""A node's child processes (real processes, small Python scripts standing in for instances): started
when wanted, stopped with SIGTERM when not, SIGKILLed past the stop bound, restarted with a doubling
backoff after a crash (its last ERROR line kept), restarted at once when the definition changes; one
that stopped on a schema error is held (not restarted) until released."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from relay.cluster.children import Children
from relay.cluster.node_config import ChildrenConfig

SCRIPTS = {
    "sleeper": "import time\nwhile True: time.sleep(0.05)\n",
    "crasher": "import sys\n"
    "print('2026-01-01 00:00:00 ERROR relay: the source went away', flush=True)\n"
    "sys.exit(2)\n",
    "schema": "import sys\n"
    "print('relay: error: the DDL at mysql-bin.000001:400 cannot be applied to shop.orders', flush=True)\n"
    "sys.exit(5)\n",
    "stubborn": "import signal, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "print('ready', flush=True)\n"
    "while True: time.sleep(0.05)\n",
}


def _command(instance: str, version: int) -> list[str]:
    return [sys.executable, "-c", SCRIPTS[instance.split("-", maxsplit=1)[0]]]


def _until(probe: Callable[[], bool], children: Children, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        children.poll()
        if probe():
            return
        time.sleep(0.02)
    raise AssertionError(f"not reached in {timeout} s: {children.report()}")


@pytest.fixture
def make(tmp_path: Path) -> Callable[..., Children]:
    made: list[Children] = []

    def factory(**settings: float) -> Children:
        children = Children(_command, tmp_path, ChildrenConfig(**settings))
        made.append(children)
        return children

    yield factory  # type: ignore[misc]
    for children in made:
        children.stop_all(time.monotonic() + 10)


def test_started_when_wanted_and_stopped_with_sigterm_when_not(make: Callable[..., Children]) -> None:
    children = make()
    children.want({"sleeper-a": 1, "sleeper-b": 1})
    _until(lambda: children.running() == ["sleeper-a", "sleeper-b"], children)
    first = children.report()["sleeper-a"]["pid"]
    children.want({"sleeper-b": 1})
    _until(lambda: children.running() == ["sleeper-b"], children)
    assert "sleeper-a" not in children.report()  # stopped because asked: forgotten, no restart
    assert children.report()["sleeper-b"]["restarts"] == 0
    children.want({"sleeper-a": 1, "sleeper-b": 1})
    _until(lambda: children.running() == ["sleeper-a", "sleeper-b"], children)
    assert children.report()["sleeper-a"]["pid"] != first


def test_a_crash_is_restarted_with_a_doubling_backoff(make: Callable[..., Children]) -> None:
    children = make(restart_backoff_seconds=0.2, restart_backoff_max_seconds=0.5)
    children.want({"crasher-x": 1})
    _until(lambda: children.report().get("crasher-x", {}).get("restarts", 0) >= 3, children)
    report = children.report()["crasher-x"]
    assert report["last_exit"] == 2
    assert report["last_error"].endswith("ERROR relay: the source went away")
    assert 0 < report["restart_in_seconds"] <= 0.5
    assert "ERROR relay" in children.log_path("crasher-x").read_text()


def test_a_definition_change_restarts_it_at_once(make: Callable[..., Children]) -> None:
    children = make()
    children.want({"sleeper-a": 1})
    _until(lambda: children.running() == ["sleeper-a"], children)
    pid = children.report()["sleeper-a"]["pid"]
    children.want({"sleeper-a": 2})
    _until(lambda: children.report()["sleeper-a"]["pid"] not in (None, pid), children)
    assert children.report()["sleeper-a"]["definition_version"] == 2
    assert children.report()["sleeper-a"]["restarts"] == 0


def test_one_that_ignores_sigterm_is_killed_past_the_stop_bound(make: Callable[..., Children]) -> None:
    children = make(stop_timeout_seconds=0.5)
    children.want({"stubborn-s": 1})
    _until(lambda: "ready" in _log(children, "stubborn-s"), children)
    children.want({})
    started = time.monotonic()
    _until(lambda: not children.running(), children)
    assert time.monotonic() - started >= 0.5


def test_stop_all_kills_what_outlives_the_deadline(make: Callable[..., Children]) -> None:
    children = make(stop_timeout_seconds=60)
    children.want({"stubborn-s": 1, "sleeper-a": 1})
    _until(lambda: "ready" in _log(children, "stubborn-s") and len(children.running()) == 2, children)
    children.stop_all(time.monotonic() + 0.5)
    assert children.running() == []


def _log(children: Children, name: str) -> str:
    path = children.log_path(name)
    return path.read_text() if path.exists() else ""


def test_a_schema_error_holds_the_child_until_released(make: Callable[..., Children]) -> None:
    children = make(restart_backoff_seconds=0.05)
    children.want({"schema-x": 1})
    _until(lambda: children.report().get("schema-x", {}).get("process") == "held", children)
    report = children.report()["schema-x"]
    assert report["last_exit"] == 5 and "cannot be applied to shop.orders" in report["last_error"]
    started = report["restarts"]
    # held: passes for six times the backoff start nothing
    until = time.monotonic() + 0.3
    while time.monotonic() < until:
        children.poll()
    assert children.running() == [] and children.report()["schema-x"]["restarts"] == started
    children.release("schema-x")
    _until(lambda: children.report()["schema-x"]["restarts"] > started, children)
