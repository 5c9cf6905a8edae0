"""`edgebus report` (docs/spark.md, "`edgebus report`"): what the fleet sent,
from the table `edgebus ingest` writes."""

from edgebus.ingest.report.summary import format_report, summarize
from edgebus.ingest.report.tables import read_table, text_table
