"""Appends chosen host-bus traffic to the telemetry log (tlog/), with group
commit: a sync point at most every commit_ms while records are pending, after
which every device link acknowledges what it had delivered before it.

The Appender runs the loop that joins the log's parts, one job each: its
queues on the host bus (intake.py), the records (records.py), the
writer and its worker thread (sink.py), the acknowledgements
(acks.py), the durable links' windows and holds (flow.py), the
operator's warning (watch.py) and the log's health (health.py).
Past the worker's trips in flight, messages wait in the log's queues; their
fill is the log's backlog. The durable links' devices share its room as
their windows, and the links ask hold() before they take a numbered frame
(docs/protocol.md 11): past high water they push back instead of
delivering what the log might not hold. A log that fails (a full disk)
holds them back until it takes writes again (health.py)."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any, Iterable

from edgebus.bridge.telemetry import health
from edgebus.bridge.telemetry.acks import IDLE, Acks, Marks
from edgebus.bridge.telemetry.flow import Flow
from edgebus.bridge.telemetry.intake import GAPS, Intake
from edgebus.bridge.telemetry.records import Records
from edgebus.bridge.telemetry.sink import Sink, Written
from edgebus.bridge.telemetry.watch import LogWatch
from edgebus.compat import wait_for

if TYPE_CHECKING:
    from edgebus import Bus, Message
    from edgebus.bridge.config import Config
    from edgebus.bridge.links.statefile import StateFile
    from edgebus.link.link import Link
    from edgebus.tlog import LogWriter


log = logging.getLogger("edgebus.bridge")


class Appender:
    """Subscribes to the configured patterns and appends every message (a
    retain is a message too) as one record; a message matched by several
    patterns is written once.

    links is the bridge's dict link_id -> Link (read live). After each group
    commit every link whose rx_mark() moved is told acknowledge(mark)
    (acks.py). Nothing a durable link delivered is ever dropped on the
    way: the queues refuse the newest message when full (reject_newest), and
    hold() keeps durable links out of the last ``reserve`` places, so each
    message they deliver has one. A record that cannot be encoded is refused
    to its link (Link.refuse) before the acknowledgement that passes it.
    While the log is failed (``health``, health.py) nothing is acknowledged."""

    def __init__(
        self,
        bus: Bus,
        cfg: Config,
        links: dict[str, Link] | None = None,
        queue_len: int = 8192,
        reserve: int | None = None,
        state: StateFile | None = None,
    ) -> None:
        self.cfg = cfg
        # The links' state file, written in the commit that follows a new peer
        # boot, before its sync: an acknowledgement that left before the file
        # named the boot would, after a SIGKILL, leave the restarted bridge
        # unable to resume that link from the log (health.resume_links), and
        # what the peer sent again was logged twice.
        self.statefile = state
        writer = health.open_log(cfg)
        self.health = health.Health(cfg)  # a failed log, the disk's free space
        self.commit_ms = cfg.commit_ms
        self.links = {} if links is None else links
        self.intake = Intake(bus, cfg.log_patterns, queue_len)
        self.flow = Flow(self.intake, self.links, self.health, queue_len, reserve)
        self.records = Records(cfg.peers)
        self.sink = Sink(writer, self.links, self.records, lambda e: health.fail(self, e))
        self.acks = Acks(self.links)
        self.watch = LogWatch(self.intake, self.flow)
        self.unsynced = 0  # records appended since the last sync point
        self.syncs = 0
        self.last_sync_ms: float | None = None  # how long the last sync point took
        self.sync_seconds = 0.0  # the time every sync point took, summed (/metrics)
        self.last_commit_records = 0
        self._t_commit = float("-inf")

    @property
    def writer(self) -> LogWriter:
        return self.sink.writer

    @property
    def appended(self) -> int:
        return self.sink.appended

    @property
    def errors(self) -> int:
        return self.sink.errors

    def queued(self) -> int:
        """The log's backlog: messages waiting in its fullest queue."""
        return self.intake.queued()

    def hold(self, link: Link | None = None, size: int = 0) -> bool:
        """Link.hold for durable links (flow.Flow.hold; the frame's size
        does not matter)."""
        return self.flow.hold(link)

    def gap(self, link: Link, first: int, last: int, why: str, sid: str | None) -> None:
        """A link's gap (Link.on_gap, through the bridge): one host record on
        bridge/gaps, {"node", "sid", "first", "last", "why"} (the peer boot's
        numbers first..last are lost, and why: docs/protocol.md 8)."""
        self.intake.conn.publish(
            GAPS,
            {
                "node": link.peer_node,
                "sid": sid or link.peer_sid,
                "first": first,
                "last": last,
                "why": why,
            },
        )

    def write(self, batch: list[Message]) -> None:
        """Write ``batch`` as it comes, without a sync: the commit's batch stays small."""
        self.unsynced += len(batch)
        self.sink.trip(self.sink.append, batch, False, then=self._written)

    def _written(self, r: Written, t0: float) -> None:
        self.sink.written(r)

    def drain(self) -> int:
        """Append everything queued now, here (at close); returns how many."""
        r = self.sink.append(self.intake.take(self.acks.moved), False)
        self.sink.written(r)
        self.unsynced += r[0]
        return r[0]

    def commit(self, batch: Iterable[Message] = ()) -> None:
        """Send one group commit: the marks, the last batch (with ``batch``,
        taken just before: nothing was published in between), a sync point;
        the marks are acknowledged when it is back (_committed). Whatever a
        link had delivered when its mark was taken is in that batch or an
        earlier trip's, which the worker wrote first."""
        self._t_commit = time.monotonic()
        marks = self.acks.for_commit(self._t_commit)
        batch = list(batch) + self.intake.take(self.acks.moved)
        self.last_commit_records = self.unsynced + len(batch)
        self.unsynced = 0
        sf = self.statefile
        state = sf.snapshot() if sf is not None and sf.unsaved() else None
        self.sink.trip(self._sync, batch, state, then=lambda r, t0: self._committed(r, marks, t0))

    def _sync(self, batch: list[Message], state: bytes | None) -> Written:
        """In the worker: the state file's snapshot, if any, then the batch and
        the sync point."""
        if state is not None:
            assert self.statefile is not None
            self.statefile.write(state)
        return self.sink.append(batch, True)

    def save_state(self) -> None:
        """The state file's snapshot written by the worker, in order with the
        commits (two writers would race to the rename)."""
        sf = self.statefile
        if sf is not None and sf.unsaved():
            self.sink.trip(sf.write, sf.snapshot(), then=lambda r, t0: None)

    def _committed(self, r: Written, marks: Marks, t0: float) -> None:
        """A commit back from the worker: what its marks cover is durable now."""
        self.sink.written(r)
        took = time.monotonic() - t0
        self.last_sync_ms = round(1000 * took, 3)
        self.sync_seconds += took
        self.syncs += 1
        self.health.backoff.reset()  # a commit made durable: the log works again
        self.acks.acknowledge(marks)
        self.watch.check(time.monotonic())

    def _housekeeping(self) -> None:
        """Age rolls, retention and the disk's free space (health.housekeeping)."""
        self.sink.trip(
            health.housekeeping, self.sink, then=lambda free, t0: health.space(self, free)
        )

    async def run(self) -> None:
        last_tick = float("-inf")
        period = self.commit_ms / 1000.0
        wake = self.intake.wake
        try:
            while True:
                wake.clear()
                if self.health.failure is not None:
                    await health.recover(self)
                    continue
                oldest = self.sink.behind()
                if oldest is not None:
                    # The worker is behind: wait for its oldest trip; meanwhile
                    # the queues fill and, at high water, the links hold.
                    await asyncio.wait([oldest])
                    continue
                now = time.monotonic()
                if now - last_tick >= IDLE:
                    self._housekeeping()
                    last_tick = now
                    self.watch.check(now)
                    self.flow.pace(sweep=True)
                elif self.flow.closed:
                    self.flow.pace()
                batch = self.intake.take(self.acks.moved)
                due = self._t_commit + period
                if now >= due and (
                    batch
                    or self.unsynced
                    or self.acks.moved
                    or (self.acks.sweep_due(now) and self.acks.sweep_moved())
                ):
                    self.commit(batch)
                    continue
                if batch:
                    self.write(batch)
                    continue
                timeout = max(0.0, due - now) if self.unsynced else IDLE
                try:
                    await wait_for(wake.wait(), timeout)
                except asyncio.TimeoutError:
                    pass
        except asyncio.CancelledError:
            raise
        except Exception as e:  # a bug, not the disk (health.fail): nothing resumes it
            self.health.failure = self.health.failure or health.why(e)
            log.error("telemetry: the appender stopped (%r): nothing more is acknowledged", e)
            raise

    def state(self) -> str:
        """ "failed" (health.py), "pushing back" (durable links held in
        the last few seconds), "dropping" (other traffic refused lately),
        "low space" (below [log] min_free_bytes) or "ok"."""
        now = time.monotonic()
        if self.health.failure is not None:
            return "failed"
        if self.flow.pushing_back(now):
            return "pushing back"
        if self.watch.dropping(now):
            return "dropping"
        return "low space" if self.health.low() else "ok"

    def close(self) -> None:
        """Let the worker finish its trips, append what is left, then seal
        the active segment (durable). A log that failed, or fails now, is
        closed unsealed, never raising (health.close_failed)."""
        self.sink.pool.shutdown(wait=True)
        if self.health.failure is None:
            try:
                self.drain()
                self.sink.writer.close()
            except Exception as e:
                health.fail(self, e)
        if self.health.failure is not None:
            health.close_failed(self)
        self.unsynced = 0
        self.intake.close()

    def stats(self) -> dict[str, Any]:
        sink, flow = self.sink, self.flow
        return {
            "dir": sink.writer.path,
            "appended": sink.appended,
            "dropped": self.intake.dropped(),
            "errors": sink.errors,
            "position": list(sink.position),
            "commit_ms": self.commit_ms,
            "syncs": self.syncs,
            "last_sync_ms": self.last_sync_ms,
            "sync_seconds": self.sync_seconds,
            "unsynced": self.unsynced,
            "queued": self.intake.queued(),
            "queue_len": flow.queue_len,
            "high_water": flow.high,
            "held": flow.held(),
            "state": self.state(),
            "relayed_vouched": self.records.vouched,
            "relayed_unvouched": self.records.unvouched,
            **self.health.stats(),
        }
