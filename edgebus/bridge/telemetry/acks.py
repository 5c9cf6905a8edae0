"""The telemetry log's acknowledgement policy: a device link acknowledges
only what the log made durable. Each group commit carries the marks
(Link.rx_mark) of the links that delivered since the last one, taken before
the commit's last batch is taken from the log's queues; publishing is
synchronous, so whatever a link had delivered by then is in that batch or
an earlier one, durable once the sync point returns, when the marks are
acknowledged (appender.py)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from edgebus.link.link import Link

# Longest wait when nothing is pending (appender.py), and how often a commit
# reads every link's mark: marks that move without a record (gaps, traffic
# the log does not take) are acknowledged within it.
IDLE = 1.0

# link_id -> (rx_mark, sessions)
Marks = dict[str, tuple[Any, Any]]


class Acks:
    """The marks of ``links`` (the bridge's dict link_id -> Link, read
    live): those sent with the last commits, those acknowledged."""

    def __init__(self, links: dict[str, Link]) -> None:
        self.links = links
        self.acked: Marks = {}  # link_id -> the mark last acknowledged
        self.sent: Marks = {}  # the marks of the last commit sent
        # Links that delivered a record since the last commit's marks: a
        # commit reads only their marks, and every link's at most once per
        # IDLE (marks that move without a record: gaps, unlogged traffic), so
        # a commit costs what moved, not the fleet (5,000 links: ms per pass).
        self.moved: set[str | None] = set()
        self.t_sweep = float("-inf")

    def marks(self, sweep: bool) -> Marks:
        """link_id -> (rx_mark, sessions) of the links that delivered since the
        last commit, or with ``sweep`` of every link: a link acknowledges again
        after a reconnect, even what it acknowledged in its previous session."""
        links = self.links
        if sweep:
            self.t_sweep = time.monotonic()
            ids = list(links)
        else:
            ids = [k for k in self.moved if k in links]
        self.moved = set()
        out = {}
        for k in ids:
            l = links.get(k)
            if l is not None:
                out[k] = (l.rx_mark(), l.counters.get("sessions"))
        return out

    def sweep_due(self, now: float) -> bool:
        return now - self.t_sweep >= IDLE

    def sweep_moved(self) -> bool:
        """Whether any link's mark moved without a record (checked at most
        once per IDLE, as it reads every link)."""
        sent = self.sent
        moved = [k for k, v in self.marks(True).items() if v != sent.get(k)]
        self.moved.update(moved)
        return bool(moved)

    def for_commit(self, now: float) -> Marks:
        """The marks a commit sent at ``now`` carries: every IDLE every
        link's, so a mark that moves without a record is acknowledged while
        records keep coming too."""
        marks = self.marks(self.sweep_due(now))
        self.sent.update(marks)
        return marks

    def acknowledge(self, marks: Marks) -> None:
        """A commit is durable: each link whose mark moved acknowledges it."""
        acked = self.acked
        for k, m in marks.items():
            link = self.links.get(k)
            if m[0] is not None and link is not None and m != acked.get(k):
                link.acknowledge(m[0])
        acked.update(marks)
