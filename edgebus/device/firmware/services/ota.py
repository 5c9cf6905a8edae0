"""sys/ota: the device's code replaced over the bus (firmware/README.md,
"Updates over the bus"; docs/protocol.md, "Updates").

One endpoint, sys/ota/op: bytes are a chunk of the transfer, an object an
operation (status, begin, copy, switch, rollback); the status is retained at
sys/ota. Resident is only this dispatch: the transfer (firmware.otaxfer) is
loaded for a transfer, the pointer's changes and a trial's gate
(firmware.otaswitch) for a switch, a rollback or a boot on trial.
"""

import asyncio

from edgebus.compat import now
from firmware import VERSION, transient, unload, write_atomic

IDLE_S = 300  # s without a chunk after which a transfer's code is unloaded
# s between the retained status's updates during a transfer: `edgebus ota
# status` shows staged bytes of total as they grow, not begin's snapshot.
PROGRESS_S = 5


class Ota:
    """The update pointer (ctx.ota, as firmware.loader left it this boot)
    and the transfer in progress, if any."""

    def __init__(self, ctx, conn):
        self.ctx = ctx
        self.conn = conn
        d = ctx.config_path.rpartition("/")[0] if ctx.config_path else ""
        self.base = (d + "/" if d else "") + "ota/"
        if ctx.ota is None:
            ctx.ota = {}
        self.st = ctx.ota
        self.xfer = None
        self.last = self.shown = now()
        self.busy = False  # a switch or rollback under way: the device reboots
        ctx.bundle = self.running()

    def on_trial(self):
        return bool(self.st.get("trial") and self.st.get("boots"))

    def running(self):
        r = self.st.get("trial") if self.on_trial() else self.st.get("good")
        if r:
            return {"version": r.get("version"), "hash": r.get("hash"), "slot": r.get("slot")}
        return {"version": VERSION, "hash": None, "slot": None}

    def status(self):
        x = self.xfer.staged() if self.xfer is not None else None
        run = self.running()
        if self.on_trial():
            s = "trial"
        elif x is not None:
            s = "receiving"
        else:
            s = "committed" if run["hash"] else "idle"
        r = {
            "running": run,
            "state": s,
            "trial": self.st.get("trial") if self.on_trial() else None,
            "staged": x,
            "last_failure": self.st.get("failed"),
            "rollbacks": self.st.get("rollbacks", 0),
        }
        if s == "trial" and not transient("firmware.otaswitch").watchdog():
            r["wdt"] = False  # a hang is not reset (otaswitch is loaded for the trial)
        return r

    def publish(self):
        self.shown = now()
        self.conn.retain("sys/ota", self.status())

    def save(self):
        import json
        import os

        try:
            os.mkdir(self.base[:-1])
        except OSError:
            pass  # exists
        write_atomic(self.base + "state.json", json.dumps(self.st))

    def op(self, p):
        """One request's reply; a ValueError is the refusal's reason."""
        if self.busy:
            raise ValueError("rebooting: a switch or rollback is under way")
        if type(p) is bytes:
            if self.xfer is None:
                raise ValueError("no transfer begun (op begin first)")
            self.last = now()
            r = self.xfer.put(p)
            if self.last - self.shown >= PROGRESS_S:
                self.publish()
            return r
        o = p.get("op") if type(p) is dict else None
        if o == "status":
            return self.status()
        if o == "begin":
            return self.begin(p)
        if o == "copy":
            if self.xfer is None:
                raise ValueError("no transfer begun (op begin first)")
            self.last = now()
            return self.xfer.copy(p)
        if o in ("switch", "rollback"):
            sw = transient("firmware.otaswitch")
            return getattr(sw, o)(self, p)
        raise ValueError(
            "sys/ota/op takes bytes (a chunk) or {op: status|begin|copy|switch|rollback}"
        )

    def begin(self, p):
        if self.on_trial():
            raise ValueError("a trial is running: wait for its commit or rollback")
        if self.xfer is None:
            slot = "b" if self.running()["slot"] == "a" else "a"
            if (self.st.get("prev") or {}).get("slot") == slot:
                self.st["prev"] = None  # that bundle is about to be overwritten
                self.save()
            x = transient("firmware.otaxfer")
            self.xfer = x.Transfer(self.base, slot, self.ctx.board.get("name"))
            asyncio.create_task(_idle(self))  # only while a transfer is held
        self.last = now()
        r = self.xfer.begin(p)
        self.publish()
        return r

    def drop(self):
        """Forget the transfer (what is on flash resumes at the next begin)."""
        self.xfer = None
        unload("firmware.otaxfer")


async def start(ctx, opts):
    ota = Ota(ctx, ctx.connect("sys"))
    ep = ota.conn.bind("sys/ota/op", queue_len=4)
    f = ota.st.get("failed")
    if f and not ota.on_trial():
        ctx.log("OTA: %s was rolled back: %s" % (f.get("version"), f.get("reason")))
    ota.publish()
    if ota.on_trial():
        asyncio.create_task(_trial(ota))
    async for req in ep:
        # Each request on its own: a refusal or an error fails that call with
        # one line, counted, and never ends the endpoint's task.
        try:
            req.reply(ota.op(req.payload))
        except Exception as e:
            ctx.count("ota_refused")
            why = str(e) if isinstance(e, ValueError) else "%s: %s" % (type(e).__name__, e)
            try:
                req.fail("ota: " + why)
            except Exception:
                pass  # the caller times out; the refusal is counted


async def _trial(ota):
    await transient("firmware.otaswitch").trial(ota)
    unload("firmware.otaswitch")  # committed: not resident while the device runs


async def _idle(ota):
    """Unload an abandoned transfer's code; ends with the transfer."""
    while ota.xfer is not None:
        await asyncio.sleep(30)
        if ota.xfer is not None and now() - ota.last > IDLE_S:
            ota.drop()
            ota.publish()
