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
                self.log(
                    "service %s crashed: %s: %s; restarting in 5 s" % (name, type(e).__name__, e)
                )
                await asyncio.sleep(5)


async def run(cfg, path, board):
    boot = transient("firmware.boot")
    ctx, names, code = await boot.start(cfg, path, board, Ctx)
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
    asyncio.create_task(up.run())
    wdt = None
    ms = opt(cfg, "", "watchdog_ms")
    if ms and machine is not None and hasattr(machine, "WDT"):
        wdt = machine.WDT(timeout=ms)
        ctx.log("watchdog on: %d ms" % ms)
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
    while not ctx._stop.is_set():
        if wdt is not None:
            wdt.feed()  # fed only while the scheduler runs
        try:
            await wait_for(ctx._stop.wait(), 1)
        except asyncio.TimeoutError:
            pass
    return ctx.exit_code or 0


def main(config_path="config.json", board=None):
    """Run the device; returns the exit code (2: bad config)."""
    try:
        cfg = transient("firmware.config").load(config_path)
        unload("firmware.config")
        board = transient("firmware.boot").load_board(
            board if board is not None else cfg.get("board")
        )
        return asyncio.run(run(cfg, config_path, board))
    except ConfigError as e:
        print("edgebus firmware: config error: %s: %s" % (config_path, e), file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(
        main(
            sys.argv[1] if len(sys.argv) > 1 else "config.json",
            sys.argv[2] if len(sys.argv) > 2 else None,
        )
    )
elif sys.platform not in ("linux", "darwin", "win32"):
    # A board: the bundle's main.py (written by edgebus build) is
    # "import firmware.main", so importing it at boot runs the device. A bad
    # config returns here and the board falls to its REPL with the message.
    main()
