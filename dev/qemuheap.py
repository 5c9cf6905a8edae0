"""The device runtime's figures on a real 32-bit board: the emulated MPS2-AN385.

Builds the firmware (edgebus frozen in; cached by its inputs) with a given GC
heap, boots it in qemu-system-arm with the workload's config (the same as
dev/devheap.py's on the unix port) and drives the same workload over the
emulated UART: session, sys/info, telemetry, sys/config/get and set, steady
state. Reports the heap at READY and with the session up, boot-to-READY time,
calls per second over the UART, the image and its frozen share; ``--bisect``
finds the smallest heap the workload runs in (a build per step, ~30 s each).

``--costs`` measures the core's heap costs on the board (import, per
subscription, per retained topic, per publish) with mpremote over its REPL,
and the same script on the unix port beside them.

``--ota`` pushes an update over the bus to the board (``ota_update``): the
runtime's bundle over its emulated UART through a bridge process, with
``edgebus ota push`` as a user runs it; the heap during the transfer and on
the trial boot, the time, whether it committed. With ``--bisect``, the
smallest heap in which it commits.

usage: python -m dev.qemuheap [--heap 64K | --bisect [--step KB] | --costs | --ota]
                               [--seal MODE] [--micropython SRC]
"""

import argparse
import asyncio
import json
import os
import re
import shutil
import subprocess
import tempfile
import time

from dev import devheap
from dev.harness.bridge import BridgeProcess
from dev.harness.process import env, run_module
from edgebus.tools.boardkit import boards, build, executables, firmware, mpybuild
from edgebus.tools.sim import qemuboard

BOARD = "qemu-mps2-an385"
TARBALL = os.path.join(
    os.path.dirname(devheap.ROOT), "shared", "micropython", "micropython-1.28.0.tar.xz"
)


def _kb(heap):
    return int(str(heap).rstrip("K")) * 1024 if str(heap).endswith("K") else int(heap)


def run(src, heap, seconds=2.0, calls=0, log=lambda *a: None, seal="auto"):
    """One boot with a heap of `heap` bytes (or "48K"): devheap.run's dict plus
    boot_s, health and calls_per_s, and the build's sizes in "build". seal:
    the device's link.seal and the host link's ("off": an unsealed session)."""
    board = boards.load_board(BOARD)
    meta = firmware.build(board, src, heap=_kb(heap), log=log)
    with tempfile.TemporaryDirectory() as state:
        cfg = devheap.config(1, {}, board=BOARD)
        cfg["link"]["seal"] = seal
        qemuboard.prepare_flash(board, state, qemuboard.device_files(board, cfg))
        qb = qemuboard.QemuBoard(board, meta["image"], state, repl="pty", uart="pty")
        t0 = time.monotonic()
        qb.start()
        con = qemuboard.Console(qb.repl_port)
        try:
            try:
                con.wait_for("READY", 30)
                boot_s = time.monotonic() - t0
            except AssertionError:
                boot_s = None
            seen = {}
            done = (
                asyncio.run(devheap._workload(qb.uart_port, seconds, qb.alive, seen, calls, seal))
                if boot_s is not None
                else []
            )
        finally:
            con.close()
            qb.close()
        out = con.text
    m = re.search(r"READY .*mem_alloc=(\d+) mem_free=(\d+) mem_code=(\d+) mem_data=(\d+)", out)
    ok = done == devheap.STEPS and "MemoryError" not in out

    def g(i):
        return int(m.group(i)) if m else None

    return {
        "heap": _kb(heap),
        "ok": ok,
        "steps": done,
        "output": out,
        "boot_s": boot_s,
        "ready_alloc": g(1),
        "ready_free": g(2),
        "code": g(3),
        "data": g(4),
        "health": seen.get("health"),
        "calls_per_s": seen.get("calls_per_s"),
        "build": {k: meta[k] for k in ("image_bytes", "frozen_bytes", "bss_bytes")},
    }


