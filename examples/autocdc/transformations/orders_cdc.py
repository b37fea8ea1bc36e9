"""The relay's change rows as an AutoCDC source: latest state (SCD type 1).

The view ``relay_changes`` streams the topic with Spark's ``kafka`` source (``spark.relay.source``:
``relay-kafka`` for a Spark without the connector jar), decodes it (``changes`` → ``typed``) and turns it
into upserts and deletes by key (``cdc_rows``): ``_key`` is the logical key (the record key's values, the
mapping's key columns), its ``_sequence`` the change identity that orders a key's changes, ``_deleted``
marks DELETEs (and the old key of an UPDATE that moved a row). Spark's ``create_auto_cdc_flow`` does the rest.

SCD type 2: Spark 4.2's AutoCDC refuses ``stored_as_scd_type=2`` ("Only 1 is supported"); the relay keeps
histories itself (``relay spark mirror --history``). The target must support row-level operations
(MERGE): Delta 4.4's tables do not report them to Spark 4.2 (AUTOCDC_TARGET_DOES_NOT_SUPPORT_MERGE), and
Iceberg's, which do, have no runtime for Spark 4.2 — see README "Spark's own AutoCDC".

TRUNCATE/DROP TABLE: Spark's open-source AutoCDC has no ``apply_as_truncates`` (Databricks' has); the
records of those statements are DDL records, not row changes, so they are not in this view. Apply them
with ``relay spark mirror`` (it removes the truncated shard's rows), or rebuild the target with a full
refresh after a TRUNCATE.
"""

import json

from pyspark import pipelines as dp
from pyspark.sql import SparkSession

from relay.spark import register
from relay.spark.apply import cdc_rows
from relay.spark.decode import changes, typed

spark = SparkSession.active()
register(spark)
conf = spark.conf
TABLE = conf.get("spark.relay.table", "shop.orders")
COLUMNS = list(json.loads(conf.get("spark.relay.columns", '{"id": "bigint"}')).items())


@dp.temporary_view
def relay_changes():  # type: ignore[no-untyped-def]
    raw = (
        spark.readStream.format(conf.get("spark.relay.source", "kafka"))
        .option("kafka.bootstrap.servers", conf.get("spark.relay.bootstrap", "127.0.0.1:9092"))
        .option("subscribe", conf.get("spark.relay.topic", "shop.orders"))
        .option("startingOffsets", "earliest")
        .load()
    )
    rows = typed(changes(raw, conf.get("spark.relay.codec", "auto")), TABLE, COLUMNS)
    return cdc_rows(rows, [name for name, _ in COLUMNS])


dp.create_streaming_table("orders")
dp.create_auto_cdc_flow(
    target="orders",
    source="relay_changes",
    keys=["_key"],
    sequence_by="_sequence",
    apply_as_deletes="_deleted",
    except_column_list=["_deleted"],
    stored_as_scd_type=1,
)
