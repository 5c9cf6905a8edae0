"""The log directory: segment file names, the sealed segments it holds, and
the lock file (docs/telemetry-log.md section 1)."""

from __future__ import annotations

import os
import re

from edgebus.tlog.format import FILE_HEADER_SIZE
from edgebus.tlog.names import parquet_name, segment_name

LOCK_NAME = "LOCK"
MAX_SEGMENT_ID = 2**64 - 1

_SEG_RE = re.compile(r"^([0-9]{20})\.(seg|parquet)\Z")
_OPEN_RE = re.compile(r"^([0-9]{20})\.seg\.open\Z")
_ANY_ID_RE = re.compile(r"^([0-9]{20})\.(seg|parquet)")


def sealed_files(path: str) -> dict[int, tuple[str, int]]:
    """{segment id: (file path, format version)} of the sealed segments in the
    log directory, both versions (never the active ``.open`` one).  A missing
    directory has none."""
    try:
        names = os.listdir(path)
    except FileNotFoundError:
        return {}
    out = {}
    for m in map(_SEG_RE.match, names):
        if m:
            sid, v2 = int(m.group(1)), m.group(2) == "parquet"
            if v2 or sid not in out:  # both present (a conversion cut short): v2 wins
                out[sid] = (os.path.join(path, m.group(0)), 2 if v2 else 1)
    return out


def list_segments(path: str) -> list[int]:
    """Sorted ids of the sealed segments in the log directory (never the
    active ``.open`` one).  A missing directory has no segments."""
    return sorted(sealed_files(path))


def segment_file(path: str, segment_id: int) -> tuple[str, int] | None:
    """(file path, format version) of a sealed segment, or None when absent."""
    for name, version in ((parquet_name(segment_id), 2), (segment_name(segment_id), 1)):
        fname = os.path.join(path, name)
        if os.path.exists(fname):
            return fname, version
    return None


def start_offset(version: int) -> int:
    """A segment's first position: the first byte after the file header
    (version 1) or row 0 (version 2)."""
    return FILE_HEADER_SIZE if version == 1 else 0


def segment_end(path: str, segment_id: int) -> int | None:
    """The end position of a sealed segment: its byte length (version 1) or
    its row count (version 2); None when it is absent or unreadable."""
    found = segment_file(path, segment_id)
    if found is None:
        return None
    fname, version = found
    try:
        if version == 1:
            return os.path.getsize(fname)
        from edgebus.tlog.columnar import row_count

        return row_count(fname)
    except Exception:  # removed meanwhile, or not a Parquet file
        return None


def latest_offset(path: str) -> tuple[int, int] | None:
    """(segment id, end) of the newest sealed segment: the position just past
    its last record (segment_end).  None when the log has no sealed segment."""
    for sid in reversed(list_segments(path)):
        end = segment_end(path, sid)
        if end is not None:  # None: removed by retention meanwhile
            return sid, end
    return None


def earliest_offset(path: str) -> tuple[int, int] | None:
    """(segment id, first position) of the oldest sealed segment, or None."""
    files = sealed_files(path)
    if not files:
        return None
    sid = min(files)
    return sid, start_offset(files[sid][1])


def open_segments(path: str) -> list[tuple[int, str]]:
    """(segment id, file name) of each active (``.open``) segment in the log
    directory, by name: what a crashed writer left."""
    out = []
    for name in sorted(os.listdir(path)):
        m = _OPEN_RE.match(name)
        if m:
            out.append((int(m.group(1)), name))
    return out


def is_log_dir(path: str) -> bool:
    """Whether the directory is a telemetry log: it holds a segment file of
    any kind (sealed, active or quarantined) or the writer's lock, which a
    bridge creates on opening its log, before any segment exists."""
    try:
        names = os.listdir(path)
    except OSError:
        return False
    return LOCK_NAME in names or any(map(_ANY_ID_RE.match, names))


def next_segment_id(path: str) -> int:
    """One more than the highest segment id named by a file of the directory
    (sealed, active or quarantined), or 0."""
    ids = [int(m.group(1)) for m in map(_ANY_ID_RE.match, os.listdir(path)) if m]
    return max(ids) + 1 if ids else 0
