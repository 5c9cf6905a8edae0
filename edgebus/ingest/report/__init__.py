"""`edgebus report` (docs/spark.md, "`edgebus report`"): what the fleet sent, from the
table `edgebus ingest` writes.

- ``command``: the command (options, output);
- ``summary``: the table's summary, as data and as text;
- ``audit``: the report's delivery audit part;
- ``plot``: the PNG of each boot's deliveries;
- ``arrow``: the same figures read with pyarrow, without Spark (the command's default);
- ``tables``: the ingest table read as a DataFrame, and plain-text tables.
"""

from edgebus.ingest.report.summary import format_report, summarize
from edgebus.ingest.report.tables import read_table, text_table
