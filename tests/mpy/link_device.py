# A device for the cross-runtime link tests: a bus and a Link (initiator) on a
# tty path opened raw and polled, or on MQTT. Runs under MicroPython and CPython.
# usage: link_device.py UPLINK KEY COUNT [NODE]
#   UPLINK: a tty path, or mqtt:HOST:PORT
# Publishes COUNT messages on sensor/count once the session is up (one every
# 10 ms for MQTT so a broker restart lands mid-stream), calls the host's
# host/add endpoint if offered, retains the result at sys/result, then serves
# until cmd/stop arrives. The uplink is reopened whenever it ends.
# LINK_DEVICE_SPOOL in the environment sets the link's spool size in bytes.
import asyncio
import os
import sys

from devkit import device_link, serve_echo, up

import edgebus


async def main(spec, key, count, node):
    bus = edgebus.Bus(q_length=16)
    c = bus.connect(principal="app")
    c.retain("sys/info", {"fw": "test", "impl": sys.implementation.name})
    link = device_link(
        bus,
        node,
        key,
        import_calls=[("host/#", "")],
        spool=int(os.getenv("LINK_DEVICE_SPOOL") or 2048),
    )
    serve_echo(c)
    stop = c.subscribe("cmd/stop")
    await up(link, spec, node)
    mqtt = spec.startswith("mqtt:")
    for i in range(count):
        c.publish("sensor/count", i)
        if mqtt:
            await asyncio.sleep(0.01)
        elif i % 8 == 7:
            await asyncio.sleep(0.01)  # let the writer drain the observer queue
    print("SENT", count)
    for _ in range(100):
        if ("host", "add") in bus.endpoints():
            r = await c.call("host/add", [2, 3], timeout=2)
            c.retain("sys/result", r)
            print("CALLED", r)
            break
        await asyncio.sleep(0.02)
    await stop.recv()
    print("STOP", link.stats()["counters"])
    await link.close()


asyncio.run(
    main(
        sys.argv[1],
        sys.argv[2],
        int(sys.argv[3]),
        sys.argv[4] if len(sys.argv) > 4 else "dev-" + sys.implementation.name,
    )
)
