"""What one device may take of the bridge, whatever it sends ([quota],
[bridge] paced): readings and bytes a second, retained facts, and its link's
pace; and the watch that names, at most once a minute, a device whose frames
the bridge refuses for it.

The readings and bytes quotas are token buckets per link consulted by the
link's hold (docs/protocol.md section 11): a frame over either is not taken and
stays in the device's spool, asked for again once the buckets refill, so an
honest device that bursts after an outage loses nothing and a hostile one gets
its share and no more. The defaults are far above what a sensor sends (1,000
readings and 256 KiB a second against 0.1-20 readings of ~100 bytes) and far
below what a flood does (20,000 readings; a device of few but large readings
would fill the log at its link's speed)."""

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
    "over_bytes": "frames over its bytes quota, held",
    "over_window": "frames past its send window, asked for again",
    "retained_refused": "retained facts over its quota, refused",
    "unpaced_refused": "sessions refused: no acknowledgements or window offered",
    "over_share": "frames past its share of the bridge's MQTT queue, dropped",
    "muted": "times muted for flooding (its frames unread meanwhile)",
    "muted_dropped": "frames on their way when it was muted, dropped unread",
}
LOG_EVERY = 60.0  # s between two lines about one device


class Quota:
    """Per-link token buckets: readings, ``rate`` a second, and bytes of
    numbered frames, ``nbytes`` a second (0: no bytes quota), each with at
    most ``burst`` seconds' worth saved up."""

    def __init__(self, rate: float, burst: float, nbytes: float = 0.0) -> None:
        self.rate = (rate, nbytes)
        self.cap = (max(1.0, rate * burst), max(1.0, nbytes * burst) if nbytes else 0.0)
        # link id -> [readings, bytes, when, bytes the frame it held needs]
        self._buckets: dict[str, list[float]] = {}

    def _refill(self, lid: str, now: float) -> list[float]:
        """``lid``'s bucket (full when new), refilled up to ``now``."""
        b = self._buckets.get(lid)
        if b is None:
            b = self._buckets[lid] = [self.cap[0], self.cap[1], now, 0.0]
        for i in (0, 1):
            b[i] = min(self.cap[i], b[i] + (now - b[2]) * self.rate[i])
        b[2] = now
        return b

    def over(self, link: Link, size: int = 0, now: float | None = None) -> bool:
        """True when ``link`` has taken its share: its next frame, of
        ``size`` bytes, waits (counted over_quota or over_bytes); else one
        reading and its bytes are taken from its buckets. ``size`` 0 asks
        whether the frame it held may come now, and takes nothing. A frame
        bigger than the whole bytes bucket needs it full, no more: it is
        late, never stuck."""
        b = self._refill(link.link_id, time.monotonic() if now is None else now)
        need = min(size, self.cap[1]) if size else b[3]
        if b[0] < 1.0 or b[1] < need:
            if size:
                b[3] = need
                link.count("over_quota" if b[0] < 1.0 else "over_bytes")
            return True
        if size:
            b[0] -= 1.0
            b[1] -= need
            b[3] = 0.0
        return False

    def forget(self, link_id: str) -> None:
        """The link is gone: its bucket too."""
        self._buckets.pop(link_id, None)


# A device that floods is muted: the bridge stops reading its frames
# (bridge/links/mqtt.py unsubscribes them) for MUTE_FIRST seconds, doubled
# at each mute up to MUTE_MAX, back to MUTE_FIRST after FORGIVE seconds
# without one. Refusing its frames is not enough: reading and parsing them
# took the bridge's whole core (~75 % in paho, its MQTT client then) and the honest devices waited
# behind them. Flooding is either of:
# - FLOOD_AT messages within one MUTE_CHECK (4,096 a second), seen as they
#   arrive, with more than a window (telemetry.flow.WINDOW_MAX) of them waiting
#   for its link: an honest device may send that fast (a spool drained after
#   an outage) but never has more than its window unacknowledged, and a
#   frame its link has not taken is not acknowledged. Only the copies it
#   sends again while the bridge's loop stalls (its window at each doubling
#   timeout: a 20 readings/s device needs a stall of about two minutes, and
#   a broker that queues that much for the bridge) come at once past the
#   mark: muted then for MUTE_FIRST, it loses nothing (its spool holds).
#   Waiting for a second check to be sure costs the honest devices 4-20x
#   more delay beside a flood (the bridge falls behind meanwhile);
# - MUTE_AT frames past its window (over_window) or past its share of the
#   MQTT queue (over_share) within one MUTE_CHECK: an honest device never
#   sends past its window, and one shrunk under it leaves at most 256 in
#   flight past it.
MUTE_CHECK = 0.25
FLOOD_AT = 1024
FLOOD_STEP = 256  # messages between two looks once past FLOOD_AT, in one check
MUTE_AT = 1024
MUTE_FIRST = 10.0
MUTE_MAX = 300.0
FORGIVE = 600.0


class Mutes:
    """Which devices' frames go unread for now, and until when."""

    def __init__(self) -> None:
        self.until: dict[str, float] = {}  # node -> monotonic time its mute ends
        self._strikes: dict[str, tuple[int, float]] = {}  # node -> (mutes, when the last ended)
        self._seen: dict[str, int] = {}  # node -> its refusals at the last check

    def mute(self, node: str, link: Link, why: str, now: float | None = None) -> float:
        """Mute ``node`` for its next term (counted on ``link``, logged with
        ``why``): the seconds. Nothing when muted already (0)."""
        if node in self.until:
            return 0.0
        now = time.monotonic() if now is None else now
        strikes, t_end = self._strikes.get(node, (0, float("-inf")))
        if now - t_end > FORGIVE:
            strikes = 0
        seconds = min(MUTE_MAX, MUTE_FIRST * 2**strikes)
        self.until[node] = now + seconds
        self._strikes[node] = (strikes + 1, now + seconds)
        link.count("muted")
        log.warning(
            "device %s (%s): %s: its frames go unread for %d s (a device that floods)",
            node,
            link.link_id,
            why,
            seconds,
        )
        return seconds

    def check(
        self, links: dict[str, Link], now: float | None = None
    ) -> tuple[list[str], list[str]]:
        """One pass over ``links`` (node -> Link), every MUTE_CHECK: (nodes
        muted now for their refusals, nodes whose mute ended)."""
        now = time.monotonic() if now is None else now
        muted, ended = [], []
        for node, link in links.items():
            c = link.counters
            n = c.get("over_window", 0) + c.get("over_share", 0)
            last = self._seen.get(node, n)
            self._seen[node] = n
            if n - last >= MUTE_AT and node not in self.until:
                why = "%d frames past its window or its share in %.2f s" % (n - last, MUTE_CHECK)
                self.mute(node, link, why, now)
                muted.append(node)
        for node, t in list(self.until.items()):
            if t <= now or node not in links:
                del self.until[node]
                ended.append(node)
        for node in [n for n in self._seen if n not in links]:
            self.forget(node)
        return muted, ended

    def forget(self, node: str) -> None:
        """The device is gone from this bridge."""
        self.until.pop(node, None)
        self._strikes.pop(node, None)
        self._seen.pop(node, None)


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
