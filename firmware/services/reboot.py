"""sys/reboot: replies, says BYE on the uplink, then machine.reset() on boards;
on the unix port and CPython the process exits with status 3 (a supervisor
such as systemd with Restart=always starts it again)."""

import asyncio

try:
    import machine
except ImportError:
    machine = None

EXIT_REBOOT = 3


async def start(ctx, opts):
    c = ctx.connect("sys")
    ep = c.bind("sys/reboot")
    req = await ep.recv()
    delay = opts.get("delay", 0.5)
    req.reply({"rebooting": True, "in_s": delay})
    ctx.log("reboot requested over the bus (from %s)" % (req.origin.peer_node,))
    await asyncio.sleep(delay)  # lets the reply reach the caller
    await ctx.link.close("reboot")
    if machine is not None and hasattr(machine, "reset"):
        machine.reset()
    ctx.log("REBOOT: exiting with status %d for the supervisor to restart" % EXIT_REBOOT)
    ctx.stop(EXIT_REBOOT)
