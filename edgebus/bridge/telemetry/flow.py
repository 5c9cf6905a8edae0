"""The telemetry log's flow control (docs/protocol.md 11): the durable
links' devices share the log's room up to high water as their windows, and
the links ask hold() before they take a numbered frame: past high water,
or while the log is failed, they push back instead of delivering what the
log might not hold (their devices keep it spooled)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from edgebus.bridge.telemetry.intake import Intake
    from edgebus.link.link import Link

# The most numbered frames a device may have sent and not acknowledged
# (its window, protocol 11), however few devices share the log.
WINDOW_MAX = 256
# Pushback is reported as current for this long after the last frame held.
PUSHBACK_RECENT = 2.0


class Failing(Protocol):
    """The log's health (health.Health) as the flow reads it."""

    @property
    def failure(self) -> str | None: ...


class Flow:
    """High water on the log's queues (``queue_len`` long, the last
    ``reserve`` places kept from durable links: only other traffic fits
    above it), the windows given to ``links``' durable ones, and whether
    they are shut (``closed``: the log is behind or failed)."""

    def __init__(
        self,
        intake: Intake,
        links: dict[str, Link],
        health: Failing,
        queue_len: int,
        reserve: int | None = None,
    ) -> None:
        self.intake = intake
        self.links = links
        self.health = health
        self.queue_len = queue_len
        self.high = queue_len - (max(1, queue_len // 8) if reserve is None else reserve)
        if not 0 < self.high < queue_len:
            raise ValueError("reserve must leave room on both sides of high water")
        self.closed = False  # the devices' windows shut: the log is behind
        self.t_held = float("-inf")  # when hold() last said yes
        self.given: int | None = None  # the window the durable links were last given

    def hold(self, link: Link | None = None, size: int = 0) -> bool:
        """Link.hold for durable links: true while the log's backlog is at
        high water, so what they would deliver now could not be sure of a
        place (they push back, the devices keep it spooled), and while the
        log is failed. Devices that honour a window are told to stop at once
        (pace). The frame's ``size`` does not matter: the queue counts
        messages."""
        if self.health.failure is not None:  # nothing is written: nothing may be taken
            self.t_held = time.monotonic()
            return True
        if self.intake.at(self.high):
            self.t_held = time.monotonic()
            if not self.closed:
                self.shut()
            return True
        return False

    def shut(self) -> None:
        """Every durable link's device: window 0 (the log is behind or failed)."""
        self.closed = True
        self.pace()

    def window(self) -> int:
        """The window every durable link's device gets: the log's room up to
        high water shared among them, so that together they never send more
        than it holds (and the hold above stays a safety net for devices
        without windows); 0 while the log is behind. A power of two, so it
        changes seldom as devices come and go (each change is a frame a
        device)."""
        if self.closed:
            return 0
        share = self.high // max(1, sum(1 for l in list(self.links.values()) if l.opts.durable))
        w = 1
        while w * 2 <= share and w < WINDOW_MAX:
            w *= 2
        return w

    def pace(self, sweep: bool = False) -> None:
        """Give the durable links the window when it changed (or, sweeping,
        every link that does not have it yet: links come and go). The log
        reopens once its backlog is down to half of high water (and it works)."""
        if self.closed and self.health.failure is None and self.intake.queued() <= self.high // 2:
            self.closed = False
        w = self.window()
        if w == self.given and not sweep:
            return
        self.given = w
        for l in list(self.links.values()):
            if l.opts.durable:
                l.window(w)

    def pushing_back(self, now: float) -> bool:
        """Whether a durable link was held in the last PUSHBACK_RECENT s."""
        return now - self.t_held < PUSHBACK_RECENT

    def held(self) -> int:
        """Data frames the links held back so far."""
        return sum(l.counters.get("held", 0) for l in list(self.links.values()))
