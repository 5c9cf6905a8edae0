"""Reading: one SegmentRange of the log to Arrow record batches of SCHEMA.

A version-2 (Parquet) segment is read by edgebus.ingest.columnar_reading; the rest of
this module reads version-1 segments.

With msgspec (the ``spark`` extra) a range is read in bulk, not one Python dict
per record: the segment is mapped, frames are split and CRC-checked in one
tight loop, the bodies of each chunk are decoded by one msgspec call
(edgebus.ingest.bodies) and the columns are built from their raw text
(edgebus.ingest.columns).  It reads the same records as tlog.read_segment, by the same
rules (docs/telemetry-log.md sections 2, 3 and 7): whatever the bulk path does
not take as is goes to tlog, whose resynchronising reader reports and skips
bad bytes; bulk reading then resumes at the next valid record.  Without
msgspec, or when the file header is not clean, the whole range is read record
by record through tlog.  Bad regions are reported by the range that owns them
(edgebus.ingest.corruption.owned).
"""

from __future__ import annotations

import gc
import os
import zlib
from typing import TYPE_CHECKING, Any, Iterator

from edgebus import tlog
from edgebus.ingest import columnar_reading, columns
from edgebus.ingest.corruption import RangeDamage
from edgebus.ingest.schema import arrow_schema
from edgebus.tlog.columnar import TS_MAX, TS_MIN, fits_timestamp

if TYPE_CHECKING:
    import mmap

    from edgebus.ingest.bodies import Rec
    from edgebus.ingest.offsets import Options
    from edgebus.ingest.ranges import RangeGroup, SegmentRange

try:
    from edgebus.ingest import bodies
except ImportError:  # no msgspec: every range is read by tlog
    bodies = None  # type: ignore[assignment]  # the optional-import idiom

# Whether ranges are read in bulk (msgspec is installed).
BULK = bodies is not None

_ARROW_ROWS = 8192  # records per batch, read through tlog
_CHUNK_ROWS = 16384  # bodies per msgspec call


def read_group(opts: Options, group: RangeGroup) -> Iterator[Any]:
    """Arrow record batches for the ranges of one RangeGroup, in log order."""
    for r in group.ranges:
        yield from read_range(opts, r)


def read_range(opts: Options, part: SegmentRange) -> Iterator[Any]:
    """Arrow record batches for one SegmentRange: in bulk when msgspec is
    there and the file header is clean, else by read_range_slow."""
    found = tlog.segment_file(opts.path, part.segment) if part.segment >= 0 else None
    if found is not None and found[1] == 2:
        yield from columnar_reading.read_range(opts, part, found[0])
        return
    if not BULK or part.segment < 0:
        yield from read_range_slow(opts, part)
        return
    import mmap

    path, sid = opts.path, part.segment
    fname = os.path.join(path, tlog.segment_name(sid))
    try:
        f = open(fname, "rb")
    except OSError:
        yield from read_range_slow(opts, part)  # reports missing / cannot open
        return
    with f:
        size = os.fstat(f.fileno()).st_size
        if (
            size < tlog.FILE_HEADER_SIZE
            or tlog.check_file_header(f.read(tlog.FILE_HEADER_SIZE), sid) is not None
        ):
            yield from read_range_slow(opts, part)
            return
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        yield from _read_bulk(opts, part, fname, mm, size)
    finally:
        try:
            mm.close()
        except BufferError:  # a view of it is still alive: the GC closes it
            pass


def read_range_slow(opts: Options, part: SegmentRange) -> Iterator[Any]:
    """Arrow record batches for one SegmentRange, record by record through
    tlog: the fallback of read_range."""
    import pyarrow as pa

    schema = arrow_schema()
    path, sid, start, end = opts.path, part.segment, part.start, part.end
    fname = os.path.join(path, tlog.segment_name(sid))
    try:
        size = os.path.getsize(fname)
    except OSError:
        size = 0
    damage = RangeDamage(part, fname, size)
    corrupt = damage.stats.corrupt
    it = tlog.read_segment(path, sid, start, None, damage.stats, decode_payload=False)
    offs, recs = [], []
    # The records are acyclic dicts freed by reference counting; with thousands of
    # them alive per batch the cyclic GC's scans cost a third of the read time.
    gc_was_on = gc.isenabled()
    gc.disable()
    try:
        for off, rec in it:
            if len(corrupt) > damage.seen:
                damage.collect(off)
            if off >= end:
                break
            if not fits_timestamp(rec["ts_host"]):
                damage.unrepresentable(off, rec["ts_host"])
                continue
            offs.append(off)
            recs.append(rec)
            if len(offs) >= _ARROW_ROWS:
                yield columns.from_dicts(pa, schema, sid, offs, recs)
                offs, recs = [], []
        else:
            damage.collect(None)
        if offs:
            yield columns.from_dicts(pa, schema, sid, offs, recs)
    finally:
        it.close()
        if gc_was_on:
            gc.enable()
    damage.report(opts)


