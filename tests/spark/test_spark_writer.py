"""The Delta mirror written by Spark's own Delta connector (``writer="spark"``: MERGE INTO) against the
driver's commits (``writer="driver"``) and against an oracle, on seeded random change streams.

Each seed makes batches of INSERT/UPDATE/DELETE records over a few hundred keys spread over range buckets,
with records repeated, batches replayed out of order and a TRUNCATE of one shard; both writers apply the
same batches to their own table. The oracle is plain Python over the records: per key the change with the
highest (sequence, part) wins, a delete beating an upsert of the same identity, and a TRUNCATE dropping
its shard's older rows. Both tables must equal it, as read by every independent reader of Delta
(``tests.spark.readers``: deltalake, polars, pyarrow and DuckDB over the version's files) and by Spark's
Delta reader. A failing seed is named in the assertion; ``SEEDS`` is the fixed set the suite runs,
``LONG_SEEDS`` more for the longer suite.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from relay.spark.apply import BatchId, apply_changes
from relay.spark.decode import changes
from relay.spark.storage import Storage
from relay.spark.tables import MirrorTable, MirrorTarget
from tests.spark.readers import read_all
from tests.spark.test_apply import frame, rec

SEEDS = (11,)  # the suite's; the longer suite runs LONG_SEEDS too
LONG_SEEDS = (29, 47, 83)
KEYS = 300
SPAN = 100_000  # the range bucket width: keys spread over several buckets


def stream(seed: int) -> list[list[tuple[str, bytes]]]:
    """Batches of records (see the module docstring); sequences rise, repeats and replays do not."""
    rng = random.Random(seed)
    batches: list[list[tuple[str, bytes]]] = []
    seq = 1000
    for _ in range(4):
        batch = []
        for _ in range(rng.randint(40, 160)):
            seq += 1
            ident = str(rng.randrange(KEYS) * (SPAN // 37))
            kind = rng.choice(("INSERT", "UPDATE", "UPDATE", "DELETE"))
            shard = f"t_0{int(ident) % 2}"
            batch.append(rec(seq, kind, {"id": ident, "status": f"s{seq}"}, shard=shard))
            if rng.random() < 0.1:
                batch.append(batch[-1])  # a record delivered twice
        batches.append(batch)
    seq += 1
    batches.append([rec(seq, "TRUNCATE", None, shard="t_01")])
    batches.append(rng.choice(batches[:-1]))  # a replay of an older batch: changes nothing
    return batches


def oracle(batches: list[list[tuple[str, bytes]]]) -> dict[str, dict[str, Any]]:
    import json

    best: dict[str, tuple[int, bool, dict[str, Any]]] = {}
    cleared: dict[str, int] = {}
    for batch in batches:
        for _, value in batch:
            m = json.loads(value)
            shard = m["source"]["table"]
            if m["isDdl"]:
                cleared[shard] = max(cleared.get(shard, -1), m["sequence"])
                continue
            row = m["data"][0]
            deleted = m["type"] == "DELETE"
            have = best.get(row["id"])
            if have is None or (m["sequence"], deleted) > (have[0], have[1]):
                best[row["id"]] = (m["sequence"], deleted, {"id": int(row["id"]), "status": row["status"]})
    out = {}
    for ident, (seq, deleted, row) in best.items():
        shard = f"t_0{int(ident) % 2}"
        if not deleted and seq >= cleared.get(shard, -1):
            out[ident] = row
    return out


def _mirrored(target: MirrorTarget) -> dict[str, dict[str, Any]]:
    """The table as every independent reader sees it (Spark's Delta connector among them: they agree)."""
    rows = read_all(target, "d.t")
    return {str(r["id"]): {"id": r["id"], "status": r["status"]} for r in rows}


@pytest.mark.timeout(900)  # two writers, four batches each: minutes on a loaded 2-core machine
@pytest.mark.parametrize(
    "seed", [*SEEDS, *(pytest.param(seed, marks=pytest.mark.long) for seed in LONG_SEEDS)]
)
def test_spark_merge_equals_driver_commits_and_the_oracle(spark: Any, tmp_path: Path, seed: int) -> None:
    batches = stream(seed)
    want = oracle(batches)
    # maintenance after every second commit, keeping no old version: the spark writer's maintenance
    # committed from a table opened before Spark's MERGE and failed ("a concurrent transaction deleted data")
    targets = {
        w: MirrorTarget(Storage(str(tmp_path / w)), "delta", writer=w, maintain_every=2, retention_hours=0.0)
        for w in ("driver", "spark")
    }
    for n, batch in enumerate(batches):
        df = changes(frame(spark, batch))
        for target in targets.values():
            apply_changes(df, target, batch=BatchId("app", n))
    for writer, target in targets.items():
        got = _mirrored(target)
        assert got == want, f"seed {seed}: the {writer} writer's table differs from the oracle"


def test_spark_merge_rerun_of_a_committed_batch_is_skipped(spark: Any, tmp_path: Path) -> None:
    target = MirrorTarget(Storage(str(tmp_path / "t")), "delta", writer="spark")
    batch = changes(frame(spark, stream(5)[0]))
    apply_changes(batch, target, batch=BatchId("app", 0))
    mirror = MirrorTable(target, "d.t")
    version = mirror.rows.version()
    apply_changes(batch, target, batch=BatchId("app", 0))
    mirror.rows.refresh()
    assert mirror.rows.version() == version
    state = mirror.rows.state()
    assert state is not None and state.batches == {"app": 0}
