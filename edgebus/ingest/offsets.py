"""Stream offsets (log positions) and the source's options (docs/spark.md).

An offset is ``{"segment": id, "offset": byte}`` (JSON, replayable, like
Kafka's partition/offset); a position is the same as a (segment, offset)
tuple, which compares in log order."""

from __future__ import annotations

import json
import os
from typing import Any, Mapping

from edgebus import tlog

# The position before every record of the log (segment ids start at 0).
BEGIN = {"segment": -1, "offset": 0}

DEFAULT_SPLIT_BYTES = 128 * 1024 * 1024  # Spark's spark.sql.files.maxPartitionBytes
MIN_SPLIT_BYTES = 1024


def position(offset: dict[str, Any]) -> tuple[int, int]:
    """The (segment, offset) tuple of an offset dict."""
    return (int(offset["segment"]), int(offset["offset"]))


def offset_dict(segment: int, offset: int) -> dict[str, int]:
    """The offset dict of a position."""
    return {"segment": int(segment), "offset": int(offset)}


def canonical(path: str, pos: tuple[int, int]) -> tuple[int, int]:
    """pos with a segment's end written as the start of the next segment.

    An offset at a segment's end then names no byte of that segment, so a later
    range starting there does not expect it on disk (retention may have
    removed it, fully read) and a segment missing from a range is data loss."""
    s, o = pos
    if s >= 0 and o > 0:
        size = tlog.segment_end(path, s)
        if size is not None and o >= size:
            return (s + 1, 0)
    return pos


def latest(path: str) -> tuple[int, int] | None:
    """The canonical position just past the newest sealed segment, or None."""
    lo = tlog.latest_offset(path)
    return None if lo is None else canonical(path, lo)


def parse_offset(text: str, what: str, path: str) -> dict[str, int]:
    """An offset option: "earliest", "latest" or JSON {"segment": s, "offset": o}."""
    t = text.strip()
    if t == "earliest":
        return dict(BEGIN)
    if t == "latest":
        lo = latest(path)
        return offset_dict(*lo) if lo else dict(BEGIN)
    try:
        v = json.loads(t)
        return offset_dict(*canonical(path, (int(v["segment"]), int(v["offset"]))))
    except (ValueError, KeyError, TypeError):
        raise ValueError(
            'edgebus: option %s must be "earliest", "latest" or '
            '{"segment": N, "offset": N}, not %r' % (what, text)
        ) from None


def _int_opt(
    options: Mapping[str, str], name: str, default: int | None = None, minimum: int = 1
) -> Any:
    v = options.get(name)
    if v is None or str(v).strip() == "":
        return default
    try:
        n = int(v)
    except ValueError:
        raise ValueError("edgebus: option %s must be an integer, not %r" % (name, v)) from None
    if n < minimum:
        raise ValueError("edgebus: option %s must be >= %d" % (name, minimum))
    return n


class Options:
    """The parsed options, picklable, shared by the readers."""

    def __init__(self, options: Mapping[str, str], parallelism: int | None = None) -> None:
        path = options.get("path")
        if not path:
            raise ValueError(
                'edgebus: the log directory is required: load(DIR) or option("path", DIR)'
            )
        self.path = os.path.abspath(path)
        # Each range costs a Spark task and reads on to a record boundary past
        # its end, so tiny ranges only add overhead.
        self.split_bytes: int = max(
            _int_opt(options, "splitBytes", DEFAULT_SPLIT_BYTES), MIN_SPLIT_BYTES
        )
        self.min_partitions: int | None = _int_opt(options, "minPartitions", parallelism)
        self.max_records: int | None = _int_opt(options, "maxRecordsPerTrigger")
        self.max_bytes: int | None = _int_opt(options, "maxBytesPerTrigger")
        cd = options.get("corruptDir")
        self.corrupt_dir = os.path.abspath(cd) if cd else None
        self.starting = options.get("startingOffset") or "earliest"
        self.ending = options.get("endingOffset") or "latest"
