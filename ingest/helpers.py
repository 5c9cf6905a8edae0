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

from pyspark.sql import Column
from pyspark.sql import functions as F

__all__ = ["payload_field", "payload_struct", "payload_bytes", "json_path"]


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
