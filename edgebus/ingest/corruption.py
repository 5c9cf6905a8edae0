"""Corrupt data: which range reports a bad region, the warnings, and the
``corruptDir`` files with what readers skipped (docs/spark.md, corrupt data)."""

from __future__ import annotations

import json
import logging
import os
import uuid
import zlib
from typing import TYPE_CHECKING, Any

from edgebus import tlog

if TYPE_CHECKING:
    from edgebus.ingest.offsets import Options
    from edgebus.ingest.ranges import SegmentRange

log = logging.getLogger("edgebus.ingest")


def region_bytes(reason: str, offset: int, nxt: int | None, size: int) -> int:
    """The length of a bad region of a segment of size bytes that starts at
    offset and ends at nxt (the next valid record; None: the file's end)."""
    if offset == 0 and reason.endswith("segment skipped"):
        return size
    if offset == 0:
        return min(tlog.FILE_HEADER_SIZE, size)
    return max(0, (size if nxt is None else nxt) - offset)


def owned(region: tuple[str, int, str], start: int) -> bool:
    """Whether the range starting at start reports this bad region.

    A range reads on past its end to the first valid record at or after it, so
    it sees every bad region that begins before that record, including one that
    begins at or just after its end.  The range after the cut starts reading at
    the cut: its first region, at exactly the cut, is either the tail of a
    record that began before the cut or bytes the range before has reported,
    so it is dropped.  Position 0 (the file header) belongs to the range at 0."""
    _file, off, reason = region
    if reason.startswith(("cannot open", "read error")):
        return True
    if off == 0:
        return start == 0
    return off != start


class RangeDamage:
    """What one SegmentRange of file fname (size bytes) skipped: the regions
    of ``stats`` (a tlog.ReadStats its reads share) that it owns, and the
    records Spark cannot represent.  ``bad`` holds them as report dicts."""

    def __init__(self, part: SegmentRange, fname: str, size: int) -> None:
        self.part = part
        self.fname = fname
        self.size = size
        self.stats = tlog.ReadStats()
        self.bad: list[dict[str, Any]] = []
        self.seen = 0  # entries of stats.corrupt already looked at

    def collect(self, nxt: int | None) -> None:
        """Take the regions stats gained since the last call; nxt is the
        offset of the valid record after them (None: none before the end)."""
        corrupt = self.stats.corrupt
        sid, start, size = self.part.segment, self.part.start, self.size
        for region in corrupt[self.seen :]:
            if owned(region, start):
                self.bad.append(
                    {
                        "file": region[0],
                        "segment": sid,
                        "offset": region[1],
                        "reason": region[2],
                        "bytes": region_bytes(region[2], region[1], nxt, size),
                    }
                )
        self.seen = len(corrupt)

    def unrepresentable(self, off: int, ts_host: float) -> None:
        """Count the record at off as skipped: its ts_host is outside Spark's
        timestamp range."""
        self.bad.append(
            {
                "file": self.fname,
                "segment": self.part.segment,
                "offset": off,
                "bytes": None,
                "reason": "unrepresentable record: ts_host %r is outside Spark's "
                "timestamp range" % (ts_host,),
            }
        )

    def report(self, opts: Options) -> None:
        """Warn of what was skipped and write it to opts.corrupt_dir, if anything."""
        if self.bad or self.stats.missing:
            report(opts, self.part, self.fname, self.bad, list(self.stats.missing))


def report(
    opts: Options,
    part: SegmentRange,
    fname: str,
    bad: list[dict[str, Any]],
    missing: list[tuple[int, int]],
) -> None:
    """Log each bad region and vanished segment of a range as a warning and,
    with the corruptDir option, write them to a file named by the range."""
    for r in bad:
        log.warning(
            "edgebus: skipped corrupt log data in %s at offset %d (%s bytes): %s",
            r["file"],
            r["offset"],
            r["bytes"],
            r["reason"],
        )
    for first, _last in missing:
        log.warning("edgebus: segment %d of %s vanished before it was read", first, opts.path)
    if not opts.corrupt_dir:
        return
    # One file per range, named by the log and range: a replayed batch rewrites
    # the same file; several logs (gateways) may share one corruptDir.
    doc = {
        "log": opts.path,
        "segment": part.segment,
        "start": part.start,
        "end": part.end,
        "regions": bad,
        "missing": [list(m) for m in missing],
    }
    _write_json(
        opts.corrupt_dir,
        "seg%020d-%d-%d-%s.json" % (part.segment, part.start, part.end, _log_tag(opts.path)),
        doc,
    )


def report_missing(opts: Options, missing: list[tuple[int, int]]) -> None:
    """Write the segment id ranges a plan found missing to opts.corrupt_dir."""
    if not opts.corrupt_dir:
        return
    for first, last in missing:
        _write_json(
            opts.corrupt_dir,
            "missing-%020d-%020d-%s.json" % (first, last, _log_tag(opts.path)),
            {"log": opts.path, "regions": [], "missing": [[first, last]]},
        )


def _log_tag(path: str) -> str:
    return "%08x" % zlib.crc32(path.encode("utf-8"))


def _write_json(directory: str, name: str, doc: Any) -> None:
    os.makedirs(directory, exist_ok=True)
    # A replayed or speculative task may write the same name at the same time.
    tmp = os.path.join(directory, ".tmp-%s-%s" % (name, uuid.uuid4().hex))
    tlog.write_atomically(
        os.path.join(directory, name),
        tmp,
        lambda f: f.write(json.dumps(doc, indent=1).encode()),
        durable=False,
    )


def corrupt_report(directory: str) -> dict[str, list[Any]]:
    """What readers skipped, from a corruptDir: {"regions": [...], "missing": [...]}.

    regions: dicts (file, segment, offset, reason, bytes), one per bad region,
    sorted by (segment, offset); missing: sorted [first, last] segment id ranges
    that were planned but not on disk."""
    regions: dict[Any, dict[str, Any]] = {}
    missing: set[tuple[int, int]] = set()
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        return {"regions": [], "missing": []}
    for name in names:
        if not name.endswith(".json") or name.startswith("."):
            continue
        try:
            with open(os.path.join(directory, name)) as f:
                doc = json.load(f)
        except (OSError, ValueError):
            continue
        for r in doc.get("regions", []):
            regions[(r["segment"], r["offset"], r["file"])] = r
        missing.update(tuple(m) for m in doc.get("missing", []))
    return {
        "regions": [regions[k] for k in sorted(regions)],
        "missing": [list(m) for m in sorted(missing)],
    }
