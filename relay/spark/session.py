"""A SparkSession with Spark's own connectors on it — Kafka, Delta Lake, s3a — from local jars only.

Owns how the relay's Spark jobs (``relay spark …``, the tests, the bench) get the connectors: the pinned
Maven sets of ``relay.common.jars`` (``spark-kafka``, ``spark-delta``, ``spark-s3``),
resolved once by ``scripts/bootstrap`` into ``.jars/``, are put on the session as ``spark.jars`` (files,
never ``--packages``: nothing reaches the network when a job starts); the jars Spark already ships are left
out, as ``spark-submit --packages`` leaves them out. With them: Delta's session extension and catalog, and
s3a for ``s3://``/``s3a://`` paths with the storage's endpoint and credentials (``configure_s3a`` sets them on
a running session too). There is no Iceberg connector for the pinned Spark (``relay.common.jars``).
``packages()`` gives the same sets as Maven coordinates for users who bring their own Spark
(``spark-submit --packages …``). Runs on the driver, in the caller's thread, before Spark starts.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from relay.common import jars
from relay.errors import JarsError, OptionError

log = logging.getLogger(__name__)

CONNECTORS = ("spark-kafka", "spark-delta", "spark-s3")
_DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
_VERSIONED = re.compile(r"^(?P<name>.+?)-\d[\w.\-]*\.jar$")


def _artifact(jar: Path) -> str:
    """A jar's artifact name without its version (``kafka-clients-3.9.2.jar`` → ``kafka-clients``)."""
    found = _VERSIONED.match(jar.name)
    return found.group("name") if found else jar.stem


def spark_home() -> Path:
    import pyspark

    return Path(os.environ.get("SPARK_HOME") or Path(pyspark.__file__).parent)


def connector_jars(sets: Iterable[str] = CONNECTORS) -> list[Path]:
    """The jars of ``sets`` that the installed Spark does not already ship (raises ``JarsError`` naming
    the command that resolves a missing set)."""
    shipped = {_artifact(j) for j in (spark_home() / "jars").glob("*.jar")}
    out: list[Path] = []
    seen: set[str] = set()
    for name in sets:
        for jar in jars.jars(name):
            artifact = _artifact(jar)
            if artifact in shipped or artifact in seen:
                continue
            seen.add(artifact)
            out.append(jar)
    return out


def packages(sets: Iterable[str] = CONNECTORS) -> str:
    """The ``--packages`` value of ``sets``, for a Spark the relay does not start (spark-submit …)."""
    return ",".join(a for name in sets for a in jars.jar_set(name).artifacts)


@dataclass(frozen=True)
class Connectors:
    """Which connectors a session gets, and the settings they need."""

    sets: tuple[str, ...] = CONNECTORS
    storage_options: Mapping[str, str] = field(default_factory=dict)  # AWS_ENDPOINT_URL … (s3a)

    def conf(self) -> dict[str, str]:
        """Spark settings: ``spark.jars``, the extensions and catalogs, s3a."""
        unknown = sorted(set(self.sets) - set(CONNECTORS))
        if unknown:
            raise OptionError(f"connectors: unknown {unknown} (known: {', '.join(CONNECTORS)})")
        out = {"spark.jars": ",".join(str(j) for j in connector_jars(self.sets))}
        if "spark-delta" in self.sets:
            out["spark.sql.extensions"] = _DELTA_EXTENSION
            out["spark.sql.catalog.spark_catalog"] = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
            # The mirror's tables are committed by one writer at a time; Spark's default S3 log store
            # needs no lock table then (as deltalake's AWS_S3_ALLOW_UNSAFE_RENAME).
            out["spark.databricks.delta.logStore.s3a.impl"] = "io.delta.storage.S3SingleDriverLogStore"
        if "spark-s3" in self.sets:
            out.update(s3a_conf(self.storage_options))
        return out


