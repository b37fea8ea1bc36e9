"""``typed``/``apply_changes`` on synthetic canal-json records (the relay's exact shape), for the cases that
used to give wrong tables: a rolling ALTER across shards inside one micro-batch, a key spelled differently in
the mapping, TIMESTAMP in a zone with DST, TRUNCATE/DROP of a shard, BIT(64) at its limits; plus the apply's
own guarantees: incremental (only touched buckets rewritten), idempotent, crash-safe, SCD type 2 history,
a changed column type (every bucket rewritten in one commit), maintenance (files bounded, retained versions
readable). Tables are read back by the formats' own libraries (``tests.spark.readers``)."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import relay.spark.apply as apply_module
from relay.spark.apply import apply_changes, apply_history, maintain
from relay.spark.decode import changes, typed
from relay.spark.tables import MirrorTable, MirrorTarget, read_table, target_of
from tests.spark.readers import current_version, read_all, schema_of

TYPES = {"id": "bigint", "status": "varchar(16)"}


def rec(
    seq: int,
    kind: str,
    row: dict[str, Any] | None,
    types: dict[str, str] | None = TYPES,
    shard: str = "t_00",
    table: str = "t",
    key: str | None = None,
    extra: dict[str, Any] | None = None,
) -> tuple[str, bytes]:
    ddl = row is None
    message: dict[str, Any] = {
        "id": seq,
        "database": "d",
        "table": table,
        "pkNames": None if ddl else ["id"],
        "isDdl": ddl,
        "type": kind,
        "es": seq,
        "ts": seq,
        "sql": "" if not ddl else f"{kind} TABLE {shard}",
        "sqlType": None if ddl else {},
        "mysqlType": None if ddl else types,
        "data": None if ddl else [row],
        "old": None,
        "gtid": "",
        "source": {"database": "d_00", "table": shard},
        "sequence": seq,
    }
    if extra:
        message.update(extra)
    if key is None:
        key = "d_00." + shard if row is None else json.dumps({"id": row["id"]})
    return key, json.dumps(message).encode()


def frame(spark: Any, values: list[tuple[str, bytes]]) -> Any:
    rows = [(k.encode(), v, "d", 0, i) for i, (k, v) in enumerate(values)]
    df = spark.createDataFrame(rows, "key binary, value binary, topic string, partition int, offset long")
    return df.selectExpr("*", "current_timestamp() as timestamp", "0 as timestampType")


@pytest.fixture(params=["delta", "iceberg"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> MirrorTarget:
    """A local mirror of each format (Iceberg: the default SQL catalog on SQLite beside the tables)."""
    return target_of(tmp_path / "out", format=request.param)


def table_rows(spark: Any, out: Any, table: str = "d.t") -> dict[str, dict[str, Any]]:
    """The mirrored rows by id, read by the format's own library (deltalake / pyiceberg), not by us."""
    rows = read_table(out, table).to_pylist()
    data = [c for c in (rows[0] if rows else {}) if not c.startswith("_") and c != "relay_bucket"]
    return {str(r["id"]): {c: r[c] for c in data} for r in rows}


def test_rolling_alter_in_one_batch_keeps_the_new_column(spark: Any, target: MirrorTarget) -> None:
    wide = {**TYPES, "extra": "int"}
    batch = frame(
        spark,
        [
            rec(10, "INSERT", {"id": "1", "status": "a", "extra": "5"}, wide, shard="t_01"),
            rec(11, "INSERT", {"id": "2", "status": "b"}, TYPES, shard="t_00"),  # shard not altered yet
        ],
    )
    apply_changes(changes(batch), target)
    got = table_rows(spark, target)
    assert got == {"1": {"id": 1, "status": "a", "extra": 5}, "2": {"id": 2, "status": "b", "extra": None}}


def test_key_spelled_differently_in_the_mapping(spark: Any, tmp_path: Path) -> None:
    batch = frame(
        spark,
        [
            rec(10, "INSERT", {"id": "1", "status": "a"}, key='{"ID":"1"}'),
            rec(11, "INSERT", {"id": "2", "status": "b"}, key='{"ID":"2"}'),
            rec(12, "UPDATE", {"id": "2", "status": "c"}, key='{"ID":"2"}'),
        ],
    )
    rows = typed(changes(batch), "d.t").collect()
    assert {r["_key"] for r in rows} == {'["1"]', '["2"]'}
    apply_changes(changes(batch), tmp_path)
    assert table_rows(spark, tmp_path) == {"1": {"id": 1, "status": "a"}, "2": {"id": 2, "status": "c"}}


