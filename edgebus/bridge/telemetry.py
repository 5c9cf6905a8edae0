"""Appends chosen host-bus traffic to the telemetry log (tlog/), with group
commit: a sync point at most every commit_ms while records are pending, after
which every device link acknowledges what it had delivered before it.

The event loop only moves messages: one worker thread, the writer's only
caller, appends them, syncs and seals (a version-2 seal writes a whole
segment as Parquet), so neither a sync nor a seal stalls the links. The loop
hands it batches without waiting for each (at most TRIPS in flight) and
acknowledges a commit's marks when its trip is back. Past that, messages wait
in the log's queues; their fill is the log's backlog. The durable links'
devices share its room as their windows, and the links ask hold() before they
take a numbered frame (docs/protocol.md 11): past high water they push back
instead of delivering what the log might not hold. A log that fails (a
full disk) holds them back until it takes writes again (loghealth.py)."""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Callable, Iterable

from edgebus import topic
from edgebus.bridge import loghealth
from edgebus.bridge.relay import trust, vouch
from edgebus.compat import wait_for
from edgebus.tlog import record_from_message

if TYPE_CHECKING:
    from edgebus import Bus, Message
    from edgebus.bridge.config import Config
    from edgebus.feed import Subscription
    from edgebus.link.link import Link


log = logging.getLogger("edgebus.bridge")

# Longest wait when nothing is pending: writer housekeeping (age rolls,
# retention) and acknowledging links whose traffic the log does not take.
IDLE = 1.0
# The operator's warning while the log pushes back or drops: at most this often.
WARN_EVERY = 10.0
# Pushback is reported as current for this long after the last frame held.
PUSHBACK_RECENT = 2.0
# Trips to the worker in flight at once before the loop waits for one.
TRIPS = 3
# The most numbered frames a device may have sent and not acknowledged
# (its window, protocol 11), however few devices share the log.
WINDOW_MAX = 256
# Where the bridge says a link's gap (docs/protocol.md 8), logged whatever
# the log's patterns are.
GAPS = ("bridge", "gaps")


