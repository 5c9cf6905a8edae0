"""Planning: the sealed segments between two positions cut into ranges and
packed into Spark partitions, and how far a bounded micro-batch reaches.

A range [a, b) yields the records whose *start* offset is in [a, b): byte
offsets in a version-1 segment, row numbers in a version-2 (Parquet) one.
Sizes are weighed in bytes either way (a Parquet row weighs its file's bytes
per row).  In a version-1 segment cuts need not fall on record boundaries:
reading from a cut resynchronises on the next valid record (the record
spanning the cut belongs to the range before it).
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any

from edgebus import tlog
from edgebus.ingest import corruption
from edgebus.ingest.offsets import DEFAULT_SPLIT_BYTES, MIN_SPLIT_BYTES, canonical, position
from edgebus.ingest.ranges import RangeGroup, SegmentRange

if TYPE_CHECKING:
    Pos = tuple[int, int]  # (segment id, offset)
    from edgebus.ingest.offsets import Options

log = logging.getLogger("edgebus.ingest")

# What opening a range costs, in bytes of reading (Spark's openCostInBytes):
# it stops thousands of tiny segments from crowding into one partition.
_OPEN_COST = 8 * 1024


class Span:
    """The part [lo, hi) of sealed segment sid between two positions; scale is
    bytes per offset unit (1 in version 1, bytes per row in version 2)."""

    def __init__(self, sid: int, lo: int, hi: int, version: int, scale: float) -> None:
        self.sid, self.lo, self.hi, self.version, self.scale = sid, lo, hi, version, scale

    @property
    def weight(self) -> int:
        return int((self.hi - self.lo) * self.scale)


def spans(path: str, start: Pos, end: Pos) -> tuple[list[Span], list[tuple[int, int]]]:
    """[Span] for the sealed segments between positions start (inclusive) and
    end (exclusive), and the ids missing from that range."""
    s0, o0 = start
    s1, o1 = end
    out, missing = [], []
    want = s0 if s0 >= 0 else None
    files = tlog.sealed_files(path)
    for sid in sorted(files):
        if sid < s0 or sid > s1:
            continue
        if want is not None and sid > want:
            missing.append((want, sid - 1))
        want = sid + 1
        fname, version = files[sid]
        try:
            nbytes = os.path.getsize(fname)
        except FileNotFoundError:  # removed by retention meanwhile
            missing.append((sid, sid))
            continue
        size = nbytes if version == 1 else tlog.segment_end(path, sid)
        if size is None:  # an unreadable Parquet file: its reader reports it
            size, nbytes = 1, nbytes
        lo = o0 if sid == s0 else 0
        hi = min(o1, size) if sid == s1 else size
        if lo < hi:
            out.append(Span(sid, lo, hi, version, nbytes / max(size, 1)))
    return out, missing


def plan(
    path: str,
    start: dict[str, Any],
    end: dict[str, Any],
    split_bytes: int = DEFAULT_SPLIT_BYTES,
    min_partitions: int | None = None,
) -> tuple[list[SegmentRange], list[tuple[int, int]]]:
    """The SegmentRanges covering offsets [start, end), of about the target
    size: split_bytes, or less when min_partitions asks for more (at least
    64 KiB). Larger segments are cut; pack() groups the small ones."""
    found, missing = spans(path, position(start), position(end))
    for first, last in missing:
        log.warning(
            "edgebus: log %s: segments %d..%d are missing (removed by retention "
            "before they were read, or quarantined); their records are lost",
            path,
            first,
            last,
        )
    target = _target(sum(sp.weight for sp in found), split_bytes, min_partitions)
    parts: list[SegmentRange] = []
    for sp in found:
        lo, hi = sp.lo, sp.hi
        n = max(1, -(-sp.weight // target))
        # A record never starts inside a version-1 file header.
        first = tlog.FILE_HEADER_SIZE + 1 if sp.version == 1 else 1
        cuts = [lo]
        for k in range(1, n):
            c = max(lo + (hi - lo) * k // n, first)
            if c > cuts[-1] and c < hi:
                cuts.append(c)
        cuts.append(hi)
        parts.extend(
            SegmentRange(sp.sid, a, b, int((b - a) * sp.scale)) for a, b in zip(cuts, cuts[1:])
        )
    return parts, missing


def pack(
    ranges: list[SegmentRange],
    split_bytes: int = DEFAULT_SPLIT_BYTES,
    min_partitions: int | None = None,
) -> list[RangeGroup]:
    """The partitions for plan()'s ranges: consecutive ranges grouped up to the
    same target size, each range counted with _OPEN_COST (Spark's file
    sources pack small files so; a task per one-minute segment would cost more
    in Python worker round trips than reading it)."""
    # The open costs count in the total too: else they push a batch sized for
    # min_partitions groups into one more, a second wave of tasks on as many cores.
    total = sum(r.weight + _OPEN_COST for r in ranges)
    target = _target(total, split_bytes, min_partitions)
    groups: list[RangeGroup] = []
    cur: list[SegmentRange] = []
    size = 0
    for r in ranges:
        n = r.weight + _OPEN_COST
        # A range goes to the slot [k*target, (k+1)*target) holding its middle:
        # at most ceil(total / target) groups, however the sizes fall.
        if cur and size + n / 2 > (len(groups) + 1) * target:
            groups.append(RangeGroup(cur))
            cur = []
        cur.append(r)
        size += n
    if cur:
        groups.append(RangeGroup(cur))
    return groups


def partitions(opts: Options, start: dict[str, Any], end: dict[str, Any]) -> list[RangeGroup]:
    """The RangeGroups of offsets [start, end) under the options opts; the
    segments missing from the range are written to its corruptDir."""
    ranges, missing = plan(opts.path, start, end, opts.split_bytes, opts.min_partitions)
    if missing and opts.corrupt_dir:
        corruption.report_missing(opts, missing)
    return pack(ranges, opts.split_bytes, opts.min_partitions)


def _target(total: int, split_bytes: int, min_partitions: int | None) -> int:
    if min_partitions and total:
        # Ranges made for parallelism stay >= 64 KiB; splitBytes is obeyed.
        return min(split_bytes, max(-(-total // min_partitions), 64 * MIN_SPLIT_BYTES))
    return split_bytes


def advance_bytes(path: str, start: Pos, end: Pos, max_bytes: int) -> Pos:
    """The position at most max_bytes of segment data after start (>= 1 record)."""
    found, _ = spans(path, start, end)
    budget, last = max_bytes, start
    for sp in found:
        if budget <= 0:
            break
        if sp.weight <= budget:
            budget -= sp.weight
            last = (sp.sid, sp.hi)
            continue
        first = tlog.FILE_HEADER_SIZE + 1 if sp.version == 1 else sp.lo + 1
        return canonical(path, (sp.sid, min(max(sp.lo + int(budget / sp.scale), first), sp.hi)))
    return canonical(path, last)


def advance_rows(path: str, start: Pos, end: Pos, max_rows: int) -> Pos:
    """The position of the (max_rows + 1)-th record after start, or end."""
    found, _ = spans(path, start, end)
    n = 0
    for sp in found:
        sid, lo, hi = sp.sid, sp.lo, sp.hi
        if sp.version == 2:  # a row is a position: nothing to read
            if n + (hi - lo) > max_rows:
                return (sid, lo + max_rows - n)
            n += hi - lo
            continue
        it = tlog.read_segment(path, sid, lo, None, decode_payload=False)
        try:
            for off, _rec in it:
                if off >= hi:
                    break
                if n == max_rows:
                    return (sid, off)
                n += 1
        finally:
            it.close()
    return end