def _frames(
    mm: mmap.mmap, size: int, pos: int, stop: int, limit: int
) -> tuple[list[int], list[memoryview], int, bool]:
    """Walk whole, CRC-valid frames from pos: (offsets, bodies, next_pos, ok).
    Stops before a record starting at or after stop, after limit frames, or at
    the first frame that is not valid (ok False: next_pos is its offset)."""
    offs: list[int] = []
    chunk: list[memoryview] = []
    unpack = tlog.RECORD_HEADER.unpack_from
    crc32 = zlib.crc32
    hdr, want_magic, want_version, max_len = (
        tlog.RECORD_HEADER_SIZE,
        tlog.RECORD_MAGIC,
        tlog.FORMAT_VERSION,
        tlog.MAX_BODY_BYTES,
    )
    mv = memoryview(mm)
    while pos < stop and len(offs) < limit:
        if pos + hdr > size:
            return offs, chunk, pos, False
        magic, version, length, crc = unpack(mm, pos)
        b0 = pos + hdr
        b1 = b0 + length
        if magic != want_magic or version != want_version or not 0 < length <= max_len or b1 > size:
            return offs, chunk, pos, False
        body = mv[b0:b1]
        if crc32(body, crc32(mv[pos : pos + 10])) != crc:
            return offs, chunk, pos, False
        offs.append(pos)
        chunk.append(body)
        pos = b1
    return offs, chunk, pos, True


def _read_bulk(
    opts: Options, part: SegmentRange, fname: str, mm: mmap.mmap, size: int
) -> Iterator[Any]:
    """Arrow record batches for one SegmentRange of a mapped segment whose file
    header is valid."""
    schema = arrow_schema()
    path, sid, start, end = opts.path, part.segment, part.start, part.end
    damage = RangeDamage(part, fname, size)
    gc_was_on = gc.isenabled()
    gc.disable()
    try:
        pos = max(start, tlog.FILE_HEADER_SIZE)
        while pos < size:
            if pos >= end:
                # Past the range: only a bad region starting here is still ours
                # (the range before a cut reports it; see corruption.owned).
                offs, chunk, _nxt, ok = _frames(mm, size, pos, pos + 1, 1)
                if ok and bodies.decode_chunk(chunk)[1] is None:
                    break
            else:
                offs, chunk, nxt, ok = _frames(mm, size, pos, end, _CHUNK_ROWS)
                recs, invalid = bodies.decode_chunk(chunk) if chunk else ([], None)
                if invalid is not None:
                    i, _why = invalid
                    offs, nxt, ok = offs[:i], offs[i], False
                del chunk
                if recs:
                    b = _batch(schema, sid, damage, offs[: len(recs)], recs)
                    if b is not None:
                        yield b
                pos = nxt
                if ok:
                    continue
            found = _resync(path, sid, pos, damage)
            if found is None:
                break
            pos = found
    finally:
        if gc_was_on:
            gc.enable()
    damage.report(opts)


def _batch(schema: Any, sid: int, damage: RangeDamage, offs: list[int], recs: list[Rec]) -> Any:
    """The Arrow record batch of decoded records at offsets offs, or None when
    none is left: a record whose time Spark cannot hold is reported, not kept."""
    import pyarrow as pa
    import pyarrow.compute as pc

    ts = pa.array([r.ts_host for r in recs], pa.float64())
    fits = pc.all(pc.and_(pc.greater_equal(ts, TS_MIN), pc.less_equal(ts, TS_MAX))).as_py()
    if not fits:
        keep = []
        for off, r in zip(offs, recs):
            if fits_timestamp(r.ts_host):
                keep.append((off, r))
            else:
                damage.unrepresentable(off, r.ts_host)
        offs, recs = [x[0] for x in keep], [x[1] for x in keep]
    if recs:
        return columns.from_recs(pa, pc, schema, sid, offs, recs)
    return None


def _resync(path: str, sid: int, pos: int, damage: RangeDamage) -> int | None:
    """Past bad bytes at pos: tlog reports them (into damage) and finds the next
    valid record; its offset, or None when the segment has none."""
    it = tlog.read_segment(path, sid, pos, None, damage.stats, decode_payload=False)
    try:
        q = next(it, None)
    finally:
        it.close()
    damage.collect(None if q is None else q[0])
    return None if q is None else int(q[0])
