"""The heap TLS costs a device (BENCHMARKS.md section 10): the real firmware on
the MicroPython unix port (a fleet device, mbedTLS) over MQTT to a real
mosquitto, plain and over TLS (a CA made for the run, EC P-256 certificates),
in the same run, to a bridge in this process. Per case: the heap at READY
(the uplink not yet open), in session (sys/health's mem_alloc after a
collection, the most of its reports), and the smallest GC heap with which the
session comes up and carries readings (-X heapsize bisected: the peak need).
These are GC heap figures: this port's mbedTLS takes its own buffers from the
C heap (BENCHMARKS.md section 10 says what that leaves out).

usage: python -m dev.bench.tls_bench [--smoke]
"""

import asyncio
import os
import pathlib
import re
import sys
import tempfile

from dev import devheap
from dev.broker import Mosquitto
from edgebus.bridge import config as bridge_config
from edgebus.bridge.daemon import Bridge
from edgebus.tools.sim.fleet import Fleet, merge
from tests.host.mqtt.tlskit import TestCA

READY = re.compile(r"READY .*mem_alloc=(\d+) ")
READINGS = 10  # sensor readings that make a session "carrying readings"
WAIT = 20.0  # s for the session and its readings: a heap at the edge is slow


def session(tmp, heap, ca=None):
    """One device with -X heapsize=heap (e.g. '96K') through a broker (TLS when
    ca, a TestCA): {"ok", "ready_alloc", "session_alloc", "restarts"}. ok: the
    session came up and carried READINGS readings and two health reports,
    with no MemoryError and no restart."""
    d = tempfile.mkdtemp(dir=tmp)
    tls = None
    if ca is not None:
        cert, key = ca.issue("localhost")
        tls = {"ca": ca.ca, "cert": cert, "key": key}
    with (
        Mosquitto(tls=tls) as broker,
        Fleet(
            os.path.join(d, "fleet"),
            mqtt=1,
            broker=("127.0.0.1", broker.port),
            heap=heap,
            config={"uplink": {"tls": {"ca": ca.ca, "server_name": "localhost"}}} if ca else None,
        ) as fleet,
    ):
        dev = fleet.devices[0]
        parts = fleet.bridge_config(("127.0.0.1", broker.port))
        if ca is not None:
            parts["mqtt"].update(url="mqtts://127.0.0.1:%d" % broker.port, tls_ca=ca.ca)
        cfg = bridge_config.parse(merge(parts, {"bridge": {"state_dir": os.path.join(d, "state")}}))
        fleet.start()
        health = asyncio.run(_readings(cfg, dev["node"], lambda: dev["restarts"] == 0))
        restarts = dev["restarts"]
    with open(dev["log"]) as f:
        out = f.read()
    m = READY.search(out)
    return {
        "ok": len(health) >= 2 and restarts == 0 and "MemoryError" not in out,
        "ready_alloc": int(m.group(1)) if m else None,
        "session_alloc": max((h["mem_alloc"] for h in health), default=None),
        "restarts": restarts,
    }


async def _readings(cfg, node, alive):
    """node's sys/health payloads once READINGS readings arrived; none when
    they do not within WAIT s or alive() turns false (the device restarted)."""
    b = Bridge(cfg)
    t = asyncio.create_task(b.run())
    c = b.bus.connect()
    temps = c.subscribe(("dev", node, "sensor", "temp"), queue_len=64)
    health = c.subscribe(("dev", node, "sys", "health"), queue_len=64)
    got, n = [], 0
    end = asyncio.get_running_loop().time() + WAIT
    try:
        while n < READINGS or len(got) < 2:
            if not alive() or asyncio.get_running_loop().time() > end:
                return []
            try:
                m = await asyncio.wait_for(temps.recv() if n < READINGS else health.recv(), 0.5)
            except asyncio.TimeoutError:
                continue
            if n < READINGS:
                n += 1
            else:
                got.append(m.payload)
    finally:
        b.stop()
        await t
    return got


def run(smoke=False):
    """Plain and TLS in the same run, each at the fleet's heap and bisected."""
    res = {"readings": READINGS, "certs": "EC P-256"}
    with tempfile.TemporaryDirectory() as tmp:
        ca = TestCA(pathlib.Path(tmp))
        for name, c in (("plain", None), ("tls", ca)):
            r = session(tmp, "320K", c)
            if not r["ok"]:
                raise RuntimeError("%s: the device's session failed at 320K: %s" % (name, r))

            def probe(_tree, heap, _seconds, c=c):
                return session(tmp, heap, c)

            r["smallest_heap_kb"] = (
                None if smoke else devheap.smallest_heap(None, lo=160, hi=320, step=8, run=probe)
            )
            res[name] = r
    return res


if __name__ == "__main__":
    import json

    print(json.dumps(run("--smoke" in sys.argv[1:]), indent=1))
