"""Reading a typed view: its whole schema (the typed columns as of its last
refresh, then the provenance columns) and the view as a DataFrame."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from edgebus.ingest import tablelog
from edgebus.ingest.views import types as views_types

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

# The provenance columns' types, in PROVENANCE's order.
PROVENANCE_DDL = (
    "peer_node STRING, peer_sid STRING, seq BIGINT, ts_device DOUBLE, ts_host DOUBLE, "
    "gateway STRING, topic STRING, late BOOLEAN, via ARRAY<STRING>, segment BIGINT, "
    "offset BIGINT, date DATE"
)
REJECTS_DDL = (
    "view STRING, reason STRING, `column` STRING, expected STRING, value STRING, "
    "payload STRING, " + PROVENANCE_DDL
)


def view_schema(spark: SparkSession, path: str) -> StructType:
    """The view at path's whole schema (its typed columns as of its last
    refresh, then the provenance columns), to read it with."""
    from pyspark.sql.types import StructType

    cols = tablelog.committed(path)[1].get("columns", [])
    typed = ", ".join("%s %s" % (views_types.quote(n), t) for n, _, t in cols)
    prov = views_types.from_ddl(PROVENANCE_DDL)
    fields = [] if not typed else list(views_types.from_ddl(typed).fields)
    ordered = [f for f in prov.fields if f.name not in ("peer_node", "date")]
    return StructType(fields + ordered + [prov["peer_node"], prov["date"]])


def read_view(spark: SparkSession, path: str) -> DataFrame:
    """A view as a DataFrame with all its columns (a row written before a
    column appeared has null there); only committed files are read."""
    return spark.read.schema(view_schema(spark, path)).parquet(os.path.abspath(path))
