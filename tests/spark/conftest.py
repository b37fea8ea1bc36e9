"""Spark tests: ONE local SparkSession (local[2]) for the whole test session, with ``relay-kafka``
registered. Tests here run real local Spark against the session's broker and MySQL (tests/conftest.py)
and are marked ``integration``; the whole module is skipped where pyspark is not installed."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

_SPARK_DIR = Path(__file__).parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.is_relative_to(_SPARK_DIR) and item.path.name != "test_offsets.py":
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from relay.spark import register
    from relay.spark.mirror import local_session

    session = local_session(app="relay-tests")
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()