# gc.mem_alloc() deltas; the topic is a string, so a publish includes its split.
COSTS = """\
import gc
gc.collect(); a0 = gc.mem_alloc()
import asyncio
gc.collect(); a1 = gc.mem_alloc()
import edgebus
gc.collect(); a2 = gc.mem_alloc()
b = edgebus.Bus(); c = b.connect()
N = 40
gc.collect(); a = gc.mem_alloc()
subs = [c.subscribe("s/%d" % i, queue_len=8) for i in range(N)]
gc.collect(); sub = (gc.mem_alloc() - a) / N
names = ["r/%d" % i for i in range(N)]
gc.collect(); a = gc.mem_alloc()
for n in names:
    c.retain(n, 1)
gc.collect(); ret = (gc.mem_alloc() - a) / N
s1 = c.subscribe("p/x", queue_len=8)
for i in range(20):
    c.publish("p/x", i); s1.recv_nowait()
gc.collect(); gc.disable(); a = gc.mem_alloc()
for i in range(100):
    c.publish("p/x", i); s1.recv_nowait()
pub = (gc.mem_alloc() - a) / 100
gc.enable()
print("COSTS asyncio=%d core=%d sub=%.0f retained=%.0f publish=%.1f"
      % (a1 - a0, a2 - a1, sub, ret, pub))
"""


def costs(src):
    """{"board": line, "unix": line} of COSTS's figures."""
    board = boards.load_board(BOARD)
    meta = firmware.build(board, src, log=lambda *a: None)
    out = {}
    with tempfile.TemporaryDirectory() as d:
        script = os.path.join(d, "costs.py")
        with open(script, "w") as f:
            f.write(COSTS)
        state = os.path.join(d, "board")
        qemuboard.prepare_flash(board, state, qemuboard.device_files(board, None, main=None))
        with qemuboard.QemuBoard(board, meta["image"], state, repl="pty", uart="null") as qb:
            qb.start()
            r = subprocess.run(
                executables.command("mpremote") + ["connect", qb.repl_port, "run", script],
                capture_output=True,
                text=True,
                timeout=60,
            )
            out["board"] = (r.stdout + r.stderr).strip()
        tree = os.path.join(d, "unix")
        mpybuild.compile_tree(devheap.ROOT, ["edgebus"], tree)
        shutil.copy(script, tree)
        r = subprocess.run(
            [mpybuild.micropython(), "-X", "heapsize=256K", "costs.py"],
            cwd=tree,
            capture_output=True,
            text=True,
            timeout=60,
        )
        out["unix"] = (r.stdout + r.stderr).strip()
    return out


# -- an update over the bus (firmware/README.md, "Updates over the bus")

# docs/devices.md's [[acl]] entry for a user who updates devices.
OTA_ACL = """
[[acl]]
uid = %d
read = ["dev/+/sys/#"]
call = ["dev/+/sys/ota/#"]
"""
OTA_BRIDGE = """[bridge]
node = "gw"
state_dir = "%(dir)s/state"
socket = "%(dir)s/bridge.sock"
heartbeat = 1
[[serial]]
node = "%(node)s"
port = "%(port)s"
key = "%(key)s"
"""
OTA_MAX_HEAP = 128 * 1024  # where --ota --bisect starts from (it commits there)
OTA_VERSION = "9.9.9"  # the version ota_update's bundle is built as
_READY = re.compile(r"READY .*fw=(\S+) .*mem_alloc=(\d+)")


def ota_config(**over):
    """The board's config for an update: the workload's (devheap.config) with
    a sys/health report and a sensor reading every second."""
    cfg = devheap.config(1, {"health_period": 1}, board=BOARD)
    cfg["services"] = [{"module": "temp", "period": 1}]
    cfg.update(over)
    return cfg


class OtaRig:
    """The board (its loader as main.py, `config` on its flash) and a bridge
    process joined to its UART by a [[serial]] link, the bridge's socket open
    to this user under docs/devices.md's [[acl]] for updates: what the update test
    and ota_update run. A context manager: entered once the board is READY
    and the bridge's socket is up."""

    def __init__(self, board, image, workdir, config):
        self.board, self.image, self.dir, self.config = board, image, str(workdir), config
        self.node = config["node"]
        self.qb = self.con = self.bridge = None

    def __enter__(self):
        try:
            state = os.path.join(self.dir, "board")
            files = qemuboard.device_files(self.board, self.config)
            qemuboard.prepare_flash(self.board, state, files)
            self.qb = qemuboard.QemuBoard(self.board, self.image, state, repl="pty", uart="pty")
            self.qb.start()
            self.con = qemuboard.Console(self.qb.repl_port)
            self.con.wait_for("READY", 30)
            toml = os.path.join(self.dir, "bridge.toml")
            with open(toml, "w") as f:
                f.write(
                    OTA_BRIDGE
                    % {
                        "dir": self.dir,
                        "node": self.node,
                        "port": self.qb.uart_port,
                        "key": self.config["key"],
                    }
                    + OTA_ACL % os.getuid()
                )
            self.bridge = BridgeProcess(self.dir, toml=toml).start().ready()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        for part in (self.bridge, self.con, self.qb):
            if part is not None:
                part.close()

    def ota(self, *args, timeout=300):
        """`edgebus ota ARGS` as the user runs it: the CompletedProcess."""
        e = dict(env(), EDGEBUS_SOCKET=self.bridge.sock)
        return run_module("edgebus.tools.cli", "ota", *args, timeout=timeout, env=e)

    def readies(self):
        """[(fw, mem_alloc)] of each READY line the board printed, boot by boot."""
        return [(v, int(a)) for v, a in _READY.findall(self.con.text)]

    def watch(self):
        """An OtaWatch of the board through the bridge's socket."""
        return OtaWatch(self.bridge.sock, self.node)


