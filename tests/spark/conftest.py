"""Spark tests: they run real local Spark (the session-scoped ``spark`` fixture of tests/conftest.py, one
SparkSession for the whole test session) against the session's broker and MySQL and are marked
``integration``; the whole directory is skipped where pyspark or pyarrow is not installed."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

_SPARK_DIR = Path(__file__).parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.is_relative_to(_SPARK_DIR) and item.path.name != "test_offsets.py":
            item.add_marker(pytest.mark.integration)
