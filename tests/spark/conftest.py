"""Spark tests: they run real local Spark (the session-scoped ``spark`` fixture of tests/conftest.py, one
SparkSession for the whole test session) against the session's broker and MySQL and are marked
``integration``; the whole directory is skipped where pyspark or pyarrow is not installed. ``s3``: the
session's S3 API server (moto) for mirrors on an object store."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

_SPARK_DIR = Path(__file__).parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.is_relative_to(_SPARK_DIR) and item.path.name != "test_offsets.py":
            item.add_marker(pytest.mark.integration)


BUCKET_NAME = "relay-mirror"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="session")
def s3() -> Iterator[dict[str, str]]:
    """A real S3 API server (moto's ``moto_server``, one for the test session) on a free port, with one
    bucket; the settings that reach it. A separate process: deltalake holds the GIL while it waits for
    an HTTP answer, so an in-process server thread (``ThreadedMotoServer``) could never answer it.
    Skipped where moto's server is not installed."""
    pytest.importorskip("moto.server")
    boto3 = pytest.importorskip("boto3")
    host, port = "127.0.0.1", _free_port()
    command = [str(Path(sys.executable).parent / "moto_server"), "-H", host, "-p", str(port)]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection((host, port), timeout=1).close()
            break
        except OSError:
            if time.monotonic() > deadline or server.poll() is not None:
                server.kill()
                raise RuntimeError(f"moto_server did not start on {host}:{port}") from None
            time.sleep(0.1)
    settings = {
        "AWS_ENDPOINT_URL": f"http://{host}:{port}",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "us-east-1",
        "AWS_ALLOW_HTTP": "true",
    }
    client = boto3.client(
        "s3",
        endpoint_url=settings["AWS_ENDPOINT_URL"],
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name="us-east-1",
    )
    client.create_bucket(Bucket=BUCKET_NAME)
    yield settings
    server.terminate()
    server.wait(30)
