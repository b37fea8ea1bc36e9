"""Java artifacts from Maven Central: every pinned coordinate in one place, resolved once into a local folder.

A *set* is what one Java program needs on its class path (the Apache Kafka broker, Spark's connectors, …):
a few root coordinates, resolved with their dependencies by Maven (``mvn dependency:copy-dependencies`` on
a small POM written here) into ``<jars dir>/<set>/``, once. After that nothing reaches the network: a
program takes the folder's jars as its class path (``classpath``), and ``require`` says how to resolve a
set that is missing instead of failing later in Java. ``scripts/bootstrap`` resolves the sets the tests use
(``python -m relay.common.jars resolve NAME…``); a stamp file holds the coordinates a folder was resolved
from, so changing a pin here resolves it again and nothing else does.

The folder is ``$RELAY_JARS_DIR``, by default ``.jars/`` in the checkout. Runs on the caller's thread;
standard library and ``relay.errors`` only.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape

from relay.common.truststore import java_options
from relay.errors import JarsError


@dataclass(frozen=True)
class JarSet:
    """The root coordinates (``group:artifact:version``) of one program's class path, and why it is needed.

    ``excludes`` (``group:artifact``) are left out of every root's dependencies: parts a set does not run that
    would only add jars (or conflicting versions) to the class path.
    """

    name: str
    artifacts: tuple[str, ...]
    why: str
    excludes: tuple[str, ...] = ()

    @property
    def fingerprint(self) -> str:
        text = "\n".join((*self.artifacts, "--", *self.excludes))
        return hashlib.sha256(text.encode()).hexdigest()[:16]


KAFKA_VERSION = "4.1.1"
# The peers ``relay bench --peers`` measures the relay against. Debezium: every module at one release, the
# newest whose MariaDB connector Maven Central serves (3.6.x publishes no debezium-connector-mariadb, and
# 3.6.1's MySQL connector refuses MariaDB 10.11: it asks for SHOW BINARY LOG STATUS on any server it takes
# for MySQL >= 8.4). Kafka Connect in standalone mode from Apache Kafka's jars, at the version that release
# is built against (its debezium-build-parent's version.kafka), which is also the broker's.
DEBEZIUM_VERSION = "3.5.0.Final"
CONNECT_VERSION = "4.1.1"
LOG4J_VERSION = "2.24.3"  # the log4j-api/log4j-core that kafka_2.13 depends on

# The one list of pinned Java artifacts. Change a version here and scripts/bootstrap resolves that set again.
SETS: dict[str, JarSet] = {
    "kafka": JarSet(
        "kafka",
        (
            f"org.apache.kafka:kafka_2.13:{KAFKA_VERSION}",
            # The broker logs through SLF4J 1.7 and ships no binding in its Maven dependencies: without one it
            # logs nothing, not even why it failed to start. Log4j 2's, the version the broker itself pins.
            f"org.apache.logging.log4j:log4j-slf4j-impl:{LOG4J_VERSION}",
        ),
        "the Apache Kafka broker (KRaft) of relay dev up, the tests, the demo and relay bench",
    ),
    "debezium": JarSet(
        "debezium",
        (
            f"io.debezium:debezium-connector-mariadb:{DEBEZIUM_VERSION}",
            f"org.apache.kafka:connect-runtime:{CONNECT_VERSION}",
            f"org.apache.kafka:connect-json:{CONNECT_VERSION}",
            # Connect logs through SLF4J 1.7; this binds it to log4j 2 (its log goes to the run's folder).
            f"org.apache.logging.log4j:log4j-slf4j-impl:{LOG4J_VERSION}",
        ),
        "Debezium's MariaDB connector on Kafka Connect (standalone), a peer of relay bench --peers debezium",
    ),
}

# Spark's connectors, pinned to the PySpark of pyproject.toml's "spark" extra (pyspark[pipelines]==
# SPARK_VERSION, the first release with Declarative Pipelines' AutoCDC). Each set is what a user who brings
# their own Spark passes as --packages (``relay.spark.session.packages``); the jars Spark already ships (its
# own modules, Scala, the Hadoop client) are excluded, as spark-submit --packages leaves them out. No Iceberg
# set: Iceberg publishes no runtime for Spark 4.2, and its 4.1 runtime does not load on 4.2
# (IncompatibleClassChangeError: its SparkView implements Spark 4.1's View interface, a class in 4.2), so
# Iceberg mirrors are committed by pyiceberg only (README, "Reading the topics from Spark").
SPARK_VERSION = "4.2.0"
DELTA_VERSION = "4.4.0"  # delta-spark for Spark 4.2 (the artifact names the Spark line: delta-spark_4.2)
HADOOP_VERSION = "3.5.0"  # the hadoop-client-api/-runtime inside pyspark 4.2.0
_SPARK_PROVIDED = (
    "org.apache.spark:spark-core_2.13",
    "org.apache.spark:spark-sql_2.13",
    "org.apache.spark:spark-catalyst_2.13",
    "org.apache.spark:spark-tags_2.13",
    "org.scala-lang:scala-library",
    "org.scala-lang:scala-reflect",
    "org.apache.hadoop:hadoop-client-api",
    "org.apache.hadoop:hadoop-client-runtime",
    "org.apache.hadoop:hadoop-common",
    "org.slf4j:slf4j-api",
)
SPARK_SETS: dict[str, JarSet] = {
    "spark-kafka": JarSet(
        "spark-kafka",
        (f"org.apache.spark:spark-sql-kafka-0-10_2.13:{SPARK_VERSION}",),
        "Spark's kafka source (spark-sql-kafka-0-10), read by relay.spark and relay spark mirror",
        _SPARK_PROVIDED,
    ),
    "spark-delta": JarSet(
        "spark-delta",
        (f"io.delta:delta-spark_4.2_2.13:{DELTA_VERSION}",),
        "Delta Lake's Spark connector (delta-spark): Spark's Delta reads, MERGE and AutoCDC targets",
        _SPARK_PROVIDED,
    ),
    "spark-s3": JarSet(
        "spark-s3",
        (f"org.apache.hadoop:hadoop-aws:{HADOOP_VERSION}",),
        "Hadoop's s3a file system (hadoop-aws and the AWS SDK): Spark's Delta tables on S3",
        _SPARK_PROVIDED,
    ),
}
SETS.update(SPARK_SETS)

# Flink's Kafka SQL connector (a shaded jar), for the Flink that scripts/bootstrap installs into .venv-flink
# (PyFlink 2.3.0). The connector is released apart from Flink, each release built for one Flink minor: Maven
# Central serves none for 2.3 yet; 5.0.0-2.2 is the newest, and Flink 2.3 runs it (the Flink SQL tutorial's
# test proves it).
FLINK_KAFKA_VERSION = "5.0.0-2.2"
SETS["flink-kafka"] = JarSet(
    "flink-kafka",
    (f"org.apache.flink:flink-sql-connector-kafka:{FLINK_KAFKA_VERSION}",),
    "Flink's Kafka SQL connector: the Flink SQL tutorial reads a debezium-json topic with PyFlink",
)

_DEFAULT_DIR = Path(__file__).resolve().parents[2] / ".jars"


def jars_dir() -> Path:
    return Path(os.environ.get("RELAY_JARS_DIR") or _DEFAULT_DIR)


def folder(name: str) -> Path:
    return jars_dir() / name


def _stamp(name: str) -> Path:
    return folder(name) / ".resolved"


def jar_set(name: str) -> JarSet:
    try:
        return SETS[name]
    except KeyError:
        raise JarsError(f"no Java artifact set named {name!r} (known: {', '.join(sorted(SETS))})") from None


def is_resolved(name: str) -> bool:
    stamp = _stamp(name)
    return stamp.is_file() and stamp.read_text().strip() == jar_set(name).fingerprint


def require(name: str) -> Path:
    """The folder of a resolved set, or a ``JarsError`` naming the command that resolves it."""
    if not is_resolved(name):
        raise JarsError(
            f"the Java artifacts of {name!r} ({jar_set(name).why}) are not resolved in {folder(name)}: run "
            f"scripts/bootstrap, or .venv/bin/python -m relay.common.jars resolve {name} (needs mvn and "
            "Maven Central once; offline afterwards)"
        )
    return folder(name)


def jars(name: str) -> list[Path]:
    """Every jar of a resolved set, sorted by name."""
    return sorted(require(name).glob("*.jar"))


def classpath(name: str) -> str:
    return os.pathsep.join(str(path) for path in jars(name))


def pom(spec: JarSet) -> str:
    """A POM whose dependencies are the set's roots (runtime scope, so test-only jars stay out)."""
    exclusions = "".join(
        f"<exclusion><groupId>{escape(g)}</groupId><artifactId>{escape(a)}</artifactId></exclusion>"
        for g, a in (item.split(":", 1) for item in spec.excludes)
    )
    deps = []
    for coordinate in spec.artifacts:
        group, artifact, version = coordinate.split(":")
        deps.append(
            f"<dependency><groupId>{escape(group)}</groupId><artifactId>{escape(artifact)}</artifactId>"
            f"<version>{escape(version)}</version><exclusions>{exclusions}</exclusions></dependency>"
        )
    return (
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        f"<groupId>canal-relay.jars</groupId><artifactId>{escape(spec.name)}</artifactId><version>1</version>"
        f"<dependencies>{''.join(deps)}</dependencies></project>"
    )


