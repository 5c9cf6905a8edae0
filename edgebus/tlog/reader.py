"""Reading sealed segments: records in order, bad bytes skipped and reported
(docs/telemetry-log.md section 7)."""

from __future__ import annotations

import os
import zlib
from typing import IO, Any, Generator

from edgebus.tlog.format import (
    FILE_HEADER_SIZE,
    FORMAT_VERSION,
    MAX_BODY_BYTES,
    RECORD_HEADER,
    RECORD_HEADER_SIZE,
    RECORD_MAGIC,
    check_file_header,
)
from edgebus.tlog.records import decode_body
from edgebus.tlog.segments import list_segments, segment_file
from edgebus.tlog.stats import ReadStats

_CHUNK = 1 << 20


class _StatsIter:
    """An iterator that also carries the ReadStats it fills (``.stats``)."""

    def __init__(self, gen: Generator[Any, None, None], stats: ReadStats) -> None:
        self._gen = gen
        self.stats = stats

    def __iter__(self) -> _StatsIter:
        return self

    def __next__(self) -> Any:
        return next(self._gen)

    def close(self) -> None:
        self._gen.close()


def read_segment(
    path: str,
    segment_id: int,
    start_offset: int = 0,
    end_offset: int | None = None,
    stats: ReadStats | None = None,
    decode_payload: bool = True,
) -> _StatsIter:
    """Iterate ``(offset, record)`` for the records of one sealed segment
    whose offset is in [start_offset, end_offset) (end None: to the end).
    Offsets are byte offsets in a version-1 segment, row numbers in a
    version-2 (Parquet) one.

    Never raises for bad data: corrupt or truncated bytes are skipped,
    resynchronising on the next record magic whose length and CRC check, and
    reported in the returned iterator's ``.stats`` (a ReadStats; pass one to
    share it across calls).  A missing segment is reported in stats.missing.
    With decode_payload False, payload and extra stay in their logged JSON
    form (``$b64``/``$lit`` tags kept), ready for ``json.dumps``."""
    stats = ReadStats() if stats is None else stats
    gen = _read_segment(path, segment_id, start_offset, end_offset, stats, decode_payload)
    return _StatsIter(gen, stats)


def _read_segment(
    path: str, segment_id: int, start: int, end: int | None, stats: ReadStats, decode_payload: bool
) -> Generator[tuple[int, dict[str, Any]], None, None]:
    found = segment_file(path, segment_id)
    if found is None:
        stats.missing.append((segment_id, segment_id))
        return
    fname, version = found
    if version == 2:
        from edgebus.tlog.columnar import read_records

        yield from read_records(fname, segment_id, max(0, start), end, stats, decode_payload)
        return
    try:
        f = open(fname, "rb")
    except FileNotFoundError:
        stats.missing.append((segment_id, segment_id))
        return
    except OSError as e:
        stats._bad(fname, 0, "cannot open: %s" % e, 0)
        return
    with f:
        try:
            size = os.fstat(f.fileno()).st_size
            limit = size if end is None else min(end, size)
            start = max(0, start)
            head = f.read(FILE_HEADER_SIZE)
            bad = check_file_header(head, segment_id)
            if bad is not None:
                reason, fatal = bad
                if fatal:
                    stats._bad(fname, 0, reason + "; segment skipped", limit - min(start, limit))
                    return
                if start < FILE_HEADER_SIZE:
                    stats._bad(fname, 0, reason, min(FILE_HEADER_SIZE, size))
            pos = max(start, FILE_HEADER_SIZE)
            src = ForwardReader(f, pos)
            while pos < limit:
                rec, nxt = parse_record(src, pos, decode_payload)
                if rec is None:
                    region, reason = pos, nxt
                    q = pos + 1
                    while True:
                        q = src.find(RECORD_MAGIC, q, limit)
                        if q < 0:
                            stats._bad(fname, region, reason, limit - region)
                            return
                        rec, nxt = parse_record(src, q, decode_payload)
                        if rec is not None:
                            stats._bad(fname, region, reason, q - region)
                            pos = q
                            break
                        q += 1
                stats.records += 1
                yield pos, rec
                pos = nxt
                src.release(pos)
        except OSError as e:
            stats._bad(fname, 0, "read error: %s" % e, 0)


