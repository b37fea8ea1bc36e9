"""Record values → change rows (``changes``) → typed rows of one logical table (``typed``).

Owns the reading of both codecs on Spark: canal-json with Spark's ``from_json`` (JVM, no Python
round trip), canal-protobuf with a Python UDF over ``relay.canal.proto.convert``. The codec of each record is
told by its first byte (``{`` for JSON; a canal ``Packet`` starts with a protobuf field tag, never
0x7B). Works on the DataFrame of Spark's ``kafka`` source or of ``relay-kafka`` (same schema). Runs in
Spark tasks (the UDF on executor Python workers); hands change rows to ``relay.spark.apply``.

``changes(df)`` columns: ``topic partition offset timestamp`` (Kafka), ``key`` (the record key text),
``database table`` (logical), ``type`` (INSERT/UPDATE/DELETE/ALTER…), ``is_ddl``, ``sql``, ``sequence``,
``source_id`` ("" for records written before source ids existed), ``es``/``ts`` (ms), ``gtid``, ``pk_names``,
``sql_type`` map, ``mysql_type`` map, ``before``/``after`` (column → canal text; null where the change has no
such image), ``source`` (id, server, serverId, serverUuid, physical database/table, binlog file, offset, gtid,
rowIndex), ``snapshot`` (true for a snapshot read: an INSERT carrying a row as the snapshot's SELECT read it;
docs/architecture.md, "Snapshots") and ``instants`` (TIMESTAMP column → epoch microseconds, the relay's
``utcMicros``), ``txn_id``/``txn_order``/``txn_table_order`` (the source transaction's id and the record's
order in it and in its table, from the ``relay.txn.*`` headers that ``kafka.transaction_topic`` adds: read
with ``includeHeaders`` true and ``changes(df, headers=True)``; null otherwise — ``changes`` never asks the
DataFrame for its columns, which Spark Declarative Pipelines refuse inside a query function). canal-json's
``old`` (the changed columns' previous values) is folded into ``before``. (``source_id``, ``sequence``,
``part``) is the change identity (``part`` 0 but for the two records of a key change and the rows of a
transaction payload or a snapshot chunk, which share one sequence): a repeated record repeats it, and
(``sequence``, ``part``) orders the changes of a key (generation, binlog file, offset, row; see
docs/architecture.md, "Record format").

``typed(changes, "shop.orders")``: the row changes of that table with one column per table column, Spark
types from ``mysqlType`` (``relay.spark.types``), plus ``_op``, ``_sequence``, ``_part``, ``_source_id``,
``_es``, ``_key``, ``_old_key``, ``_snapshot``, ``_source`` (the physical "db.table"), ``_txn_id``,
``_txn_order``, ``_txn_table_order`` (a Spark job applying whole transactions groups by ``_txn_id`` and
waits for the END on the transaction topic, whose ``event_count`` the group reaches) (the row identity
after and before the change: the key columns' values, and the key's ``_shard`` where the mapping puts the
shard identity into keys). For a batch DataFrame (e.g. a ``foreachBatch`` micro-batch) the columns are those
the data names, so a DDL does not break a running query: a new column appears, a dropped one is simply
absent (null once merged into a table).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F  # noqa: N812 (pyspark's convention)
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from relay.errors import SparkSourceError
from relay.spark.types import spark_type_sql

_S = StringType()
SOURCE_TYPE = StructType(
    [
        StructField("id", _S),
        StructField("server", _S),
        StructField("serverId", LongType()),
        StructField("serverUuid", _S),
        StructField("database", _S),
        StructField("table", _S),
        StructField("file", _S),
        StructField("offset", LongType()),
        StructField("gtid", _S),
        StructField("rowIndex", IntegerType()),
    ]
)
_TEXT_MAP = MapType(_S, _S)
CANAL_JSON_TYPE = StructType(
    [
        StructField("id", LongType()),
        StructField("database", _S),
        StructField("table", _S),
        StructField("pkNames", ArrayType(_S)),
        StructField("isDdl", BooleanType()),
        StructField("type", _S),
        StructField("es", LongType()),
        StructField("ts", LongType()),
        StructField("sql", _S),
        StructField("sqlType", MapType(_S, IntegerType())),
        StructField("mysqlType", _TEXT_MAP),
        StructField("data", ArrayType(_TEXT_MAP)),
        StructField("old", ArrayType(_TEXT_MAP)),
        StructField("gtid", _S),
        StructField("source", SOURCE_TYPE),
        StructField("sequence", LongType()),
        StructField("part", LongType()),
        StructField("snapshot", BooleanType()),
        StructField("utcMicros", ArrayType(MapType(_S, LongType()))),
    ]
)
CHANGE_TYPE = StructType(
    [
        StructField("database", _S),
        StructField("table", _S),
        StructField("type", _S),
        StructField("is_ddl", BooleanType()),
        StructField("sql", _S),
        StructField("sequence", LongType()),
        StructField("part", LongType()),
        StructField("source_id", _S),
        StructField("es", LongType()),
        StructField("ts", LongType()),
        StructField("gtid", _S),
        StructField("pk_names", ArrayType(_S)),
        StructField("sql_type", MapType(_S, IntegerType())),
        StructField("mysql_type", _TEXT_MAP),
        StructField("before", _TEXT_MAP),
        StructField("after", _TEXT_MAP),
        StructField("source", SOURCE_TYPE),
        StructField("snapshot", BooleanType()),
        StructField("instants", MapType(_S, LongType())),
    ]
)
META = (
    "_op", "_sequence", "_part", "_source_id", "_es", "_key", "_old_key", "_snapshot", "_source",
    "_txn_id", "_txn_order", "_txn_table_order",
)  # fmt: skip


def _json_change(m: Column) -> Column:
    """The change struct of a parsed FlatMessage column (parsed once, in an earlier projection)."""
    data, old, kind = m["data"][0], m["old"][0], m["type"]
    before_update = F.when(
        old.isNull(),
        data,
    ).otherwise(
        F.map_from_entries(
            F.transform(
                F.map_keys(data),
                lambda k: F.struct(
                    k.alias("key"),
                    F.when(F.map_contains_key(old, k), old[k]).otherwise(data[k]).alias("value"),
                ),
            )
        )
    )
    return F.struct(
        m["database"].alias("database"),
        m["table"].alias("table"),
        kind.alias("type"),
        m["isDdl"].alias("is_ddl"),
        m["sql"].alias("sql"),
        F.coalesce(m["sequence"], m["id"]).alias("sequence"),
        F.coalesce(m["part"], F.lit(0).cast("long")).alias("part"),
        F.coalesce(m["source"]["id"], F.lit("")).alias("source_id"),
        m["es"].alias("es"),
        m["ts"].alias("ts"),
        m["gtid"].alias("gtid"),
        m["pkNames"].alias("pk_names"),
        m["sqlType"].alias("sql_type"),
        m["mysqlType"].alias("mysql_type"),
        F.when(kind == "DELETE", data).when(kind == "UPDATE", before_update).alias("before"),
        F.when(kind.isin("INSERT", "UPDATE"), data).alias("after"),
        m["source"].alias("source"),
        F.coalesce(m["snapshot"], F.lit(False)).alias("snapshot"),
        F.get(m["utcMicros"], 0).alias("instants"),
    )


def _protobuf_change(value: bytes | None) -> dict[str, Any] | None:
    """One canal-protobuf value as a CHANGE_TYPE dict (None for JSON or empty values)."""
    if not value or value[:1] == b"{":
        return None
    from relay.spark.protobuf import change_of_packet

    return change_of_packet(value)


_protobuf_udf: Any = None


def _protobuf(value: Column) -> Column:
    global _protobuf_udf
    if _protobuf_udf is None:
        # A lambda: pyspark would otherwise try (and warn about) inferring a pandas UDF from the hints.
        _protobuf_udf = F.udf(lambda v: _protobuf_change(v), CHANGE_TYPE)  # noqa: PLW0108
    return cast(Column, _protobuf_udf(value))


def changes(df: DataFrame, codec: str = "auto", headers: bool = False) -> DataFrame:
    """One row per change record of ``df`` (Spark's kafka schema); tombstones (null values) dropped.

    ``codec``: ``auto`` (per record), ``canal-json`` or ``canal-protobuf`` (skips the other decoder).
    ``headers``: ``df`` has the Kafka source's ``headers`` column (``includeHeaders`` true): the
    transaction columns come from the ``relay.txn.*`` headers; else they are null.
    """
    if codec not in ("auto", "canal-json", "canal-protobuf"):
        raise SparkSourceError(f"codec: expected auto, canal-json or canal-protobuf, got {codec!r}")
    kafka = ("topic", "partition", "offset", "timestamp", "key", *TXN_COLUMNS)
    value = F.col("value")
    is_json = F.lit(codec == "canal-json") if codec != "auto" else F.substring(value, 1, 1) == F.lit(b"{")
    base = df.where(value.isNotNull()).select(
        *kafka[:4],
        F.col("key").cast("string").alias("key"),
        *_transaction(headers),
        value,
        is_json.alias("_json"),
    )
    # Parse once per record in its own projection: Spark keeps a non-cheap expression referenced many
    # times (from_json, the UDF) in its own Project instead of inlining it into every reference.
    parsed = []
    if codec != "canal-protobuf":
        parsed.append(F.from_json(F.when(F.col("_json"), value.cast("string")), CANAL_JSON_TYPE).alias("_m"))
    if codec != "canal-json":
        parsed.append(_protobuf(F.when(~F.col("_json"), value)).alias("_p"))
    step = base.select(*kafka, "_json", *parsed)
    if codec == "canal-json":
        change = _json_change(F.col("_m"))
    elif codec == "canal-protobuf":
        change = F.col("_p")
    else:
        change = F.when(F.col("_json"), _json_change(F.col("_m"))).otherwise(F.col("_p"))
    return step.select(*kafka, change.alias("c")).where(F.col("c").isNotNull()).select(*kafka, "c.*")


# The transaction headers (relay.kafka.txn_meta; kafka.transaction_topic) → changes() columns.
TXN_HEADERS = (
    ("relay.txn.id", "txn_id", _S),
    ("relay.txn.order", "txn_order", LongType()),
    ("relay.txn.table_order", "txn_table_order", LongType()),
)
TXN_COLUMNS = tuple(column for _, column, _ in TXN_HEADERS)


def _transaction(headers: bool) -> list[Column]:
    """The transaction id and orders from the records' headers (the Kafka source's ``includeHeaders``);
    null without headers or without the transaction topic."""
    out = []
    for header, column, kind in TXN_HEADERS:
        if headers:
            found = F.get(F.filter(F.col("headers"), _named(header)), 0)
            text = found["value"].cast("string")
        else:
            text = F.lit(None).cast("string")
        out.append(text.cast(kind).alias(column))
    return out


def _named(name: str) -> Callable[[Column], Column]:
    """Whether a header is ``name``'s (one argument: Spark's ``filter`` takes a second as the index)."""
    return lambda h: h["key"] == name


SHARD_FIELD = "_shard"  # the record key's shard identity (mapping key_shard), not a column of the row
_KEY_WIDTH = 4  # keys of up to this many columns spelled as in the image are read without a lambda


def _key_names(df: DataFrame) -> DataFrame:
    """Adds ``_names``: the key columns (from the record key's JSON, else the whole image), sorted,
    ``_kshard``: the key's ``_shard`` value (null when the mapping puts no shard identity in keys), and
    ``_kfast``: the names are at most ``_KEY_WIDTH`` and spelled as in the image (see ``_key_of``).

    The record key spells the columns as the mapping does, and the mapping matches them case-insensitively:
    each name is replaced by the image's own spelling of it. Spark runs higher-order functions (``transform``,
    ``filter``) interpreted, row by row: they are only evaluated for the rare keys that need them.
    """
    # The names only (json_object_keys: no map built, 1/3 faster than from_json to a map); the shard value
    # is read only from the keys that name it.
    with_names = df.withColumn("_knames", F.json_object_keys(F.col("key")))
    named, image = F.col("_knames"), F.coalesce(F.col("after"), F.col("before"))
    # each of the (at most _KEY_WIDTH) names looked up in the image: a third of the time of a set
    # difference with the image's names (array_union + array_except built two arrays per row)
    fast = named.isNotNull() & (F.size(named) <= _KEY_WIDTH)
    for i in range(_KEY_WIDTH):
        n = F.get(named, i)
        fast = fast & (n.isNull() | F.map_contains_key(image, n) | (n == F.lit(SHARD_FIELD)))
    spelled = F.transform(
        named,
        lambda n: F.coalesce(F.get(F.filter(F.map_keys(image), lambda k: F.lower(k) == F.lower(n)), 0), n),
    )
    slow = F.when(named.isNotNull(), spelled).otherwise(F.map_keys(image))
    shard = F.when(F.array_contains(named, SHARD_FIELD), F.get_json_object(F.col("key"), f"$.{SHARD_FIELD}"))
    # sort_array, not array_sort: array_sort compares through an interpreted lambda (0.5 s a 1M rows)
    return (
        with_names.withColumn("_kfast", F.coalesce(fast, F.lit(False)))
        .withColumn("_names", F.sort_array(F.when(F.col("_kfast"), named).otherwise(slow)))
        .withColumn("_kshard", shard)
    )


def _key_of(image: str) -> Column:
    """The row identity from ``image``: the key columns' values in name order, the shard identity
    taken from the record key (it is no column of the row), so two shards' id 1 stay two rows."""

    def value(n: Column) -> Column:
        return F.when(n == F.lit(SHARD_FIELD), F.col("_kshard")).otherwise(F.col(image)[n])

    names = F.col("_names")
    fast = F.slice(F.array(*[value(F.get(names, i)) for i in range(_KEY_WIDTH)]), 1, F.size(names))
    values = F.when(F.col("_kfast"), fast).otherwise(F.transform(names, value))
    return F.when(F.col(image).isNotNull(), F.to_json(values))


