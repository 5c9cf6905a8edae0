"""sys/info (retained): firmware version, board and the board values in force
(manifest, queues with the spool, budget), implementation, uptime, heap, reset
cause; retained again every info_period seconds (uptime moves)."""

import asyncio
import sys

from firmware import VERSION, mem, opt

try:
    import machine
except ImportError:
    machine = None

_CAUSES = ("PWRON_RESET", "HARD_RESET", "WDT_RESET", "DEEPSLEEP_RESET", "SOFT_RESET")


def reset_cause():
    if machine is None or not hasattr(machine, "reset_cause"):
        return None
    c = machine.reset_cause()
    for n in _CAUSES:
        if getattr(machine, n, None) == c:
            return n.lower()
    return c


def info(ctx):
    im = sys.implementation
    v = im.version
    a, f = mem()
    b = ctx.board
    # The board values in force: "manifest" null means the built-in defaults.
    return {
        "fw": VERSION,
        "bundle": ctx.bundle,
        "node": ctx.node,
        "board": b.get("name"),
        "manifest": b.get("manifest"),
        "queues": b.get("queues"),
        "budget": b.get("budget"),
        "impl": "%s %d.%d.%d" % (im.name, v[0], v[1], v[2]),
        "platform": sys.platform,
        "uptime": int(ctx.uptime()),
        "mem_free": f,
        "mem_alloc": a,
        "reset_cause": reset_cause(),
        "seal": ctx.link.opts.seal if ctx.link else None,
    }


async def start(ctx, opts):
    c = ctx.connect("sys")
    while True:
        c.retain("sys/info", info(ctx))
        await asyncio.sleep(opts.get("period", opt(ctx.config, "", "info_period")))
