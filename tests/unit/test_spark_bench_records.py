"""``relay.spark.bench.records``: the benchmark's change stream is one a table could have produced — replayed
by an independent oracle (a dict of rows), every UPDATE and DELETE names a live row with its current values,
every INSERT a new key, a repeat is the previous record again. No timing: the generator's cost is linear by
construction (an O(1) draw), measured by the bench, not asserted here."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest

pytest.importorskip("pyspark")

from relay.spark.bench import records

SEEDS = (7, 41, 1009)


def replay(recs: list[tuple[bytes, bytes, str, int, int]], seed: int) -> Counter[str]:
    state: dict[str, dict[str, Any]] = {}
    ever: set[str] = set()
    kinds: Counter[str] = Counter()
    last_seq = 0
    for at, (key, value, topic, partition, offset) in enumerate(recs):
        where = f"seed {seed}, record {at}"
        assert (topic, offset) == ("bench.orders", at), where
        if at and recs[at - 1][:4] == (key, value, topic, partition):
            kinds["repeat"] += 1
            continue
        message = json.loads(value)
        (row,) = message["data"]
        ident = row["id"]
        assert json.loads(key) == {"id": ident} and partition == int(ident) % 4, where
        assert message["sequence"] > last_seq, where
        last_seq = message["sequence"]
        kind = message["type"]
        kinds[kind] += 1
        if kind == "INSERT":
            assert ident not in ever, where
            ever.add(ident)
            state[ident] = row
        elif kind == "UPDATE":
            assert ident in state, where
            assert message["old"] == [{"status": state[ident]["status"]}], where
            assert {**row, "status": state[ident]["status"]} == state[ident], where
            state[ident] = row
        else:
            assert kind == "DELETE" and state.pop(ident) == row, where
    return kinds


@pytest.mark.parametrize("seed", SEEDS)
def test_records_replay_as_a_table_would(seed: int) -> None:
    n = 20_000
    recs = records(n, seed=seed)
    assert len(recs) == n
    kinds = replay(recs, seed)
    changes = n - kinds["repeat"]
    assert 0.07 * n < kinds["repeat"] < 0.13 * n, (seed, kinds)
    assert 0.45 * changes < kinds["INSERT"] < 0.56 * changes, (seed, kinds)
    assert 0.30 * changes < kinds["UPDATE"] < 0.40 * changes, (seed, kinds)
    assert 0.11 * changes < kinds["DELETE"] < 0.19 * changes, (seed, kinds)


def test_records_draw_updates_and_deletes_from_all_live_rows() -> None:
    """Deleted keys come from every quarter of the inserted ones, old and new (the O(1) draw moves the last
    key into the drawn one's place: every live key stays drawable; older keys, at risk longer, go more
    often)."""
    recs = records(20_000, seed=3)
    deleted = sorted(
        int(json.loads(v)["data"][0]["id"]) for _k, v, *_ in recs if json.loads(v)["type"] == "DELETE"
    )
    inserted = max(int(json.loads(v)["data"][0]["id"]) for _k, v, *_ in recs)
    quarters = Counter(min(3, 4 * (d - 1) // inserted) for d in set(deleted))
    assert all(quarters[q] > len(set(deleted)) // 50 for q in range(4)), quarters


def test_records_are_deterministic_per_seed() -> None:
    assert records(3_000, seed=5) == records(3_000, seed=5)
    assert records(3_000, seed=5) != records(3_000, seed=6)


def test_iceberg_on_an_object_store_gets_a_local_catalog_of_its_own() -> None:
    # `relay spark bench --root s3://…` measured Delta for minutes, then stopped at Iceberg: no catalog
    import shutil

    from relay.spark import bench

    saved = dict(bench._WHERE)
    bench._WHERE.update(root="s3://b/m", options={"AWS_REGION": "us-east-1"})
    try:
        one, two = bench._target("iceberg", "s3://b/m/bench-1"), bench._target("iceberg", "s3://b/m/bench-2")
        assert one.catalog["uri"].startswith("sqlite:///") and one.catalog["uri"] != two.catalog["uri"]
        assert bench._target("delta", "s3://b/m/bench-3").catalog == {}
    finally:
        shutil.rmtree(bench._WHERE.get("catalogs") or "/nonexistent", ignore_errors=True)
        bench._WHERE.clear()
        bench._WHERE.update(saved)


@pytest.mark.parametrize("formats", ["delta,bogus", "iceberg-spark", "delta-merge"])
def test_a_bad_format_is_refused_before_spark_starts(formats: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # it was refused only when its turn came, after minutes of measuring the formats before it
    from relay.errors import OptionError
    from relay.spark import bench, mirror

    def no_session(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a Spark session was started for a bad --formats")

    monkeypatch.setattr(mirror, "local_session", no_session)
    with pytest.raises(OptionError, match=r"^--formats: expected some of delta, iceberg, delta-spark, got '"):
        bench.main(["--formats", formats, "--json"])


BAD_COUNTS = [["--load-batch", "0"], ["--load", "-5"], ["--runs", "x"], ["--batches", "-1"]]


@pytest.mark.parametrize("argv", BAD_COUNTS)
def test_a_count_that_cannot_be_measured_is_refused_by_the_parser(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    # --load-batch 0 ran the decode steps for minutes, then failed in range(0, rows, 0) with a traceback
    from relay.spark import bench

    with pytest.raises(SystemExit) as ended:
        bench._arguments(argv)
    assert ended.value.code == 2
    assert f"argument {argv[0]}: expected a whole number of at least" in capsys.readouterr().err
