"""The time step: sets the device's clock from NTP (the config's "time":
{"ntp": host, "every": s}) once the network is up, before the uplink's first
HELLO, and again every "every" s; a failed query is retried with backoff.
Until the first sync the device withholds its clock (compat.wall), so the
bridge's alignment at the handshake stands in, as without this step; "ntp":
null trusts the board's RTC instead. A sync that moves the clock while a
session runs ends the session, so the next HELLO carries the new clock.
sys/health "clock" says which clock the readings carry.

NTP is micropython-lib's `ntptime` (required by the boards with a network:
boards/README.md); its query blocks the device for up to ntptime.timeout
(1 s) and has 1 s resolution. The RTC is machine.RTC; where none exists (the
unix port) "rtc": "firmware.rtcsim" names the simulator, which has its API.
Loaded only when "time" is configured.
"""

import asyncio
import time

from edgebus import compat
from edgebus.backoff import Backoff
from firmware import ConfigError, opt

FIRST_WAIT = 15  # s the uplink's start waits for the network and the first query
STEP_MS = 1000  # a sync that moves the clock by more ends the session


class Clock:
    def __init__(self, ctx, cfg):
        self.ctx = ctx
        self.host = cfg.get("ntp")
        self.every = opt(cfg, "time", "every")
        drv = opt(cfg, "time", "rtc")
        try:
            mod = __import__(drv)
            for part in drv.split(".")[1:]:
                mod = getattr(mod, part)
            self.rtc = mod.RTC()
        except (ImportError, AttributeError):
            raise ConfigError(
                'time: no %s.RTC on this runtime; "rtc": "firmware.rtcsim" simulates one' % drv
            )
        self.ntp = None
        if self.host:
            try:
                import ntptime
            except ImportError:
                raise ConfigError(
                    "time: no ntptime module (micropython-lib's) in this firmware: "
                    "mpremote mip install ntptime"
                )
            ntptime.host = self.host
            self.ntp = ntptime
        compat.wall[0] = "bridge" if self.host else "rtc"
        self.backoff = Backoff(opt(cfg, "time", "retry"), self.every)
        self.queried = asyncio.Event()
        self.synced_at = None  # Unix s of the last sync
        self.offset_ms = None  # how far the last sync moved the clock
        self.syncs = 0
        self.failures = 0
        self.last_error = None

    async def first(self, then):
        """Run the step, and coroutine then (the uplink) after its first query
        (FIRST_WAIT at most: then runs in any case). A task of its own: the
        device's main loop, which feeds the watchdog, never waits for it."""
        if self.ntp is not None:
            asyncio.create_task(self.run())
            try:
                await compat.wait_for(self.queried.wait(), FIRST_WAIT)
            except asyncio.TimeoutError:
                pass
        await then

    def sync(self):
        """One query and the RTC set from it (as ntptime.settime does); the
        clock's move in ms (None: it was not set before)."""
        src = compat.wall[0]
        compat.wall[0] = None  # the clock itself, even while withheld
        try:
            old = compat.wall_ms()
            tm = time.gmtime(self.ntp.time())
            self.rtc.datetime((tm[0], tm[1], tm[2], tm[6] + 1, tm[3], tm[4], tm[5], 0))
            return compat.wall_ms() - old if old is not None else None
        finally:
            compat.wall[0] = src

    async def run(self):
        log = self.ctx.log
        net = self.ctx.net
        bo = self.backoff
        while True:
            if net is not None and not net.up.is_set():
                await net.up.wait()
            src = compat.wall[0]
            try:
                step = self.sync()
            except Exception as e:  # OSError, a timeout, a bad reply: retried
                self.failures += 1
                if isinstance(e, OSError) and e.args and e.args[0] in (11, 110):
                    e = "no answer within %s s" % self.ntp.timeout  # EAGAIN, ETIMEDOUT
                else:
                    e = "%s: %s" % (type(e).__name__, e)
                self.last_error = "ntp %s: %s" % (self.host, e)
                self.queried.set()
                d = bo.next()
                log("time: %s; %s clock, again in %.0f s" % (self.last_error, src, d))
                await asyncio.sleep(d)
                continue
            compat.wall[0] = "ntp"
            self.syncs += 1
            self.synced_at = compat.wall_ms() // 1000
            self.offset_ms = step
            self.last_error = None
            bo.reset()
            self.queried.set()
            log("time: set from ntp %s (moved %s ms)" % (self.host, step))
            if src != "ntp" or step is None or abs(step) > STEP_MS:
                up = self.ctx.uplink
                if up is not None and up.transport is not None:
                    log("time: a new session, so the bridge reads the new clock")
                    up.network_lost()
            await asyncio.sleep(self.every)

    def stats(self):
        return {
            "source": "bridge" if compat.wall_ms() is None else compat.wall[0],
            "ntp": self.host,
            "synced_at": self.synced_at,
            "offset_ms": self.offset_ms,
            "syncs": self.syncs,
            "failures": self.failures,
            "last_error": self.last_error,
        }
