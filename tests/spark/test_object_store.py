"""The mirror on an object store: Delta and Iceberg tables written by Spark tasks to a real S3 API server.

The tests start ``moto``'s S3 server on a free local port (one per test module), point the mirror at
``s3://bucket/…`` with the usual AWS settings, and check what a cluster without a shared file system
needs: the tasks write through pyarrow's S3 file system, the driver commits through deltalake / pyiceberg,
a kill between the file writes and the commit leaves only files no version references and the next run
deletes them, and three readers that are not our code — the format's library, and pyarrow over exactly
the files the table's current version lists — see the same rows as a local mirror of the same changes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from relay.spark.apply import apply_changes
from relay.spark.decode import changes
from relay.spark.layout import BUCKET
from relay.spark.storage import Storage
from relay.spark.tables import MirrorTable, MirrorTarget, target_of
from tests.spark.conftest import BUCKET_NAME
from tests.spark.test_apply import _workload, frame, table_rows

boto3 = pytest.importorskip("boto3")


def _objects(settings: dict[str, str], prefix: str) -> set[str]:
    client = boto3.client(
        "s3",
        endpoint_url=settings["AWS_ENDPOINT_URL"],
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name="us-east-1",
    )
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET_NAME, Prefix=prefix)
    return {f"s3://{BUCKET_NAME}/{o['Key']}" for page in pages for o in page.get("Contents", [])}


def _target(fmt: str, s3: dict[str, str], name: str, tmp_path: Path) -> MirrorTarget:
    storage = Storage(f"s3://{BUCKET_NAME}/{name}-{fmt}", s3)
    catalog = {"uri": f"sqlite:///{tmp_path / 'catalog.sqlite'}"} if fmt == "iceberg" else {}
    return MirrorTarget(storage, fmt, catalog)


def _committed_files(target: MirrorTarget) -> set[str]:
    mirror = MirrorTable(target, "d.t")
    return {u for part in (mirror.rows, mirror.tombs) for files in part.files().values() for u in files}


def _pyarrow_rows(target: MirrorTarget) -> dict[str, dict[str, Any]]:
    """The rows read by pyarrow alone from the files the current version lists (the bucket from the path
    for Delta, whose files do not hold it)."""
    import pyarrow.parquet as pq

    fs = target.storage.filesystem()
    out: dict[str, dict[str, Any]] = {}
    for uris in MirrorTable(target, "d.t").rows.files().values():
        for uri in uris:
            for row in pq.read_table(target.storage.fs_path(uri), filesystem=fs).to_pylist():
                out[str(row["id"])] = {"id": row["id"], "status": row["status"]}
    return out


@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_mirror_on_s3_survives_a_kill_between_writes_and_commit(
    spark: Any, s3: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str
) -> None:
    target = _target(fmt, s3, "kill", tmp_path)
    first = frame(spark, _workload(1000, range(1, 30)))
    apply_changes(changes(first), target)
    good = table_rows(spark, target)
    batch = frame(spark, _workload(5000, range(21, 200_040, 10_000)))  # a new key in every other bucket
    part = type(MirrorTable(target, "d.t").rows)

    def killed(*_: Any, **__: Any) -> None:
        raise KeyboardInterrupt("killed after the tasks wrote to S3, before the commit")

    monkeypatch.setattr(part, "commit", killed)
    with pytest.raises(KeyboardInterrupt):
        apply_changes(changes(batch), target)
    monkeypatch.undo()
    assert table_rows(spark, target) == good  # the committed table, unchanged
    stored = _objects(s3, target.storage.root.split("/", 3)[3])
    orphans = {o for o in stored if o.endswith(".parquet")} - _committed_files(target)
    orphans = {o for o in orphans if "/relay-" in o and "metadata" not in o}
    assert orphans, "the killed write left no files on S3: the test proves nothing"
    apply_changes(changes(batch), target)  # the micro-batch again: the orphans go, the batch is applied
    assert not orphans & _objects(s3, target.storage.root.split("/", 3)[3])
    local = target_of(tmp_path / "local", format=fmt)
    apply_changes(changes(first), local)
    apply_changes(changes(batch), local)
    expected = table_rows(spark, local)
    assert table_rows(spark, target) == expected  # the format's library reads S3
    assert _pyarrow_rows(target) == expected  # pyarrow over the committed files only
    assert len(expected) > 20 and any(int(k) > 100_000 for k in expected)


def test_storage_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "env-key")
    storage = Storage("s3a://b/p", {"AWS_REGION": "eu-west-1"})
    assert storage.delta_uri("t") == "s3://b/p/t"
    assert storage.delta_options()["AWS_ACCESS_KEY_ID"] == "env-key"
    assert storage.iceberg_io() == {
        "s3.endpoint": "http://127.0.0.1:9",
        "s3.access-key-id": "env-key",
        "s3.region": "eu-west-1",
    }
    assert storage.fs_path("s3a://b/p/t/x.parquet") == "b/p/t/x.parquet"
    assert BUCKET == "relay_bucket"
