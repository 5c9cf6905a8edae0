"""The `edgebus` PySpark data source: the bridge's telemetry log as a table.

    from edgebus.ingest.source import register
    register(spark)
    spark.read.format("edgebus").load("/var/lib/edgebus/tlog")          # batch
    spark.readStream.format("edgebus").load("/var/lib/edgebus/tlog")    # streaming

Offsets are log positions ``{"segment": id, "offset": byte}`` (edgebus.ingest.offsets),
so Structured Streaming with a checkpoint and a file sink is exactly once.
Only sealed segments are read (docs/telemetry-log.md section 7).  A micro-batch
(or a batch read) is cut into byte ranges of segments packed into partitions
(edgebus.ingest.planning), so the work spreads over executors; each range is read into
Arrow batches by edgebus.ingest.reading.  Columns (edgebus.ingest.schema) and options are
documented in docs/spark.md.

Corrupt or truncated bytes never fail a read and never produce a row: each bad
region is logged as a warning naming file and offset and, with the
``corruptDir`` option, written to a JSON file there (see
:func:`edgebus.ingest.corruption.corrupt_report`).
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any, Iterator, Sequence, cast

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader

from edgebus.ingest import planning
from edgebus.ingest.offsets import BEGIN, Options, latest, offset_dict, parse_offset, position
from edgebus.ingest.ranges import RangeGroup
from edgebus.ingest.schema import SCHEMA

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.datasource import InputPartition
    from pyspark.sql.types import StructType

try:  # pyspark >= 4.2: admission control, availableNow
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadMaxBytes,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # pragma: no cover - pyspark 4.0/4.1
    ReadAllAvailable = ReadMaxBytes = ReadMaxRows = None  # type: ignore[assignment, misc]  # absent

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]  # a plain base: never called
        pass


__all__ = [
    "EdgebusDataSource",
    "EdgebusBatchReader",
    "EdgebusStreamReader",
    "default_parallelism",
    "register",
    "with_parallelism",
]

log = logging.getLogger("edgebus.ingest")


def register(spark: SparkSession) -> SparkSession:
    """Make ``format("edgebus")`` available in this SparkSession.

    The registered class carries the session's default parallelism, which the
    readers use for ``minPartitions`` when it is not given (like Spark's file
    sources): the planning runs in a Python worker that has no session to ask."""
    n = default_parallelism(spark)
    spark.dataSource.register(with_parallelism(n) if n else EdgebusDataSource)
    return spark


def default_parallelism(spark: SparkSession) -> int | None:
    """The session's default parallelism; None on Spark Connect, whose client
    has no SparkContext (the readers then take the server's CPU count)."""
    try:
        return int(spark.sparkContext.defaultParallelism)
    except Exception:  # pyspark's PySparkNotImplementedError on Connect
        return None


def with_parallelism(n: int) -> type[EdgebusDataSource]:
    """EdgebusDataSource whose readers default minPartitions to n. Being made
    here, not importable, the class is pickled by value (cloudpickle), so the
    hint travels to the planning worker."""
    return type("EdgebusDataSource", (EdgebusDataSource,), {"parallelism": int(n)})


def _read(opts: Options, partition: InputPartition) -> Iterator[Any]:
    # Imported here, in the task's worker: the planning worker and the process
    # serving a stream's offsets (started per query) need no pyarrow/numpy/msgspec.
    from edgebus.ingest.reading import read_group

    return read_group(opts, cast(RangeGroup, partition))


class EdgebusDataSource(DataSource):
    """``format("edgebus")``: the bridge's telemetry log (docs/spark.md)."""

    @classmethod
    def name(cls) -> str:
        return "edgebus"

    def schema(self) -> StructType:
        return SCHEMA

    def _opts(self, schema: StructType) -> Options:
        if schema is not None and schema != SCHEMA:
            raise ValueError(
                "edgebus: the schema is fixed (docs/spark.md); "
                "do not pass one, select or cast columns instead"
            )
        return Options(self.options, getattr(self, "parallelism", None) or os.cpu_count())

    def reader(self, schema: StructType) -> EdgebusBatchReader:
        return EdgebusBatchReader(self._opts(schema))

    def streamReader(self, schema: StructType) -> EdgebusStreamReader:
        return EdgebusStreamReader(self._opts(schema))


class EdgebusBatchReader(DataSourceReader):
    """Every sealed segment at planning time, or [startingOffset, endingOffset)."""

    def __init__(self, opts: Options) -> None:
        if not os.path.isdir(opts.path):
            raise FileNotFoundError("edgebus: no log directory at %s" % opts.path)
        self.opts = opts

    def partitions(self) -> Sequence[InputPartition]:
        o = self.opts
        start = parse_offset(o.starting, "startingOffset", o.path)
        end = parse_offset(o.ending, "endingOffset", o.path)
        # Spark wants at least one partition; an empty one reads nothing.
        return planning.partitions(o, start, end) or [RangeGroup([])]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read(self.opts, partition)


class EdgebusStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches [end of the last batch, newest sealed segment's end), bounded
    by maxRecordsPerTrigger / maxBytesPerTrigger."""

    def __init__(self, opts: Options) -> None:
        self.opts = opts
        # availableNow: do not read past this position
        self._target: tuple[int, int] | None = None
        self._warned = False

    def initialOffset(self) -> dict[str, int]:
        o = self.opts
        if not os.path.isdir(o.path):
            log.warning("edgebus: no log directory at %s yet; waiting for it", o.path)
        return parse_offset(o.starting, "startingOffset", o.path)

    def _latest(self) -> tuple[int, int] | None:
        lo = latest(self.opts.path)
        if lo is None:
            return None
        if self._target is not None and lo > self._target:
            lo = self._target
        return lo

    def latestOffset(
        self, start: dict[str, Any] | None = None, limit: Any = None
    ) -> dict[str, Any]:
        # Two signatures: latestOffset() before pyspark 4.2, (start, limit) after.
        lo = self._latest()
        if start is None:
            return offset_dict(*lo) if lo else dict(BEGIN)
        s = position(start)
        if lo is None or lo <= s:
            if lo is not None and lo < s and not self._warned:
                self._warned = True
                log.warning(
                    "edgebus: log %s ends at %r, before the stream's position %r: "
                    "was the log directory replaced?",
                    self.opts.path,
                    lo,
                    s,
                )
            return start
        end = lo
        o = self.opts
        if limit is None:
            limit = self.getDefaultReadLimit()
        if ReadAllAvailable is None or not isinstance(limit, ReadAllAvailable):
            max_rows = getattr(limit, "max_rows", None) or o.max_records
            max_bytes = getattr(limit, "max_bytes", None) or o.max_bytes
            if max_bytes:
                end = min(end, planning.advance_bytes(o.path, s, end, max_bytes))
            if max_rows:
                end = min(end, planning.advance_rows(o.path, s, end, max_rows))
        return offset_dict(*end)

    def getDefaultReadLimit(self) -> Any:
        if ReadAllAvailable is None:
            return None
        if self.opts.max_records:
            return ReadMaxRows(self.opts.max_records)
        if self.opts.max_bytes:
            return ReadMaxBytes(self.opts.max_bytes)
        return ReadAllAvailable()

    def reportLatestOffset(self) -> dict[str, int] | None:
        lo = latest(self.opts.path)
        return offset_dict(*lo) if lo else None

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = latest(self.opts.path) or (-1, 0)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        return planning.partitions(self.opts, start, end)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read(self.opts, partition)

    def commit(self, end: dict[str, Any]) -> None:
        pass  # the log is the bridge's; its retention decides what is kept
