"""PySpark readers of the relay topics: change decoding, latest-state tables, Spark's connectors on a session.

``relay.spark.session.session()`` starts a SparkSession with Spark's own Kafka, Delta and s3a connectors
from the jars ``scripts/bootstrap`` resolved (no network at run time); ``changes``/``typed``
(``relay.spark.decode``) work on the DataFrame of Spark's ``kafka`` source, or of the relay's Python source
``relay-kafka`` (``register(spark)`` adds it, for a Spark without the connector jar); ``apply_changes``
(``relay.spark.apply``) keeps a Delta Lake or Iceberg latest-state table per logical table
(``relay.spark.tables.read_table`` reads one without Spark); ``relay.spark.mirror`` is
the long-running job. Never imports the daemon's runtime (pipeline, instance, binlog source, publisher).
"""

from __future__ import annotations

from relay.spark.source import NAME, register

__all__ = ["NAME", "register"]
