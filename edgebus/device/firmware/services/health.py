"""sys/health (published every health_period s): heap, bus drops, uplink and
link state and counters."""

import asyncio
import gc
import json

from edgebus.compat import wall_ms
from firmware import mem, opt

_LINK = (
    "sessions",
    "session_ends",
    "frames_in",
    "frames_out",
    "gaps",
    "dropped_out",
    "liveness_timeouts",
    "auth_failures",
    "bad_frames",
    "acked",
    "retransmitted",
    "spool_dropped",
    "forged",
    "replayed",
    "peer_offline",
    # a full heap (a frame not handled, or held and tried again) and a
    # refused send (a gap the peer asks to be resent): a board short of
    # heap shows here first
    "memory_errors",
    "send_errors",
    "oversize_out",  # frames over max_len, not sent (a gap at the peer)
)
# A report must fit one frame: link.max_len less the topic, the frame's
# fields and a seal (HEADROOM). With the WiFi, clock and sleep sections and
# errors' text it can pass 1 KB, and a report too large is never sent (its
# number a gap), just when a device has trouble to report: fit() sheds the
# least needed first, and says "trimmed".
HEADROOM = 96
ERR = 48  # characters of an error's text kept when trimming


def _size(d):
    return len(json.dumps(d, separators=(",", ":")))  # as the link encodes it


def fit(d, room):
    """d (a report) within room bytes of JSON, trimmed in steps if need be:
    the link's counters that are 0, then each last_error past ERR chars,
    then the spool's detail but depth and unsent."""
    if _size(d) <= room:
        return d
    d["trimmed"] = True
    lk = d["link"]
    for k in _LINK:
        if not lk.get(k):
            lk.pop(k, None)
    if _size(d) <= room:
        return d
    for sec in (lk, d["uplink"], d["network"], d["clock"]):
        e = sec.get("last_error") if sec else None
        if type(e) is str:
            sec["last_error"] = e[:ERR]
    if _size(d) <= room:
        return d
    sp = lk["spool"]
    lk["spool"] = {"depth": sp.get("depth"), "unsent": sp.get("unsent")}
    return d


def health(ctx):
    gc.collect()  # live heap, not garbage: a few ms every health_period
    a, f = mem()
    link = ctx.link
    lc = link.counters
    lk = {"state": link.status, "sid": link.sid, "last_error": link.last_error}
    for k in _LINK:
        lk[k] = lc.get(k, 0)
    lk["spool"] = link.spool_stats()
    b = ctx.board
    # Which board's values run ("manifest" null: the built-in defaults); the
    # spool's capacity is in link.spool, the rest of the values in sys/info.
    return {
        "uptime": int(ctx.uptime()),
        "board": b.get("name"),
        "manifest": b.get("manifest"),
        "mem_alloc": a,
        "mem_free": f,
        "bus_dropped": ctx.bus.stats()["dropped"],
        "link": lk,
        "uplink": ctx.uplink.stats(),
        "network": ctx.net.stats() if ctx.net is not None else None,
        "sleep": ctx.sleep.stats() if ctx.sleep is not None else None,
        # which clock the readings carry (firmware/clock.py); no time step: the
        # board's own when set, else the bridge's alignment
        "clock": ctx.clock.stats()
        if ctx.clock is not None
        else {"source": "bridge" if wall_ms() is None else "rtc"},
        "service_errors": ctx.counters.get("service_errors", 0),
        "ota_refused": ctx.counters.get("ota_refused", 0),
        "health_skipped": ctx.counters.get("health_skipped", 0),
    }


async def start(ctx, opts):
    c = ctx.connect("sys")
    while True:
        await asyncio.sleep(opts.get("period", opt(ctx.config, "", "health_period")))
        try:
            c.publish("sys/health", fit(health(ctx), ctx.link.opts.max_len - HEADROOM))
        except MemoryError:
            # A small board's heap briefly full: this report is skipped and
            # counted (the next one says so); the next comes on time, not
            # after a crash and the 5 s restart.
            ctx.count("health_skipped")
