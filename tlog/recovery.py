"""Recovery of what a crashed writer left: each ``.open`` segment cut back to
its last whole valid record and sealed, or removed when it holds none
(docs/telemetry-log.md section 5)."""
import os

from tlog.errors import LogError
from tlog.format import FILE_HEADER_SIZE, check_file_header
from tlog.reader import ForwardReader, parse_record
from tlog.segments import fsync_dir, open_segments, segment_name


def valid_prefix(fname, segment_id):
    """(end, count, header_ok) for an .open file: the end offset of its last
    whole valid record when read strictly from the start, no resync."""
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
            pos, n = nxt, n + 1
            src.release(pos)


def recover(path, clock):
    """Seal, remove or quarantine every ``.open`` segment in the log directory
    (the caller holds its lock); clock gives a sealed file's mtime.  Returns
    what was done, as (file, action, detail)."""
    done = []
    for sid, name in open_segments(path):
        fname = os.path.join(path, name)
        sealed = os.path.join(path, segment_name(sid))
        if os.path.exists(sealed):
            raise LogError("both %s and %s exist; resolve by hand" % (name, sealed))
        size = os.path.getsize(fname)
        end, count, header_ok = valid_prefix(fname, sid)
        if count == 0:
            if header_ok or size <= FILE_HEADER_SIZE:
                os.unlink(fname)
                done.append((fname, "removed", "no whole record"))
            else:
                # A bad header followed by data is set aside, not destroyed.
                os.rename(fname, fname + ".corrupt")
                done.append((fname, "quarantined", "bad file header"))
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
        os.rename(fname, sealed)
        done.append((fname, "sealed", "%d records, %d bytes cut" % (count, size - end)))
    if done:
        fsync_dir(path)
    return done
