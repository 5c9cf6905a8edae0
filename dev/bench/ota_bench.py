"""Updates over the bus (BENCHMARKS.md section 9): `edgebus ota push` of the
full runtime's bundle (edgebus build --board unix) to fleet devices (the real
firmware on the MicroPython unix port) through the bridge: one device over a
115,200-baud pty beside the line's physical limit for the same bytes, one
over MQTT, and a fleet over MQTT in one wave; and the emulated 32-bit
board's heap during an update over its UART (dev/qemuheap.ota_update)."""

import os
import re
import shutil
import tempfile
import time

from dev.harness.ota import mqtt_fleet, ota, ready_bridge
from edgebus.tools.boardkit import boards, build
from edgebus.tools.commands import otaplan
from edgebus.tools.sim.fleet import Fleet

BAUD = 115200
LINE = re.compile(r"^(\S+): committed \S+ in \d+ s \(sent in ([\d.]+) s\)$")


def _bundle(tmp):
    out = os.path.join(tmp, "bundle")
    build.build(boards.load_board("unix"), out, bundle_version="bench", log=lambda s: None)
    m = otaplan.load_bundle(out).meta
    return out, sum(f[1] for f in m["files"]), len(m["files"])


def _push(bridge, fleet, bundle, parallel=1):
    """Push bundle to every device of the fleet through its ready bridge:
    (wall seconds from the command's start to its end, {node: transfer s})."""
    t0 = time.monotonic()
    r = ota(
        bridge.sock,
        *("push", "--bundle", bundle, "--to", "*", "--yes", "--canary", "0"),
        *("--parallel", str(parallel), "--trial-s", "60"),
    )
    wall = time.monotonic() - t0
    sent = {m.group(1): float(m.group(2)) for m in map(LINE.match, r.stdout.splitlines()) if m}
    if r.returncode != 0 or len(sent) != len(fleet.devices):
        raise RuntimeError("edgebus ota push failed:\n%s\n%s" % (r.stdout, r.stderr))
    return wall, sent


def _serial(tmp, bundle):
    with Fleet(os.path.join(tmp, "fleet"), serial=1, baud=BAUD) as fleet:
        fleet.start()
        with ready_bridge(tmp, fleet) as bridge:
            cable = fleet.cables[0]
            b0 = cable.bytes["b_to_a"]
            wall, sent = _push(bridge, fleet, bundle)
            return wall, list(sent.values())[0], cable.bytes["b_to_a"] - b0


def _mqtt(tmp, bundle, n):
    with mqtt_fleet(tmp, n) as (fleet, bridge):
        return _push(bridge, fleet, bundle, parallel=n)


# The emulated board's heaps: its budget, and one the trial boot fits in (the
# slot's .mpy code loads into the heap; the frozen modules ran from flash).
BOARD_HEAPS = ("64K", "128K")


def _board():
    """The emulated board's figures per heap, or {"error"} saying why not."""
    try:
        from dev import qemuheap

        return {h: qemuheap.ota_update(h) for h in BOARD_HEAPS}
    except Exception as e:  # the part's other figures stand without it
        return {"error": "%s: %s" % (type(e).__name__, e)}


def run(smoke=False):
    n = 2 if smoke else 20
    res = {"baud": BAUD, "fleet": n}
    tmp = tempfile.mkdtemp(prefix="edgebus-ota-bench-")
    try:
        bundle, size, files = _bundle(tmp)
        res.update(bundle_bytes=size, files=files)
        if not smoke:  # the smoke run keeps CI short: the tests cover the serial path
            wall, sent, wire = _serial(os.path.join(tmp, "serial"), bundle)
            res["serial"] = {
                "wall_s": wall,
                "sent_s": sent,
                "wire_bytes": wire,
                "limit_s": size * 10 / BAUD,  # 8N1: 10 bits a byte
                "wire_limit_s": wire * 10 / BAUD,
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
