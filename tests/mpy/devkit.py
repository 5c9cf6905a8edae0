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
