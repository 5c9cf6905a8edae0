"""The log directory: segment file names, the sealed segments it holds, and
the lock file (docs/telemetry-log.md section 1)."""
import os
import re

from tlog.format import FILE_HEADER_SIZE

LOCK_NAME = "LOCK"
MAX_SEGMENT_ID = 2 ** 64 - 1

_SEG_RE = re.compile(r"^([0-9]{20})\.seg\Z")
_OPEN_RE = re.compile(r"^([0-9]{20})\.seg\.open\Z")
_ANY_ID_RE = re.compile(r"^([0-9]{20})\.seg")


def segment_name(segment_id, sealed=True):
    """The file name of a segment: sealed, or the active one (``.open``)."""
    return "%020d.seg%s" % (segment_id, "" if sealed else ".open")


def list_segments(path):
    """Sorted ids of the sealed segments in the log directory (never the
    active ``.open`` one).  A missing directory has no segments."""
    try:
        names = os.listdir(path)
    except FileNotFoundError:
        return []
    return sorted(int(m.group(1)) for m in map(_SEG_RE.match, names) if m)


def latest_offset(path):
    """(segment id, byte length) of the newest sealed segment: the position
    just past its last byte.  None when the log has no sealed segment."""
    for sid in reversed(list_segments(path)):
        try:
            return sid, os.path.getsize(os.path.join(path, segment_name(sid)))
        except FileNotFoundError:       # removed by retention meanwhile
            continue
    return None


def earliest_offset(path):
    """(segment id, FILE_HEADER_SIZE) of the oldest sealed segment, or None."""
    ids = list_segments(path)
    return (ids[0], FILE_HEADER_SIZE) if ids else None


def open_segments(path):
    """(segment id, file name) of each active (``.open``) segment in the log
    directory, by name: what a crashed writer left."""
    out = []
    for name in sorted(os.listdir(path)):
        m = _OPEN_RE.match(name)
        if m:
            out.append((int(m.group(1)), name))
    return out


def next_segment_id(path):
    """One more than the highest segment id named by a file of the directory
    (sealed, active or quarantined), or 0."""
    ids = [int(m.group(1)) for m in map(_ANY_ID_RE.match, os.listdir(path)) if m]
    return max(ids) + 1 if ids else 0


def fsync_dir(path):
    """Make the directory's entries (creations, renames, unlinks) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
