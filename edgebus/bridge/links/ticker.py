"""What every kind of the bridge's links shares: one ticker for thousands of
links, the retry delays (a port, the broker, a peer), and the words of an
outage."""

from __future__ import annotations

import asyncio
import logging

from edgebus.backoff import Backoff
from edgebus.link.link import Link

log = logging.getLogger("edgebus.bridge")


# Links ticked per slice of a shared ticker's pass, between which the loop
# serves others: a pass over 10,000 links takes tens of ms in one go.
TICK_SLICE = 500


async def tick_links(links: dict[str, Link], heartbeat: float) -> None:
    """Tick every Link in ``links`` (a dict, read live), each set
    ``ticks = False``, at the period a link's own ticker keeps (a quarter
    second, or a quarter of a shorter heartbeat): one task for thousands of
    links instead of a task and a timer each, which at 5,000 links is 20,000
    wakes a second. A link's tick that raises is logged and the rest go on."""
    period = min(0.25, heartbeat / 4)
    loop = asyncio.get_running_loop()
    while True:
        t0 = loop.time()
        batch = list(links.values())
        for i in range(0, len(batch), TICK_SLICE):
            for link in batch[i : i + TICK_SLICE]:
                try:
                    link.tick()
                except Exception as e:  # one link's fault must not stop the others' timers
                    link.count("tick_errors")
                    link.last_error = "tick: %r" % (e,)
                    if link.counters["tick_errors"] == 1:
                        log.exception("%s: tick failed", link.link_id)
            await asyncio.sleep(0)
        await asyncio.sleep(max(0.0, period - (loop.time() - t0)))


# 2 s cap: a gateway's broker and serial ports are local (retrying costs
# nothing), and every second it stays away is a second devices must spool.
RETRY_CAP = 2.0


def retry_backoff(cap: float = RETRY_CAP) -> Backoff:
    """The bridge's retry delays (a port, the broker, a peer): from half a
    second, doubling up to cap, jittered so many devices do not retry in step."""
    return Backoff(0.5, cap)


class Outage:
    """What a retry loop says of its failures: a warning when their words
    change (the first of an outage, or a new reason), the same words again
    only at debug, and one line when it is back. A broker away for a minute
    is one line, not one a second; ``last`` is the failure now (None: up)."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.last: str | None = None

    def failed(self, why: str) -> None:
        level = logging.DEBUG if why == self.last else logging.WARNING
        log.log(level, "%s: %s; retrying", self.what, why)
        self.last = why

    def over(self, how: str = "connected again") -> None:
        if self.last is not None:
            log.info("%s: %s", self.what, how)
        self.last = None
