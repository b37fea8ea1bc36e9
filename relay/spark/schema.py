"""The output schema of the ``relay-kafka`` source: exactly Spark's ``kafka`` source schema.

``key`` binary, ``value`` binary, ``topic`` string, ``partition`` int, ``offset`` long, ``timestamp``
timestamp, ``timestampType`` int, and — with ``includeHeaders=true``, as in Spark — ``headers``
array<struct<key string, value binary>>. Arrow forms for the readers' record batches are derived with
pyspark's own converter, so they match what Spark checks. Imported on the driver and on executors.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

KAFKA_SCHEMA = StructType(
    [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
)
HEADERS_FIELD = StructField(
    "headers",
    ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())])),
)
KAFKA_HEADERS_SCHEMA = StructType([*KAFKA_SCHEMA.fields, HEADERS_FIELD])


def spark_schema(include_headers: bool) -> StructType:
    return KAFKA_HEADERS_SCHEMA if include_headers else KAFKA_SCHEMA


@cache
def arrow_schema(include_headers: bool) -> Any:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(spark_schema(include_headers), timezone="UTC")
