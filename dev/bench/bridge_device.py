"""The device of the bridge benchmark, run as a process of its own: a bus and
an edgebus link over MQTT (edgebus.link.mqtt) that publishes N stamped
messages on sensor/v, then idles until it is killed. Portable: the same file runs on
CPython and on the MicroPython unix port (from the .mpy bundle).

usage: bridge_device.py HOST PORT NODE KEY N PACE_MS OUT_QUEUE WINDOW
                        [ACK [PREFIX [SEAL [COST [DO]]]]]

Each payload carries its send time ``t`` (time.time_ns(): one clock for every
process on the machine, both runtimes) and its index ``i``. PACE_MS > 0
publishes one message every PACE_MS; otherwise as fast as possible. WINDOW > 0
keeps at most WINDOW messages ahead of what the link has sent (a small
device's out_queue cannot hold a whole burst); 0 publishes the burst at once
into an out_queue big enough for it. ACK 0 does not offer acknowledgements
(the peers link as protocol 1); 1 (the default) does. PREFIX: the MQTT
topic prefix (the bridge's [mqtt] prefix), "edgebus" by default. SEAL: the
link's seal mode ("auto" by default). COST 1 (dev/bench/device_cost.py, on
MicroPython): also the uplink's heap and its bytes on the socket until the
first reading (``cost``, below). DO (device_cost.py's variants; paced
runs): "link" (the default) publishes each reading into the bus, whose link
sends it; "quiet" the same with the link's status not retained on the bus
(``status=False``, as the firmware has it); "idle" runs the same loop with
the session up and publishes nothing; "bus" makes no link and publishes into
the bus alone; "pace" makes no link and publishes nothing: the loop's sleeps
alone. Without a link it prints "up" at once and, after the readings,
{"sent": N}.

Prints "up" once its session is up and before the first message, "sent N" once the
link has sent every message, then (once every
message is acknowledged, or 30 s later) one JSON line: when the last
acknowledgement came ("acked_s", seconds from the first publish; null if
not all were), each message's publish -> acknowledgement latency at this
device ("ack_ms", the ACK covering it arriving back here) and what the session
negotiated ("sealed", "encrypted", "bare") and the window the bridge gave
("window", None: none).

With COST 1 it prints before "up" a "wire" line: the hex of every byte the
device wrote ("out") and read ("in") on its socket from connect until then
(its first reading goes next); and after the JSON line a "heap" line:
gc.mem_alloc() after gc.collect() at each step less before the link and its
transport were made ("link", "transport", "open", "up", then "acked": every
reading acknowledged) and the spool's preallocated ring ("spool").
"""

import asyncio
import gc
import json
import sys
import time

from edgebus import Bus
from edgebus.conn import Connection
from edgebus.link import calls, handshake, rx, tx
from edgebus.link import link as linkmod
from edgebus.link import seal as sealing
from edgebus.link.link import Link
from edgebus.link.mqtt import MqttTransport

PAD = "x" * 40  # ~60-byte payloads, like the in-process benchmark had


def _sent(link, base):
    return link.counters.get("frames_out", 0) - base


ACKS = []  # (arrival ns, upto) of every ACK frame
ACK_FRAMES = [0]  # how many came (a device's heap keeps only the last of ACKS)
CPYTHON = sys.implementation.name != "micropython"
# Called, if set, as the readings start and once the JSON line is out
# (dev/bench/device_profile.py's account): outside the readings' loop.
HOOKS = {"start": None, "end": None}


def _on_ack(link, n, _orig=tx.on_ack):
    _orig(link, n)
    if type(n) is int:
        ACK_FRAMES[0] += 1
        if CPYTHON or not ACKS:
            ACKS.append((time.time_ns(), n))
        else:  # a device's heap keeps the last one only
            ACKS[0] = (time.time_ns(), n)


tx.on_ack = _on_ack  # rx calls it through the module: every ACK passes here


WIRE = {"out": bytearray(), "in": bytearray()}  # COST: the socket's bytes until "up"


class _Counted:
    """A stream whose bytes go to WIRE[d] too (COST, until the first reading;
    the transport gets its own back then). ``_i``, not ``s``: nodelay()
    reaches the socket as the stream's ``s``."""

    def __init__(self, inner, d):
        self._i, self._d = inner, d

    def __getattr__(self, k):
        return getattr(self._i, k)

    def write(self, b):
        WIRE[self._d] += b
        return self._i.write(b)

    async def readexactly(self, n):
        b = await self._i.readexactly(n)
        WIRE[self._d] += b
        return b

    async def read(self, n=-1):  # the transport reads ahead (link/mqtt.py)
        b = await self._i.read(n)
        WIRE[self._d] += b
        return b


