"""Recovery of what a crashed writer left: each ``.open`` segment cut back to
its last whole valid record and sealed (as Parquet in version 2), or removed
when it holds none or a finished seal already holds it (docs/telemetry-log.md
section 5)."""

from __future__ import annotations

import os
from typing import Any, Callable

from edgebus.tlog.durable import fsync_dir
from edgebus.tlog.errors import LogError
from edgebus.tlog.format import FILE_HEADER_SIZE, check_file_header
from edgebus.tlog.reader import ForwardReader, parse_record
from edgebus.tlog.records import row_of
from edgebus.tlog.segments import open_segments, segment_file, segment_name


def valid_prefix(
    fname: str, segment_id: int, rows: list[tuple[Any, ...]] | None = None
) -> tuple[int, int, bool]:
    """(end, count, header_ok) for an .open file: the end offset of its last
    whole valid record when read strictly from the start, no resync.  With a
    list as rows, each valid record is appended to it as a row_of() tuple."""
    with open(fname, "rb") as f:
        head = f.read(FILE_HEADER_SIZE)
        if check_file_header(head, segment_id) is not None:
            return FILE_HEADER_SIZE, 0, False
        pos, n = FILE_HEADER_SIZE, 0
        src = ForwardReader(f, pos)
        while True:
            rec, nxt = parse_record(src, pos, False)
            if rec is None:
                return pos, n, True
            if rows is not None:
                rows.append(row_of(rec))
            pos, n = nxt, n + 1
            src.release(pos)


def recover(
    path: str, clock: Callable[[], float], version: int = 2, gateway: str | None = None
) -> list[tuple[str, str, str]]:
    """Seal, remove or quarantine every ``.open`` segment in the log directory
    (the caller holds its lock); clock gives a sealed file's mtime.  version
    is the sealed format: 2 writes the records as a Parquet segment (gateway
    in its metadata), 1 cuts the row file back and renames it.  Returns what
    was done, as (file, action, detail)."""
    done = []
    if version == 2:
        from edgebus.tlog import columnar

        done += [
            (os.path.join(path, n), "removed", "unfinished seal")
            for n in columnar.remove_temporaries(path)
        ]
    for sid, name in open_segments(path):
        fname = os.path.join(path, name)
        size = os.path.getsize(fname)
        rows: list[tuple[Any, ...]] | None = [] if version == 2 else None
        end, count, header_ok = valid_prefix(fname, sid, rows)
        sealed = segment_file(path, sid)
        if sealed is not None:
            done.append(_sealed_already(fname, sealed, count))
            continue
        if count == 0:
            if header_ok or size <= FILE_HEADER_SIZE:
                os.unlink(fname)
                done.append((fname, "removed", "no whole record"))
            else:
                # A bad header followed by data is set aside, not destroyed.
                os.rename(fname, fname + ".corrupt")
                done.append((fname, "quarantined", "bad file header"))
            continue
        if rows is not None:  # version 2
            columnar.write_segment(path, sid, rows, gateway, mtime=clock())
            os.unlink(fname)
            done.append(
                (fname, "sealed", "%d records as Parquet, %d bytes cut" % (count, size - end))
            )
            continue
        fd = os.open(fname, os.O_WRONLY)
        try:
            if end < size:
                os.ftruncate(fd, end)
            t = clock()
            os.utime(fd, (t, t))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(fname, os.path.join(path, segment_name(sid)))
        done.append((fname, "sealed", "%d records, %d bytes cut" % (count, size - end)))
    if done:
        fsync_dir(path)
    return done


def _sealed_already(fname: str, sealed: tuple[str, int], count: int) -> tuple[str, str, str]:
    """An .open file beside the sealed segment of the same id: a crash between
    a Parquet seal's rename and the row file's removal, so the Parquet file
    holds every record the row file does, and the row file goes.  Anything
    else cannot come from a crash: LogError."""
    sealed_name, version = sealed
    if version == 2:
        from edgebus.tlog.columnar import row_count

        try:
            n = row_count(sealed_name)
            rows: int | None = n
            why = "holds %d rows, the row file %d records" % (n, count)
        except Exception as e:
            rows, why = None, "unreadable (%s)" % e
        if rows is not None and rows >= count:
            os.unlink(fname)
            return fname, "removed", "already sealed as %s" % os.path.basename(sealed_name)
        raise LogError(
            "both %s and %s exist and %s is %s; resolve by hand"
            % (fname, sealed_name, sealed_name, why)
        )
    raise LogError("both %s and %s exist; resolve by hand" % (fname, sealed_name))
