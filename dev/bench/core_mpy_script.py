# Runs under the real MicroPython unix port (edgebus as .mpy); prints one JSON
# object of heap and speed figures.
# argv: [smoke] [fleet] [board]  - "smoke" shortens the run; "fleet" only
# counts how many subscriptions fit in the heap the interpreter was given;
# "board": a 64 KB board's heap (dev/bench/core_board.py), where the speed runs
# need the heap figures' objects gone first.
import gc
import json
import sys
import time

SMOKE = "smoke" in sys.argv
FLEET = "fleet" in sys.argv
BOARD = "board" in sys.argv
out = {}

gc.collect()
a0 = gc.mem_alloc()
import asyncio  # noqa: E402, F401  (the core needs it; its heap is counted apart)

gc.collect()
a1 = gc.mem_alloc()
try:
    import edgebus  # noqa: E402
except MemoryError:
    if not FLEET:
        raise
    # The 64 KB heap holds the interpreter's own objects and asyncio too; what
    # is left may be too fragmented for the core (it fits with no margin): 0.
    print(json.dumps({"import_asyncio": a1 - a0, "import_core": None, "max_subscriptions_q8": 0}))
    sys.exit(0)

gc.collect()
a2 = gc.mem_alloc()
out["import_asyncio"] = a1 - a0
out["import_core"] = a2 - a1

N = 20 if SMOKE else 50

if FLEET:
    bus = edgebus.Bus()
    conn = bus.connect()
    fleet = []
    try:
        while True:
            fleet.append(conn.subscribe(("f", len(fleet)), queue_len=8))
    except MemoryError:
        pass
    out["max_subscriptions_q8"] = len(fleet)
    print(json.dumps(out))
    sys.exit(0)


def per_item(make):
    gc.collect()
    before = gc.mem_alloc()
    keep = make()
    gc.collect()
    used = gc.mem_alloc() - before
    return used / N, keep


bus = edgebus.Bus()
conn = bus.connect()
out["per_subscription_q8"], _k1 = per_item(
    lambda: [conn.subscribe(("dev", i, "temp"), queue_len=8) for i in range(N)]
)
out["per_retained_topic"], _k2 = per_item(lambda: [conn.retain(("cfg", i), i) for i in range(N)])
out["per_endpoint_q1"], _k3 = per_item(lambda: [conn.bind(("rpc", i)) for i in range(N)])
del _k1, _k2, _k3


def alloc_per_publish(nsubs):
    b = edgebus.Bus(q_length=16)
    c = b.connect()
    subs = [c.subscribe(("t", "x")) for _ in range(nsubs)]
    topic = ("t", "x")
    payload = 1
    total = 0
    rounds = 4 if SMOKE else 16
    for _ in range(rounds):
        gc.collect()
        gc.disable()
        before = gc.mem_alloc()
        for _ in range(16):
            c.publish(topic, payload)
        total += gc.mem_alloc() - before
        gc.enable()
        for s in subs:
            while s.recv_nowait() is not None:
                pass
    return total / (rounds * 16)


out["alloc_per_publish_1sub"] = alloc_per_publish(1)
out["alloc_per_publish_10subs"] = alloc_per_publish(10)


def naive_publish(subs, topic, msg):
    # Baseline: linear scan with a per-token matcher, deque-free list queues.
    for pat, q in subs:
        ok = True
        for i, p in enumerate(pat):
            if p == "#":
                break
            if i >= len(topic) or (p != "+" and p != topic[i]):
                ok = False
                break
        else:
            ok = len(pat) == len(topic)
        if ok:
            q.append(msg)


def speed(nsubs, naive):
    topic = ("t", "x")
    count = 2000 if SMOKE else 20000
    if naive:
        subs = [(("t", "+") if i % 2 else ("t", "x"), []) for i in range(nsubs)]
        t0 = time.ticks_us()
        for _ in range(count // 100):
            for _ in range(100):
                naive_publish(subs, topic, (topic, 1))
            for _, q in subs:
                q.clear() if hasattr(q, "clear") else q.__init__()
    else:
        b = edgebus.Bus(q_length=100)
        c = b.connect()
        subs = [c.subscribe(("t", "+") if i % 2 else ("t", "x")) for i in range(nsubs)]
        t0 = time.ticks_us()
        for _ in range(count // 100):
            for _ in range(100):
                c.publish(topic, 1)
            for s in subs:
                while s.recv_nowait() is not None:
                    pass
    dt = time.ticks_diff(time.ticks_us(), t0)
    return count * 1000000 / dt


if BOARD:  # 50 subscriptions, retained topics and endpoints still live
    del bus, conn
    gc.collect()

# Collect after every 32 KB allocated, as on a board: on the unix port's
# large heap an unbounded threshold makes each collection sweep far more.
gc.threshold(32 * 1024)
for n in (1, 10):
    out["msgs_per_s_%dsub" % n] = speed(n, False)
    out["naive_msgs_per_s_%dsub" % n] = speed(n, True)

print(json.dumps(out))
