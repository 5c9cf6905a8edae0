"""The device of the bridge benchmark, run as a process of its own: a bus and
an edgebus link over MQTT (edgebus.link.mqtt) that publishes N stamped
messages on sensor/v, then idles until it is killed. Portable: the same file runs on
CPython and on the MicroPython unix port (from the .mpy bundle).

usage: bridge_device.py HOST PORT NODE KEY N PACE_MS OUT_QUEUE WINDOW [ACK [PREFIX [SEAL]]]

Each payload carries its send time ``t`` (time.time_ns(): one clock for every
process on the machine, both runtimes) and its index ``i``. PACE_MS > 0
publishes one message every PACE_MS; otherwise as fast as possible. WINDOW > 0
keeps at most WINDOW messages ahead of what the link has sent (a small
device's out_queue cannot hold a whole burst); 0 publishes the burst at once
into an out_queue big enough for it. ACK 0 does not offer acknowledgements
(the peers link as protocol 1); 1 (the default) does. PREFIX: the MQTT
topic prefix (the bridge's [mqtt] prefix), "edgebus" by default. SEAL: the
link's seal mode ("auto" by default).

Prints "up" once its session is up and before the first message, "sent N" once the
link has sent every message, then (once every
message is acknowledged, or 30 s later) one JSON line: when the last
acknowledgement came ("acked_s", seconds from the first publish; null if
not all were), each message's publish -> acknowledgement latency at this
device ("ack_ms", the ACK covering it arriving back here) and what the session
negotiated ("sealed", "encrypted", "bare") and the window the bridge gave
("window", None: none).
"""

import asyncio
import json
import sys
import time

from edgebus import Bus
from edgebus.link import seal as sealing
from edgebus.link import tx
from edgebus.link.link import Link
from edgebus.link.mqtt import MqttTransport

PAD = "x" * 40  # ~60-byte payloads, like the in-process benchmark had


def _sent(link, base):
    return link.counters.get("frames_out", 0) - base


ACKS = []  # (arrival ns, upto) of every ACK frame
ACK_FRAMES = [0]  # how many came (a device's heap keeps only the last of ACKS)
CPYTHON = sys.implementation.name != "micropython"


def _on_ack(link, n, _orig=tx.on_ack):
    _orig(link, n)
    if type(n) is int:
        ACK_FRAMES[0] += 1
        if CPYTHON or not ACKS:
            ACKS.append((time.time_ns(), n))
        else:  # a device's heap keeps the last one only
            ACKS[0] = (time.time_ns(), n)


tx.on_ack = _on_ack  # rx calls it through the module: every ACK passes here


def _flush():
    fl = getattr(sys.stdout, "flush", None)
    if fl:
        fl()


async def main(
    host, port, node, key, n, pace_ms, out_queue, window, ack=1, prefix="edgebus", seal="auto"
):
    bus = Bus(q_length=8)
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
    )
    tr = await MqttTransport(host, port, node=node, prefix=prefix).open()
    asyncio.create_task(link.run(tr))
    while link.status != "up":
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.2)  # the snapshot and routes go out first
    print("up")  # what follows is the readings' cost (dev/bench/device_cost.py)
    _flush()
    c = bus.connect()
    base = link.counters.get("frames_out", 0)
    seq0 = link.tx_seq  # nothing else is exported: message i is seq0 + i
    ns = time.time_ns
    t_pub = []
    for i in range(n):
        if window:
            while i - _sent(link, base) >= window:
                await asyncio.sleep(0.001)
        t = ns()
        if not i or pace_ms and CPYTHON:  # per message: not on a device's heap
            t_pub.append(t)
        c.publish("sensor/v", {"t": t, "i": i, "pad": PAD})
        if pace_ms:
            await asyncio.sleep(pace_ms / 1000)
        elif i % 32 == 31:
            await asyncio.sleep(0)
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
    # Stay up until the benchmark kills this process: closing now could drop
    # frames still in the socket's buffers (a close with unread input resets).
    while True:
        await asyncio.sleep(1)


if __name__ == "__main__":
    a = sys.argv[1:]
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
        )
    )
