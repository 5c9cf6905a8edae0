"""A hostile device from inside the fleet, with its own valid key and its
firmware replaced: a CPython Link over MQTT that floods readings
as fast as its process can make them, in one of the ways the protocol allows:

- ``unpaced``: it offers no acknowledgements and no window (ack off);
- ``ignore``: it offers both and ignores the window it is given;
- ``retain``: it retains a new fact per reading.

    python -m tests.reliability.hostile_device MODE NODE KEY PORT SECONDS

It prints one JSON line at the end: readings made, frames sent, its link's
counters and last error."""

import asyncio
import json
import sys
import time

import edgebus
from edgebus.link import tx
from edgebus.link.link import Link
from edgebus.link.mqtt import MqttTransport


async def main(mode, node, key, port, seconds):
    bus = edgebus.Bus()
    link = Link(
        bus,
        node,
        key=key.encode(),
        role="initiator",
        exports=[("sensor/#", ""), ("state/#", "")],
        ack=mode != "unpaced",
        spool=1 << 20,
        status=False,
    )
    if mode == "ignore":  # its code takes no notice of a window
        tx.on_window = lambda link, w: None
    c = bus.connect()
    link.start()
    t = MqttTransport("127.0.0.1", port, node=node)
    await t.open()
    run = asyncio.create_task(link.run(t))
    n = 0
    t_end = time.monotonic() + seconds
    while time.monotonic() < t_end:
        if mode == "ignore":
            link._tx_window = None  # whatever the handshake said
        for _ in range(200):
            n += 1
            if mode == "retain":
                c.retain("state/k%d" % n, n)
            else:
                c.publish("sensor/temp", {"n": n, "flood": True})
        await asyncio.sleep(0)
    out = {
        "mode": mode,
        "made": n,
        "frames_out": link.counters.get("frames_out", 0),
        "counters": link.counters,
        "last_error": link.last_error,
        "state": link.status,
    }
    run.cancel()
    t.close()
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    m, node, key, port, secs = sys.argv[1:6]
    asyncio.run(main(m, node, key, int(port), float(secs)))
