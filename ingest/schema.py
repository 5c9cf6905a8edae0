"""The table the `edgebus` data source reads (docs/spark.md, columns), and the
conversions of record values into its column types."""
import json

from pyspark.sql.types import (ArrayType, BooleanType, DoubleType, LongType, StringType, StructField,
                               StructType, TimestampType)

SCHEMA = StructType([
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
    StructField("segment", LongType(), False),
    StructField("offset", LongType(), False),
])

_I64_MIN, _I64_MAX = -2 ** 63, 2 ** 63 - 1
# Spark timestamps cover years 0001..9999 (seconds since the epoch, UTC).
TS_MIN, TS_MAX = -62135596800.0, 253402300799.0

# The payload/extra columns' text: compact JSON, as the writer logs it.
json_text = json.JSONEncoder(ensure_ascii=False, allow_nan=False,
                             separators=(",", ":")).encode


def arrow_schema():
    """SCHEMA as the pyarrow schema of the record batches the readers yield."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(SCHEMA, timezone="UTC")


# A record's extra as JSON text says late when it holds this (compact JSON);
# the text is then decoded to be sure it is the top-level member.
LATE_TEXT = b'"late":true'


def is_late(extra):
    """The late column for a record's extra (a dict, or None): True only when
    its member ``late`` is JSON true (a reading delivered out of a spool)."""
    return type(extra) is dict and extra.get("late") is True


def fits_timestamp(ts_host):
    """Whether ts_host (seconds) is within Spark's timestamp range."""
    return TS_MIN <= ts_host <= TS_MAX          # ints compare exactly, no overflow


def to_long(v):
    """v for a long column: null beyond a long's range (the JSON keeps it)."""
    return v if v is None or _I64_MIN <= v <= _I64_MAX else None


def to_double(v):
    """v for a double column: an int as the nearest double, null beyond a
    double's range."""
    if type(v) is int:
        return float(v) if -1e308 < v < 1e308 else None
    return v
