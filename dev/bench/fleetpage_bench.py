"""How long the bridge's /fleet.json takes at N devices (BENCHMARKS.md section
11; docs/bridge.md, "The fleet page"): an in-process bridge with N configured
MQTT devices (real links; no broker, so every link is down), each with a
retained sys/info and sys/ota, asked over HTTP for the first page, a filter,
a sort and a deep page, beside a /metrics scrape of the same bridge (its
baseline), interleaved round by round. Per request: the wall time, the rows'
time on the event loop (rows_ms, made 250 links a turn), the longest the loop
was held at once, and the bytes answered.

usage: python -m dev.bench --only fleetpage   (into BENCHMARKS.md)
   or: python -m dev.bench.fleetpage_bench [--devices 10000] [--rounds 7]
(run it under ``flock /tmp/bench.lock`` on a shared machine)
"""

import argparse
import asyncio
import json
import shutil
import statistics
import tempfile
import time
import urllib.request

from dev.broker import free_port
from dev.harness.poll import until
from edgebus.bridge import config as bridge_config
from edgebus.bridge.daemon import Bridge

QUERIES = ("", "q=d0042", "sort=-spool", "sort=-bundle&page=150")
FIELDS = ("wall_ms", "rows_ms", "loop_held_ms", "bytes")


def _get(url):
    t0 = time.perf_counter()
    with urllib.request.urlopen(url, timeout=60) as r:
        body = r.read()
    return body, (time.perf_counter() - t0) * 1000


async def _measure(b, port, rounds):
    base = "http://127.0.0.1:%d" % port
    out = {q: [] for q in QUERIES + ("/metrics",)}
    for _ in range(rounds):  # interleaved: each round asks each once
        for q in QUERIES:
            body, ms = await asyncio.to_thread(_get, base + "/fleet.json?" + q)
            d = json.loads(body)
            out[q].append((ms, d["rows_ms"], d["loop_held_ms"], len(body)))
        _, ms = await asyncio.to_thread(_get, base + "/metrics")
        out["/metrics"].append((ms, 0.0, 0.0, 0))
    return out


def run(devices, rounds):
    """{query or "/metrics": [(FIELDS) a round]}."""
    port = free_port()
    state = tempfile.mkdtemp(prefix="fleetpage-bench-")
    nodes = ["d%05d" % i for i in range(devices)]
    cfg = bridge_config.parse(
        {
            "bridge": {"state_dir": state, "metrics": "127.0.0.1:%d" % port},
            "mqtt": {
                "url": "mqtt://127.0.0.1:%d" % free_port(),
                "devices": [{"node": n, "key": "k"} for n in nodes],
            },
        }
    )
    bridge_config.prepare(cfg)

    async def main():
        b = Bridge(cfg)
        t = asyncio.create_task(b.run())
        await until(
            lambda: len(b.links) >= devices and hasattr(b, "metrics"),
            120,
            "the bridge's links and its metrics listener",
            0.1,
        )
        for i, n in enumerate(nodes):
            b.conn.retain("dev/%s/sys/info" % n, {"uptime": i, "mem_free": 40000, "fw": "0.1"})
            b.conn.retain(
                "dev/%s/sys/ota" % n,
                {"state": "committed", "running": {"version": "1.%d" % (i % 7), "hash": "ab" * 32}},
            )
        try:
            return await _measure(b, port, rounds)
        finally:
            b.stop()
            await t

    try:
        return asyncio.run(main())
    finally:
        shutil.rmtree(state, ignore_errors=True)


def figures(smoke=False, devices=10000, rounds=7):
    """BENCHMARKS section 11: {"devices", "rounds", "requests": [{"request",
    "wall_ms": {median, min, max}, and the medians of the other FIELDS}, ...]},
    the /metrics scrape last."""
    if smoke:
        devices, rounds = 300, 2
    rows = []
    for q, xs in run(devices, rounds).items():
        walls = [x[0] for x in xs]
        r = {
            "request": q if q.startswith("/") else "/fleet.json" + ("?" + q if q else ""),
            "wall_ms": {"median": statistics.median(walls), "min": min(walls), "max": max(walls)},
        }
        for i, k in enumerate(FIELDS[1:], 1):
            r[k] = statistics.median(x[i] for x in xs)
        rows.append(r)
    return {"devices": devices, "rounds": rounds, "requests": rows}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", type=int, default=10000)
    ap.add_argument("--rounds", type=int, default=7)
    a = ap.parse_args()
    f = figures(devices=a.devices, rounds=a.rounds)
    print("%d devices, median of %d rounds:" % (a.devices, a.rounds))
    print("%-38s %9s %9s %13s %9s" % ("request", "wall ms", "rows ms", "loop held ms", "bytes"))
    for r in f["requests"]:
        rest = tuple(r[k] for k in FIELDS[1:])
        print("%-38s %9.1f %9.1f %13.1f %9d" % ((r["request"], r["wall_ms"]["median"]) + rest))


if __name__ == "__main__":
    main()
