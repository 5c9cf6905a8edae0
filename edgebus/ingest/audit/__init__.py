"""The delivery audit (docs/spark.md, "Delivery audit"): per device boot and
time window, what was received, late, missing and why, and duplicated."""

from edgebus.ingest.audit.table import DEFAULT_WINDOW, add_arguments, audit_dir, refresh
