"""The device of the bridge benchmark, run as a process of its own: a bus and
an edgebus link over MQTT (edgebus.link.mqtt) that publishes N stamped
messages on sensor/v, then idles until it is killed. Portable: the same file runs on
CPython and on the MicroPython unix port (from the .mpy bundle).

usage: bridge_device.py HOST PORT NODE KEY N PACE_MS OUT_QUEUE WINDOW

Each payload carries its send time ``t`` (time.time_ns(): one clock for every
process on the machine, both runtimes) and its index ``i``. PACE_MS > 0
publishes one message every PACE_MS; otherwise as fast as possible. WINDOW > 0
keeps at most WINDOW messages ahead of what the link has sent (a small
device's out_queue cannot hold a whole burst); 0 publishes the burst at once
into an out_queue big enough for it.
"""
import sys
import time
import asyncio

from edgebus import Bus
from edgebus.link.link import Link
from edgebus.link.mqtt import MqttTransport

PAD = "x" * 40      # ~60-byte payloads, like the in-process benchmark had


def _sent(link, base):
    return link.counters.get("frames_out", 0) - base


async def main(host, port, node, key, n, pace_ms, out_queue, window):
    bus = Bus(q_length=8)
    link = Link(bus, node, key=key.encode(), exports=[("sensor/#", "")], heartbeat=2.0,
                out_queue=out_queue, spool=out_queue * 128 + 4096)   # as much as the queue
    t = await MqttTransport(host, port, node=node).open()
    asyncio.create_task(link.run(t))
    while link.status != "up":
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.2)            # the snapshot and routes go out first
    c = bus.connect()
    base = link.counters.get("frames_out", 0)
    ns = time.time_ns
    for i in range(n):
        if window:
            while i - _sent(link, base) >= window:
                await asyncio.sleep(0.001)
        c.publish("sensor/v", {"t": ns(), "i": i, "pad": PAD})
        if pace_ms:
            await asyncio.sleep(pace_ms / 1000)
        elif i % 32 == 31:
            await asyncio.sleep(0)
    t0 = time.time()
    while _sent(link, base) < n and time.time() - t0 < 30:
        await asyncio.sleep(0.01)
    print("sent", _sent(link, base))
    # Stay up until the benchmark kills this process: closing now could drop
    # frames still in the socket's buffers (a close with unread input resets).
    while True:
        await asyncio.sleep(1)

if __name__ == "__main__":
    a = sys.argv[1:]
    asyncio.run(main(a[0], int(a[1]), a[2], a[3], int(a[4]), float(a[5]), int(a[6]), int(a[7])))
