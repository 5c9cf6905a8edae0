"""Retention: the oldest sealed segments deleted by total size or age
(docs/telemetry-log.md section 6)."""

from __future__ import annotations

import os
from typing import Callable

from edgebus.tlog.durable import fsync_dir
from edgebus.tlog.segments import sealed_files


def retain(
    path: str,
    retention_bytes: int | None,
    retention_seconds: float | None,
    clock: Callable[[], float],
) -> list[int]:
    """Delete the oldest sealed segments beyond retention_bytes (total of
    sealed segments) or older than retention_seconds (since sealing, by
    mtime, against clock()).  Only a prefix is deleted, and the newest sealed
    segment is always kept so that segment ids are never reused.  Returns
    the deleted ids."""
    if retention_bytes is None and retention_seconds is None:
        return []
    info = []
    for sid, (fname, _version) in sorted(sealed_files(path).items()):
        try:
            st = os.stat(fname)
        except FileNotFoundError:
            continue
        info.append((sid, fname, st.st_size, st.st_mtime))
    total = sum(i[2] for i in info)
    cutoff = None if retention_seconds is None else clock() - retention_seconds
    deleted = []
    for sid, fname, size, mtime in info[:-1]:
        over = retention_bytes is not None and total > retention_bytes
        old = cutoff is not None and mtime < cutoff
        if not (over or old):
            break
        try:
            os.unlink(fname)
        except FileNotFoundError:
            pass
        total -= size
        deleted.append(sid)
    if deleted:
        fsync_dir(path)
    return deleted
