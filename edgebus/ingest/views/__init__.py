"""Typed views (docs/spark.md, "Typed views"): one typed, partitioned table per
topic family, kept beside the ingest table by ``edgebus ingest --views FILE``."""

from edgebus.ingest.views.refresh import add_arguments, read_view, refresh, tables, view_schema
