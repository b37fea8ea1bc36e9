"""GTID sets round-trip through text and record transactions; the retry policy backs off and gives up."""

from __future__ import annotations

import pytest

from relay.binlog.gtid import GtidSet
from relay.common.retry import RetryPolicy
from relay.errors import SourceError

U1 = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
U2 = "4e11fa47-71ca-11e1-9e33-c80aa9429562"


@pytest.mark.parametrize(
    "text",
    [f"{U1}:1-5", f"{U1}:1-5:7-9,{U2}:3", ""],
)
def test_mysql_gtid_set_round_trips(text: str) -> None:
    assert str(GtidSet.parse(text, mariadb=False)) == text


def test_mysql_gtid_set_merges_and_adds() -> None:
    gs = GtidSet.parse(f"{U1}:1-3:5", mariadb=False)
    gs.add(f"{U1}:4")
    assert str(gs) == f"{U1}:1-5"
    gs.add(f"{U2}:1")
    assert gs.contains(f"{U2}:1") and not gs.contains(f"{U2}:2")
    assert str(gs) == f"{U1}:1-5,{U2}:1"


def test_mariadb_gtid_set_keeps_the_last_per_domain() -> None:
    gs = GtidSet.parse("0-1-100,1-2-7", mariadb=True)
    gs.add("0-1-101")
    assert str(gs) == "0-1-101,1-2-7"
    assert gs.contains("0-1-50") and not gs.contains("1-2-8")


def test_bad_gtid_text_is_refused_with_the_text() -> None:
    with pytest.raises(SourceError, match="nonsense"):
        GtidSet.parse("nonsense", mariadb=False)
    with pytest.raises(SourceError, match="0-x-1"):
        GtidSet.parse("0-x-1", mariadb=True)


def test_backoff_grows_caps_and_gives_up() -> None:
    slept: list[float] = []
    backoff = RetryPolicy(initial=1.0, maximum=4.0, multiplier=2.0, jitter=0.0, max_tries=5).start(
        slept.append
    )
    results = [backoff.wait() for _ in range(5)]
    assert results == [True, True, True, True, False]
    assert slept == [1.0, 2.0, 4.0, 4.0]
