# A device with the flash spool on, for tests/host/firmware/test_flash_spool.py: a bus
# and a Link (initiator) over MQTT with journal=JOURNAL. Runs under MicroPython
# and CPython.
# usage: flash_device.py mqtt:HOST:PORT KEY NODE JOURNAL UP_N DOWN_N
# Prints "SID <sid>"; publishes UP_N readings on sensor/r (payload 0, 1, ...)
# once the session is up, then waits for the session to go down (if UP_N);
# publishes DOWN_N more, prints "DONE <last sequence number>", and runs on.
import asyncio
import sys

from devkit import uplink

import edgebus
from edgebus.link.link import Link


async def main(spec, key, node, journal, up_n, down_n):
    bus = edgebus.Bus(q_length=16)
    c = bus.connect(principal="app")
    link = Link(
        bus,
        node,
        key=key.encode(),
        role="initiator",
        exports=[("sensor/#", "")],
        heartbeat=0.5,
        handshake_timeout=1.0,
        out_queue=64,
        journal=journal,
    )
    print("SID", link.sid)
    link.start()
    asyncio.create_task(uplink(link, spec, node))
    i = 0
    if up_n:
        while link.status != "up":
            await asyncio.sleep(0.02)
        for _ in range(up_n):
            c.publish("sensor/r", i)
            i += 1
            await asyncio.sleep(0.02)
        while link.status == "up":
            await asyncio.sleep(0.02)
    for _ in range(down_n):
        c.publish("sensor/r", i)
        i += 1
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.1)  # the link's pump numbers the last one
    print("DONE", link.tx_seq - 1)
    while True:
        await asyncio.sleep(1)


asyncio.run(
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6]))
)
