"""How long the bridge's /fleet.json takes at N devices (docs/bridge.md, "The
fleet page"): an in-process bridge with N configured MQTT devices (real
links; no broker, so every link is down), each with a retained sys/info and
sys/ota, asked over HTTP for the first page, a filter, a sort and a deep page,
beside a /metrics scrape of the same bridge (its baseline). Prints the median
of each: the request's wall time, the rows' time on the event loop (rows_ms,
made 250 links a turn) and the longest the loop was held at once.

usage: python -m dev.fleetpage_bench [--devices 10000] [--rounds 7]
(run it under ``flock /tmp/bench.lock`` on a shared machine)
"""

import argparse
import asyncio
import json
import statistics
import tempfile
import time
import urllib.request

from dev.broker import free_port
from edgebus.bridge import config as bridge_config
from edgebus.bridge.daemon import Bridge

QUERIES = ("", "q=d0042", "sort=-spool", "sort=-bundle&page=150")


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
        while len(b.links) < devices or not hasattr(b, "metrics"):
            await asyncio.sleep(0.1)
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

    return asyncio.run(main())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", type=int, default=10000)
    ap.add_argument("--rounds", type=int, default=7)
    a = ap.parse_args()
    res = run(a.devices, a.rounds)
    print("%d devices, median of %d rounds:" % (a.devices, a.rounds))
    print("%-38s %9s %9s %13s %9s" % ("request", "wall ms", "rows ms", "loop held ms", "bytes"))
    for q, xs in res.items():
        med = [statistics.median(x[i] for x in xs) for i in range(4)]
        name = q if q.startswith("/") else "/fleet.json?" + q
        print("%-38s %9.1f %9.1f %13.1f %9d" % (name, *med))


if __name__ == "__main__":
    main()
