"""sys/reboot: replies, says BYE on the uplink, then machine.reset() on boards;
on the unix port and CPython the process exits with status 3 (a supervisor
such as systemd with Restart=always starts it again)."""

import asyncio

try:
    import machine
except ImportError:
    machine = None

EXIT_REBOOT = 3


async def restart(ctx, why, delay=0.5):
    """Reboot the device: after delay (a reply reaches its caller), BYE on the
    link, then the reset (boards) or exit status 3 (unix port, CPython)."""
    ctx.log("reboot: %s" % why)
    await asyncio.sleep(delay)
    await ctx.link.close("reboot")
    if machine is not None and hasattr(machine, "reset"):
        machine.reset()
    ctx.log("REBOOT: exiting with status %d for the supervisor to restart" % EXIT_REBOOT)
    ctx.stop(EXIT_REBOOT)


async def start(ctx, opts):
    c = ctx.connect("sys")
    ep = c.bind("sys/reboot")
    req = await ep.recv()
    delay = opts.get("delay", 0.5)
    req.reply({"rebooting": True, "in_s": delay})
    await restart(ctx, "requested over the bus (from %s)" % (req.origin.peer_node,), delay)