def column_types(rows: DataFrame) -> list[tuple[str, str]]:
    """(column, mysqlType) of every column any change names, the type from the latest change (by sequence)
    naming it; in the table order of the latest change, then the others (columns of shards not altered
    yet, or dropped) by position. Every column counts: during a rolling ALTER the latest change may come
    from a shard that does not have the new column yet, while other rows of the batch carry it."""
    exploded = rows.select("sequence", F.posexplode("mysql_type").alias("pos", "name", "mysql"))
    latest = exploded.groupBy("name").agg(
        F.max_by(F.struct("mysql", "pos"), "sequence").alias("m"), F.max("sequence").alias("seq")
    )
    found = latest.collect()
    top = max((r["seq"] for r in found), default=None)
    found.sort(key=lambda r: (r["seq"] != top, r["m"]["pos"], r["name"]))
    return [(r["name"], r["m"]["mysql"]) for r in found]


def typed(changes_df: DataFrame, table: str, columns: list[tuple[str, str]] | None = None) -> DataFrame:
    """The row changes of logical ``table`` ("db.table") with typed columns; see the module docstring.

    ``columns`` ([(name, mysqlType)]) fixes the columns; required for a streaming DataFrame, found from
    the data (the columns of the latest change) otherwise.
    """
    db, _, name = table.partition(".")
    if not name:
        raise SparkSourceError(f"table: expected 'database.table', got {table!r}")
    rows = changes_df.where(
        (F.col("database") == db)
        & (F.col("table") == name)
        & ~F.col("is_ddl")
        & F.col("type").isin("INSERT", "UPDATE", "DELETE")
    )
    if columns is None:
        if changes_df.isStreaming:
            raise SparkSourceError(
                "typed() on a streaming DataFrame needs columns=[(name, mysqlType)]; or call it inside "
                "foreachBatch, where each micro-batch is a batch DataFrame and new columns appear as they "
                "come"
            )
        columns = column_types(rows)
    rows = _key_names(rows)
    image = F.coalesce(F.col("after"), F.col("before"))
    typed_cols = [_typed_value(image[c], mysql, F.col("instants")[c]).alias(c) for c, mysql in columns]
    return rows.select(
        *typed_cols,
        F.col("type").alias("_op"),
        F.col("sequence").alias("_sequence"),
        F.col("part").alias("_part"),
        F.col("source_id").alias("_source_id"),
        F.col("es").alias("_es"),
        _key_of("after").alias("_key"),
        _key_of("before").alias("_old_key"),
        F.coalesce(F.col("snapshot"), F.lit(False)).alias("_snapshot"),
        F.concat_ws(".", F.col("source.database"), F.col("source.table")).alias("_source"),
        *_txn_meta(),
    )