class OtaWatch:
    """The board's sys/ topics on the bridge's host bus as this user sees
    them: ``get(leaf)`` its retained sys/<leaf> (info, ota), ``health`` every
    sys/health report with the host's time it came at, [(monotonic, payload)].
    An async context manager."""

    def __init__(self, sock, node):
        self.sock, self.node = sock, node
        self.health = []

    async def __aenter__(self):
        import edgebus
        from edgebus.client.local import attach_local

        bus = edgebus.Bus(q_length=64)
        self.link, self._task = await attach_local(bus, self.sock, node="ota-watch")
        c = bus.connect(principal="watch")
        self.view = c.retained_view("dev/%s/sys/#" % self.node)
        self._drain = asyncio.create_task(
            self._collect(c.subscribe("dev/%s/sys/health" % self.node, queue_len=64))
        )
        return self

    async def _collect(self, sub):
        while True:
            m = await sub.recv()
            self.health.append((time.monotonic(), m.payload))

    def get(self, leaf):
        m = self.view.get(("dev", self.node, "sys", leaf))
        return m.payload if m is not None and isinstance(m.payload, dict) else None

    async def until(self, leaf, cond, timeout=60):
        """The retained sys/<leaf> once cond(it) holds; AssertionError after
        timeout seconds, with the last value."""
        from dev.harness.poll import until

        def ok():
            v = self.get(leaf)
            return v if v is not None and cond(v) else None

        return await until(ok, timeout, lambda: "sys/%s: %s" % (leaf, self.get(leaf)), step=0.05)

    async def __aexit__(self, *exc):
        self._drain.cancel()
        await self.link.close()
        self._task.cancel()


async def _timed_push(rig, w, bundle, h, *args):
    """`edgebus ota push` of bundle (hash h) to the rig's board, timed by the
    host: (CompletedProcess, its start (monotonic), {"begin": the device's
    first answer to begin, "switch": its log's switch, "commit": sys/ota
    committed to h, "end": the command's end}, seconds from the start)."""
    t0 = time.monotonic()
    run = asyncio.ensure_future(
        asyncio.to_thread(rig.ota, "push", "--bundle", bundle, "--to", rig.node, "--yes", *args)
    )
    i0 = len(rig.con.text)
    marks = {
        "begin": lambda: (w.get("ota") or {}).get("state") == "receiving",
        "switch": lambda: rig.con.text.find("reboot: switching to", i0) >= 0,
        "commit": lambda: (
            (w.get("ota") or {}).get("state") == "committed"
            and w.get("ota")["running"]["hash"] == h
        ),
    }
    t = {}
    while True:
        done = run.done()
        for k, f in marks.items():
            if k not in t and f():
                t[k] = time.monotonic() - t0
        if done:
            t["end"] = time.monotonic() - t0
            return run.result(), t0, t
        await asyncio.sleep(0.02)


