"""relay.spark.session: the jars put on a session, the --packages text, the s3a settings (no Spark)."""

from __future__ import annotations

from pathlib import Path

import pytest

from relay.common import jars
from relay.errors import OptionError

session = pytest.importorskip("relay.spark.session")


def _resolved(tmp: Path, name: str, files: list[str]) -> None:
    folder = tmp / name
    folder.mkdir(parents=True)
    for file in files:
        (folder / file).write_bytes(b"")
    (folder / ".resolved").write_text(jars.SETS[name].fingerprint + "\n")


def test_jars_spark_ships_are_left_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "spark"
    (home / "jars").mkdir(parents=True)
    (home / "jars" / "commons-pool2-2.12.0.jar").write_bytes(b"")  # Spark's own copy, another version
    monkeypatch.setenv("SPARK_HOME", str(home))
    monkeypatch.setenv("RELAY_JARS_DIR", str(tmp_path / "jars"))
    kafka = ["spark-sql-kafka-0-10_2.13-4.2.0.jar", "kafka-clients-3.9.2.jar", "commons-pool2-2.13.1.jar"]
    _resolved(tmp_path / "jars", "spark-kafka", kafka)
    _resolved(tmp_path / "jars", "spark-delta", ["delta-spark_4.2_2.13-4.4.0.jar", "kafka-clients-3.9.2.jar"])
    names = [p.name for p in session.connector_jars(("spark-kafka", "spark-delta"))]
    assert names == [
        "kafka-clients-3.9.2.jar",
        "spark-sql-kafka-0-10_2.13-4.2.0.jar",
        "delta-spark_4.2_2.13-4.4.0.jar",
    ]


def test_packages_are_the_pinned_roots() -> None:
    text = session.packages(("spark-kafka", "spark-delta"))
    assert text == (
        f"org.apache.spark:spark-sql-kafka-0-10_2.13:{jars.SPARK_VERSION},"
        f"io.delta:delta-spark_4.2_2.13:{jars.DELTA_VERSION}"
    )


def test_s3a_settings_from_the_storage_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("AWS_SESSION_TOKEN", "AWS_REGION", "AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID"):
        monkeypatch.delenv(key, raising=False)
    conf = session.s3a_conf(
        {"AWS_ENDPOINT_URL": "http://127.0.0.1:9000", "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"}
    )
    assert conf["spark.hadoop.fs.s3.impl"] == "org.apache.hadoop.fs.s3a.S3AFileSystem"
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:9000"
    assert conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "false"
    assert conf["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert (conf["spark.hadoop.fs.s3a.access.key"], conf["spark.hadoop.fs.s3a.secret.key"]) == ("k", "s")


def test_an_unknown_connector_is_refused() -> None:
    with pytest.raises(OptionError, match=r"unknown .*spark-iceberg"):
        session.Connectors(("spark-iceberg",)).conf()


def test_the_spark_writer_is_delta_only(tmp_path: Path) -> None:
    tables = pytest.importorskip("relay.spark.tables")
    from relay.spark.storage import Storage

    assert tables.MirrorTarget(Storage(str(tmp_path)), "delta", writer="spark").writer == "spark"
    with pytest.raises(OptionError, match=r"writer spark: .*Delta tables only"):
        tables.MirrorTarget(Storage(str(tmp_path)), "iceberg", writer="spark")
    with pytest.raises(OptionError, match=r"writer: expected one of driver, spark"):
        tables.MirrorTarget(Storage(str(tmp_path)), "delta", writer="jvm")


def test_the_mirror_asks_only_for_the_connectors_it_uses() -> None:
    mirror = pytest.importorskip("relay.spark.mirror")
    base = {"bootstrap_servers": "b:9092", "topics": ("t",), "checkpoint": "/ck"}
    assert mirror.MirrorConfig(out="/m", **base).connectors() == ("spark-kafka",)
    assert mirror.MirrorConfig(out="/m", source="relay-kafka", **base).connectors() == ()
    spark_s3 = mirror.MirrorConfig(out="s3://b/m", writer="spark", **base)
    assert spark_s3.connectors() == ("spark-kafka", "spark-delta", "spark-s3")