def _count_streams():
    """Have asyncio's next connection (the transport's) count its bytes."""
    gc.collect()
    h = gc.mem_alloc()
    real = asyncio.open_connection  # MicroPython imports asyncio.stream now
    gc.collect()
    ITEMS["asyncio.stream"] = gc.mem_alloc() - h

    async def counted(*a, **k):
        r, w = await real(*a, **k)
        asyncio.open_connection = real
        return _Counted(r, "in"), _Counted(w, "out")

    asyncio.open_connection = counted


def _uncount(tr):
    """Print the bytes counted and give the transport its streams back."""
    from binascii import hexlify

    tr.r, tr.w = tr.r._i, tr.w._i
    print("wire", json.dumps({k: hexlify(v).decode() for k, v in WIRE.items()}))
    WIRE["out"], WIRE["in"] = bytearray(), bytearray()  # as before the link


# COST: the heap each of these kept, summed over its calls until "up" (the
# link's parts as it is made, then as its session starts); their keys are
# here before the link so that filling them costs nothing.
PARTS = (
    (linkmod, "Spool", "spool"),
    (handshake, "init", "handshake.init"),
    (tx, "init", "tx.init"),
    (rx, "init", "rx.init"),
    (calls, "init", "calls.init"),
    (tx, "observe", "tx.observe"),
    (handshake, "hello", "handshake.hello"),
    (sealing, "start", "seal.start"),
    (Connection, "derive", "Connection.derive"),
    (Link, "publish_status", "Link.publish_status"),
    (calls, "send_routes", "calls.send_routes"),
)
ITEMS = {"asyncio.stream": 0}
WRAPPED = []  # (owner, name, original, wrapper): kept after _unitemise, so freeing costs nothing


def _measured(f, label):
    def w(*a, **k):
        gc.collect()
        h = gc.mem_alloc()
        r = f(*a, **k)
        gc.collect()
        ITEMS[label] += gc.mem_alloc() - h
        return r

    return w


def _itemise():
    for owner, name, label in PARTS:
        ITEMS[label] = 0
        f = getattr(owner, name)
        w = _measured(f, label)
        setattr(owner, name, w)
        WRAPPED.append((owner, name, f, w))


def _unitemise():
    for owner, name, f, _ in WRAPPED:
        setattr(owner, name, f)


def _heap(cost, h, step):
    """COST: the heap above h (gc.mem_alloc() before the link) at step."""
    if cost is not None:
        gc.collect()
        cost[step] = gc.mem_alloc() - h


async def _session(link, tr, cost, h0):
    """Open tr and run link over it until its session is up (COST: each step's heap)."""
    _heap(cost, h0, "transport")
    if cost is not None:
        _count_streams()
    await tr.open()
    _heap(cost, h0, "open")
    asyncio.create_task(link.run(tr))
    while link.status != "up":
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.2)  # the snapshot and routes go out first
    if cost is not None:
        _uncount(tr)
        _heap(cost, h0, "up")
        _unitemise()
    return tr


def _flush():
    fl = getattr(sys.stdout, "flush", None)
    if fl:
        fl()


async def _readings(c, link, n, pace_ms, window, publish):
    """The readings' loop: n readings published on sensor/v (``publish``;
    otherwise the same loop and sleeps, nothing published); their publish
    times (on a device's heap, the first only)."""
    base = link.counters.get("frames_out", 0) if link is not None else 0
    window = window if publish and link is not None else 0
    ns = time.time_ns
    t_pub = []
    for i in range(n):
        if window:
            while i - _sent(link, base) >= window:
                await asyncio.sleep(0.001)
        t = ns()
        if not i or pace_ms and CPYTHON:  # per message: not on a device's heap
            t_pub.append(t)
        if publish:
            c.publish("sensor/v", {"t": t, "i": i, "pad": PAD})
        if pace_ms:
            await asyncio.sleep(pace_ms / 1000)
        elif i % 32 == 31:
            await asyncio.sleep(0)
    return t_pub


async def _idle():
    # Stay up until the benchmark kills this process: closing now could drop
    # frames still in the socket's buffers (a close with unread input resets).
    while True:
        await asyncio.sleep(1)


