"""Device start-up, once per boot: the board manifest, the service modules,
the session id, the runtime's objects and the heap budget check.

Loaded by firmware.main for the start and unloaded once the device is READY
(firmware.transient): its code is not resident while the device runs.
"""

import asyncio
import gc
import time
from os import urandom

import edgebus
from firmware import ConfigError, mem, opt, write_atomic

# ota first: its start says which bundle runs (ctx.bundle) before sys/info.
BUILTIN = ("ota", "info", "health", "reboot", "sysconfig")
# Heap kept free for transients (JSON, calls, sys/config/set loading the
# validator) unless the board manifest sets budget.reserve: the measured
# transient peak of the full runtime on the unix port is ~15 KB (dev/devheap.py).
RESERVE = 16384
# What a device runs when no board manifest reaches it (a bundle assembled by
# hand): the smallest spool of the boards that run the runtime (esp32,
# rp2-pico-w) and no heap budget, since the board is unknown. sys/info and
# sys/health say so ("manifest": null) rather than pass them off as a board's.
DEFAULTS = {
    "queues": {"bus": 8, "full": "drop_oldest", "uplink_tx": 16, "uplink_rx": 8, "spool": 24576},
    "uart": {"baud": 115200},
}
# Where edgebus build, deploy, flash and the fleet put the manifest: the
# filesystem root on boards, the working directory on the unix port.
MANIFEST = "board.json"


def _import(name):
    """A service module: firmware.services.<name> if it exists, else <name>."""
    full = "firmware.services." + name
    try:
        m = __import__(full)
    except ImportError as e:
        if not _missing(e, full):
            raise  # the module exists: its own ImportError, or one of its imports'
        return __import__(name, None, None, ("_",))
    for part in full.split(".")[1:]:
        m = getattr(m, part)
    return m


def _missing(e, full):
    """Is e the ImportError of module full (or a package on its way there,
    below firmware.services) not existing? Only the exact words say so:
    MicroPython's "no module named 'x'", CPython's "No module named 'x'",
    a terse build's "module not found"; a service whose own message names
    itself is not missing."""
    s = str(e)
    if s == "module not found":
        return True
    s = s.lower()
    while full != "firmware.services":
        if s == "no module named '%s'" % full:
            return True
        full = full.rpartition(".")[0]
    return False


# What the runtime reads of a board manifest; the rest (prose, build and flash
# settings for the host's tools) is dropped when read from a file: kept in
# ctx.board it took ~0.5 KB of heap on the 32-bit board for nothing. edgebus
# build writes only these into a bundle's board.json (edgebus.tools.boardkit.boards.runtime_files).
RUNTIME_KEYS = ("name", "runtime", "uplink", "uart", "queues", "budget")


def load_board(board):
    """The board values the device runs, with "manifest": where they came
    from (None: the built-in DEFAULTS). board: a manifest dict, a manifest
    path (ending .json), or the config's board name or None, which read
    board.json. A board.json for another board than the config names stops
    the device (ConfigError): its queues and budget are not this board's."""
    if type(board) is dict:
        b = dict(board)
        b.setdefault("manifest", "given")
        return b
    import json

    path = board if board is not None and board.endswith(".json") else MANIFEST
    try:
        with open(path) as f:
            m = json.load(f)
    except OSError:
        if path != MANIFEST:
            raise ConfigError("no board manifest at %s" % path)
        b = dict(DEFAULTS)
        b["name"] = board
        b["manifest"] = None
        return b
    except ValueError as e:
        raise ConfigError(
            "board manifest %s is not valid JSON (%s): rebuild and deploy the "
            "bundle (edgebus build, edgebus deploy)" % (path, e)
        )
    if type(m) is not dict or "name" not in m:
        raise ConfigError(
            "board manifest %s has no board name: rebuild and deploy the bundle" % path
        )
    if path == MANIFEST and board is not None and m["name"] != board:
        raise ConfigError(
            "%s is the manifest of board %s but the config says board %s: deploy "
            "the bundle built for %s (edgebus build --board %s) or correct the "
            "config's board" % (path, m["name"], board, board, board)
        )
    b = dict((k, m[k]) for k in RUNTIME_KEYS if k in m)
    b["manifest"] = path
    return b


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
            raise ConfigError("service %r cannot be loaded: %s" % (name, str(e) or "ImportError"))
        if not hasattr(mod, "start"):
            raise ConfigError("service %r has no start(ctx, opts)" % name)
        out.append((name, mod, opts))
    return out


def check_budget(board, data, feeds):
    """Refuse a config whose runtime data (heap bytes at READY beyond the code:
    data, plus the link's export feeds) and the board's reserve for
    transients exceed the board's heap budget."""
    b = board.get("budget") or {}
    lim = b.get("heap")
    reserve = b.get("reserve")
    if reserve is None:  # absent, or null as the manifest's schema fills it
        reserve = RESERVE
    if lim and data is not None and data + feeds + reserve > lim:
        raise ConfigError(
            "this config needs %d bytes of heap for its data (%d at boot, %d for the link's "
            "export feeds) plus %d in reserve, over the %s board's budget of %d (budget.heap "
            "in boards/%s.json): lower queues.bus, link.out_queue or link.max_pending, or run "
            "fewer services"
            % (data + feeds, data, feeds, reserve, board.get("name"), lim, board.get("name"))
        )


