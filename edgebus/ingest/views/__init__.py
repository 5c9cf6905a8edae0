"""Typed views (docs/spark.md, "Typed views"): one typed, partitioned table per
topic family, kept beside the ingest table by ``edgebus ingest --views FILE``.

- ``config``: the views' TOML file;
- ``types``: what fits a column, and a new column's type;
- ``payloads``: the rows of a topic pattern, their payloads parsed, key types;
- ``marks``: how far each table has taken the ingest table, per gateway;
- ``plan``: what a refresh writes for one view (rows, new columns, rejects);
- ``refresh``: the refresh the ingest job runs (a derived table: edgebus.ingest.job);
- ``reading``: a view read back as a DataFrame;
- ``infer``: ``edgebus views infer``, a view drafted from the table;
- ``arrow``, ``json_types``: its rows read with pyarrow, without Spark, each
  payload value typed as Spark's ``schema_of_variant`` types it.
"""

from edgebus.ingest.views.reading import read_view, view_schema
from edgebus.ingest.views.refresh import add_arguments, refresh, tables
