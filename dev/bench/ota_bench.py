"""Updates over the bus (BENCHMARKS.md section 9): `edgebus ota push` of the
full runtime's bundle (edgebus build --board unix) to fleet devices (the real
firmware on the MicroPython unix port) through the bridge: one device over a
115,200-baud pty, in one run the whole bundle as it is, the whole bundle
compressed and a one-service change (a delta: the device copies the rest),
beside the line's physical limit; one device over MQTT, and a fleet over MQTT
in one wave; and the emulated 32-bit board's heap during an update over its
UART (dev/qemuheap.ota_update)."""

import os
import re
import shutil
import subprocess
import tempfile
import time

from dev.harness.ota import mqtt_fleet, ota, ready_bridge
from edgebus.tools.boardkit import boards, build, devicefiles
from edgebus.tools.commands import otaplan
from edgebus.tools.sim.fleet import Fleet

BAUD = 115200
LINE = re.compile(r"^(\S+): committed \S+ in \d+ s \(sent (\d+) of (\d+) bytes in ([\d.]+) s\)$")
# The one-service change: the temp service's reading moves by a degree.
SERVICE = ("services/temp.py", "21.0 + 3.0 *", "22.0 + 3.0 *")
# The serial device's pushes, in order: (name, bundle, flags). Each bundle
# differs from the one the device runs; the two deltas are each a
# one-service change from the full push before them (paired runs).
SERIAL = (
    ("plain", "a", ("--full", "--no-compress")),
    ("full", "b1", ("--full",)),
    ("delta", "c1", ()),
    ("full", "b2", ("--full",)),
    ("delta", "c2", ()),
)


def _bundles(tmp):
    """{name: bundle dir}: a, b1, b2 the runtime as it is, c1 and c2 with the
    temp service changed, each built from the same copied sources (so they
    differ in that file and their version only); and its bytes and files."""
    src = os.path.join(tmp, "src", "firmware")
    shutil.copytree(
        devicefiles.FIRMWARE_DIR, src, ignore=shutil.ignore_patterns("__pycache__", "*.md")
    )
    out = {}
    for names in (("a", "b1", "b2"), ("c1", "c2")):
        if names[0] == "c1":
            path, old, new = SERVICE
            with open(os.path.join(src, path)) as f:
                text = f.read()
            if old not in text:
                raise RuntimeError("%s no longer holds %r: update ota_bench.SERVICE" % (path, old))
            with open(os.path.join(src, path), "w") as f:
                f.write(text.replace(old, new, 1))
        for n in names:
            out[n] = os.path.join(tmp, "bundle-" + n)
            build.build(
                boards.load_board("unix"),
                out[n],
                [devicefiles.CORE_DIR, src],
                bundle_version="bench-" + n,
                log=lambda s: None,
            )
    m = otaplan.load_bundle(out["a"]).meta
    return out, sum(f[1] for f in m["files"]), len(m["files"])


def _push(bridge, fleet, bundle, parallel=1, flags=()):
    """Push bundle to every device of the fleet through its ready bridge:
    (wall seconds from the command's start to its end, {node: {"sent_s",
    "sent" (the bundle's bytes in puts), "total" (the bundle's)}})."""
    t0 = time.monotonic()
    r = ota(
        bridge.sock,
        *("push", "--bundle", bundle, "--to", "*", "--yes", "--canary", "0"),
        *("--parallel", str(parallel), "--trial-s", "60", *flags),
    )
    wall = time.monotonic() - t0
    sent = {
        m.group(1): {"sent_s": float(m.group(4)), "sent": int(m.group(2)), "total": int(m.group(3))}
        for m in map(LINE.match, r.stdout.splitlines())
        if m
    }
    if r.returncode != 0 or len(sent) != len(fleet.devices):
        raise RuntimeError("edgebus ota push failed:\n%s\n%s" % (r.stdout, r.stderr))
    return wall, sent


def _serial(tmp, bundles):
    """The SERIAL pushes to one device over the paced pty: a list of
    {"name", "sent_s", "sent", "total", "wall_s", "wire_bytes"}."""
    out = []
    with Fleet(os.path.join(tmp, "fleet"), serial=1, baud=BAUD) as fleet:
        fleet.start()
        with ready_bridge(tmp, fleet) as bridge:
            cable = fleet.cables[0]
            for name, b, flags in SERIAL:
                b0 = cable.bytes["b_to_a"]
                wall, sent = _push(bridge, fleet, bundles[b], flags=flags)
                r = dict(list(sent.values())[0], name=name, wall_s=wall)
                r["wire_bytes"] = cable.bytes["b_to_a"] - b0
                out.append(r)
    return out


def _mqtt(tmp, bundle, n):
    with mqtt_fleet(tmp, n) as (fleet, bridge):
        wall, sent = _push(bridge, fleet, bundle, parallel=n, flags=("--full",))
        return wall, {k: v["sent_s"] for k, v in sent.items()}


# The emulated board's heaps: its budget (the bundle's code is larger: refused
# before the transfer), and one the trial boot fits in (the slot's .mpy code
# loads into the heap; the frozen modules ran from flash).
BOARD_HEAPS = ("64K", "144K")


def _bytes(heap):
    """A heap size as BOARD_HEAPS writes it ("64K") in bytes."""
    return int(heap[:-1]) * 1024


def _board():
    """The emulated board's figures per heap (a heap's {"heap", "error"} says
    why it has none), or {"error"} saying why there are none."""
    try:
        from dev import qemuheap
    except Exception as e:  # the part's other figures stand without it
        return {"error": "%s: %s" % (type(e).__name__, e)}
    out = {}
    for h in BOARD_HEAPS:
        try:
            out[h] = qemuheap.ota_update(h)
        except subprocess.TimeoutExpired as e:  # the other heap's figures stand without it
            out[h] = {"heap": _bytes(h), "error": "the push took more than %g s" % e.timeout}
        except Exception as e:
            out[h] = {"heap": _bytes(h), "error": "%s: %s" % (type(e).__name__, e)}
    return out


def run(smoke=False):
    n = 2 if smoke else 20
    res = {"baud": BAUD, "fleet": n}
    tmp = tempfile.mkdtemp(prefix="edgebus-ota-bench-")
    try:
        bundles, size, files = _bundles(tmp)
        bundle = bundles["a"]
        res.update(bundle_bytes=size, files=files)
        if not smoke:  # the smoke run keeps CI short: the tests cover the serial path
            res["serial"] = {
                "pushes": _serial(os.path.join(tmp, "serial"), bundles),
                "limit_s": size * 10 / BAUD,  # 8N1: 10 bits a byte
                "changed": SERVICE[0],
            }
        wall, sent = _mqtt(os.path.join(tmp, "mqtt1"), bundle, 1)
        res["mqtt_one"] = {"wall_s": wall, "sent_s": list(sent.values())[0]}
        wall, sent = _mqtt(os.path.join(tmp, "mqttn"), bundle, n)
        v = sorted(sent.values())
        res["mqtt_fleet"] = {"wall_s": wall, "sent_max_s": v[-1], "sent_median_s": v[len(v) // 2]}
        res["board"] = {"error": "not in a smoke run"} if smoke else _board()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return res
