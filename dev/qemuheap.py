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

usage: python -m dev.qemuheap [--heap 64K | --bisect [--step KB] | --costs] [--seal MODE]
                               [--micropython SRC]
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
from edgebus.tools import boards, executables, firmware, mpybuild, qemuboard

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


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m dev.qemuheap", description=__doc__.splitlines()[0])
    ap.add_argument("--heap", default="64K", help="GC heap (default 64K, the board's budget)")
    ap.add_argument("--bisect", action="store_true", help="find the smallest heap that works")
    ap.add_argument("--micropython", default=os.environ.get(firmware.ENV_SOURCE) or TARBALL)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--costs", action="store_true", help="the core's heap costs only")
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
