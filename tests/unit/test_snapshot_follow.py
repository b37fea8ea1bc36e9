"""`relay snapshot run --follow` follows the snapshot it asked for, not the one the status showed before."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from relay.cli import snapshot as cli


def _report(snapshot_id: str | None, state: str, done: bool | None) -> dict[str, Any]:
    return {
        "snapshot": f"{snapshot_id}: {state}" if snapshot_id else None,
        "snapshot_percent": 100.0 if state == "done" else 50.0,
        "snapshot_state": state,
        "done": done,
        "snapshot_id": snapshot_id,
    }


def _reader(reports: list[dict[str, Any]]) -> tuple[Callable[[], dict[str, Any]], list[int]]:
    seen = [0]
    it: Iterator[dict[str, Any]] = iter(reports)

    def read() -> dict[str, Any]:
        seen[0] += 1
        return next(it)

    return read, seen


@pytest.fixture(autouse=True)
def _no_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli.time, "sleep", lambda _s: None)


def test_the_previous_done_snapshot_is_not_taken_for_the_new_one(capsys: pytest.CaptureFixture[str]) -> None:
    read, seen = _reader([
        _report("old", "done", True),  # the status not yet rewritten since the request was accepted
        _report("new", "running", False),
        _report("new", "done", True),
    ])  # fmt: skip
    assert cli._follow_bar(read, lambda p: f"{p:.0f}%", "new") == 0
    assert seen[0] == 3
    assert "waiting for the relay's status to show snapshot new" in capsys.readouterr().out


def test_a_snapshot_the_status_never_shows_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    read, _ = _reader([_report("old", "done", True)] * 3)
    assert cli._follow_bar(read, lambda p: f"{p:.0f}%", "new", show_within=-1.0) == 1
    assert "does not show snapshot new" in capsys.readouterr().out


def test_following_without_an_id_takes_what_the_status_shows() -> None:
    read, seen = _reader([_report("old", "done", True)])
    assert cli._follow_bar(read, lambda p: f"{p:.0f}%") == 0
    assert seen[0] == 1


def test_a_relay_that_stopped_ends_the_wait() -> None:
    read, _ = _reader([_report(None, "interrupted", None)])
    assert cli._follow_bar(read, lambda p: f"{p:.0f}%", "new") == 1