def _txn_meta() -> list[Column]:
    """``_txn_id``/``_txn_order``/``_txn_table_order`` from the change rows (``changes`` always has the
    columns; the DataFrame is not asked for its columns: no analysis inside a pipeline's query function)."""
    return [F.col(column).alias(f"_{column}") for _, column, _ in TXN_HEADERS]


def _typed_value(text: Column, mysql_type: str, instant: Column) -> Column:
    target = spark_type_sql(mysql_type)
    kind = mysql_type.split("(", 1)[0].strip().lower()
    if target == "binary":
        return F.encode(text, "ISO-8859-1")
    if target == "string":
        return text
    if kind == "timestamp":
        # canal renders TIMESTAMP in the source server's zone (ambiguous in the hour a DST change
        # repeats); the relay adds the instant (``utcMicros``, epoch microseconds) beside the text.
        # Values without it (records of older relays) fall back to reading the text as UTC.
        fallback = F.to_utc_timestamp(text.try_cast("timestamp_ntz"), "UTC")
        return F.when(instant.isNotNull(), F.timestamp_micros(instant)).otherwise(fallback)
    if kind == "year":
        return F.when(text == "0000", F.lit(0)).otherwise(text.try_cast("int"))
    # try_cast: a value Spark cannot hold (zero date 0000-00-00, out-of-range) becomes null, not a failed job
    return text.try_cast(target)
