"""How much MicroPython heap the full device runtime needs, measured.

Runs firmware.main (bus + link + UART uplink + built-in services + the
example sensor) from the .mpy bundle under the real micropython binary with
``-X heapsize=H``, on one end of a pty cable, against a CPython host link on
the other end, and drives a workload through it: session up, sys/info,
periodic sys/health and sensor telemetry, sys/config/get and a valid
sys/config/set (which loads the validator), then a few more seconds.

A run passes when every step answered and the device printed no MemoryError
(the runtime catches some, counts them and carries on: degraded is a fail).
``smallest_heap`` bisects H: the smallest passing heap is the runtime's peak
need, the figure the benchmark prints and the test holds against the board
budget. ``live`` is gc.mem_alloc() after a collection at the end (steady
state), ``code`` the heap the imports alone take.

usage: python -m dev.devheap [--heap 96K | --bisect] [--seconds S]
"""

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile

from edgebus.tools.boardkit import mpybuild
from edgebus.tools.sim.fleet import DEVICE_HEAP
from edgebus.tools.sim.ptycable import PtyCable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NODE, KEY = "d1", "k1"
WAIT = 30.0  # seconds per step: generous, as a loaded CI machine may be slow
# The imports firmware.main makes before any service runs: the code share.
_IMPORTS = (
    "import gc,asyncio;gc.collect();a=gc.mem_alloc();"
    "import edgebus,edgebus.link.link,edgebus.link.stream,firmware.main,"
    "firmware.uplink_uart;"
    "[__import__('firmware.services.'+s) for s in "
    "('ota','info','health','reboot','sysconfig','temp')];"
    "gc.collect();print('CODE',gc.mem_alloc()-a)"
)


def bundle(out=None):
    """edgebus/ and firmware/ compiled to .mpy in out (a new temp dir if None)."""
    out = out or tempfile.mkdtemp(prefix="edgebus-devheap-")
    mpybuild.compile_tree(ROOT, ["edgebus", "firmware"], out)
    return out


def _config(d, port, over):
    p = os.path.join(d, "config-%d.json" % os.getpid())
    with open(p, "w") as f:
        json.dump(config(port, over), f)
    return p


def config(port, over, board="unix"):
    """The workload's device config."""
    cfg = {
        "node": NODE,
        "key": KEY,
        "board": board,
        "uplink": {
            "kind": "uart",
            "port": port,
            "baud": 115200,
            "backoff_min": 0.2,
            "backoff_max": 1,
        },
        "link": {"heartbeat": 0.5, "handshake_timeout": 1.0},
        "services": [{"module": "temp", "period": 0.2}],
        "health_period": 0.3,
    }
    cfg.update(over)
    return cfg


async def _workload(port, seconds, alive, seen=None, calls=0, seal="auto"):
    """The host side; returns the list of steps that answered. seen (a dict)
    gets the last sys/health payload and, when calls > 0, the rate of that
    many sys/config/get calls in a row ("calls_per_s"). seal: the host
    link's (its "auto" refuses an unsealed device: "off" for one)."""
    import serial_asyncio

    import edgebus
    from edgebus.link.link import Link
    from edgebus.link.stream import StreamTransport

    bus = edgebus.Bus(q_length=64)
    link = Link(
        bus,
        "host",
        key=KEY.encode(),
        role="responder",
        imports=[("#", "dev/{node}")],
        import_calls=[("#", "dev/{node}")],
        heartbeat=0.5,
        seal=seal,
    )
    r, w = await serial_asyncio.open_serial_connection(url=port, baudrate=115200)
    task = asyncio.create_task(link.run(StreamTransport(r, w)))
    done = []
    try:
        c = bus.connect(principal="devheap")
        view = c.retained_view("dev/#")
        health = c.subscribe(("dev", NODE, "sys", "health"), queue_len=16)
        temp = c.subscribe(("dev", NODE, "sensor", "temp"), queue_len=16)
        loop = asyncio.get_event_loop()
        t_end = loop.time() + 60
        while link.status != "up" or ("dev", NODE, "sys", "config", "set") not in bus.endpoints():
            if loop.time() > t_end or not alive():
                return done
            await asyncio.sleep(0.05)
        done.append("up")
        while view.get(("dev", NODE, "sys", "info")) is None:
            if loop.time() > t_end or not alive():
                return done
            await asyncio.sleep(0.05)
        done.append("info")
        for _ in range(3):
            await asyncio.wait_for(health.recv(), WAIT)
            await asyncio.wait_for(temp.recv(), WAIT)
        done.append("telemetry")
        got = await c.call(("dev", NODE, "sys", "config", "get"), None, timeout=WAIT)
        assert got["node"] == NODE
        done.append("config/get")
        r = await c.call(
            ("dev", NODE, "sys", "config", "set"), {"health_period": 0.25}, timeout=WAIT
        )
        assert r["saved"] is True
        done.append("config/set")
        await asyncio.sleep(seconds)
        n = 0
        while n < 3:  # still alive and publishing
            h = await asyncio.wait_for(health.recv(), WAIT)
            n += 1
        if seen is not None:
            seen["health"] = h.payload
            if calls:
                t0 = loop.time()
                for _ in range(calls):
                    await c.call(("dev", NODE, "sys", "config", "get"), "node", timeout=WAIT)
                seen["calls_per_s"] = calls / (loop.time() - t0)
        done.append("steady")
    except (asyncio.TimeoutError, AssertionError, edgebus.BusError) as e:
        if seen is not None:  # what the host saw when a step failed
            seen["failed"] = {
                "step": type(e).__name__,
                "error": str(e),
                "link": link.status,
                "last_error": link.last_error,
                "counters": dict(link.counters),
            }
    finally:
        await link.close()
        task.cancel()
    return done


