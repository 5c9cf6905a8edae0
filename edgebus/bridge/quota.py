"""What one device may take of the bridge, whatever it sends ([quota],
[bridge] paced): readings a second, retained facts, and its link's pace; and
the watch that names, at most once a minute, a device whose frames the bridge
refuses for it.

The readings quota is a token bucket per link consulted by the link's hold
(docs/protocol.md section 11): a frame over it is not taken and stays in the
device's spool, asked for again once the bucket refills, so an honest device
that bursts after an outage loses nothing and a hostile one gets its share and
no more. The defaults are far above what a sensor sends (1,000 readings a
second against 0.1-20) and far below what a flood does (20,000)."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable

    from edgebus.link.link import Link

log = logging.getLogger("edgebus.bridge")

# The link counters of a refusal for the device itself (not an outsider's
# forgeries, which are the outsider's), and what each says in the log line.
REFUSALS = {
    "over_quota": "frames over its readings quota, held",
    "over_window": "frames past its send window, asked for again",
    "retained_refused": "retained facts over its quota, refused",
    "unpaced_refused": "sessions refused: no acknowledgements or window offered",
    "over_share": "frames past its share of the bridge's MQTT queue, dropped",
}
LOG_EVERY = 60.0  # s between two lines about one device


class Quota:
    """Per-link token buckets of readings: ``rate`` a second, at most
    ``burst`` seconds' worth saved up."""

    def __init__(self, rate: float, burst: float) -> None:
        self.rate = rate
        self.cap = max(1.0, rate * burst)
        self._buckets: dict[str, list[float]] = {}  # link id -> [tokens, when]

    def over(self, link: Link) -> bool:
        """True when ``link`` has taken its share: its next frame waits
        (counted over_quota); else one reading is taken from its bucket."""
        now = time.monotonic()
        b = self._buckets.get(link.link_id)
        if b is None:
            b = self._buckets[link.link_id] = [self.cap, now]
        tokens = min(self.cap, b[0] + (now - b[1]) * self.rate)
        b[1] = now
        if tokens < 1.0:
            b[0] = tokens
            link.count("over_quota")
            return True
        b[0] = tokens - 1.0
        return False

    def forget(self, link_id: str) -> None:
        """The link is gone: its bucket too."""
        self._buckets.pop(link_id, None)


def refusals(counters: dict[str, int]) -> dict[str, int]:
    """A link's refusals for its device, from its counters."""
    return {k: counters[k] for k in REFUSALS if counters.get(k)}


class Watch:
    """Says in the bridge's log, at most once a minute a device, which
    device's frames were refused for it since the last line and why."""

    def __init__(self) -> None:
        self._seen: dict[str, dict[str, int]] = {}  # link id -> refusals at the last line
        self._said: dict[str, float] = {}  # link id -> when

    def check(self, links: Iterable[Link], now: float | None = None) -> list[str]:
        """One pass over ``links``: the lines it logged."""
        now = time.monotonic() if now is None else now
        lines = []
        for link in links:
            lid = link.link_id
            if now - self._said.get(lid, float("-inf")) < LOG_EVERY:
                continue
            got = refusals(link.counters)
            seen = self._seen.get(lid, {})
            grew = {k: v - seen.get(k, 0) for k, v in got.items() if v > seen.get(k, 0)}
            if not grew:
                continue
            self._seen[lid] = got
            self._said[lid] = now
            line = "device %s (%s): %s" % (
                link.peer_node or link.peer or "?",
                lid,
                "; ".join("%d %s" % (n, REFUSALS[k]) for k, n in sorted(grew.items())),
            )
            log.warning("%s", line)
            lines.append(line)
        return lines

    def forget(self, link_id: str) -> None:
        self._seen.pop(link_id, None)
        self._said.pop(link_id, None)
