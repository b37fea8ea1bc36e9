"""The AutoCDC example (examples/autocdc) run by Spark's own Declarative Pipelines, with Spark's kafka source
and Delta tables from the jars scripts/bootstrap resolved — and what Spark 4.2 does with it.

``spark-pipelines`` (PySpark's Declarative Pipelines CLI) runs the example's spec: the view ``relay_changes``
(the relay's change rows from Spark's ``kafka`` source, with records of the table on the topic) and a
``create_auto_cdc_flow`` target keyed by ``_key`` and sequenced by ``_sequence``, created as a Delta table.
The whole graph is analysed and the flow starts; Spark 4.2 then refuses the target with
``AUTOCDC_TARGET_DOES_NOT_SUPPORT_MERGE`` (format: delta): its AutoCDC writes only to tables that implement
Spark's row-level operations, and Delta 4.4's do not (nor with ``spark.databricks.delta.v2.enableMode``
STRICT). A wrong key name fails earlier, in analysis; an SCD type 2 flow is refused when it is defined
(Spark 4.2's AutoCDC supports type 1 only). These tests pin that state: when a Delta (or an Iceberg runtime
for Spark 4.2) reports row-level operations, the first one fails and the example's targets must then equal
``SELECT`` (README, "Spark's own AutoCDC").
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import Producer

from relay.spark.bench import MYSQL_TYPES, records
from relay.spark.session import connector_jars

EXAMPLE = Path(__file__).parents[2] / "examples" / "autocdc"
CLI = Path(sys.executable).parent / "spark-pipelines"
DELTA = (
    "--conf",
    "spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension",
    "--conf",
    "spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog.DeltaCatalog",
)


def _project(tmp: Path, bootstrap: str, topic: str = "bench.orders") -> Path:
    project = tmp / "autocdc"
    shutil.copytree(EXAMPLE, project)
    spec = yaml.safe_load((project / "spark-pipeline.yml").read_text())
    spec["storage"] = f"file://{tmp / 'storage'}"
    conf = spec["configuration"]
    conf.update(
        {"spark.relay.bootstrap": bootstrap, "spark.relay.topic": topic, "spark.relay.table": "bench.orders"}
    )
    conf["spark.relay.columns"] = json.dumps(MYSQL_TYPES)
    (project / "spark-pipeline.yml").write_text(yaml.safe_dump(spec))
    return project


def _pipelines(command: str, project: Path) -> str:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2]), "PYSPARK_PYTHON": sys.executable}
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    jars = ",".join(str(j) for j in connector_jars(("spark-kafka", "spark-delta")))
    argv = [str(CLI), command, "--spec", str(project / "spark-pipeline.yml"), "--jars", jars, *DELTA]
    done = subprocess.run(
        argv, cwd=project.parent, env=env, capture_output=True, text=True, timeout=900, check=False
    )
    return done.stdout + done.stderr


# Two spark-pipelines processes (~55 s): the longer suite. It fails the day Spark's AutoCDC merges into Delta.
@pytest.mark.long
def test_example_runs_up_to_a_delta_target_spark_refuses_to_merge_into(
    kafka_service: Any, tmp_path: Path
) -> None:
    bootstrap = kafka_service.bootstrap_servers
    topic = f"autocdc-{os.getpid()}-{tmp_path.name[-8:]}"
    producer = Producer({"bootstrap.servers": bootstrap})
    for key, value, *_ in records(200):
        producer.produce(topic, value, key)
    assert producer.flush(30) == 0
    project = _project(tmp_path, bootstrap, topic)
    checked = _pipelines("dry-run", project)  # the whole graph analysed: keys, sequence_by, deletes
    assert "Run is COMPLETED" in checked, checked[-4000:]
    ran = _pipelines("run", project)
    assert "AUTOCDC_TARGET_DOES_NOT_SUPPORT_MERGE" in ran, ran[-4000:]
    assert "format: delta" in ran, ran[-4000:]


def test_a_key_the_relay_rows_lack_fails_analysis(tmp_path: Path) -> None:
    project = _project(tmp_path, "127.0.0.1:9")
    flows = project / "transformations" / "orders_cdc.py"
    flows.write_text(flows.read_text().replace('keys=["_key"]', 'keys=["no_such_key"]', 1))
    checked = _pipelines("dry-run", project)
    assert "AUTOCDC_KEY_NOT_IN_SELECTED_SCHEMA" in checked, checked[-4000:]


def test_an_scd2_flow_is_refused_by_spark(tmp_path: Path) -> None:
    project = _project(tmp_path, "127.0.0.1:9")
    flows = project / "transformations" / "orders_cdc.py"
    flows.write_text(flows.read_text().replace("stored_as_scd_type=1", "stored_as_scd_type=2", 1))
    checked = _pipelines("dry-run", project)
    assert "stored_as_scd_type" in checked and "Run is COMPLETED" not in checked, checked[-4000:]
