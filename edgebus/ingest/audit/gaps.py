"""The delivery audit's missing numbers: which of a boot's link numbers the
table lacks, with the reason a bridge recorded (``bridge/gaps`` records,
docs/spark.md "Delivery audit").  Plain Python over ranges: a boot's gaps and
records are few, whatever the number of readings.
"""

from __future__ import annotations

from typing import Any, Iterable

UNEXPLAINED = "unexplained"
# A boot's start (seconds): the link flags late every reading taken before the
# session that delivered it (extra.late), and a device takes readings while its
# first handshake is under way (0.5 to 1 s in the demo). The audit and the plot
# count on time what a boot took before its first session (before its first
# reading taken in session and before its first number arrived), when that
# number arrived within this of its first reading (two handshake timeouts,
# protocol.md): a device that booted with its bridge out of reach longer
# delivers them late, and what an outage after the first session began
# spooled keeps the link's flag, even one that began before any reading was
# taken in session.
START_GRACE = 10.0
# When records of several bridges name the same number, the sender's own word
# wins: "evicted" is the device saying the number is gone for good, "lost" a
# receiver seeing numbers jump (a second gateway may see the same jump).
_RANK = {"evicted": 0, "lost": 2}


def _rank(why: str) -> int:
    return _RANK.get(why, 1)


def missing(
    gaps: Iterable[tuple[int, int, Any]],
    records: Iterable[tuple[int, int, str, Any]],
    first: int | None,
    last: int | None,
    head: Any,
    tail: Any,
) -> list[tuple[int, int, str, Any]]:
    """The missing numbers of one boot as (first, last, why, where) ranges.

    gaps: (a, b, where) runs of numbers missing between received ones, where
    the window of the number after the run.  records: (a, b, why, where) of
    the bridge/gaps records for the boot, where the record's own window.
    first, last: the lowest and highest received numbers (None: none).
    Numbers a record names outside [first, last] are missing too (the bridge
    said so): below first to head (first's window), above last to tail
    (last's), and with nothing received to the record's own window.  Each
    range is split by the records covering it; what no record covers is
    UNEXPLAINED."""
    recs = sorted((a, b, why) for a, b, why, _w in records if a is not None and b is not None)
    spans = [(a, b, w) for a, b, w in gaps]
    for a, b, _why, where in records:
        if a is None or b is None or a > b:
            continue
        if first is None or last is None:
            spans.append((a, b, where))
            continue
        if a < first:
            spans.append((a, min(b, first - 1), head))
        if b > last:
            spans.append((max(a, last + 1), b, tail))
    out: list[tuple[int, int, str, Any]] = []
    for a, b, where in _union(spans):
        out += [(x, y, why, where) for x, y, why in _split(a, b, recs)]
    return out


def _union(spans: list[tuple[int, int, Any]]) -> list[tuple[int, int, Any]]:
    """Overlapping spans merged (two records of one loss, from two bridges);
    a merged span keeps the first known window."""
    out: list[list[Any]] = []
    for a, b, w in sorted(spans, key=lambda s: (s[0], s[1])):
        if out and a <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], b)
            out[-1][2] = out[-1][2] if out[-1][2] is not None else w
        else:
            out.append([a, b, w])
    return [(a, b, w) for a, b, w in out]


def _split(a: int, b: int, recs: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """[a, b] cut where the reasons change: each number gets the best-ranked
    reason among the records naming it, or UNEXPLAINED."""
    cuts = {a, b + 1}
    for x, y, _ in recs:
        if x <= b and y >= a:
            cuts.update((max(x, a), min(y, b) + 1))
    edges = sorted(cuts)
    out: list[tuple[int, int, str]] = []
    for lo, hi in zip(edges, edges[1:]):
        whys = [why for x, y, why in recs if x <= lo and y >= hi - 1]
        why = min(whys, key=lambda w: (_rank(w), w)) if whys else UNEXPLAINED
        if out and out[-1][2] == why and out[-1][1] == lo - 1:
            out[-1] = (out[-1][0], hi - 1, why)
        else:
            out.append((lo, hi - 1, why))
    return out