def test_bit64_at_its_limits(spark: Any) -> None:
    types = {"id": "bigint", "b": "bit(64)", "s": "bit(1)"}
    values = ["0", "9223372036854775807", "9223372036854775808", "18446744073709551615"]
    batch = frame(
        spark, [rec(10 + i, "INSERT", {"id": str(i), "b": v, "s": "1"}, types) for i, v in enumerate(values)]
    )
    got = {r["id"]: r for r in typed(changes(batch), "d.t").collect()}
    assert [got[i]["b"] for i in range(4)] == [Decimal(v) for v in values]
    assert got[0]["s"] == 1


def test_timestamp_in_a_dst_zone_is_the_instant(spark: Any) -> None:
    # Europe/Berlin, 2024-10-27: 02:30 happens twice (CEST +02:00, then CET +01:00).
    types = {"id": "bigint", "at": "timestamp(3)"}
    first = dt.datetime(2024, 10, 27, 0, 30, 0, 123000, tzinfo=dt.UTC)  # 02:30:00.123 CEST
    second = first + dt.timedelta(hours=1)  # 02:30:00.123 CET
    micros = [int(t.timestamp() * 1_000_000) for t in (first, second)]
    batch = frame(
        spark,
        [
            rec(
                10 + i,
                "INSERT",
                {"id": str(i), "at": "2024-10-27 02:30:00.123"},
                types,
                extra={"utcMicros": [{"at": m}]},
            )
            for i, m in enumerate(micros)
        ],
    )
    got = {r["id"]: r["at"] for r in typed(changes(batch), "d.t").collect()}
    # the session zone is UTC: Spark gives naive UTC datetimes for TIMESTAMP
    assert got == {0: first.replace(tzinfo=None), 1: second.replace(tzinfo=None)}


def test_truncate_drop_and_recreate_of_a_shard(spark: Any, target: MirrorTarget) -> None:
    inserts = [
        rec(10, "INSERT", {"id": "1", "status": "a"}, shard="t_00"),
        rec(11, "INSERT", {"id": "2", "status": "b"}, shard="t_01"),
        rec(12, "INSERT", {"id": "3", "status": "c"}, shard="t_00"),
    ]
    apply_changes(changes(frame(spark, inserts)), target)
    truncate = [rec(20, "TRUNCATE", None, shard="t_00"), rec(21, "INSERT", {"id": "4", "status": "d"})]
    apply_changes(changes(frame(spark, truncate)), target)
    assert set(table_rows(spark, target)) == {"2", "4"}
    apply_changes(changes(frame(spark, inserts)), target)  # a replay cannot bring truncated rows back
    assert set(table_rows(spark, target)) == {"2", "4"}
    drop = [rec(30, "ERASE", None, shard="t_01"), rec(30, "ERASE", None, shard="t_00")]
    apply_changes(changes(frame(spark, drop)), target)
    assert table_rows(spark, target) == {}
    create = [rec(40, "CREATE", None, shard="t_00"), rec(41, "INSERT", {"id": "5", "status": "e"})]
    apply_changes(changes(frame(spark, [*inserts, *create])), target)
    assert table_rows(spark, target) == {"5": {"id": 5, "status": "e"}}


def _workload(first: int, keys: range) -> list[tuple[str, bytes]]:
    out = []
    for i, k in enumerate(keys):
        out.append(rec(first + 3 * i, "INSERT", {"id": str(k), "status": "new"}))
        if k % 2:
            out.append(rec(first + 3 * i + 1, "UPDATE", {"id": str(k), "status": "paid"}))
        if k % 5 == 0:
            out.append(rec(first + 3 * i + 2, "DELETE", {"id": str(k), "status": "paid"}))
    return out


def test_apply_rewrites_only_touched_buckets_and_is_idempotent(spark: Any, target: MirrorTarget) -> None:
    base = frame(spark, _workload(1000, range(1, 300_000, 1000)))  # keys in three range buckets
    apply_changes(changes(base), target)
    first = table_rows(spark, target)
    mirror = MirrorTable(target, "d.t")
    before, version = mirror.rows.files(), mirror.rows.version()
    batch = frame(spark, _workload(10**6, range(250_000, 250_010)))  # one bucket only
    apply_changes(changes(batch), target)
    mirror.rows.refresh()
    after = mirror.rows.files()
    assert sorted(after) == ["r0", "r1", "r2"]
    assert {b for b in after if after[b] != before[b]} == {"r2"}  # one bucket's file replaced
    expected = table_rows(spark, target)
    done = mirror.rows.version()
    assert done != version
    apply_changes(changes(batch), target)  # the same micro-batch re-run
    apply_changes(changes(base), target)  # a replay from the start
    mirror.rows.refresh()
    assert mirror.rows.version() == done  # nothing changed, nothing committed
    assert table_rows(spark, target) == expected
    assert expected["250001"] == {"id": 250001, "status": "paid"} and "250005" not in expected
    # Time travel: the version before the batch, read by the format's library.
    assert {
        str(r["id"]): {"id": r["id"], "status": r["status"]} for r in mirror.read(version).to_pylist()
    } == first
    assert first != expected and len(first) == 300