STEPS = ["up", "info", "telemetry", "config/get", "config/set", "steady"]


def run(tree, heap, seconds=2.0, board=None, **config):
    """One run of the device runtime with -X heapsize=heap (bytes or '96K');
    board: a manifest path given to firmware.main; config: keys overridden."""
    heap = str(heap)
    seen: dict = {}
    with tempfile.TemporaryDirectory() as d, PtyCable() as cable:
        cfg = _config(d, cable.a, config)
        p = subprocess.Popen(
            [mpybuild.micropython(), "-X", "heapsize=" + heap, "-m", "firmware.main", cfg]
            + ([board] if board else []),
            cwd=tree,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            done = asyncio.run(_workload(cable.b, seconds, lambda: p.poll() is None, seen))
        finally:
            if p.poll() is None:
                p.kill()
            out = p.communicate(timeout=10)[0]
    m = re.search(r"READY .*mem_alloc=(\d+) .*mem_code=(\d+) mem_data=(\d+)", out)
    ok = done == STEPS and "MemoryError" not in out
    return {
        "heap": heap,
        "ok": ok,
        "steps": done,
        "host": seen.get("failed"),
        "exit": p.returncode,
        "output": out,
        "ready_alloc": int(m.group(1)) if m else None,
        "code": int(m.group(2)) if m else None,
        "data": int(m.group(3)) if m else None,
    }


def code_heap(tree):
    """Heap bytes the runtime's imports take (collected, asyncio excluded)."""
    r = subprocess.run(
        [mpybuild.micropython(), "-X", "heapsize=1M", "-c", _IMPORTS],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=60,
    )
    m = re.search(r"CODE (\d+)", r.stdout)
    if not m:
        raise RuntimeError("import failed:\n" + r.stdout + r.stderr)
    return int(m.group(1))


def smallest_heap(tree, lo=32, hi=256, step=4, seconds=2.0, run=run):
    """Bisect the smallest heap (KB, multiple of step) that passes run()."""
    if not run(tree, "%dK" % hi, seconds)["ok"]:
        raise RuntimeError("the device runtime fails even with %d KB of heap" % hi)
    lo //= step
    hi //= step
    while lo + 1 < hi:  # invariant: hi passes, lo fails (or untested floor)
        mid = (lo + hi) // 2
        if run(tree, "%dK" % (mid * step), seconds)["ok"]:
            hi = mid
        else:
            lo = mid
    return hi * step


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m dev.devheap", description=__doc__.splitlines()[0])
    ap.add_argument(
        "--heap",
        default=DEVICE_HEAP,
        help="heap for a single run (default %s, the fleet's)" % DEVICE_HEAP,
    )
    ap.add_argument("--bisect", action="store_true", help="find the smallest heap that works")
    ap.add_argument("--seconds", type=float, default=2.0, help="steady-state time per run")
    ap.add_argument("-v", action="store_true", help="print the device output")
    a = ap.parse_args(argv)
    tree = bundle()
    print("code (imports):", code_heap(tree), "bytes")
    if a.bisect:
        print(
            "smallest heap that runs the workload: %d KB" % smallest_heap(tree, seconds=a.seconds)
        )
        return 0
    r = run(tree, a.heap, a.seconds)
    if a.v or not r["ok"]:
        print(r["output"])
    print(
        "heap %s: %s, steps %s; at READY: %s bytes allocated, %s code, %s data"
        % (
            r["heap"],
            "ok" if r["ok"] else "FAILED",
            r["steps"],
            r["ready_alloc"],
            r["code"],
            r["data"],
        )
    )
    return 0 if r["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
