"""The delivery audit (docs/spark.md, "Delivery audit"): per device boot and
time window, what was received, late, missing and why, and duplicated.

- ``table``: the audit table the ingest job refreshes (a derived table:
  edgebus.ingest.job), its schema and options;
- ``rows``: a boot's rows assembled from the queries, gaps and copies;
- ``queries``: the Spark queries over the ingest table;
- ``gaps``: a boot's missing numbers and their reasons;
- ``copies``: the copies each boot has in the logs, duplicates included.
"""

from edgebus.ingest.audit.table import DEFAULT_WINDOW, add_arguments, audit_dir, refresh
