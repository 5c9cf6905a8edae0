"""Reading a range of rows of a version-2 (Parquet) segment as Arrow record
batches of SCHEMA: the file's own columns, row group by row group, with no
per-row Python (docs/telemetry-log.md section 2.3).

What does not read (a file that is not a version-2 segment, a row group whose
page checksum or decoding fails) is skipped and reported like corrupt
version-1 data, by edgebus.tlog.columnar.read_rows; a row whose ts_host Spark cannot
hold (its ts_host_time is null) is skipped and reported as unrepresentable.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from edgebus.ingest.corruption import report
from edgebus.ingest.schema import arrow_schema
from edgebus.tlog import ReadStats, columnar

if TYPE_CHECKING:
    from edgebus.ingest.offsets import Options
    from edgebus.ingest.ranges import SegmentRange


def read_range(opts: Options, part: SegmentRange, fname: str) -> Iterator[Any]:
    """Arrow record batches for the rows [part.start, part.end) of the
    version-2 segment part.segment, file fname."""
    schema = arrow_schema()
    names = schema.names
    sid, start = part.segment, part.start
    stats = ReadStats()
    bad = []
    for _first, t in columnar.read_rows(fname, sid, start, part.end, stats, columns=names):
        t = t.select(names)
        times = t.column("ts_host_time")
        if times.null_count:
            keep = pc.is_valid(times)
            for off, ts in zip(
                t.column("offset").filter(pc.invert(keep)).to_pylist(),
                t.column("ts_host").filter(pc.invert(keep)).to_pylist(),
            ):
                bad.append(
                    _region(
                        fname,
                        sid,
                        off,
                        None,
                        "unrepresentable record: ts_host %r "
                        "is outside Spark's timestamp range" % (ts,),
                    )
                )
            t = t.filter(keep)
        for b in t.to_batches():
            yield pa.RecordBatch.from_arrays(b.columns, schema=schema)
    for _file, off, reason in stats.corrupt:
        # A file that does not open is reported at row 0, by the range there.
        if off != 0 or start == 0:
            bad.append(_region(fname, sid, off, None, reason))
    if bad:
        report(opts, part, fname, bad, [])


def _region(fname: str, sid: int, offset: int, nbytes: int | None, reason: str) -> dict[str, Any]:
    return {"file": fname, "segment": sid, "offset": offset, "bytes": nbytes, "reason": reason}
