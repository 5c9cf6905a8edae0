"""The newest records of a log, read segment by segment from the end: what
the writer's owner needs after a restart to know what is already durable."""

from __future__ import annotations

import os

from edgebus.tlog.reader import read_segment
from edgebus.tlog.segments import sealed_files
from edgebus.tlog.stats import ReadStats

# One default-sized segment: minutes to hours of a gateway's traffic.
TAIL_BYTES = 64 * 1024 * 1024


def last_seqs(path: str, max_bytes: int = TAIL_BYTES) -> dict[tuple[str, str], int]:
    """``{(link_id, peer_sid): highest seq}`` over the newest sealed segments.

    Segments are read newest first until at least ``max_bytes`` of them have
    been read (None: the whole log; both format versions); a record counts only when its
    ``link_id``, ``peer_sid`` and ``seq`` are all set.  Sealed segments only:
    call it after opening the LogWriter, whose recovery seals what a crashed
    writer left in its ``.open`` segment.  Bad bytes are skipped as by
    read_segment; never raises for the log's content."""
    out: dict[tuple[str, str], int] = {}
    covered = 0
    files = sealed_files(path)
    for sid in sorted(files, reverse=True):
        if max_bytes is not None and covered >= max_bytes:
            break
        fname, version = files[sid]
        try:
            covered += os.path.getsize(fname)
        except FileNotFoundError:  # removed by retention meanwhile
            continue
        if version == 2:  # three columns, no record decoding
            from edgebus.tlog.columnar import max_seqs

            max_seqs(fname, sid, out, ReadStats())
            continue
        for _, r in read_segment(path, sid, decode_payload=False):
            link_id, peer_sid, seq = r["link_id"], r["peer_sid"], r["seq"]
            if link_id is None or peer_sid is None or seq is None:
                continue
            key = (link_id, peer_sid)
            if seq > out.get(key, -1):
                out[key] = seq
    return out
