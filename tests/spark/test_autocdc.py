"""The AutoCDC example (examples/autocdc) is a pipeline Spark can analyse against the relay's change rows.

``spark-pipelines`` (PySpark's Declarative Pipelines CLI) runs the example's spec with the relay source as a
view and ``create_auto_cdc_flow`` targets keyed by ``_key`` and sequenced by ``_sequence``. On this plain
local Spark the catalog's tables are parquet, which cannot MERGE: the run must get past the analysis of the
flows (keys, sequence_by and apply_as_deletes resolve against our schema) and stop at the materialization
of the targets with ``AUTOCDC_TARGET_DOES_NOT_SUPPORT_MERGE``. A wrong key name fails earlier, in analysis.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

EXAMPLE = Path(__file__).parents[2] / "examples" / "autocdc"
CLI = Path(sys.executable).parent / "spark-pipelines"


def _project(tmp: Path, bootstrap: str) -> Path:
    project = tmp / "autocdc"
    shutil.copytree(EXAMPLE, project)
    spec = yaml.safe_load((project / "spark-pipeline.yml").read_text())
    spec["storage"] = f"file://{tmp / 'storage'}"
    spec["configuration"]["spark.relay.bootstrap"] = bootstrap
    spec["configuration"]["spark.sql.warehouse.dir"] = str(tmp / "warehouse")
    (project / "spark-pipeline.yml").write_text(yaml.safe_dump(spec))
    return project


def _pipelines(command: str, project: Path) -> str:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2]), "PYSPARK_PYTHON": sys.executable}
    done = subprocess.run(
        [str(CLI), command, "--spec", str(project / "spark-pipeline.yml")],
        cwd=project.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    return done.stdout + done.stderr


def test_example_pipeline_resolves_and_stops_only_at_merge(kafka_service: Any, tmp_path: Path) -> None:
    project = _project(tmp_path, kafka_service.bootstrap_servers)
    checked = _pipelines("dry-run", project)  # the whole graph analysed: keys, sequence_by, deletes
    assert "Run is COMPLETED" in checked, checked[-4000:]
    ran = _pipelines("run", project)
    assert "AUTOCDC_TARGET_DOES_NOT_SUPPORT_MERGE" in ran, ran[-4000:]
    assert "format: parquet" in ran


def test_a_key_the_relay_rows_lack_fails_analysis(tmp_path: Path) -> None:
    project = _project(tmp_path, "127.0.0.1:9")
    flows = project / "transformations" / "orders_cdc.py"
    flows.write_text(flows.read_text().replace('keys=["_key"]', 'keys=["no_such_key"]', 1))
    checked = _pipelines("dry-run", project)
    assert "AUTOCDC_KEY_NOT_IN_SELECTED_SCHEMA" in checked, checked[-4000:]
