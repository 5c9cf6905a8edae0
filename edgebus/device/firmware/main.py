"""Device runtime entry point: main(config_path, board) (firmware/README.md).

Reads and validates the config, starts the bus, the built-in and user
services, and keeps the uplink alive; feeds the watchdog on boards.
"""

import asyncio
import gc
import sys

from edgebus.compat import now, wait_for
from firmware import VERSION, ConfigError, mem, opt, transient, unload

try:
    import machine
except ImportError:  # unix port, CPython
    machine = None


# The watchdog a boot on trial runs when the config sets none: once started a
# board's WDT cannot be stopped, so it stays on (fed) after the commit.
TRIAL_WDT_MS = 30000


class Ctx:
    """What a service gets: the bus, the config, the link, a logger."""

    def __init__(self, bus, cfg, path, board):
        self.bus = bus
        self.config = cfg
        self.config_path = path
        self.board = board
        self.node = cfg["node"]
        self.t0 = now()
        self.link = None
        self.uplink = None
        self.net = None  # the WiFi station (firmware/wifi.py), when configured
        self.sleep = None  # the duty cycle (firmware/sleep.py), when configured
        self.clock = None  # the time step (firmware/clock.py), when configured
        self.ota = None  # the update pointer (firmware/loader.py), None: no update yet
        self.bundle = None  # the bundle running: {"version", "hash", "slot"} (sys/ota)
        self.crash = None  # the last service crash, "name: Error: message"
        self.spool = None  # the link spool's buffer, allocated first
        self.counters = {}
        self._sys = None
        self.exit_code = None
        self._stop = asyncio.Event()

    def connect(self, name):
        """A connection acting as ("svc", name). The built-in services share
        one, "sys": a connection is ~250 B of a 32-bit board's heap."""
        if name != "sys":
            return self.bus.connect(principal=("svc", name))
        if self._sys is None:
            self._sys = self.bus.connect(principal=("svc", "sys"))
        return self._sys

    def log(self, msg):
        try:
            print("[%9.3f] %s" % (now() - self.t0, msg))
        except MemoryError:  # logging must never take its caller down with it
            self.count("log_dropped")

    def count(self, name, n=1):
        self.counters[name] = self.counters.get(name, 0) + n

    def uptime(self):
        return now() - self.t0

    def stop(self, code=0):
        """End main() with this exit code (the reboot service on unix)."""
        self.exit_code = code
        self._stop.set()

    async def guard(self, name, mod, opts):
        """Run a service; a crash is logged and counted, then it starts again."""
        while True:
            try:
                r = mod.start(self, opts)
                if r is not None and hasattr(r, "send"):  # a coroutine: runs until it ends
                    await r
                return
            except Exception as e:
                self.count("service_errors")
                self.crash = "%s: %s: %s" % (name, type(e).__name__, e)
                self.log(
                    "service %s crashed: %s: %s; restarting in 5 s" % (name, type(e).__name__, e)
                )
                await asyncio.sleep(5)


def watchdog(cfg, trial):
    """The watchdog of watchdog_ms, else TRIAL_WDT_MS on a boot on trial (an
    update that hangs is reset and rolled back): machine.WDT, else the
    simulator (firmware.wdtsim) on runtimes without one; None when off, or
    on trial where the runtime has neither a WDT nor the threads the
    simulator needs (the emulated MPS2-AN385): then a hang is not reset."""
    ms = opt(cfg, "", "watchdog_ms") or (TRIAL_WDT_MS if trial else 0)
    if not ms:
        return None
    if machine is not None and hasattr(machine, "WDT"):
        return machine.WDT(timeout=ms)
    try:
        return transient("firmware.wdtsim").WDT(timeout=ms)
    except ImportError:  # no _thread
        if opt(cfg, "", "watchdog_ms"):
            raise ConfigError("watchdog_ms: this runtime has no machine.WDT nor _thread")
        return None  # a trial still runs


