"""PySpark readers of the relay topics: the ``relay-kafka`` data source, change decoding, latest-state tables.

``register(spark)`` adds ``format("relay-kafka")``; ``changes``/``typed`` (``relay.spark.decode``) work on
the DataFrame of either that source or Spark's own ``kafka`` source; ``apply_changes``
(``relay.spark.apply``) keeps a Delta Lake or Iceberg latest-state table per logical table
(``relay.spark.tables.read_table`` reads one without Spark); ``relay.spark.mirror`` is
the long-running job. Never imports the daemon's runtime (pipeline, instance, binlog source, publisher).
"""

from __future__ import annotations

from relay.spark.source import NAME, register

__all__ = ["NAME", "register"]
