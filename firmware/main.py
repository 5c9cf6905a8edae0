"""Device runtime entry point: main(config_path, board) (firmware/README.md).

Reads and validates the config, starts the bus, the built-in and user
services, and keeps the uplink alive; feeds the watchdog on boards.
"""
import sys
import gc
import asyncio
import edgebus
from edgebus.compat import now, wait_for
from firmware import VERSION, ConfigError, mem, transient, unload

try:
    import machine
except ImportError:       # unix port, CPython
    machine = None

BUILTIN = ("info", "health", "reboot", "sysconfig")
# Heap kept free for transients (JSON, calls, sys/config/set loading the
# validator) unless the board manifest sets budget.reserve: the measured
# transient peak of the full runtime on the unix port is ~15 KB (dev/devheap.py).
RESERVE = 16384
# Defaults when no board manifest is given (the unix board's values).
BOARD = {"name": "unix", "queues": {"bus": 8, "full": "drop_oldest", "uplink_tx": 16,
                                    "spool": 24576}, "uart": {"baud": 115200}}


def _import(name):
    """A service module: firmware.services.<name> if it exists, else <name>."""
    for full in ("firmware.services." + name, name):
        try:
            m = __import__(full)
        except ImportError as e:
            if full == name:
                raise
            if name.replace(".", "/") not in str(e) and name not in str(e):
                raise         # the module exists but an import inside it failed
            continue
        for part in full.split(".")[1:]:
            m = getattr(m, part)
        return m


# What the runtime reads of a board manifest; the rest (prose, build and flash
# settings for the host's tools) is dropped when read from a file: kept in
# ctx.board it took ~0.5 KB of heap on the 32-bit board for nothing.
RUNTIME_KEYS = ("name", "runtime", "uplink", "uart", "queues", "budget")


def _runtime(b):
    return dict((k, b[k]) for k in RUNTIME_KEYS if k in b)


def load_board(board):
    """board: a manifest dict, a board name or path (boards/<name>.json), or None
    (the board's own board.json if it has one, as edgebus flash writes it)."""
    if type(board) is dict:
        return board
    if board is None:
        import json
        try:
            with open("board.json") as f:
                return _runtime(json.load(f))
        except (OSError, ValueError):
            return BOARD
    import json
    for p in (board, "boards/%s.json" % board, "board.json"):
        try:
            with open(p) as f:
                b = json.load(f)
            if p != "board.json" or b.get("name") == board:
                return _runtime(b)
        except (OSError, ValueError):
            pass
    # No manifest on the device (deploy copies none): the unix defaults, named.
    b = dict(BOARD)
    b["name"] = board
    return b


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
        self.spool = None      # the link spool's buffer, allocated first
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
        except MemoryError:   # logging must never take its caller down with it
            self.count("log_dropped")

    def count(self, name, n=1):
        self.counters[name] = self.counters.get(name, 0) + n

    def uptime(self):
        return now() - self.t0

    def stop(self, code=0):
        """End main() with this exit code (the reboot service on unix)."""
        self.exit_code = code
        self._stop.set()


async def _guard(ctx, name, mod, opts):
    """Run a service; a crash is logged and counted, then it starts again."""
    while True:
        try:
            r = mod.start(ctx, opts)
            if r is not None and hasattr(r, "send"):   # a coroutine: runs until it ends
                await r
            return
        except Exception as e:
            ctx.count("service_errors")
            ctx.log("service %s crashed: %s: %s; restarting in 5 s"
                    % (name, type(e).__name__, e))
            await asyncio.sleep(5)


def load_services(cfg):
    """[(name, module, opts)] for the built-in and configured services."""
    svcs = [(n, {}) for n in BUILTIN]
    for s in cfg.get("services", ()):
        if type(s) is str:
            svcs.append((s, {}))
        else:
            svcs.append((s["module"], s))
    out = []
    for name, opts in svcs:
        try:
            mod = _import(name)
        except ImportError as e:
            raise ConfigError("service %r cannot be loaded: %s" % (name, e))
        if not hasattr(mod, "start"):
            raise ConfigError("service %r has no start(ctx, opts)" % name)
        out.append((name, mod, opts))
    return out