def test_a_kill_between_file_writes_and_commit_leaves_orphans_the_next_run_removes(
    spark: Any, target: MirrorTarget, monkeypatch: pytest.MonkeyPatch
) -> None:
    apply_changes(changes(frame(spark, _workload(1000, range(10)))), target)
    good = table_rows(spark, target)
    batch = frame(spark, _workload(5000, range(5, 20)))
    part = type(MirrorTable(target, "d.t").rows)

    def killed(*_: Any, **__: Any) -> None:
        raise KeyboardInterrupt("killed after the tasks wrote, before the commit")

    monkeypatch.setattr(part, "commit", killed)
    with pytest.raises(KeyboardInterrupt):
        apply_changes(changes(batch), target)
    monkeypatch.undo()
    assert table_rows(spark, target) == good  # the last committed table, still readable
    orphans = _data_files(target) - _referenced(target)
    assert orphans, "the killed write left no files: the test proves nothing"
    apply_changes(changes(batch), target)  # the micro-batch again: orphans removed, then applied
    assert not orphans & _data_files(target)
    fresh = target_of(target.storage.uri("fresh"), format=target.format)
    apply_changes(changes(frame(spark, _workload(1000, range(10)))), fresh)
    apply_changes(changes(batch), fresh)
    assert table_rows(spark, target) == table_rows(spark, fresh)


def _data_files(target: MirrorTarget) -> set[str]:
    """Every parquet file under the mirror's root, by path (what the storage holds)."""
    return {str(p) for p in Path(target.storage.root).rglob("*.parquet") if "fresh" not in p.parts}


def _referenced(target: MirrorTarget) -> set[str]:
    mirror = MirrorTable(target, "d.t")
    out = set()
    for part in (mirror.rows, mirror.tombs):
        out |= {u.removeprefix("file://") for files in part.files().values() for u in files}
    return out


def test_scd2_history_holds_every_version(spark: Any, target: MirrorTarget) -> None:
    versions = [
        rec(10, "INSERT", {"id": "1", "status": "new"}),
        rec(20, "UPDATE", {"id": "1", "status": "paid"}),
        rec(30, "UPDATE", {"id": "1", "status": "shipped"}),
        rec(40, "DELETE", {"id": "1", "status": "shipped"}),
        rec(50, "INSERT", {"id": "1", "status": "again"}),
        rec(15, "INSERT", {"id": "2", "status": "other"}),
    ]
    apply_history(changes(frame(spark, versions[:2])), target, "d.t")
    apply_history(changes(frame(spark, versions)), target, "d.t")  # overlapping replay
    apply_history(changes(frame(spark, versions[2:4])), target, "d.t")
    rows = MirrorTable(target, "d.t", "history").read().to_pylist()
    got = sorted((r["id"], r["status"], r["_start_sequence"], r["_end_sequence"]) for r in rows)
    independent = sorted(
        (r["id"], r["status"], r["_start_sequence"], r["_end_sequence"])
        for r in read_all(target, "d.t", "history")
    )
    assert independent == got  # as the format's own readers (and pyarrow over its files) see it
    assert got == [
        (1, "again", 50, None),
        (1, "new", 10, 20),
        (1, "paid", 20, 30),
        (1, "shipped", 30, 40),
        (2, "other", 15, None),
    ]


def test_timestamp_instant_of_a_protobuf_record(spark: Any) -> None:
    from relay.binlog.events import ColumnMeta, RowImage
    from relay.binlog.rows import Instant
    from relay.canal.entry import EventType
    from tests.unit.test_codec import COLUMNS, encoder, mapping, rows_entry

    columns = (*COLUMNS[:3], ColumnMeta(3, "at", 17, 3, True, False, None, False, "timestamp(3)", 93, 3))
    values = []
    for ident, micros in (("1", 1_729_989_000_123_000), ("2", 1_729_992_600_123_000)):  # the DST fold
        at = Instant("2024-10-27 02:30:00.123")
        at.micros = micros
        entry = rows_entry(EventType.INSERT, RowImage(None, (ident, "a", "1.00", at)), columns=columns)
        (record,) = encoder(mapping(codec="canal-protobuf")).encode(entry)
        values.append((record.key.decode(), record.value))
    got = {r["id"]: r["at"] for r in typed(changes(frame(spark, values)), "shop.orders").collect()}
    assert got == {
        1: dt.datetime(2024, 10, 27, 0, 30, 0, 123000),
        2: dt.datetime(2024, 10, 27, 1, 30, 0, 123000),
    }