def read_log(
    path: str,
    start: tuple[int, int] | None = None,
    end: tuple[int, int] | None = None,
    stats: ReadStats | None = None,
    decode_payload: bool = True,
) -> _StatsIter:
    """Iterate ``((segment_id, offset), record)`` over the sealed segments
    from position start (inclusive; None: the oldest segment) to position end
    (exclusive; None: the end of the newest sealed segment at call time).
    Positions are those :meth:`LogWriter.append` returned.  Segments in the
    range that retention (or anything else) removed are listed in
    ``.stats.missing``."""
    stats = ReadStats() if stats is None else stats
    return _StatsIter(_read_log(path, start, end, stats, decode_payload), stats)


def _read_log(
    path: str,
    start: tuple[int, int] | None,
    end: tuple[int, int | None] | None,
    stats: ReadStats,
    decode_payload: bool,
) -> Generator[tuple[tuple[int, int], dict[str, Any]], None, None]:
    ids = list_segments(path)
    if end is None:
        if not ids:
            return
        end = (ids[-1], None)
    if start is None:
        if not ids:
            return
        start = (ids[0], 0)
    want = start[0]  # the next id expected in the range
    for sid in ids:
        if sid < start[0]:
            continue
        if sid > end[0]:
            break
        if sid > want:  # removed by retention (or by hand)
            stats.missing.append((want, sid - 1))
        lo = start[1] if sid == start[0] else 0
        hi = end[1] if sid == end[0] else None
        for off, rec in _read_segment(path, sid, lo, hi, stats, decode_payload):
            yield (sid, off), rec
        want = sid + 1
    if want <= end[0] and ids and want <= ids[-1]:
        stats.missing.append((want, min(end[0], ids[-1])))


class ForwardReader:
    """Chunked random-ish access to a file read forward."""

    def __init__(self, f: IO[bytes], start: int) -> None:
        self.f = f
        self.base = start
        self.data = bytearray()
        self.eof = False
        f.seek(start)

    def _fill(self, upto: int) -> None:
        while self.base + len(self.data) < upto and not self.eof:
            chunk = self.f.read(max(_CHUNK, upto - self.base - len(self.data)))
            if not chunk:
                self.eof = True
            else:
                self.data += chunk

    def get(self, pos: int, n: int) -> bytes:
        self._fill(pos + n)
        i = pos - self.base
        return bytes(self.data[i : i + n])

    def find(self, pat: bytes, pos: int, limit: int) -> int:
        """Index >= pos of pat starting before limit, or -1."""
        while True:
            i = self.data.find(pat, pos - self.base)
            if i >= 0 and self.base + i < limit:
                return self.base + i
            if i >= 0 or self.eof or self.base + len(self.data) >= limit + len(pat):
                return -1
            pos = max(pos, self.base + len(self.data) - len(pat) + 1)
            self._fill(self.base + len(self.data) + _CHUNK)

    def release(self, pos: int) -> None:
        """Forget bytes before pos."""
        k = pos - self.base
        if k > _CHUNK:
            del self.data[:k]
            self.base = pos


def parse_record(
    src: ForwardReader, pos: int, decode_payload: bool
) -> tuple[dict[str, Any] | None, Any]:
    """The record framed at pos: (record, next position), or (None, reason)
    when the bytes there are not a whole valid record."""
    hdr = src.get(pos, RECORD_HEADER_SIZE)
    if len(hdr) < RECORD_HEADER_SIZE:
        return None, "truncated record header (%d bytes before end of file)" % len(hdr)
    magic, version, length, crc = RECORD_HEADER.unpack(hdr)
    if magic != RECORD_MAGIC:
        return None, "bad record magic"
    if version != FORMAT_VERSION:
        return None, "unsupported record version %d" % version
    if length > MAX_BODY_BYTES:
        return None, "record length %d exceeds maximum" % length
    body = src.get(pos + RECORD_HEADER_SIZE, length)
    if len(body) < length:
        return None, "truncated record (body needs %d bytes, %d present)" % (length, len(body))
    if zlib.crc32(body, zlib.crc32(hdr[:10])) != crc:
        return None, "CRC mismatch"
    try:
        rec = decode_body(body, decode_payload)
    except Exception as e:  # a reader never raises for bad data
        return None, "invalid body: %s" % e
    return rec, pos + RECORD_HEADER_SIZE + length
