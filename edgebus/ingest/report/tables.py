"""What `edgebus report`, the delivery audit and the typed views share: the ingest table read
as a DataFrame, and plain-text tables."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["read_table", "text_table"]


def read_table(spark: SparkSession, table: str) -> DataFrame:
    """The ingested table as a DataFrame (through the file sink's metadata log, so
    only committed files; an empty table reads as no rows)."""
    from edgebus.ingest.job import TABLE_SCHEMA

    return spark.read.schema(TABLE_SCHEMA).parquet(os.path.abspath(table))


def text_table(header: list[str], rows: list[list[str]]) -> str:
    """header and rows as aligned columns (two spaces apart)."""
    cols = [header] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cols) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cols)
