# Device-side helpers shared by the test devices (link_device.py,
# tests/reliability/rel_device.py); copied beside them into the .mpy tree.
# Runs under MicroPython and CPython.
import asyncio

from edgebus.link.stream import PolledTransport


def open_tty(path):
    try:
        return open(path, "r+b", buffering=0)
    except TypeError:  # MicroPython: files are unbuffered already
        return open(path, "r+b")


async def uplink(link, spec, node):
    """Keep link running over spec (a tty path or mqtt:HOST:PORT), reopened
    with backoff whenever it ends, as firmware/uplink.py does."""
    delay = 0.2
    link.start()  # spooled from now on, as the firmware's uplink does
    while True:
        try:
            if spec.startswith("mqtt:"):
                from edgebus.link.mqtt import MqttTransport

                _, host, port = spec.split(":")
                t = await MqttTransport(host, int(port), node=node, keepalive=10).open()
                t.on_peer = link.peer_presence
            else:
                t = PolledTransport(open_tty(spec))
            delay = 0.2
            await link.run(t)
        except Exception as e:  # log, back off, reopen
            print("UPLINK", repr(e))
        await asyncio.sleep(delay)
        delay = min(delay * 2, 2.0)


def device_link(bus, node, key, **kw):
    """The test devices' Link: the initiator with key (a str) exporting
    sensor/# and sys/# (and its calls), importing cmd/#, with a 0.5 s
    heartbeat, a 1 s handshake timeout, 64 frames out; kw the rest (its
    spool, the calls it imports...)."""
    from edgebus.link.link import Link

    return Link(
        bus,
        node,
        key=key.encode(),
        role="initiator",
        exports=[("sensor/#", ""), ("sys/#", "")],
        imports=[("cmd/#", "")],
        export_calls=[("sys/#", "")],
        heartbeat=0.5,
        out_queue=64,
        handshake_timeout=1.0,
        **kw,
    )


def serve_echo(c):
    """Bind sys/echo on connection c and answer each call with {"echo": payload}."""
    ep = c.bind("sys/echo")

    async def serve():
        async for req in ep:
            req.reply({"echo": req.payload})

    return asyncio.create_task(serve())


async def up(link, spec, node):
    """Keep link running over spec (uplink) and wait for its first session;
    prints UP and the link's sid."""
    asyncio.create_task(uplink(link, spec, node))
    while link.status != "up":
        await asyncio.sleep(0.02)
    print("UP", link.sid)