def resolve(name: str, *, quiet: bool = True) -> Path:
    """Resolve a set into its folder (a no-op when the folder's stamp matches the pins)."""
    spec = jar_set(name)
    if is_resolved(name):
        return folder(name)
    mvn = shutil.which("mvn")
    if mvn is None:
        raise JarsError(f"mvn is not installed: it resolves {name!r} ({spec.why}) from Maven Central once")
    target = folder(name)
    staging = target.with_name(f".{name}.staging")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix=f"relay-jars-{name}-") as work:
        (Path(work) / "pom.xml").write_text(pom(spec))
        argv = [mvn, "-B", "-f", str(Path(work) / "pom.xml"), "dependency:copy-dependencies"]
        argv += [f"-DoutputDirectory={staging}", "-DincludeScope=runtime"]
        if quiet:
            argv.append("-q")
        env = dict(os.environ)
        trust = java_options(jars_dir())  # the machine's CA bundle, where Java's own store lacks some of it
        if trust:
            env["MAVEN_OPTS"] = " ".join([env.get("MAVEN_OPTS", ""), *trust]).strip()
        done = subprocess.run(argv, capture_output=True, text=True, check=False, env=env)
    if done.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise JarsError(f"mvn could not resolve {name!r} ({', '.join(spec.artifacts)}):\n{tail}")
    (staging / ".resolved").write_text(spec.fingerprint + "\n")
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    return target


def main(argv: list[str]) -> int:
    """``resolve NAME…`` (idempotent), ``path NAME`` (the folder of a resolved set), ``list``."""
    if len(argv) >= 1 and argv[0] == "list":
        for spec in SETS.values():
            state = "resolved" if is_resolved(spec.name) else "missing"
            sys.stdout.write(f"{spec.name}\t{state}\t{' '.join(spec.artifacts)}\t{spec.why}\n")
        return 0
    if len(argv) >= 2 and argv[0] in ("resolve", "path"):
        try:
            for name in argv[1:]:
                if argv[0] == "path":
                    sys.stdout.write(f"{require(name)}\n")
                elif not is_resolved(name):
                    sys.stderr.write(f"jars: resolving {name} ({jar_set(name).why}) from Maven Central\n")
                    resolve(name)
        except JarsError as exc:
            sys.stderr.write(f"jars: {exc}\n")
            return 1
        return 0
    sys.stderr.write("usage: python -m relay.common.jars resolve NAME… | path NAME | list\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
