"""Duty-cycle mode (the config's "sleep"; loaded only when it is set): each
boot is one wake. The services take their readings as ever; the uplink joins
and sends the spool and earlier wakes' journal; the device stays up until its
session has been up "linger" s with no new call (the bridge's mailbox hands
over held calls, and the session's snapshot the retained desired state, at
its start) and the bridge has acknowledged everything it sent, or until
"awake" s run out. Then it
retains sys/sleep (how long it sleeps: the bridge reports it asleep, not
down), says BYE (which writes what is unacknowledged to the flash journal,
sent on the next wake) and deep-sleeps until the next wake, "every" s after
this one began: machine.deepsleep on boards, firmware.sleepsim where there is
none. Cycles, the last wake's length and what was left unacknowledged are in
sys/health ("sleep"), kept across resets in RTC memory where the board has
it, else in STATE beside the config.
"""

import asyncio
import json

from edgebus.compat import now
from firmware import ConfigError, opt, write_atomic

STATE = "sleep.json"
KEYS = ("cycles", "last_awake", "unacked_at_sleep")


def _rtc():
    try:
        import machine

        r = machine.RTC()
        r.memory()
        return r
    except (ImportError, AttributeError, OSError, TypeError):
        return None


class Sleep:
    def __init__(self, ctx, cfg):
        self.ctx = ctx
        self.every = cfg["every"]
        self.awake = opt(cfg, "sleep", "awake")
        self.linger = opt(cfg, "sleep", "linger")
        self.rtc = _rtc()
        self.deepsleep = _deepsleep()
        d = ctx.config_path.rpartition("/")[0] if ctx.config_path else ""
        self.path = (d + "/" if d else "") + STATE
        self.st = self._load()

    def _load(self):
        try:
            raw = self.rtc.memory() if self.rtc is not None else open(self.path).read()
            st = json.loads(raw)
            if type(st) is dict:
                return st
        except (OSError, ValueError, TypeError):
            pass  # first boot, or a power cut cleared the RTC memory
        return {"cycles": 0, "last_awake": None, "unacked_at_sleep": None}

    def _save(self):
        raw = json.dumps(self.st)
        if self.rtc is not None:
            self.rtc.memory(raw)
        else:
            write_atomic(self.path, raw)

    def stats(self):
        s = {"every": self.every}
        for k in KEYS:
            s[k] = self.st.get(k)
        return s

    def unacked(self):
        """Readings not yet acknowledged: this boot's and earlier boots' (journal)."""
        link = self.ctx.link
        n = link.tx_seq - link.tx_acked
        if n == 0:  # the journal's count builds the link's stats: only then
            j = link.stats().get("journal")
            n = j["old_entries"] if j else 0
        return n

    async def run(self):
        ctx = self.ctx
        link = ctx.link
        end = ctx.t0 + self.awake
        quiet = None  # since when the session is up with no new call
        served = -1
        while now() < end or _on_trial(ctx):
            if link.status != "up" or _on_trial(ctx):
                # A bundle on trial commits after its session has settled
                # (firmware/otaswitch.py); a deep sleep before that would be
                # the trial's second boot, and the loader would roll it back.
                quiet = None
            else:
                c = link.counters.get("calls_in", 0)
                if quiet is None or c != served:
                    quiet, served = now(), c  # a call came: linger again after it
                elif now() - quiet >= self.linger and not self.unacked():
                    break
            await asyncio.sleep(0.05)
        ms = int(max(0.1, self.every - (now() - ctx.t0)) * 1000)
        s0 = link.tx_seq
        c = ctx.connect("sys")
        c.retain("sys/sleep", {"ms": ms, "every": self.every, "cycle": self.st["cycles"] + 1})
        t = now()
        # Until the announcement took its sequence number and was acknowledged:
        # the bridge knows; a second at most (else it finds the link down).
        while link.status == "up" and link.tx_acked <= s0 and now() - t < 1:
            await asyncio.sleep(0.02)
        await link.close("sleep")  # BYE; what is unacknowledged goes to the journal
        st = self.st
        st["cycles"] += 1
        st["last_awake"] = round(now() - ctx.t0, 3)
        st["unacked_at_sleep"] = self.unacked()
        self._save()
        ctx.log(
            "sleep: cycle %d, awake %.2f s, %d unacknowledged, sleeping %d ms"
            % (st["cycles"], st["last_awake"], st["unacked_at_sleep"], ms)
        )
        self.deepsleep(ms)


def _on_trial(ctx):
    p = ctx.ota
    return bool(p and p.get("trial") and p.get("boots"))


def _deepsleep():
    """machine.deepsleep (a board: a reset at the wake), else the simulator;
    ConfigError where neither is (the emulated board, whose bundle leaves the
    simulators out)."""
    try:
        import machine

        return machine.deepsleep
    except (ImportError, AttributeError):
        pass
    try:
        from firmware import sleepsim
    except ImportError:
        raise ConfigError("sleep: this runtime has no machine.deepsleep")
    return sleepsim.deepsleep


def start(ctx, cfg):
    """The duty cycle of ctx's device (config "sleep" cfg): ctx.sleep, and its task."""
    ctx.sleep = s = Sleep(ctx, cfg)
    asyncio.create_task(s.run())
    return s
