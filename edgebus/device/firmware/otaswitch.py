"""The update pointer's changes: the switch to a staged bundle, a rollback,
and a trial boot's gate (commit, or why it failed and the reboot that makes
firmware.loader go back). Loaded by the sys/ota service only for these.
"""

import asyncio

from edgebus.compat import now

SETTLE_S = 10  # s of session with no service crash before a trial commits
TRIAL_S = 120  # s a trial has for that unless the switch says otherwise


def switch(ota, p):
    x = ota.xfer
    if x is None:
        raise ValueError("nothing staged (op begin and the files first)")
    h = p.get("hash")
    t = p.get("trial_s", TRIAL_S)
    if type(t) not in (int, float) or not 10 <= t <= 3600:
        raise ValueError("trial_s must be a number of seconds from 10 to 3600")
    x.verify(h)
    w = x.want
    ota.st["trial"] = {"slot": w["slot"], "version": w["version"], "hash": h, "trial_s": t}
    ota.st["boots"] = 0  # firmware.loader counts the trial's boot
    ota.save()
    x.done()
    ota.drop()
    _reboot(ota, "switching to %s (%s) on trial" % (w["version"], h[:12]))
    return {"switching": True, "slot": w["slot"], "in_s": 0.5}


def rollback(ota, p):
    """To the previous bundle ({"op": "rollback"}), or to the factory
    modules ({"op": "rollback", "to": "factory"}); on trial, the trial fails."""
    st = ota.st
    if ota.on_trial():
        st["reason"] = "rolled back by request"
    elif p.get("to") == "factory":
        st["prev"], st["good"] = st.get("good"), None
    else:
        st["good"], st["prev"] = st.get("prev"), st.get("good")
    ota.save()
    g = st.get("good") or {}
    _reboot(ota, "rollback to %s" % g.get("version", "the factory modules"))
    return {"rolling_back": True, "to": g.get("version"), "in_s": 0.5}


def _reboot(ota, why):
    ota.busy = True
    rb = __import__("firmware.services.reboot", None, None, ("_",))
    asyncio.create_task(rb.restart(ota.ctx, why))


def watchdog():
    """Whether a hang on trial is reset: the runtime has what firmware.loader
    arms, machine.WDT or _thread for the simulator; the emulated MPS2-AN385
    has neither (sys/ota's "wdt": false)."""
    try:
        import machine

        if hasattr(machine, "WDT"):
            return True
    except ImportError:
        pass
    try:
        import _thread  # noqa: F401

        return True
    except ImportError:
        return False


def mark(ota, stage):
    ota.st["stage"] = stage
    ota.save()


async def trial(ota):
    """Commit once the session has held SETTLE_S with no service crash,
    within the trial's trial_s; else record why and reboot."""
    ctx = ota.ctx
    t = ota.st["trial"]
    limit = t.get("trial_s", TRIAL_S)
    ctx.log(
        "OTA: %s on trial: commits after %d s of session within %d s"
        % (t["version"], SETTLE_S, limit)
    )
    mark(ota, "started, no session yet")
    up = None
    while ctx.uptime() < limit:
        await asyncio.sleep(1)
        if ctx.counters.get("service_errors"):
            return await fail(ota, "a service crashed: %s" % ctx.crash)
        if ctx.link.status != "up":
            up = None
        elif up is None:
            up = now()
            if ota.st.get("stage") != "session":
                mark(ota, "session")
        elif now() - up >= SETTLE_S:
            return commit(ota)
    await fail(
        ota,
        "no session within %d s" % limit if up is None else "no stable session within %d s" % limit,
    )


def commit(ota):
    st = ota.st
    t = st["trial"]
    t.pop("trial_s", None)
    st["prev"], st["good"], st["trial"] = st.get("good"), t, None
    for k in ("boots", "stage", "reason"):
        st.pop(k, None)
    ota.save()
    ota.ctx.bundle = ota.running()
    ota.ctx.log("OTA: committed %s (%s)" % (t["version"], t["hash"][:12]))
    ota.publish()


async def fail(ota, reason):
    ota.st["reason"] = reason
    ota.save()
    ota.ctx.log("OTA: trial failed: %s; rebooting into the previous bundle" % reason)
    _reboot(ota, "trial failed")