def boot_sid(path):
    """This boot's session id: the boot number kept in the file at path (one
    more each boot) as its first 6 hex digits, then 10 of a hash of that number
    and whatever entropy the board has. A board without a good random source
    (an emulator, a chip without RNG seeded alike each power-on) thus never
    repeats a sid, and the host's generation for it always moves on. With no
    path (a Ctx built without a config file) the sid rests on entropy only."""
    import hashlib
    from binascii import hexlify

    n = 0
    if path is not None:
        try:
            with open(path) as f:
                n = int(f.read().strip() or 0)
        except (OSError, ValueError):
            pass  # first boot, or a damaged counter: the hash still differs
        n += 1
        try:
            write_atomic(path, "%d\n" % n)
        except OSError:
            n = 0  # no writable filesystem: entropy only
    t = time.ticks_us() if hasattr(time, "ticks_us") else time.time_ns()
    h = hashlib.sha256(("%d %d " % (n, t)).encode() + urandom(16)).digest()
    return "%06x%s" % (n & 0xFFFFFF, hexlify(h[:5]).decode())


async def start(cfg, path, board, ctx_class, pointer=None):
    """The bus, a ctx_class context, the uplink and the services, started:
    (ctx, service names, code bytes) once the services took their first step.
    pointer: the update pointer this boot runs by (read_pointer)."""
    q = dict(DEFAULTS["queues"])
    q.update(board.get("queues", {}))
    q.update(cfg.get("queues", {}))
    n = q["spool"] = cfg.get("link", {}).get("spool", q["spool"])
    # ctx.board holds what the device runs (sys/info reports it), the
    # config's overrides included.
    if "out_queue" in cfg.get("link", {}):
        q["uplink_tx"] = cfg["link"]["out_queue"]
    board = dict(board)
    board["queues"] = q
    try:
        # The link's spool first: its one large block is found easily before
        # the code is loaded around the heap (later, 46 KB free can hold no 20 KB).
        spool = bytearray(n)
    except MemoryError:
        raise ConfigError("no room for a link.spool of %d bytes: lower it" % n)
    from firmware.uplink import Uplink

    svcs = load_services(cfg)
    gc.collect()  # code loaded: collect before the long-lived objects, less fragmentation
    code = mem()[0]
    if code is not None:
        code -= len(spool)  # data, not code
    try:
        bus = edgebus.Bus(q_length=q["bus"], full=q["full"])
        ctx = ctx_class(bus, cfg, path, board)
        ctx.spool = spool
        ctx.ota = pointer
        counter = None  # the boot counter sits beside the config file
        if path is not None:
            d = path.rpartition("/")[0]
            counter = (d + "/" if d else "") + "bootcount"
        ctx.uplink = up = Uplink(ctx, boot_sid(counter))
        ctx.link = up.link
        if cfg.get("network"):
            ctx.net = _network(ctx, cfg["network"])
        gc.collect()
        a0 = mem()[0]
        # The export feeds before the services: what they publish from their
        # first step on is spooled (started after them, the first reading of
        # every boot was published to no one).
        up.link.start()
        gc.collect()
        feeds = mem()[0] - a0 if a0 is not None else 0
        names = start_services(ctx, svcs)
        await asyncio.sleep(0.05)  # let the services take their first step
    except MemoryError:
        raise _no_heap()
    gc.collect()
    a = mem()[0]
    check_budget(board, a - code - feeds if a is not None else None, feeds)
    return ctx, names, code


def _no_heap():
    """The ConfigError of a start that ran out of heap: how much there is, and
    what to do."""
    gc.collect()
    m = mem()
    return ConfigError(
        "out of heap while starting (%s of %s bytes free): give it more heap (the unix "
        "port: micropython -X heapsize=256K), or lower queues.bus, link.out_queue or "
        "link.max_pending, or run fewer services"
        % (m[1], m[0] + m[1] if m[0] is not None else None)
    )


def _network(ctx, cfg):
    """The WiFi station (firmware/wifi.py) of the config's "network"."""
    try:
        from firmware.wifi import Wifi

        return Wifi(ctx, cfg)
    except ImportError as e:
        raise ConfigError(
            "network: no %s module in this build (%s): a board without a radio "
            'has no network step; "driver": "firmware.wlansim" simulates one'
            % (opt(cfg, "network", "driver"), e)
        )


def read_pointer(path):
    """The update pointer (ota/state.json beside the config, as
    firmware.loader left it this boot), or None."""
    import json

    d = path.rpartition("/")[0] if path else ""
    try:
        with open((d + "/" if d else "") + "ota/state.json") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def start_services(ctx, svcs):
    for name, mod, opts in svcs:
        asyncio.create_task(ctx.guard(name, mod, opts))
    return [s[0] for s in svcs]