def _stored(target: MirrorTarget, suffix: str) -> set[str]:
    """Every file with ``suffix`` under the mirror's root but the catalog (what the storage holds)."""
    return {str(p) for p in Path(target.storage.root).rglob(f"*{suffix}") if "fresh" not in p.parts}


def test_maintenance_bounds_the_files_and_keeps_the_retained_versions(
    spark: Any, target: MirrorTarget, monkeypatch: pytest.MonkeyPatch
) -> None:
    kept = replace(target, maintain_every=3)  # the default retention (7 days): every version stays
    runs: list[str] = []
    real = apply_module.maintain

    def counted(mirror: MirrorTable) -> None:
        runs.append(mirror.table)
        real(mirror)

    monkeypatch.setattr(apply_module, "maintain", counted)
    versions: list[tuple[int, list[dict[str, Any]]]] = []
    for i in range(7):  # the same two buckets changed by every batch, one key deleted each time
        batch = [rec(100 * i + k, "UPDATE", {"id": str(k * 100_000 + i), "status": f"v{i}"}) for k in (0, 1)]
        batch += [rec(100 * i + 50 + k, "INSERT", {"id": str(k * 100_000 + 50 + i)}) for k in (0, 1)]
        batch.append(rec(100 * i + 90, "DELETE", {"id": str(50 + i - 1), "status": ""}))
        apply_changes(changes(frame(spark, batch)), kept)
        versions.append((current_version(kept, "d.t"), read_all(kept, "d.t")))
    assert runs == ["d.t", "d.t"]  # after the 3rd and the 6th commit of the table
    for version, rows in versions:  # nothing younger than the retention was removed: time travel works
        assert read_all(kept, "d.t", version=version) == rows
    assert len(_stored(kept, ".parquet")) > 2 * len(_referenced(kept))  # replaced files kept meanwhile
    now = replace(target, retention_hours=0)  # keep the current version only
    maintain(MirrorTable(now, "d.t"))
    assert _stored(now, ".parquet") == _referenced(now)  # exactly the current version's files
    assert read_all(now, "d.t") == versions[-1][1]
    with pytest.raises(Exception):  # noqa: B017 (each library raises its own: files gone / snapshot expired)
        read_all(now, "d.t", version=versions[0][0])
    if target.format == "iceberg":  # the manifests and manifest lists of expired snapshots went too
        assert _stored(now, ".avro") == _iceberg_metadata(now)


def _iceberg_metadata(target: MirrorTarget) -> set[str]:
    """The manifests and manifest lists the rows' and tombstones' remaining snapshots reference."""
    out: set[str] = set()
    for part in (MirrorTable(target, "d.t").rows, MirrorTable(target, "d.t").tombs):
        table = part._open()  # type: ignore[attr-defined]
        out |= {str(p) for p in table.inspect.all_manifests().column("path").to_pylist()}
        out |= {str(s.manifest_list) for s in table.snapshots()}
    return {u.removeprefix("file://") for u in out}


def test_a_changed_column_type_rewrites_every_bucket_in_one_commit(spark: Any, target: MirrorTarget) -> None:
    types = {"id": "bigint", "status": "varchar(16)", "n": "int"}
    first = [
        rec(10 + i, "INSERT", {"id": str(k), "status": s, "n": str(i)}, types)
        for i, (k, s) in enumerate(((1, "7"), (150_000, "x"), (250_000, "12")))
    ]
    apply_changes(changes(frame(spark, first)), target)
    before_version, before = current_version(target, "d.t"), read_all(target, "d.t")
    mirror = MirrorTable(target, "d.t")
    files = mirror.rows.files()
    assert sorted(files) == ["r0", "r1", "r2"]
    # ALTER TABLE … MODIFY status INT, n BIGINT: one new row in one bucket, in the new types.
    retyped = {"id": "bigint", "status": "int", "n": "bigint"}
    apply_changes(
        changes(frame(spark, [rec(20, "INSERT", {"id": "2", "status": "3", "n": "9"}, retyped)])), target
    )
    schema = schema_of(target, "d.t")
    assert schema["status"] == pa.int32() and schema["n"] == pa.int64()
    got = {r["id"]: (r["status"], r["n"]) for r in read_all(target, "d.t")}
    assert got == {1: (7, 0), 2: (3, 9), 150_000: (None, 1), 250_000: (12, 2)}  # "x" is no INT: null
    mirror.rows.refresh()
    after = mirror.rows.files()
    assert all(set(after[b]).isdisjoint(files[b]) for b in files)  # every bucket written again
    if target.format == "delta":  # one commit: the schema change and the rewritten files together
        assert current_version(target, "d.t") == before_version + 1
    assert read_all(target, "d.t", version=before_version) == before  # the old types, by time travel
