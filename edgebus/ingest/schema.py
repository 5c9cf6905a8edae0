"""The table the `edgebus` data source reads (docs/spark.md, columns): the
columns of a version-2 segment (edgebus.tlog.columnar.SCHEMA) but ``topic_json``.
The conversions of record values into these types are edgebus.tlog.columnar's."""

from __future__ import annotations

from typing import Any

from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

SCHEMA = StructType(
    [
        StructField("topic", StringType(), False),
        StructField("topic_tokens", ArrayType(StringType(), False), False),
        StructField("payload", StringType(), True),
        StructField("ts_device", DoubleType(), True),
        StructField("ts_host", DoubleType(), False),
        StructField("ts_host_time", TimestampType(), False),
        StructField("link_id", StringType(), True),
        StructField("peer_node", StringType(), True),
        StructField("peer_sid", StringType(), True),
        StructField("generation", LongType(), True),
        StructField("seq", LongType(), True),
        StructField("origin_kind", StringType(), True),
        StructField("conn_id", StringType(), True),
        StructField("principal", StringType(), True),
        StructField("extra", StringType(), True),
        StructField("late", BooleanType(), False),
        StructField("gateway", StringType(), True),
        StructField("segment", LongType(), False),
        StructField("offset", LongType(), False),
    ]
)


def arrow_schema() -> Any:
    """SCHEMA as the pyarrow schema of the record batches the readers yield."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(SCHEMA, timezone="UTC")


# A record's extra as JSON text says late when it holds this (compact JSON);
# the text is then decoded to be sure it is the top-level member.
LATE_TEXT = b'"late":true'
