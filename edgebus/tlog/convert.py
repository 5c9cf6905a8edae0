"""Converting a log's version-1 sealed segments to version 2 (Parquet), in
place (docs/telemetry-log.md section 8).  Reading needs no conversion: this is
for logs that other engines should read as plain Parquet."""

from __future__ import annotations

import os

from edgebus.tlog import columnar
from edgebus.tlog.errors import LogError
from edgebus.tlog.reader import read_segment
from edgebus.tlog.records import row_of
from edgebus.tlog.segments import sealed_files
from edgebus.tlog.stats import ReadStats


def convert_log(path: str, gateway: str | None = None) -> list[int]:
    """Rewrite every version-1 sealed segment of the log at path as a
    version-2 one of the same id; returns the converted ids.  Each Parquet
    file is in place before its ``.seg`` is removed, so a crash leaves both
    (readers take the Parquet one; run again to finish).  Bad bytes in a
    segment raise LogError before anything of it is written: convert only
    what reads clean.  No writer may hold the directory meanwhile."""
    done = []
    for sid, (fname, version) in sorted(sealed_files(path).items()):
        if version != 1:
            continue
        stats = ReadStats()
        rows = [row_of(r) for _, r in read_segment(path, sid, stats=stats, decode_payload=False)]
        if not stats.clean:
            raise LogError("%s does not read clean (%r); not converted" % (fname, stats))
        columnar.write_segment(path, sid, rows, gateway, mtime=os.path.getmtime(fname))
        os.unlink(fname)
        done.append(sid)
    return done
