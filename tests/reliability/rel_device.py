# A device for the reliability suite, run by the real micropython binary (or
# CPython): a bus and a Link (initiator) on a tty path or MQTT.
# usage: rel_device.py UPLINK KEY NODE RATE COUNT BOOT
#   UPLINK: a tty path, or mqtt:HOST:PORT; RATE: messages/s; COUNT: 0 = forever
#   BOOT:   a name for this boot, retained at sys/boot and as the fact sys/boot/BOOT
# Publishes sensor/n {"i": i, "t": wall clock in us} paced at RATE, retains its
# boot facts, serves sys/echo and sys/slow (which never answers), and takes
# cmd/clock {"offset_s": x}: its wall clock jumps by x seconds (an RTC set by
# NTP or by hand). The link's own timers use the monotonic ticks, as on a board.
import asyncio
import sys
import time

from devkit import device_link, serve_echo, up

import edgebus
from edgebus.compat import now

OFFSET = [0]
# ~1000 readings of ~63 bytes: 10 s at 100 msg/s, longer than any outage here.
SPOOL = 65536


def wall_us():
    return time.time_ns() // 1000 + OFFSET[0]


async def main(spec, key, node, rate, count, boot):
    bus = edgebus.Bus(q_length=16)
    c = bus.connect(principal="app")
    c.retain("sys/boot", boot)
    c.retain("sys/boot/" + boot, 1)
    link = device_link(bus, node, key, spool=SPOOL)
    serve_echo(c)
    slow = c.bind("sys/slow", queue_len=8)
    clock = c.subscribe("cmd/clock")

    async def serve_slow():
        held = []
        async for req in slow:
            held.append(req)  # never answered: the caller waits

    async def serve_clock():
        async for m in clock:
            OFFSET[0] += int(m.payload["offset_s"] * 1000000)
            print("CLOCK", OFFSET[0])

    asyncio.create_task(serve_slow())
    asyncio.create_task(serve_clock())
    await up(link, spec, node)
    period = 1.0 / rate
    t0 = now()
    i = 0
    while count == 0 or i < count:
        c.publish("sensor/n", {"i": i, "t": wall_us()})
        i += 1
        d = t0 + i * period - now()
        await asyncio.sleep(d if d > 0 else 0)
    print("SENT", i)
    while True:
        await asyncio.sleep(1)


asyncio.run(
    main(sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), int(sys.argv[5]), sys.argv[6])
)