def s3a_conf(options: Mapping[str, str]) -> dict[str, str]:
    """Hadoop's s3a settings from the storage settings (``AWS_ENDPOINT_URL``, keys, region); ``s3://`` paths
    (what deltalake and pyiceberg write) are served by s3a too."""

    def setting(key: str) -> str | None:
        return options.get(key) or os.environ.get(key)

    out = {"spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem"}
    endpoint = setting("AWS_ENDPOINT_URL")
    if endpoint:
        out["spark.hadoop.fs.s3a.endpoint"] = endpoint
        out["spark.hadoop.fs.s3a.path.style.access"] = "true"
        out["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(endpoint.startswith("https")).lower()
    region = setting("AWS_REGION")
    if region:
        out["spark.hadoop.fs.s3a.endpoint.region"] = region
    key, secret = setting("AWS_ACCESS_KEY_ID"), setting("AWS_SECRET_ACCESS_KEY")
    if key and secret:
        out["spark.hadoop.fs.s3a.access.key"] = key
        out["spark.hadoop.fs.s3a.secret.key"] = secret
        provider = "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
        token = setting("AWS_SESSION_TOKEN")
        if token:
            out["spark.hadoop.fs.s3a.session.token"] = token
            provider = "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
        out["spark.hadoop.fs.s3a.aws.credentials.provider"] = provider
    return out


def configure_s3a(spark: Any, options: Mapping[str, str]) -> None:
    """Set ``s3a_conf(options)`` on a running session's Hadoop configuration (for the jobs started after)."""
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    for key, value in s3a_conf(options).items():
        hadoop.set(key[len("spark.hadoop.") :], value)


def submitted() -> bool:
    """Whether this process is a driver that ``spark-submit`` started (its JVM, master and jars are set)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def session(
    master: str | None = "local[2]",
    app: str = "relay",
    *,
    connectors: Connectors | None = None,
    driver_memory: str | None = None,
    conf: Mapping[str, str] | None = None,
) -> Any:
    """A SparkSession (the one already running in this process, if any) with ``connectors`` (default: every
    set, no storage settings). Workers run this interpreter; few shuffle partitions; UTC; cached tables
    uncompressed (the mirror's per-batch cache builds a third faster). Under
    ``spark-submit`` its master and its ``--packages``/``--jars`` stand: nothing is added but the SQL
    settings (``master`` None keeps spark-submit's, or local[2] without it)."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if master is None and not submitted():
        master = "local[2]"
    if master is not None and master.startswith("local"):
        # A local session needs no network name: Spark otherwise resolves the machine's host name at start
        # and fails ("UnknownHostException") where it is not in /etc/hosts (fresh containers, chroots).
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        os.environ.setdefault("SPARK_LOCAL_HOSTNAME", "localhost")
    settings = {
        "spark.sql.shuffle.partitions": "2",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        # the mirror caches each micro-batch's change rows (maps of text): building that cache uncompressed
        # takes 9 s for 1M rows against 12 s, for 15 % more memory (654 MiB against 570)
        "spark.sql.inMemoryColumnarStorage.compressed": "false",
    }
    if not submitted():
        settings.update((connectors or Connectors()).conf())
        if driver_memory:
            settings["spark.driver.memory"] = driver_memory
    settings.update(conf or {})
    if not submitted():
        _launch_apart({**settings, "spark.app.name": app, **({"spark.master": master} if master else {})})
    builder = SparkSession.builder.appName(app)
    if master is not None:
        builder = builder.master(master)
    for key, value in settings.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def _launch_apart(settings: Mapping[str, str]) -> None:
    """Start Spark's JVM in a session of its own (once a process), so that a signal sent to the relay's
    process group — Ctrl-C's SIGINT, ``timeout``'s and systemd's SIGTERM — reaches only Python, which stops
    the query between micro-batches and then Spark. In the group, the JVM died with the signal and the
    stop that followed failed ("relay: error: Connection refused", exit 2). The JVM still ends with its
    driver: it exits when the pipe on its standard input closes (pyspark's own guard)."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None:
        return
    conf = SparkConf(loadDefaults=False)
    for key, value in settings.items():
        conf.set(key, value)
    gateway = launch_gateway(conf, popen_kwargs={"start_new_session": True})  # type: ignore[no-untyped-call]
    SparkContext._ensure_initialized(gateway=gateway)


def has_connector(spark: Any, name: str) -> bool:
    """Whether ``spark`` has the connector set ``name`` on its class path (its main class loads)."""
    probe = {
        "spark-kafka": "org.apache.spark.sql.kafka010.KafkaSourceProvider",
        "spark-delta": "io.delta.tables.DeltaTable",
        "spark-s3": "org.apache.hadoop.fs.s3a.S3AFileSystem",
    }[name]
    jvm = spark.sparkContext._jvm
    try:
        jvm.org.apache.spark.util.Utils.classForName(probe, True, False)
    except Exception as exc:  # py4j's Py4JJavaError: the class is not there
        log.debug("connector %s: %s", name, exc)
        return False
    return True


def require_connectors(spark: Any, sets: Iterable[str]) -> None:
    """A ``JarsError`` naming what to do when ``spark`` lacks one of ``sets``."""
    missing = [name for name in sets if not has_connector(spark, name)]
    if missing:
        raise JarsError(
            f"this Spark session lacks {', '.join(missing)}: start it with relay.spark.session.session(), or "
            f"pass --packages {packages(missing)} (or the jars of scripts/bootstrap's .jars/) to Spark"
        )


def main(argv: list[str]) -> int:
    """``python -m relay.spark.session jars|packages [SET…]``: the local jars (comma-separated, for
    ``--jars`` of spark-submit / spark-pipelines) or the Maven coordinates (for ``--packages``)."""
    if not argv or argv[0] not in ("jars", "packages"):
        sys.stderr.write("usage: python -m relay.spark.session jars|packages [SET…]\n")
        return 2
    sets = tuple(argv[1:]) or CONNECTORS
    try:
        if argv[0] == "jars":
            sys.stdout.write(",".join(str(j) for j in connector_jars(sets)) + "\n")
        else:
            sys.stdout.write(packages(sets) + "\n")
    except JarsError as exc:
        sys.stderr.write(f"relay.spark.session: {exc}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
