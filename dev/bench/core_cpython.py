"""Core throughput on CPython: edgebus vs eclipse-zenoh (in-process FIFO) vs a
naive asyncio.Queue + linear paho topic_matches_sub matcher, and edgebus's
publish cost as the number of stored patterns grows.

Every system is driven the same way: publish a batch of messages, then each
matching subscriber receives the whole batch through its natural receive call
(edgebus `await sub.recv()`, asyncio `await q.get()`, zenoh `try_recv()`).
Figure: published messages per second with every delivery received.
"""

import asyncio
import math
import os

from paho.mqtt.client import topic_matches_sub

import edgebus
from dev.bench.stats import clock, rate, repeat

TOPIC = ("bench", "dev", "7", "temp")
TOPIC_S = "bench/dev/7/temp"
MATCHING = ["bench/dev/7/temp", "bench/dev/+/temp", "bench/#", "bench/+/7/#"]


def subscription_set(total, matching):
    """`total` MQTT-style patterns of which `matching` match TOPIC."""
    pats = [MATCHING[i % len(MATCHING)] for i in range(matching)]
    i = 0
    while len(pats) < total:
        pats.append("bench/dev/%d/temp" % (1000 + i) if i % 2 else "other/dev/%d/#" % i)
        i += 1
    return pats


def to_zenoh(p):
    return p.replace("/+", "/*").replace("/#", "/**").replace("#", "**")


async def _edgebus(pats, batch, rounds):
    bus = edgebus.Bus(q_length=batch)
    c = bus.connect()
    subs = [c.subscribe(p) for p in pats]
    live = [s for s, p in zip(subs, pats) if topic_matches_sub(p, TOPIC_S)]
    t0 = clock()
    for _ in range(rounds):
        for _ in range(batch):
            c.publish(TOPIC, b"payload")
        for s in live:
            for _ in range(batch):
                await s.recv()
    dt = clock() - t0
    assert bus.stats()["dropped"] == 0
    return rate(batch * rounds, dt)


async def _naive(pats, batch, rounds):
    subs = [(p, asyncio.Queue(batch)) for p in pats]
    live = [q for p, q in subs if topic_matches_sub(p, TOPIC_S)]

    def publish(topic, payload):
        for p, q in subs:
            if topic_matches_sub(p, topic):
                q.put_nowait((topic, payload))

    t0 = clock()
    for _ in range(rounds):
        for _ in range(batch):
            publish(TOPIC_S, b"payload")
        for q in live:
            for _ in range(batch):
                await q.get()
    return rate(batch * rounds, clock() - t0)


def _zenoh(pats, batch, rounds):
    import zenoh

    conf = zenoh.Config()
    conf.insert_json5("scouting/multicast/enabled", "false")
    s = zenoh.open(conf)
    try:
        subs = [s.declare_subscriber(to_zenoh(p), zenoh.handlers.FifoChannel(batch)) for p in pats]
        live = [h for h, p in zip(subs, pats) if topic_matches_sub(p, TOPIC_S)]
        pub = s.declare_publisher(TOPIC_S)
        t0 = clock()
        got = 0
        for _ in range(rounds):
            for _ in range(batch):
                pub.put(b"payload")
            for h in live:
                for _ in range(batch):
                    if h.try_recv() is not None:
                        got += 1
        dt = clock() - t0
        assert got == batch * rounds * len(live), (got, batch * rounds * len(live))
        return rate(batch * rounds, dt)
    finally:
        s.close()


def throughput(smoke=False):
    """Figures for 1, 10 and 1,000 subscriptions (100 matching of 1,000)."""
    reps = 1 if smoke else 5
    out = []
    for total, matching, rounds in ((1, 1, 200), (10, 10, 50), (1000, 100, 5)):
        if smoke:
            rounds = max(1, rounds // 20)
        pats = subscription_set(total, matching)
        row = {
            "subscriptions": total,
            "matching": matching,
            "edgebus": repeat(lambda: asyncio.run(_edgebus(pats, 100, rounds)), reps),
            "zenoh": repeat(lambda: _zenoh(pats, 100, rounds), reps),
        }
        naive_rounds = max(1, rounds // (10 if total >= 1000 else 1))
        row["naive"] = repeat(lambda: asyncio.run(_naive(pats, 100, naive_rounds)), reps)
        out.append(row)
    return out


def _publish_cost(n_patterns, publishes):
    bus = edgebus.Bus(q_length=1)
    c = bus.connect()
    for i in range(n_patterns):
        # siblings of the published topic, like a fleet of devices under one
        # prefix: every level the publish walks has many children
        c.subscribe(("bench", "dev", "x%d" % i, "temp" if i % 10 else "#"))
    s = c.subscribe(TOPIC, queue_len=publishes)
    t0 = clock()
    for _ in range(publishes):
        c.publish(TOPIC, 1)
    dt = clock() - t0
    assert s.stats()["queued"] == publishes
    return dt / publishes * 1e9  # ns per publish


def publish_cost_curve(smoke=False):
    """ns per publish (one matching subscriber) vs stored patterns."""
    sizes = (10, 100, 1000) if smoke else (10, 100, 1000, 10000, 100000)
    reps = 1 if smoke else 5
    pubs = 2000 if smoke else 20000
    points = [
        {"patterns": n, "ns_per_publish": repeat(lambda: _publish_cost(n, pubs), reps)}
        for n in sizes
    ]
    xs = [math.log10(p["patterns"]) for p in points]
    ys = [math.log10(p["ns_per_publish"]["median"]) for p in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return {
        "points": points,
        "loglog_slope": slope,
        "ratio_last_first": points[-1]["ns_per_publish"]["median"]
        / points[0]["ns_per_publish"]["median"],
    }


def compiled_throughput(smoke=False):
    """throughput() with the compiled core (dev/compiled.py: setup.py's mypyc
    build in a folder of its own), in a Python that imports it; zenoh and the
    naive baseline measured again there, so each ratio is from one process.
    {"error"} when it cannot be built here (no C compiler, no headers)."""
    import json
    import subprocess
    import sys
    import tempfile

    from dev import compiled

    with tempfile.TemporaryDirectory() as d:
        try:
            out = compiled.build(os.path.join(d, "c"))
        except (subprocess.CalledProcessError, OSError) as e:
            return {"error": "the compiled core did not build: %s" % e}
        code = (
            "import json, edgebus.feed as f; from dev.bench import core_cpython as c; "
            "assert f.__file__.endswith('.so'), f.__file__; "
            "print(json.dumps(c.throughput(%r)))" % smoke
        )
        r = subprocess.run(
            [sys.executable, "-c", code], cwd=out, capture_output=True, text=True, check=True
        )
    return {"rows": json.loads(r.stdout.strip().splitlines()[-1])}