def ota_update(heap="64K", src=None, log=lambda *a: None):
    """An update over the bus on the board with a GC heap of `heap` (bytes or
    "64K"): the runtime's bundle (edgebus build, version OTA_VERSION) pushed
    over its emulated UART (115,200 baud) by `edgebus ota push` through a
    bridge process. {"heap", "bundle_bytes" (ota.jsonl's files), "files",
    "line_s" (bundle_bytes * 10 / 115200: the line's own limit), "seconds"
    (push start to the commit the board retains in sys/ota; None: no
    commit), "transfer_s" (the board's first answer to begin to its switch,
    which checks every file on flash), "push_s" (the whole command),
    "ready_alloc" (the heap at READY before the update), "peak_alloc" (the
    highest sys/health mem_alloc from the push's start to its end, the trial
    boot's included: live heap after a collection, reported every second),
    "transfer_alloc" (the same up to the switch: the transfer's, with the
    factory's code), "trial_alloc" (at READY on the trial boot, whose code
    is the bundle's, loaded into the heap; None: it never got there),
    "committed", "outcome" (the push's line for the board)}."""
    from edgebus.tools.commands import otaplan

    board = boards.load_board(BOARD)
    src = src or os.environ.get(firmware.ENV_SOURCE) or TARBALL
    meta = firmware.build(board, src, heap=_kb(heap), log=log)
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "bundle")
        build.build(board, out, bundle_version=OTA_VERSION, log=lambda s: None)
        b = otaplan.load_bundle(out)
        files = b.meta["files"]

        async def update(rig):
            async with rig.watch() as w:
                await w.until("ota", lambda v: True)
                return await _timed_push(rig, w, out, b.hash), w.health

        with OtaRig(board, meta["image"], d, ota_config()) as rig:
            (r, t0, t), health = asyncio.run(update(rig))
            text = rig.con.text
    ready = _READY.search(text)
    # The trial boot's READY: the first after the switch, unless the boot that
    # printed it is the rollback's (its ota service says so before READY).
    i = text.find("reboot: switching to")
    trial = _READY.search(text, i) if i >= 0 else None
    if trial and text.find(" was rolled back: ", i, trial.start()) >= 0:
        trial = None

    def peak(upto):
        seen = [p["mem_alloc"] for at, p in health if 0 <= at - t0 <= upto]
        return max(seen) if seen else None

    nbytes = sum(f[1] for f in files)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith(ota_config()["node"] + ": ")]
    return {
        "heap": _kb(heap),
        "bundle_bytes": nbytes,
        "files": len(files),
        "line_s": round(nbytes * 10 / 115200, 2),
        "seconds": t.get("commit"),
        "transfer_s": t["switch"] - t["begin"] if "switch" in t and "begin" in t else None,
        "push_s": t["end"],
        "ready_alloc": int(ready.group(2)) if ready else None,
        "peak_alloc": peak(t["end"]),
        "transfer_alloc": peak(t.get("switch", t["end"])),
        "trial_alloc": int(trial.group(2)) if trial else None,
        "committed": r.returncode == 0 and "commit" in t,
        "outcome": lines[-1] if lines else (r.stdout + r.stderr).strip(),
    }


def _ota_step(src, heap):
    r = ota_update(heap, src)
    print(json.dumps(r))
    return r["committed"]


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m dev.qemuheap", description=__doc__.splitlines()[0])
    ap.add_argument("--heap", default="64K", help="GC heap (default 64K, the board's budget)")
    ap.add_argument("--bisect", action="store_true", help="find the smallest heap that works")
    ap.add_argument("--micropython", default=os.environ.get(firmware.ENV_SOURCE) or TARBALL)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--costs", action="store_true", help="the core's heap costs only")
    ap.add_argument("--ota", action="store_true", help="an update over the bus (ota_update)")
    ap.add_argument("--step", type=int, default=4, help="bisection step in KB (default 4)")
    ap.add_argument(
        "--seal",
        default="auto",
        help="the device's link.seal and the host "
        "link's (default auto: sealed, mac on this board; off: unsealed)",
    )
    a = ap.parse_args(argv)
    if a.costs:
        for k, v in costs(a.micropython).items():
            print("%-5s %s" % (k, v))
        return
    if a.ota:
        print(json.dumps(ota_update(a.heap, a.micropython, log=print), indent=1))
        if a.bisect:
            hi = devheap.smallest_heap(
                None,
                lo=_kb(a.heap) // 1024,
                hi=OTA_MAX_HEAP // 1024,
                step=a.step,
                run=lambda _t, h, _s: {"ok": _ota_step(a.micropython, h)},
            )
            print("smallest heap in which the update commits: %d KB" % hi)
        return
    r = run(a.micropython, a.heap, a.seconds, calls=50, log=print, seal=a.seal)
    r.pop("output")
    print(json.dumps(r, indent=1))
    if a.bisect:
        hi = devheap.smallest_heap(
            None,
            lo=24,
            hi=_kb(a.heap) // 1024,
            step=a.step,
            seconds=a.seconds,
            run=lambda _t, h, s: run(a.micropython, h, s, log=print, seal=a.seal),
        )
        print("smallest heap that runs the workload: %d KB" % hi)


if __name__ == "__main__":
    main()
