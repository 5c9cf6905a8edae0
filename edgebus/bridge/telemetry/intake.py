"""The telemetry log's intake: its subscriptions on the host bus (the
configured patterns, and bridge/gaps whatever they are), each a queue that
refuses the newest message when full; what waits in them is the log's
backlog (appender.py)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Iterable

from edgebus import topic

if TYPE_CHECKING:
    from edgebus import Bus, Message
    from edgebus.feed import Subscription

# Where the bridge says a link's gap (docs/protocol.md 8), logged whatever
# the log's patterns are.
GAPS = ("bridge", "gaps")


class Intake:
    """The log's queues on the host bus, one per pattern; ``wake`` is set
    when a message arrives in any of them."""

    def __init__(self, bus: Bus, patterns: Iterable[str], queue_len: int) -> None:
        self.conn = bus.connect(principal=("bridge", "telemetry"))
        self.wake = asyncio.Event()
        self.subs: list[Subscription] = []
        pats = list(patterns)
        if not any(topic.matches(topic.pattern(p, "+", "#")[1], GAPS) for p in pats):
            pats.append("/".join(GAPS))
        for p in pats:
            s = self.conn.subscribe(p, queue_len=queue_len, full="reject_newest")
            s.wake_on(self.wake)
            self.subs.append(s)

    def take(self, moved: set[str | None]) -> list[Message]:
        """Every message queued now, each once (a message matched by several
        patterns is queued in each); the link ids they came from are added
        to ``moved``."""
        out = []
        seen: set[int] | None = set() if len(self.subs) > 1 else None
        for s in self.subs:
            while True:
                m = s.recv_nowait()
                if m is None:
                    break
                if seen is not None:
                    if id(m) in seen:
                        continue
                    seen.add(id(m))
                out.append(m)
                moved.add(m.origin.link_id)
        return out

    def dropped(self) -> int:
        return sum(s.dropped() for s in self.subs)

    def queued(self) -> int:
        """The log's backlog: messages waiting in its fullest queue."""
        return max([s.stats()["queued"] for s in self.subs] or [0])

    def at(self, level: int) -> bool:
        """Whether any queue holds ``level`` messages or more."""
        for s in self.subs:
            if s.stats()["queued"] >= level:
                return True
        return False

    def waiting(self) -> int:
        """Messages waiting in all the queues (at a stop: not written)."""
        return sum(s.stats()["queued"] for s in self.subs)

    def close(self) -> None:
        self.conn.disconnect()