class Appender:
    """Subscribes to the configured patterns and appends every message (a
    retain is a message too) as one record; a message matched by several
    patterns is written once.

    links is the bridge's dict link_id -> Link (read live). After each group
    commit every link whose rx_mark() moved is told acknowledge(mark): the
    mark is taken before the commit's last batch is taken from the queues,
    and publishing is synchronous, so whatever the link had delivered to the
    bus by then is in that batch or an earlier one, durable once the sync
    point returns. Nothing a durable link delivered is ever dropped on the
    way: the queues refuse the newest message when full (reject_newest), and
    hold() keeps durable links out of the last ``reserve`` places, so each
    message they deliver has one. A record that cannot be encoded is refused
    to its link (Link.refuse) before the acknowledgement that passes it.
    While the log is failed (``health``, loghealth.py) nothing is acknowledged."""

    def __init__(
        self,
        bus: Bus,
        cfg: Config,
        links: dict[str, Link] | None = None,
        queue_len: int = 8192,
        reserve: int | None = None,
    ) -> None:
        self.cfg = cfg
        self.writer = loghealth.open_log(cfg)
        self.health = loghealth.Health(cfg)  # a failed log, the disk's free space
        self.commit_ms = cfg.commit_ms
        self.links = {} if links is None else links
        self.conn = bus.connect(principal=("bridge", "telemetry"))
        self.wake = asyncio.Event()
        self.queue_len = queue_len
        # Durable links stop at high water; above it only other traffic fits.
        self.high = queue_len - (max(1, queue_len // 8) if reserve is None else reserve)
        if not 0 < self.high < queue_len:
            raise ValueError("reserve must leave room on both sides of high water")
        self.subs: list[Subscription] = []
        pats = list(cfg.log_patterns)
        if not any(topic.matches(topic.pattern(p, "+", "#")[1], GAPS) for p in pats):
            pats.append("/".join(GAPS))
        for p in pats:
            s = self.conn.subscribe(p, queue_len=queue_len, full="reject_newest")
            s.wake_on(self.wake)
            self.subs.append(s)
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="edgebus-log")
        # [[peer]] links whose relayed readings may carry their device's identity
        self.relays = trust(cfg.peers)
        self.vouched = 0  # relayed records logged under their device's identity
        self.unvouched = 0  # ... under their peer's: the claim not trusted (relay.vouch)
        self.appended = 0
        self.errors = 0
        self.unsynced = 0  # records appended since the last sync point
        self.syncs = 0
        self.last_sync_ms: float | None = None  # how long the last sync point took
        self.last_commit_records = 0
        self._t_commit = float("-inf")
        self._acked: dict[str, tuple[Any, Any]] = {}  # link_id -> the mark last acknowledged
        self._position = self.writer.position()
        self._t_held = float("-inf")  # when hold() last said yes
        self._closed = False  # the devices' windows shut: the log is behind
        self._trips: list[asyncio.Future[Any]] = []  # the worker's trips not yet back, oldest first
        self._sent_marks: dict[str, tuple[Any, Any]] = {}  # the marks of the last commit sent
        # Links that delivered a record since the last commit's marks: a
        # commit reads only their marks, and every link's at most once per
        # IDLE (marks that move without a record: gaps, unlogged traffic), so
        # a commit costs what moved, not the fleet (5,000 links: ms per pass).
        self._moved: set[str | None] = set()
        self._t_sweep = float("-inf")
        self._window: int | None = None  # the window the durable links were last given
        self._drops = (0, float("-inf"))  # dropped(), and when it last grew
        self._warned = (float("-inf"), 0, 0)  # (when, held, dropped) at the last warning

    def dropped(self) -> int:
        return sum(s.dropped() for s in self.subs)

    def queued(self) -> int:
        """The log's backlog: messages waiting in its fullest queue."""
        return max([s.stats()["queued"] for s in self.subs] or [0])

    def hold(self, link: Link | None = None) -> bool:
        """Link.hold for durable links: true while the log's backlog is at
        high water, so what they would deliver now could not be sure of a
        place (they push back, the devices keep it spooled), and while the
        log is failed. Devices that honour a window are told to stop at once
        (pace)."""
        if self.health.failure is not None:  # nothing is written: nothing may be taken
            self._t_held = time.monotonic()
            return True
        for s in self.subs:
            if s.stats()["queued"] >= self.high:
                self._t_held = time.monotonic()
                if not self._closed:
                    self._closed = True
                    self.pace()
                return True
        return False

    def window(self) -> int:
        """The window every durable link's device gets: the log's room up to
        high water shared among them, so that together they never send more
        than it holds (and the hold above stays a safety net for devices
        without windows); 0 while the log is behind. A power of two, so it
        changes seldom as devices come and go (each change is a frame a
        device)."""
        if self._closed:
            return 0
        share = self.high // max(1, sum(1 for l in list(self.links.values()) if l.durable))
        w = 1
        while w * 2 <= share and w < WINDOW_MAX:
            w *= 2
        return w

    def pace(self, sweep: bool = False) -> None:
        """Give the durable links the window when it changed (or, sweeping,
        every link that does not have it yet: links come and go). The log
        reopens once its backlog is down to half of high water (and it works)."""
        if self._closed and self.health.failure is None and self.queued() <= self.high // 2:
            self._closed = False
        w = self.window()
        if w == self._window and not sweep:
            return
        self._window = w
        for l in list(self.links.values()):
            if l.durable:
                l.window(w)

    def _take(self) -> list[Message]:
        """Every message queued now, each once."""
        out = []
        seen: set[int] | None = set() if len(self.subs) > 1 else None
        moved = self._moved
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

    def _append(
        self, batch: list[Message], sync: bool
    ) -> tuple[int, list[tuple[Message, Exception]], tuple[int, int]]:
        """In the worker: append the batch, then sync if asked; returns the
        count appended and (message, error) for each record refused."""
        n = 0
        bad: list[tuple[Message, Exception]] = []
        append = self.writer.append
        relays = self.relays
        for m in batch:
            try:
                rec = record_from_message(m, ts_host=time.time())
                v = vouch(rec, relays)
                if v is not None:
                    if v:
                        self.vouched += 1
                    else:
                        self.unvouched += 1
                append(rec)
                n += 1
            except (TypeError, ValueError) as e:  # a payload the log cannot hold
                bad.append((m, e))
        if sync:
            self.writer.flush()
        return n, bad, self.writer.position()

    def _trip(
        self, fn: Callable[..., Any], *args: Any, marks: dict[str, tuple[Any, Any]] | None = None
    ) -> None:
        """fn(*args) in the worker thread, not awaited: the loop goes on taking
        and sending batches while the worker writes (on a loop that serves
        thousands of links, each await of a result costs a whole turn of it).
        The single worker keeps the trips in order; _back() handles each
        result on the loop, and with ``marks`` (a commit) acknowledges them."""
        fut = asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)
        t0 = time.monotonic()
        fut.add_done_callback(lambda f: self._back(f, marks, t0))
        self._trips.append(fut)

    def _back(
        self, fut: asyncio.Future[Any], marks: dict[str, tuple[Any, Any]] | None, t0: float
    ) -> None:
        """A trip's result, on the loop: a failure fails the log
        (loghealth.fail); a batch written is counted, its refused records
        told; a commit's marks are acknowledged: what they cover is durable
        now; housekeeping's free bytes are looked at (loghealth.space)."""
        if fut.cancelled():
            return
        e = fut.exception()
        if e is not None:
            loghealth.fail(self, e)
            return
        r = fut.result()
        if type(r) is int:  # housekeeping
            loghealth.space(self, r)
            return
        n, bad, self._position = r
        self._refuse(bad)
        self.appended += n
        if marks is None:
            return
        self.last_sync_ms = round(1000 * (time.monotonic() - t0), 3)
        self.syncs += 1
        self.health.backoff.reset()  # a commit made durable: the log works again
        for k, m in marks.items():
            link = self.links.get(k)
            if m[0] is not None and link is not None and m != self._acked.get(k):
                link.acknowledge(m[0])
        self._acked.update(marks)
        self._watch(time.monotonic())

    def _refuse(self, bad: list[tuple[Message, Exception]]) -> None:
        """Each record refused: counted, said, and refused to its device."""
        for m, e in bad:
            self.errors += 1
            log.warning("telemetry: record for %s not written: %s", m.topic, e)
            o = m.origin
            link = self.links.get(o.link_id) if o.link_id else None
            seq = (o.extra or {}).get("seq")
            if link is not None and type(seq) is int:
                link.refuse(
                    seq, "not logged: %s" % e, o.peer_sid if o.peer_sid != link.peer_sid else None
                )

    def gap(self, link: Link, first: int, last: int, why: str, sid: str | None) -> None:
        """A link's gap (Link.on_gap, through the bridge): one host record on
        bridge/gaps, {"node", "sid", "first", "last", "why"} (the peer boot's
        numbers first..last are lost, and why: docs/protocol.md 8)."""
        self.conn.publish(
            GAPS,
            {
                "node": link.peer_node,
                "sid": sid or link.peer_sid,
                "first": first,
                "last": last,
                "why": why,
            },
        )

    def drain(self) -> int:
        """Append everything queued now, here (at close); returns how many."""
        n, bad, self._position = self._append(self._take(), False)
        self._refuse(bad)
        self.appended += n
        self.unsynced += n
        return n

    def _marks(self, sweep: bool) -> dict[str, tuple[Any, Any]]:
        """link_id -> (rx_mark, sessions) of the links that delivered since the
        last commit, or with ``sweep`` of every link: a link acknowledges again
        after a reconnect, even what it acknowledged in its previous session."""
        links = self.links
        if sweep:
            self._t_sweep = time.monotonic()
            ids = list(links)
        else:
            ids = [k for k in self._moved if k in links]
        self._moved = set()
        out = {}
        for k in ids:
            l = links.get(k)
            if l is not None:
                out[k] = (l.rx_mark(), l.counters.get("sessions"))
        return out

    def _sweep_moved(self) -> bool:
        """Whether any link's mark moved without a record (checked at most
        once per IDLE, as it reads every link)."""
        sent = self._sent_marks
        moved = [k for k, v in self._marks(True).items() if v != sent.get(k)]
        self._moved.update(moved)
        return bool(moved)

    def commit(self, batch: Iterable[Message] = ()) -> None:
        """Send one group commit: the marks, the last batch (with ``batch``,
        taken just before: nothing was published in between), a sync point;
        the marks are acknowledged when it is back (_back). Whatever a link
        had delivered when its mark was taken is in that batch or an earlier
        trip's, which the worker wrote first."""
        self._t_commit = time.monotonic()
        # Every IDLE a commit takes every link's mark, so a mark that moves
        # without a record is acknowledged while records keep coming too.
        marks = self._marks(self._t_commit - self._t_sweep >= IDLE)
        self._sent_marks.update(marks)
        batch = list(batch) + self._take()
        self.last_commit_records = self.unsynced + len(batch)
        self.unsynced = 0
        self._trip(self._append, batch, True, marks=marks)

    async def run(self) -> None:
        last_tick = float("-inf")
        period = self.commit_ms / 1000.0
        try:
            while True:
                self.wake.clear()
                if self.health.failure is not None:
                    await loghealth.recover(self)
                    continue
                self._trips = [f for f in self._trips if not f.done()]
                if len(self._trips) >= TRIPS:
                    # The worker is behind: wait for its oldest trip; meanwhile
                    # the queues fill and, at high water, the links hold.
                    await asyncio.wait([self._trips[0]])
                    continue
                now = time.monotonic()
                if now - last_tick >= IDLE:
                    self._trip(loghealth.housekeeping, self)  # age rolls, retention, free space
                    last_tick = now
                    self._watch(now)
                    self.pace(sweep=True)
                elif self._closed:
                    self.pace()
                batch = self._take()
                due = self._t_commit + period
                if now >= due and (
                    batch
                    or self.unsynced
                    or self._moved
                    or (now - self._t_sweep >= IDLE and self._sweep_moved())
                ):
                    self.commit(batch)
                    continue
                if batch:
                    # Written as it comes, without a sync: the commit's batch stays small.
                    self.unsynced += len(batch)
                    self._trip(self._append, batch, False)
                    continue
                timeout = max(0.0, due - now) if self.unsynced else IDLE
                try:
                    await wait_for(self.wake.wait(), timeout)
                except asyncio.TimeoutError:
                    pass
        except asyncio.CancelledError:
            raise
        except Exception as e:  # a bug, not the disk (loghealth.fail): nothing resumes it
            self.health.failure = self.health.failure or loghealth.why(e)
            log.error("telemetry: the appender stopped (%r): nothing more is acknowledged", e)
            raise

    def _held(self) -> int:
        return sum(l.counters.get("held", 0) for l in list(self.links.values()))

    def _watch(self, now: float) -> None:
        """The operator's warning, at most every WARN_EVERY s, while the log
        pushes back on durable links or drops other traffic."""
        d = self.dropped()
        if d != self._drops[0]:
            self._drops = (d, now)
        t, held0, dropped0 = self._warned
        if now - t < WARN_EVERY:
            return
        held = self._held()
        if held == held0 and d == dropped0:
            return
        log.warning(
            "telemetry: the log is behind (%d of %d queued, high water %d): %d data "
            "frame(s) of durable links held back (their devices keep them spooled and "
            "send them again) and %d message(s) of other traffic dropped since the "
            "last warning",
            self.queued(),
            self.queue_len,
            self.high,
            held - held0,
            d - dropped0,
        )
        self._warned = (now, held, d)

    def state(self) -> str:
        """ "failed" (loghealth.py), "pushing back" (durable links held in
        the last few seconds), "dropping" (other traffic refused lately),
        "low space" (below [log] min_free_bytes) or "ok"."""
        now = time.monotonic()
        if self.health.failure is not None:
            return "failed"
        if now - self._t_held < PUSHBACK_RECENT:
            return "pushing back"
        if now - self._drops[1] < WARN_EVERY:
            return "dropping"
        return "low space" if self.health.low() else "ok"

    def close(self) -> None:
        """Let the worker finish its trips, append what is left, then seal
        the active segment (durable). A log that failed, or fails now, is
        closed unsealed, never raising (loghealth.close_failed)."""
        self._pool.shutdown(wait=True)
        if self.health.failure is None:
            try:
                self.drain()
                self.writer.close()
            except Exception as e:
                loghealth.fail(self, e)
        if self.health.failure is not None:
            loghealth.close_failed(self)
        self.unsynced = 0
        self.conn.disconnect()

    def stats(self) -> dict[str, Any]:
        return {
            "dir": self.writer.path,
            "appended": self.appended,
            "dropped": self.dropped(),
            "errors": self.errors,
            "position": list(self._position),
            "commit_ms": self.commit_ms,
            "syncs": self.syncs,
            "last_sync_ms": self.last_sync_ms,
            "unsynced": self.unsynced,
            "queued": self.queued(),
            "queue_len": self.queue_len,
            "high_water": self.high,
            "held": self._held(),
            "state": self.state(),
            "relayed_vouched": self.vouched,
            "relayed_unvouched": self.unvouched,
            **self.health.stats(),
        }
