"""The units the planner cuts a log into and the readers read: a
SegmentRange (records of one sealed segment, the unit of reading and of
corruption reports) and a RangeGroup (one Spark partition of them).  Spark
pickles them to the executors."""

from __future__ import annotations

from pyspark.sql.datasource import InputPartition


class SegmentRange(InputPartition):
    """Records of one sealed segment whose start offset is in [start, end):
    the unit of reading and of corruption reports.  weight: its bytes."""

    def __init__(self, segment: int, start: int, end: int, weight: int | None = None) -> None:
        self.segment = segment
        self.start = start
        self.end = end
        self.weight = end - start if weight is None else weight


class RangeGroup(InputPartition):
    """One Spark partition: SegmentRanges read one after the other, in log order."""

    def __init__(self, ranges: list[SegmentRange]) -> None:
        self.ranges = ranges
