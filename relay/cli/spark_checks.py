"""What ``relay spark mirror`` (and ``relay verify --against mirror:…``) checks before Spark or a table reader
starts: the programs Spark needs, the Iceberg catalog settings, the object store's endpoint, the brokers and
the topics.

Each check that fails raises ``OptionError`` naming the flag to change, in one line, within the
``--connect-timeout``; before these checks a broker that does not answer cost ~40 s of Spark's start and
its retries, then a traceback, and Iceberg on S3 without ``--catalog-uri`` 225 lines of one. Runs on the
CLI's thread; imports no pyspark.
"""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import Iterable, Mapping
from pathlib import Path
from urllib.parse import urlparse

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from relay.common.addresses import hosts_problem
from relay.common.kafka_log import quiet
from relay.errors import OptionError, SparkSourceError
from relay.spark.storage import Storage

__all__ = ["check_kafka", "check_programs", "check_storage", "mirror_preflight"]

# What pyspark's launcher runs: the JVM, through bash scripts (spark-submit, spark-class).
SPARK_PROGRAMS = {"java": "default-jre-headless", "bash": "bash"}


def mirror_preflight(
    *,
    bootstrap_servers: str,
    topics: Iterable[str],
    kafka_options: Mapping[str, str],
    storage: Storage,
    format: str,
    catalog: Mapping[str, str],
    timeout: float,
) -> None:
    """Everything ``relay spark mirror`` can know is wrong before it starts Spark."""
    check_programs()
    check_storage(storage, "--out", format, catalog, timeout)
    check_kafka(bootstrap_servers, list(topics), kafka_options, timeout)


def check_programs() -> None:
    """Java and bash on PATH (or Java under ``$JAVA_HOME``): pyspark starts the JVM through them."""
    for program, package in SPARK_PROGRAMS.items():
        home = os.environ.get("JAVA_HOME")
        if program == "java" and home and Path(home, "bin", "java").exists():
            continue
        if shutil.which(program) is None:
            raise OptionError(
                f"{program} not found on PATH (Spark runs the JVM through it): install it with "
                f"`apt-get install -y {package}` (or run scripts/bootstrap)"
                + (", or set JAVA_HOME" if program == "java" else "")
            )


def check_storage(
    storage: Storage,
    flag: str,
    format: str,
    catalog: Mapping[str, str],
    timeout: float,
    *,
    read_only: bool = False,
) -> None:
    """The table format's catalog settings (Iceberg on an object store needs a catalog URI or type),
    a local root that exists (``read_only``) or can be written, and an object store's endpoint that
    accepts connections."""
    if format == "iceberg":
        from relay.spark.iceberg import catalog_settings

        try:
            catalog_settings(storage, catalog)  # pure: refuses a SQLite catalog on an object store
        except SparkSourceError as exc:
            raise OptionError(f"{flag} {storage.root}: {exc}") from exc
    if storage.is_local:
        if read_only:
            if not Path(storage.root).exists():
                raise OptionError(f"{flag} {storage.root}: no such mirror table (no such folder)")
        else:
            _writable(Path(storage.root), flag)
        return
    endpoint = storage.setting("AWS_ENDPOINT_URL") if storage.scheme in ("s3", "s3a") else None
    if endpoint:
        _answers(endpoint, "AWS_ENDPOINT_URL (--storage-option or the environment)", timeout)


def _writable(root: Path, flag: str) -> None:
    existing = root
    while not existing.exists() and existing.parent != existing:
        existing = existing.parent
    if not existing.is_dir():
        raise OptionError(f"{flag} {root}: {existing} is not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise OptionError(f"{flag} {root}: {existing} is not writable by this user")


def _answers(url: str, setting: str, timeout: float) -> None:
    parsed = urlparse(url if "://" in url else f"https://{url}")
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    host = parsed.hostname or ""
    try:
        with socket.create_connection((host, port), timeout=min(timeout, 5.0)):
            return
    except socket.gaierror as exc:
        raise OptionError(f"{setting} {url}: the name {host!r} does not resolve ({exc.strerror})") from exc
    except OSError as exc:
        why = "connection refused" if isinstance(exc, ConnectionRefusedError) else (exc.strerror or str(exc))
        raise OptionError(f"{setting} {url}: the object store does not answer: {why}") from exc


def check_kafka(bootstrap: str, topics: list[str], options: Mapping[str, str], timeout: float) -> None:
    """The brokers answer within ``timeout`` and every topic exists (listed, never named: naming a
    topic in a metadata request creates it on some brokers)."""
    problem = hosts_problem(bootstrap)
    if problem is not None:
        raise OptionError(f"--bootstrap-servers: {problem}")
    admin = AdminClient(quiet({**options, "bootstrap.servers": bootstrap}))
    try:
        meta = admin.list_topics(timeout=timeout)
    except KafkaException as exc:
        raise OptionError(
            f"--bootstrap-servers {bootstrap}: kafka did not answer within {timeout:g} s "
            f"({exc.args[0].str()}); is it running, and is the address right? (--connect-timeout: wait "
            "longer)"
        ) from exc
    missing = [t for t in topics if t not in meta.topics or meta.topics[t].error is not None]
    if missing:
        raise OptionError(
            f"--topics: {', '.join(repr(t) for t in missing)} not on {bootstrap} (a relay creates a topic "
            "when it first publishes to it; the mapping names them: relay mapping show)"
        )
