"""Appends chosen host-bus traffic to the telemetry log (tlog/)."""
import asyncio
import logging
import time

from edgebus.compat import wait_for
from tlog import LogWriter, record_from_message

log = logging.getLogger("edgebus.bridge")


class Appender:
    """Subscribes to the configured patterns and appends every message (a
    retain is a message too) as one record; a message matched by several
    patterns is written once."""

    def __init__(self, bus, cfg, queue_len=8192):
        self.writer = LogWriter(cfg.log_dir, segment_bytes=cfg.segment_bytes,
                                segment_seconds=cfg.segment_seconds,
                                retention_bytes=cfg.retention_bytes,
                                retention_seconds=cfg.retention_seconds)
        self.conn = bus.connect(principal=("bridge", "telemetry"))
        self.wake = asyncio.Event()
        self.subs = []
        for p in cfg.log_patterns:
            s = self.conn.subscribe(p, queue_len=queue_len)
            s.wake_on(self.wake)
            self.subs.append(s)
        self.appended = 0
        self.errors = 0

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
        return n

    async def run(self):
        last_tick = 0.0
        while True:
            self.wake.clear()
            self.drain()
            now = time.monotonic()
            if now - last_tick >= 1.0:
                self.writer.tick()      # rolls by age, applies retention
                last_tick = now
            try:
                await wait_for(self.wake.wait(), 1.0)
            except asyncio.TimeoutError:
                pass

    def close(self):
        """Append what is left, then seal the active segment (durable)."""
        self.drain()
        self.writer.close()
        self.conn.disconnect()

    def stats(self):
        return {"dir": self.writer.path, "appended": self.appended, "dropped": self.dropped(),
                "errors": self.errors, "position": list(self.writer.position())}
