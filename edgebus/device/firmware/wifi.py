"""The network step: keeps a board's WiFi station joined (the config's
"network": {"ssid", "password"}), before and while the uplink runs. The
uplink waits for it before it opens a transport (no backoff spent on a dead
network) and is told when the access point goes, so it drops its transport
at once; the station rejoins with backoff and jitter. Joins, drops, failures,
RSSI and the last error are in sys/health ("network").

Boards: MicroPython's `network` module (network.WLAN). Where no radio exists
(the unix port, the emulated board) "driver": "firmware.wlansim" names the
simulator, which has the same API. Loaded only when "network" is configured.
"""

import asyncio

from edgebus.backoff import Backoff
from edgebus.compat import now
from firmware import opt

# The status codes that end a join attempt, by their names in the port's
# network module (not every port has every one).
FAILS = (
    "STAT_WRONG_PASSWORD",
    "STAT_NO_AP_FOUND",
    "STAT_CONNECT_FAIL",
    "STAT_ASSOC_FAIL",
    "STAT_HANDSHAKE_TIMEOUT",
    "STAT_BEACON_TIMEOUT",
)


class Wifi:
    def __init__(self, ctx, cfg):
        self.ctx = ctx
        drv = opt(cfg, "network", "driver")
        mod = __import__(drv)
        for part in drv.split(".")[1:]:
            mod = getattr(mod, part)
        self.mod = mod
        self.wlan = mod.WLAN(mod.STA_IF)
        self.ssid = cfg["ssid"]
        self.password = cfg.get("password")
        self.join_timeout = opt(cfg, "network", "join_timeout")
        self.backoff = Backoff(
            opt(cfg, "network", "backoff_min"), opt(cfg, "network", "backoff_max")
        )
        self.up = asyncio.Event()
        self.state = "down"
        self.joins = 0
        self.drops = 0
        self.failures = 0
        self.last_error = None

    def _failed(self, s):
        for n in FAILS:
            if getattr(self.mod, n, None) == s:
                return n[5:].lower()
        return None

    async def _join(self):
        """True once the station has an address, else False with last_error set."""
        w = self.wlan
        w.connect(self.ssid, self.password)
        t0 = now()
        while now() - t0 < self.join_timeout:
            if w.isconnected():
                return True
            why = self._failed(w.status())
            if why is not None:
                self.last_error = "join %s: %s" % (self.ssid, why)
                break
            await asyncio.sleep(0.2)
        else:
            self.last_error = "join %s: no address within %s s" % (self.ssid, self.join_timeout)
        w.disconnect()
        return False

    async def run(self):
        log = self.ctx.log
        w = self.wlan
        w.active(True)
        bo = self.backoff
        while True:
            self.state = "joining"
            if await self._join():
                self.joins += 1
                self.state = "up"
                bo.reset()
                log("network: joined %s (#%d, rssi %s)" % (self.ssid, self.joins, self.rssi()))
                self.up.set()
                while w.isconnected():
                    await asyncio.sleep(1)
                self.up.clear()
                self.drops += 1
                self.state = "down"
                self.last_error = "lost %s" % self.ssid
                log("network: lost %s; the uplink waits for the rejoin" % self.ssid)
                up = self.ctx.uplink
                if up is not None:
                    up.network_lost()
                continue  # rejoin at once: an AP that rebooted is often back soon
            self.failures += 1
            self.state = "down"
            log("network: %s" % self.last_error)
            await asyncio.sleep(bo.next())

    def rssi(self):
        try:
            return self.wlan.status("rssi")
        except (OSError, ValueError, TypeError):
            return None

    def stats(self):
        return {
            "state": self.state,
            "rssi": self.rssi() if self.state == "up" else None,
            "joins": self.joins,
            "drops": self.drops,
            "failures": self.failures,
            "last_error": self.last_error,
        }
