# A device for the cross-runtime link tests: a bus and a Link (initiator) on a
# tty path opened raw and polled. Runs under MicroPython (and CPython).
# usage: link_device.py TTY KEY COUNT
# Publishes COUNT messages on sensor/count once the session is up, calls the
# host's host/add endpoint, retains the result at sys/result, then serves
# until cmd/stop arrives.
import sys
import asyncio
import edgebus
from edgebus.link.link import Link
from edgebus.link.stream import PolledTransport


def open_tty(path):
    try:
        return open(path, "r+b", buffering=0)
    except TypeError:       # MicroPython: files are unbuffered already
        return open(path, "r+b")


async def main(path, key, count):
    bus = edgebus.Bus(q_length=16)
    c = bus.connect(principal="app")
    c.retain("sys/info", {"fw": "test", "impl": sys.implementation.name})
    link = Link(bus, "dev-" + sys.implementation.name, key=key.encode(), role="initiator",
                exports=[("sensor/#", ""), ("sys/#", "")], imports=[("cmd/#", "")],
                export_calls=[("sys/#", "")], import_calls=[("host/#", "")],
                heartbeat=0.5, out_queue=64)
    ep = c.bind("sys/echo")
    stop = c.subscribe("cmd/stop")

    async def echo():
        async for req in ep:
            req.reply({"echo": req.payload})

    asyncio.create_task(echo())
    t = asyncio.create_task(link.run(PolledTransport(open_tty(path))))
    while link.status != "up":
        await asyncio.sleep(0.02)
    print("UP", link.sid)
    for i in range(count):
        c.publish("sensor/count", i)
        if i % 8 == 7:
            await asyncio.sleep(0.01)   # let the writer drain the observer queue
    while ("host", "add") not in bus._eps:
        await asyncio.sleep(0.02)
    r = await c.call("host/add", [2, 3], timeout=2)
    c.retain("sys/result", r)
    print("CALLED", r)
    await stop.recv()
    print("STOP", link.stats()["counters"])
    await link.close()


asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