async def main(
    host,
    port,
    node,
    key,
    n,
    pace_ms,
    out_queue,
    window,
    ack=1,
    prefix="edgebus",
    seal="auto",
    cost=0,
    do="link",
):
    bus = Bus(q_length=8)
    c = bus.connect()
    if do in ("bus", "pace"):  # no link
        print("up")
        _flush()
        await _readings(c, None, n, pace_ms, 0, do == "bus")
        print(json.dumps({"sent": n}))
        _flush()
        await _idle()
    cost = {} if cost and hasattr(gc, "mem_alloc") else None  # MicroPython's
    h0 = 0
    if cost is not None:
        _itemise()
        gc.collect()
        h0 = gc.mem_alloc()
    link = Link(
        bus,
        node,
        key=key.encode(),
        exports=[("sensor/#", "")],
        heartbeat=2.0,
        out_queue=out_queue,
        spool=out_queue * 128 + 4096,  # as much as the queue
        ack=bool(ack),
        seal=seal,
        status=do != "quiet",
    )
    _heap(cost, h0, "link")
    tr = await _session(link, MqttTransport(host, port, node=node, prefix=prefix), cost, h0)
    print("up")  # what follows is the readings' cost (dev/bench/device_cost.py)
    _flush()
    base = link.counters.get("frames_out", 0)
    seq0 = link.tx_seq  # nothing else is exported: message i is seq0 + i
    if HOOKS["start"]:
        HOOKS["start"]()
    t_pub = await _readings(c, link, n, pace_ms, window, do != "idle")
    if do == "idle":
        print(json.dumps({"idle": n, "sealed": link._seal is not None}))
        _flush()
        await _idle()
    await _outcome(link, tr, base, seq0, n, pace_ms, t_pub)
    if HOOKS["end"]:
        HOOKS["end"]()
        _flush()
    if cost is not None:  # after the JSON line: outside the CPU measured
        _heap(cost, h0, "acked")
        cost["spool"] = len(link._spool.buf)
        cost["items"] = ITEMS
        print("heap", json.dumps(cost))
        _flush()
    await _idle()


async def _outcome(link, tr, base, seq0, n, pace_ms, t_pub):
    """Wait until every reading is sent and acknowledged (or 30 s each), then
    print the JSON line."""
    t0 = time.time()
    while _sent(link, base) < n and time.time() - t0 < 30:
        await asyncio.sleep(0.01)
    print("sent", _sent(link, base))
    t0 = time.time()
    end = seq0 + n
    while link._acking and not (ACKS and ACKS[-1][1] >= end) and time.time() - t0 < 30:
        await asyncio.sleep(0.005)
    lat = []
    j = 0
    for i in range(len(t_pub) if pace_ms and CPYTHON else 0):  # the first ACK past i covers it
        while j < len(ACKS) and ACKS[j][1] <= seq0 + i:
            j += 1
        if j == len(ACKS):
            break
        lat.append((ACKS[j][0] - t_pub[i]) / 1e6)
    done = link._acking and ACKS and ACKS[-1][1] >= end
    k = link.counters
    print(
        json.dumps(
            {
                "acking": link._acking,
                "acks": ACK_FRAMES[0],
                "retransmitted": k.get("retransmitted", 0),
                "ack_timeouts": k.get("ack_timeouts", 0),
                "resends": k.get("resends", 0),
                "acked_s": (ACKS[-1][0] - t_pub[0]) / 1e9 if done else None,
                "ack_ms": lat,
                "sealed": link._seal is not None,
                "encrypted": sealing.encrypted(link),
                "bare": tr.bare,
                "window": link._tx_window,  # the bridge's pace for this device (None: none)
            }
        )
    )
    _flush()


def run(a):
    """main() for the command line's arguments ``a`` (the module doc's usage)."""
    asyncio.run(
        main(
            a[0],
            int(a[1]),
            a[2],
            a[3],
            int(a[4]),
            float(a[5]),
            int(a[6]),
            int(a[7]),
            int(a[8]) if len(a) > 8 else 1,
            a[9] if len(a) > 9 else "edgebus",
            a[10] if len(a) > 10 else "auto",
            int(a[11]) if len(a) > 11 else 0,
            a[12] if len(a) > 12 else "link",
        )
    )


if __name__ == "__main__":
    run(sys.argv[1:])
