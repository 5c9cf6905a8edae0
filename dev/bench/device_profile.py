"""bridge_device.py (the edgebus device of dev/bench/device_cost.py) with a
wall-clock account of the link's per-reading functions: each in PROFILED is
wrapped to add its time (time.ticks_us, inclusive of what it calls) and its
calls, from the first reading until every reading is acknowledged, printed
after the device's JSON line as one "prof" line: {name: [µs, calls, bytes
allocated, calls those bytes are of]}, and "wrap": what an empty wrapped
call costs, µs and bytes (to subtract once per nested wrapped call).
MicroPython has no profiler of its Python; this is the nearest: the
functions' shares, where the variants of device_cost.py give only the
link's whole. MicroPython only (ticks_us).

usage: device_profile.py (bridge_device.py's arguments)"""

import gc
import json
import sys
import time

import bridge_device as bd

from edgebus.conn import Connection
from edgebus.link import seal, spool, tx
from edgebus.link.link import Link

# (owner, function): the reading's path out, the ACK's path in, the timers
PROFILED = (
    (Connection, "publish"),
    (tx.Exports, "set"),
    (Link, "next_body"),
    (tx, "pump"),
    (tx, "spool_item"),
    (tx, "encode_item"),
    (spool.Spool, "put"),
    (tx, "data_next"),
    (seal, "out"),
    (Link, "feed"),
    (seal, "opened"),
    (spool.Spool, "ack"),
    (Link, "tick"),
    (Link, "publish_status"),
)
T = {}


def _wrap(owner, name, label):
    f = getattr(owner, name)
    us = time.ticks_us
    diff = time.ticks_diff
    alloc = gc.mem_alloc
    acc = T[label] = [0, 0, 0, 0]  # µs, calls, bytes allocated, calls without a collection

    def timed(*a, **k):
        m0 = alloc()
        t0 = us()
        try:
            return f(*a, **k)
        finally:
            acc[0] += diff(us(), t0)
            acc[1] += 1
            m = alloc() - m0
            if m >= 0:  # else the heap was collected meanwhile: not counted
                acc[2] += m
                acc[3] += 1

    setattr(owner, name, timed)


class _Empty:
    def call(self):
        pass


def _wrap_cost(n=2000):
    """(µs, bytes) an empty wrapped call takes (the wrapper's own cost)."""
    _wrap(_Empty, "call", "_empty")
    e = _Empty()
    t0 = time.ticks_us()
    for _ in range(n):
        e.call()
    took = time.ticks_diff(time.ticks_us(), t0) / n
    acc = T.pop("_empty")
    return took, acc[2] / max(acc[3], 1)


# The heap's collections: counted where the heap in use is seen to have
# shrunk since the last reading's publish (no finaliser or callback on the
# unix port says when one runs), timed by collecting at the end
GC = {"last": 0, "collections": 0, "grown": 0, "spans": 0}


def _sample_gc():
    publish = Connection.publish

    def sampled(*a, **k):
        m = gc.mem_alloc()
        if m < GC["last"]:
            GC["collections"] += 1
        else:
            GC["grown"] += m - GC["last"]
            GC["spans"] += 1
        GC["last"] = m
        return publish(*a, **k)

    Connection.publish = sampled


def _collect_us(n=5):
    t0 = time.ticks_us()
    for _ in range(n):
        gc.collect()
    return time.ticks_diff(time.ticks_us(), t0) / n


def main():
    wrap = _wrap_cost()
    for owner, name in PROFILED:
        _wrap(owner, name, getattr(owner, "__name__", "?").split(".")[-1] + "." + name)
    _sample_gc()

    def start():
        for v in T.values():
            v[0] = v[1] = v[2] = v[3] = 0
        GC["last"], GC["collections"], GC["grown"], GC["spans"] = gc.mem_alloc(), 0, 0, 0

    def end():
        c = GC["collections"]
        per = GC["grown"] / max(GC["spans"], 1)  # bytes allocated from a reading to the next
        print("prof", json.dumps({"wrap": wrap, "functions": T, "gc": [c, _collect_us(), per]}))

    bd.HOOKS["start"], bd.HOOKS["end"] = start, end
    bd.run(sys.argv[1:])


main()