def _ready(ctx, names, a, f, code, data):
    """Say READY, with the heap's figures (and that no manifest came with it)."""
    b = ctx.board
    if b.get("manifest") is None:
        ctx.log(
            "no board manifest (board.json): running built-in defaults, spool %d bytes "
            "and no heap budget; deploy the bundle built for this board" % b["queues"]["spool"]
        )
    ctx.log(
        "READY node=%s fw=%s board=%s manifest=%s services=%s mem_alloc=%s mem_free=%s "
        "mem_code=%s mem_data=%s"
        % (ctx.node, VERSION, b.get("name"), b.get("manifest"), ",".join(names), a, f, code, data)
    )


async def run(cfg, path, board):
    boot = transient("firmware.boot")
    ptr = boot.read_pointer(path)
    trial = bool(ptr and ptr.get("trial") and ptr.get("boots"))
    # On trial the watchdog runs before the services start: a bundle that
    # hangs in its start is reset, and the loader goes back.
    wdt = watchdog(cfg, True) if trial else None
    ctx, names, code = await boot.start(cfg, path, board, Ctx, ptr)
    boot = None
    gc.collect()
    a0 = mem()[0]
    unload("firmware.boot")  # start-up code: not resident while the device runs
    gc.collect()
    a, f = mem()
    if code is not None:
        code -= a0 - a
    data = a - code if a is not None else None
    up = ctx.uplink
    if ctx.net is not None:
        asyncio.create_task(ctx.net.run())
    if cfg.get("time"):
        # NTP before the uplink's first HELLO, which carries the clock
        ctx.clock = transient("firmware.clock").Clock(ctx, cfg["time"])
        asyncio.create_task(ctx.clock.first(up.run()))
    else:
        asyncio.create_task(up.run())
    if cfg.get("sleep"):
        transient("firmware.sleep").start(ctx, cfg["sleep"])
    if wdt is None:
        wdt = watchdog(cfg, False)
    if wdt is not None:
        ctx.log("watchdog on: %d ms" % (opt(cfg, "", "watchdog_ms") or TRIAL_WDT_MS))
    elif trial:
        ctx.log("no watchdog: this runtime has no machine.WDT nor _thread; a hang is not reset")
    _ready(ctx, names, a, f, code, data)
    # reboot_after: a device whose uplink cannot come back by itself (a heap
    # too fragmented to build a HELLO, a wedged radio driver) is reset. One
    # local (t_up), the limit read each time: each local is a slot of this
    # coroutine's frame, which a board holds all along.
    t_up = now()
    while not ctx._stop.is_set():
        if wdt is not None:
            wdt.feed()  # fed only while the scheduler runs
        if ctx.link is None or ctx.link.status == "up":
            t_up = now()
        elif opt(cfg, "", "reboot_after") and now() - t_up >= opt(cfg, "", "reboot_after"):
            await transient("firmware.services.reboot").restart(
                ctx, "no session for %d s (reboot_after)" % opt(cfg, "", "reboot_after"), 0
            )
        try:
            await wait_for(ctx._stop.wait(), 1)
        except asyncio.TimeoutError:
            pass
    return ctx.exit_code or 0


# Why the last main() failed to start the device (the loader records it
# when a bundle on trial fails).
error = None


def main(config_path="config.json", board=None):
    """Run the device; returns the exit code (2: bad config)."""
    global error
    try:
        cfg = transient("firmware.config").load(config_path)
        unload("firmware.config")
        board = transient("firmware.boot").load_board(
            board if board is not None else cfg.get("board")
        )
        return asyncio.run(run(cfg, config_path, board))
    except ConfigError as e:
        error = "config error: %s" % e
        print("edgebus firmware: config error: %s: %s" % (config_path, e), file=sys.stderr)
        return 2
    except MemoryError:
        # Loading the runtime itself (before boot's own check can say so): a
        # line that says what to do, not a traceback through an import.
        gc.collect()
        m = mem()
        error = "out of heap (%s of %s bytes free)" % (
            m[1],
            m[0] + m[1] if m[0] is not None else None,
        )
        print(
            "edgebus firmware: %s: give it more heap (the unix port: micropython -X "
            "heapsize=256K)" % error,
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":
    sys.exit(
        main(
            sys.argv[1] if len(sys.argv) > 1 else "config.json",
            sys.argv[2] if len(sys.argv) > 2 else None,
        )
    )