def start_services(ctx, svcs):
    for name, mod, opts in svcs:
        asyncio.create_task(_guard(ctx, name, mod, opts))
    return [s[0] for s in svcs]


def check_budget(board, data, session):
    """Refuse a config whose runtime data (heap bytes at READY beyond the code,
    plus what a session adds) and the board's reserve for transients exceed
    the board's heap budget."""
    b = board.get("budget") or {}
    lim = b.get("heap")
    reserve = b.get("reserve", RESERVE)
    if lim and data is not None and data + session + reserve > lim:
        raise ConfigError(
            "this config needs %d bytes of heap for its data (%d at boot, %d for the link's "
            "export feeds) plus %d in reserve, over the %s board's budget of %d (budget.heap "
            "in boards/%s.json): lower queues.bus, link.out_queue or link.max_pending, or run "
            "fewer services" % (data + session, data, session, reserve, board.get("name"), lim,
                                board.get("name")))


async def run(cfg, path, board):
    q = dict(board.get("queues", {}))
    q.update(cfg.get("queues", {}))
    n = cfg.get("link", {}).get("spool", q.get("spool", 24576))
    try:
        # The link's spool first: its one large block is found easily before
        # the code is loaded around the heap (later, 46 KB free can hold no 20 KB).
        spool = bytearray(n)
    except MemoryError:
        raise ConfigError("no room for a link.spool of %d bytes: lower it" % n)
    from firmware.uplink import Uplink
    svcs = load_services(cfg)
    gc.collect()   # code loaded: collect before the long-lived objects, less fragmentation
    code = mem()[0]
    if code is not None:
        code -= len(spool)    # data, not code
    try:
        bus = edgebus.Bus(q_length=q.get("bus", 8), full=q.get("full", "drop_oldest"))
        ctx = Ctx(bus, cfg, path, board)
        ctx.spool = spool
        ctx.uplink = up = Uplink(ctx)
        ctx.link = up.link
        names = start_services(ctx, svcs)
        await asyncio.sleep(0.05)   # let the services take their first step
    except MemoryError:
        gc.collect()
        raise ConfigError("out of heap while starting (%s bytes free): lower queues.bus, "
                          "link.out_queue or link.max_pending, or run fewer services"
                          % mem()[1])
    gc.collect()
    a, f = mem()
    data = a - code if a is not None else None
    check_budget(board, data, up.session_heap())
    asyncio.create_task(up.run())
    wdt = None
    ms = cfg.get("watchdog_ms", 0)
    if ms and machine is not None and hasattr(machine, "WDT"):
        wdt = machine.WDT(timeout=ms)
        ctx.log("watchdog on: %d ms" % ms)
    ctx.log("READY node=%s fw=%s board=%s services=%s mem_alloc=%s mem_free=%s "
            "mem_code=%s mem_data=%s" % (ctx.node, VERSION, board.get("name"),
                                         ",".join(names), a, f, code, data))
    while not ctx._stop.is_set():
        if wdt is not None:
            wdt.feed()            # fed only while the scheduler runs
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
        board = load_board(board if board is not None else cfg.get("board"))
        return asyncio.run(run(cfg, config_path, board))
    except ConfigError as e:
        print("edgebus firmware: config error: %s: %s" % (config_path, e), file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "config.json",
                  sys.argv[2] if len(sys.argv) > 2 else None))
elif sys.platform not in ("linux", "darwin", "win32"):
    # A board: the bundle's main.py (written by edgebus build) is
    # "import firmware.main", so importing it at boot runs the device. A bad
    # config returns here and the board falls to its REPL with the message.
    main()
