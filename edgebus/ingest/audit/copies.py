"""The delivery audit's copies: how many records each device boot has in the
logs per time window, duplicates included, which the table cannot say (the
job keeps one copy of a number).  Incremental: each refresh reads only the
records between where it read to before and where the job's last committed
micro-batch read to, per log, so every log record is read once in the audit's life (before
retention can remove its segment), a version-2 segment's four columns at a
time.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any, Iterator

from edgebus import tlog
from edgebus.ingest.offsets import position

Mark = tuple[int, int]  # (segment, offset): a log position
Key = tuple[str, str, int, str]  # (peer_node, peer_sid, window start, gateway)
_COLUMNS = ["peer_node", "peer_sid", "seq", "ts_host"]


def committed_ends(checkpoint: str, n_logs: int) -> list[Mark] | None:
    """Per log of the job (in --log order), the position up to which its last
    committed micro-batch read (exclusive), from the streaming checkpoint
    (Spark's offsets/N, the sources' offsets a line each, once commits/N
    says batch N is done; the file sink commits a batch's files before);
    None before the first commit.  Every record before it is in the table
    or was dropped by the job as a duplicate."""
    try:
        done = [int(n) for n in os.listdir(os.path.join(checkpoint, "commits")) if n.isdigit()]
    except FileNotFoundError:
        return None
    if not done:
        return None
    with open(os.path.join(checkpoint, "offsets", str(max(done))), encoding="utf-8") as f:
        lines = f.read().splitlines()[2:]
    if len(lines) != n_logs:
        raise ValueError(
            "checkpoint %s: %d source offsets for %d logs" % (checkpoint, len(lines), n_logs)
        )
    return [position(json.loads(line)) for line in lines]


def log_gateway(log_dir: str) -> str | None:
    """The gateway (bridge node) a log's newest version-2 segment names, as the
    table's ``gateway`` column has it; None for a version-1 log."""
    from edgebus.tlog import columnar

    for sid, (fname, version) in sorted(tlog.sealed_files(log_dir).items(), reverse=True):
        if version == 2:
            try:
                return columnar.open_segment(fname, sid)[1]
            except (OSError, ValueError):
                continue
    return None


def count_copies(
    log_dir: str, old: Mark | None, new: Mark, window: float, out: dict[Key, int]
) -> dict[Key, int]:
    """Add into out, per (peer_node, peer_sid, window start, the log's
    gateway or ""), the log's numbered
    device records at positions from old (None: the start) to new, new
    excluded.  What does not read is skipped (the job reported it)."""
    lo = old or (-1, 0)
    gw = log_gateway(log_dir) or ""
    for sid, (fname, version) in sorted(tlog.sealed_files(log_dir).items()):
        if sid < lo[0] or (sid, 0) >= new:
            continue
        start = lo[1] if sid == lo[0] else tlog.start_offset(version)
        end = new[1] if sid == new[0] else None
        for _pos, node, boot, ts in _numbered(log_dir, fname, sid, version, start, end):
            key = (node, boot, int(math.floor(ts / window) * window), gw)
            out[key] = out.get(key, 0) + 1
    return out


def _numbered(
    log_dir: str, fname: str, sid: int, version: int, start: int, end: int | None
) -> Iterator[tuple[int, str, str, float]]:
    """(position, peer_node, peer_sid, ts_host) of the records with a device
    key in [start, end) of one segment."""
    stats = tlog.ReadStats()
    if version == 2:
        from edgebus.tlog import columnar

        for first, t in columnar.read_rows(fname, sid, start, end, stats, columns=_COLUMNS):
            cols: dict[str, list[Any]] = {c: t.column(c).to_pylist() for c in _COLUMNS}
            for i, (node, boot, seq) in enumerate(
                zip(cols["peer_node"], cols["peer_sid"], cols["seq"])
            ):
                if node is not None and boot is not None and seq is not None:
                    yield first + i, node, boot, cols["ts_host"][i]
        return
    for pos, r in tlog.read_segment(log_dir, sid, start, end, stats, decode_payload=False):
        if r["peer_node"] is not None and r["peer_sid"] is not None and r["seq"] is not None:
            yield pos, r["peer_node"], r["peer_sid"], r["ts_host"]
