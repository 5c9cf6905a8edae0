"""Appends chosen host-bus traffic to the telemetry log (tlog/), with group
commit: a sync point at most every commit_ms while records are pending, after
which every device link acknowledges what it had delivered before it."""
import asyncio
import logging
import time

from edgebus.compat import wait_for
from tlog import LogWriter, last_seqs, record_from_message

log = logging.getLogger("edgebus.bridge")

# Longest wait when nothing is pending: writer housekeeping (age rolls,
# retention) and acknowledging links whose traffic the log does not take.
IDLE = 1.0


class Appender:
    """Subscribes to the configured patterns and appends every message (a
    retain is a message too) as one record; a message matched by several
    patterns is written once.

    links is the bridge's dict link_id -> Link (read live). After each group
    commit every link whose rx_mark() moved is told acknowledge(mark): the
    mark is taken before the commit's last drain, and publishing is
    synchronous, so whatever the link had delivered to the bus by then is in
    this appender's queues and is durable once the sync point returns."""

    def __init__(self, bus, cfg, links=None, queue_len=8192):
        self.writer = LogWriter(cfg.log_dir, segment_bytes=cfg.segment_bytes,
                                segment_seconds=cfg.segment_seconds,
                                retention_bytes=cfg.retention_bytes,
                                retention_seconds=cfg.retention_seconds, gateway=cfg.node)
        self.commit_ms = cfg.commit_ms
        self.links = {} if links is None else links
        self.conn = bus.connect(principal=("bridge", "telemetry"))
        self.wake = asyncio.Event()
        self.subs = []
        for p in cfg.log_patterns:
            s = self.conn.subscribe(p, queue_len=queue_len)
            s.wake_on(self.wake)
            self.subs.append(s)
        self.appended = 0
        self.errors = 0
        self.unsynced = 0            # records appended since the last sync point
        self.syncs = 0
        self.last_sync_ms = None     # how long the last sync point took
        self._t_commit = float("-inf")
        self._acked = {}             # link_id -> the mark last acknowledged

    def dropped(self):
        return sum(s.dropped() for s in self.subs)

    def drain(self):
        """Append everything queued now; returns how many records."""
        n = 0
        seen = set()
        for s in self.subs:
            while True:
                m = s.recv_nowait()
                if m is None:
                    break
                if len(self.subs) > 1:
                    if id(m) in seen:
                        continue
                    seen.add(id(m))
                try:
                    self.writer.append(record_from_message(m, ts_host=time.time()))
                    n += 1
                except (TypeError, ValueError) as e:   # a payload JSON cannot hold
                    self.errors += 1
                    log.warning("telemetry: record for %s not written: %s", m.topic, e)
        self.appended += n
        self.unsynced += n
        return n

    def _marks(self):
        """link_id -> (rx_mark, sessions): a link acknowledges again after a
        reconnect, even what it acknowledged in its previous session."""
        return {k: (l.rx_mark(), l.counters.get("sessions")) for k, l in list(self.links.items())}

    def _marks_moved(self):
        return any(v != self._acked.get(k) for k, v in self._marks().items())

    async def commit(self):
        """One group commit: marks, last drain, sync point, acknowledgements."""
        self._t_commit = time.monotonic()
        marks = self._marks()
        self.drain()
        if self.unsynced:
            n = self.unsynced
            t0 = time.monotonic()
            await self._sync()
            self.last_sync_ms = round(1000 * (time.monotonic() - t0), 3)
            self.syncs += 1
            self.unsynced -= n
        for k, m in marks.items():
            link = self.links.get(k)
            if m[0] is not None and link is not None and m != self._acked.get(k):
                link.acknowledge(m[0])
        self._acked = marks

    async def _sync(self):
        """writer.flush() in a thread, so the fsync does not stall the links.
        Nothing else touches the writer meanwhile: only this task drains, and
        a cancelled task waits for the flush before it lets go of the writer."""
        fut = asyncio.get_running_loop().run_in_executor(None, self.writer.flush)
        try:
            await asyncio.shield(fut)
        except asyncio.CancelledError:
            await asyncio.wait([fut])
            raise

    async def run(self):
        last_tick = 0.0
        period = self.commit_ms / 1000.0
        try:
            while True:
                self.wake.clear()
                self.drain()
                now = time.monotonic()
                if now - last_tick >= IDLE:
                    self.writer.tick()      # rolls by age, applies retention
                    last_tick = now
                timeout = IDLE
                if self.unsynced or self._marks_moved():
                    due = self._t_commit + period
                    if now >= due:
                        await self.commit()
                        continue
                    timeout = due - now
                try:
                    await wait_for(self.wake.wait(), timeout)
                except asyncio.TimeoutError:
                    pass
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.error("telemetry: the log failed (%r): nothing more is written or acknowledged",
                      e)
            raise

    def close(self):
        """Append what is left, then seal the active segment (durable)."""
        self.drain()
        self.writer.close()
        self.unsynced = 0
        self.conn.disconnect()

    def stats(self):
        return {"dir": self.writer.path, "appended": self.appended, "dropped": self.dropped(),
                "errors": self.errors, "position": list(self.writer.position()),
                "commit_ms": self.commit_ms, "syncs": self.syncs,
                "last_sync_ms": self.last_sync_ms, "unsynced": self.unsynced}


def resume_links(states, log_dir):
    """After a restart, before the links run: each link's peer state (link_id
    -> state dict) whose peer boot has records in the log expects the next
    sequence number after the last one logged, so that frames the device
    retransmits (logged, but not acknowledged before the bridge died) are
    dropped as duplicates instead of logged twice. Returns how many links.

    The log decides, also when the state file says more: the file is saved
    while frames flow, so its rx_next can be past what was made durable, and
    keeping it would drop the retransmitted frames that were never logged.
    Nothing past the log's last seq was acknowledged (an acknowledgement
    follows the sync point), so the device still holds it."""
    last = last_seqs(log_dir)
    n = 0
    for link_id, st in sorted(states.items()):
        seq = last.get((link_id, st.get("peer_sid")))
        if seq is None:
            continue
        was, st["rx_next"] = st.get("rx_next"), seq + 1
        log.info("log: %s resumes peer boot %s after seq %d in the log (rx_next %d, the state "
                 "file had %s)", link_id, st["peer_sid"], seq, st["rx_next"], was)
        n += 1
    return n
