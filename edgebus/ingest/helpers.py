"""Typed extraction from the `payload` and `extra` JSON text columns.

    from edgebus.ingest.helpers import payload_field, payload_bytes
    df.select(payload_field("payload", "temp", "double"),        # {"temp": 21.5}
              payload_field("payload", "$", "long"),              # a bare number payload
              payload_field("extra", "ts"),                       # works on extra too
              payload_bytes("payload"))                           # {"$b64": "..."} -> binary

Every helper returns null, never an error, for an absent member or a value that
does not convert (so one device sending a string where others send numbers
cannot fail a query, even with ANSI mode on).
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

__all__ = ["payload_field", "payload_struct", "payload_bytes", "json_path", "with_bundle"]


def _col(c: Column | str) -> Column:
    return c if isinstance(c, Column) else F.col(c)


def json_path(path: str) -> str:
    """'temp' / 'a.b' / 'xs[0]' -> '$.temp' ...; a path starting with '$' is kept."""
    return path if path.startswith("$") else "$." + path


def payload_field(col: Column | str, path: str, type: Any = "string") -> Column:
    """The JSON value at path in col (JSON text) cast to type (a Spark SQL type
    name or DataType): 'string' gives a string member's text, or the JSON text of
    an object/array member."""
    v = F.get_json_object(_col(col), json_path(path))
    if type in ("string", "str"):
        return v
    return v.try_cast(type)


def payload_struct(col: Column | str, schema: Any) -> Column:
    """The whole JSON text parsed with from_json to schema (a DDL string or
    StructType); malformed or mismatching values give nulls."""
    return F.from_json(_col(col), schema, {"mode": "PERMISSIVE"})


def payload_bytes(col: Column | str, path: str = "$") -> Column:
    """The bytes of a binary value (logged as {"$b64": "..."}) at path, as binary."""
    v = F.get_json_object(_col(col), json_path(path) + "['$b64']")
    return F.try_to_binary(v, F.lit("base64"))


def with_bundle(df: DataFrame, info: DataFrame | None = None) -> DataFrame:
    """df with ``bundle_version`` and ``bundle_hash``: the code that produced
    each row, from its device boot's ``sys/info`` rows (``info``, default df
    itself), joined on (``peer_node``, ``peer_sid``). A device's code changes
    only across a reboot (an update's switch reboots), and every boot has its
    own sid, so each boot maps to one bundle; hash null is the factory modules
    (firmware/README.md, "Updates over the bus"). Rows of a boot whose
    sys/info is not in the table get nulls."""
    src = df if info is None else info
    boots = (
        src.filter(F.col("topic").endswith("/sys/info") & F.col("peer_sid").isNotNull())
        .select(
            "peer_node",
            "peer_sid",
            F.get_json_object("payload", "$.bundle.version").alias("bundle_version"),
            F.get_json_object("payload", "$.bundle.hash").alias("bundle_hash"),
        )
        .dropDuplicates(["peer_node", "peer_sid"])
    )
    return df.join(boots, ["peer_node", "peer_sid"], "left")
