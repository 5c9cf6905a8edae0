"""A Python data source that does no reading: the ceiling of any Python source.

``format("edgebus-ceiling")`` plans the same partitions as ``edgebus`` over the
same log, but each Python worker reads the log once (the warm-up run) and from
then on yields the Arrow batches it kept. What is left of a run is what every
Python data source pays whatever its reader does: a Python worker per task,
the Arrow batches' trip to the JVM, and their conversion to Spark rows. The
Spark benchmark (dev/bench/spark_bench.py) prints it beside the edgebus source
and Spark's JSON source; it is a benchmark aid, not part of the product.
"""
from pyspark.sql.datasource import DataSource, DataSourceReader

from ingest.schema import SCHEMA
from ingest.source import EdgebusDataSource

_KEPT = {}     # (log path, partition's ranges) -> [pyarrow.RecordBatch], per worker


class CeilingSource(DataSource):
    """The edgebus source's partitions and batches, served from memory."""

    @classmethod
    def name(cls):
        return "edgebus-ceiling"

    def schema(self):
        return SCHEMA

    def reader(self, schema):
        return _Reader(EdgebusDataSource(self.options).reader(schema))


class _Reader(DataSourceReader):
    def __init__(self, inner):
        self.inner = inner

    def partitions(self):
        return self.inner.partitions()

    def read(self, partition):
        key = (self.inner.opts.path,
               tuple((r.segment, r.start, r.end) for r in partition.ranges))
        kept = _KEPT.get(key)
        if kept is None:
            kept = _KEPT[key] = list(self.inner.read(partition))
        return iter(kept)
