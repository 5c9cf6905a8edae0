# A device's MQTT transport alone, for the presence tests: opens
# edgebus.link.mqtt.MqttTransport, sets on_peer, and prints one line per
# presence message ("PEER 1" / "PEER 0") and per frame, reopening the
# transport whenever it ends. Runs under MicroPython and CPython.
# usage: presence_device.py HOST PORT NODE
import asyncio
import sys

from edgebus.link.mqtt import MqttTransport


def peer(online):
    print("PEER", 1 if online else 0)


async def main(host, port, node):
    while True:
        try:
            t = await MqttTransport(host, port, node=node, keepalive=10).open()
        except OSError as e:
            print("OPEN FAILED", repr(e))
            await asyncio.sleep(0.2)
            continue
        t.on_peer = peer
        print("OPEN")
        while True:
            b = await t.recv()
            if b is None:
                break
            print("FRAME", len(b[0]))
        print("CLOSED")


asyncio.run(main(sys.argv[1], int(sys.argv[2]), sys.argv[3]))
