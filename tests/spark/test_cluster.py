"""The mirror on a Spark standalone cluster — a master and two workers started from PySpark's own classes on
this machine — writing Delta and Iceberg tables to a real S3 API server (moto), against ``local[*]``.

The topic holds seeded canal-json changes of ``bench.orders`` (inserts, updates, deletes, ~10 % repeated:
``relay.spark.bench.records``). ``relay spark mirror --available-now`` runs twice per format as a user runs
it — once with ``--master spark://…`` (executors in the two workers' JVMs, Spark's kafka source, the
connector jars shipped to them by the driver), once with ``--master local[*]`` — into two S3 prefixes. The
tables, read by every independent reader of the format (``tests.spark.readers``), must be equal to each
other and to the oracle (the last change per key by sequence, deletes removed). Slow (three JVMs besides
the broker's, two mirror runs per format): in the longer suite (``scripts/test-long``).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from relay.spark.bench import records
from relay.spark.session import spark_home
from relay.spark.storage import Storage
from relay.spark.tables import MirrorTarget
from tests.integration.relay_harness import wait_for
from tests.spark.conftest import BUCKET_NAME
from tests.spark.readers import read_all

pytestmark = pytest.mark.long

RECORDS = 3000
TABLE = "bench.orders"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _env() -> dict[str, str]:
    env = {**os.environ, "SPARK_HOME": str(spark_home()), "SPARK_LOCAL_IP": "127.0.0.1"}
    env.update({"PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_HOSTNAME": "localhost"})
    return env


def _daemon(tmp: Path, name: str, args: list[str]) -> subprocess.Popen[bytes]:
    log = (tmp / f"{name}.log").open("wb")
    command = [str(spark_home() / "bin" / "spark-class"), *args]
    return subprocess.Popen(command, env=_env(), stdout=log, stderr=subprocess.STDOUT)


def _answers(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``spark://127.0.0.1:PORT``: a master and two workers (1 core, 1 GiB each) until the module ends."""
    tmp = tmp_path_factory.mktemp("spark-cluster")
    port, ui = _free_port(), _free_port()
    args = ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port)]
    master = _daemon(tmp, "master", [*args, "--webui-port", str(ui)])
    started = [master]
    url = f"spark://127.0.0.1:{port}"
    try:
        wait_for(lambda: _answers(port), 180, "the Spark master's port", interval=0.5)
        for n in (1, 2):
            work = tmp / f"worker{n}"
            work.mkdir()
            args = ["org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1", "--cores", "1"]
            args += ["--memory", "1g", "--webui-port", str(_free_port()), "--work-dir", str(work)]
            started.append(_daemon(tmp, f"worker{n}", args))
        wait_for(lambda: _alive_workers(ui) == 2, 180, "two workers registered with the master", interval=1)
        yield url
    finally:
        for process in reversed(started):
            process.terminate()
        for process in started:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()


def _alive_workers(ui: int) -> int:
    from urllib.request import urlopen

    try:
        with urlopen(f"http://127.0.0.1:{ui}/json/", timeout=5) as answer:
            return int(json.loads(answer.read())["aliveworkers"])
    except OSError:
        return 0


def _publish(bootstrap: str) -> tuple[str, dict[str, dict[str, Any]]]:
    """A topic of the seeded changes, and the oracle: each key's last change by sequence (deletes gone)."""
    from confluent_kafka import Producer

    topic = f"cluster-{time.monotonic_ns() % 10**9}"
    producer = Producer({"bootstrap.servers": bootstrap})
    state: dict[str, dict[str, Any] | None] = {}
    best: dict[str, int] = {}
    for key, value, *_ in records(RECORDS, seed=41):
        producer.produce(topic, value, key, partition=0)
        message = json.loads(value)
        row = message["data"][0]
        if message["sequence"] >= best.get(row["id"], -1):
            best[row["id"]] = message["sequence"]
            state[row["id"]] = None if message["type"] == "DELETE" else row
    assert producer.flush(60) == 0
    want = {k: {"id": int(k), "status": r["status"]} for k, r in state.items() if r is not None}
    return topic, want


def _mirror(master: str, bootstrap: str, topic: str, target: MirrorTarget, checkpoint: Path) -> None:
    command = [sys.executable, "-m", "relay.cli", "spark", "mirror", "--master", master, "--available-now"]
    command += ["--bootstrap-servers", bootstrap, "--topics", topic, "--out", target.storage.root]
    command += ["--checkpoint", str(checkpoint), "--format", target.format, "--codec", "canal-json"]
    command += [f"--storage-option={k}={v}" for k, v in target.storage.options.items()]
    if target.catalog.get("uri"):
        command += ["--catalog-uri", target.catalog["uri"]]
    done = subprocess.run(command, env=_env(), capture_output=True, text=True, timeout=1500, check=False)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]


@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_mirror_on_a_standalone_cluster_equals_local(
    cluster: str, kafka_service: Any, s3: dict[str, str], tmp_path: Path, fmt: str
) -> None:
    topic, want = _publish(kafka_service.bootstrap_servers)
    seen = {}
    for name, master in (("cluster", cluster), ("local", "local[*]")):
        prefix = f"s3://{BUCKET_NAME}/cluster-{fmt}-{name}-{time.monotonic_ns() % 10**8}"
        catalog = {"uri": f"sqlite:///{tmp_path / f'{name}.sqlite'}"} if fmt == "iceberg" else {}
        target = MirrorTarget(Storage(prefix, s3), fmt, catalog)
        _mirror(master, kafka_service.bootstrap_servers, topic, target, tmp_path / f"ck-{name}")
        rows = read_all(target, TABLE)
        seen[name] = {str(r["id"]): {"id": r["id"], "status": r["status"]} for r in rows}
    assert seen["cluster"] == seen["local"]
    assert seen["cluster"] == want
