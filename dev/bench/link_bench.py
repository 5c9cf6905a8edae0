"""Link figures: bytes on the wire per message, messages/s over a pty paced at
115,200 baud against that line's physical limit, and call round trips/s."""
import asyncio
import os

import edgebus
from edgebus.link import frame, wire
from edgebus.link.link import Link
from edgebus.link.pipe import pair
from edgebus.link.stream import PolledTransport, StreamTransport
from dev.bench.stats import clock, repeat
from tools.ptycable import PtyCable

TOPIC = "sensor/temp"


def wire_bytes():
    """Bytes on a stream for one PUB of a binary payload of 8, 64, 512 bytes."""
    out = []
    for n in (8, 64, 512):
        body = wire.encode(wire.PUB, [TOPIC, None], seq=1234, blob=os.urandom(n))
        on_line = len(frame.encode(body, lead=True))
        topic_json = len(('["%s",null]' % TOPIC).encode())
        out.append({"payload": n, "on_line": on_line,
                    "framing_and_header": on_line - n - topic_json - 1,  # 1: varint JSON length
                    "topic_and_json": topic_json + 1,
                    "efficiency": n / on_line})
    return out


async def _pty_rate(count, baud):
    with PtyCable(baud=baud) as cable:
        dev, host = edgebus.Bus(q_length=16), edgebus.Bus(q_length=count + 16)
        # the whole burst waits in the spool (~90 bytes a message): nothing evicted
        dl = Link(dev, "dev", key=b"k", exports=[("sensor/#", "")], heartbeat=1.0,
                  out_queue=count + 16, spool=count * 128 + 4096)
        hl = Link(host, "host", key=b"k", role="responder", imports=[("#", "dev")],
                  heartbeat=1.0)
        # Non-blocking, as a polled device must be: both ends share this event loop.
        f = open(os.open(cable.a, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK), "r+b", buffering=0)
        import serial_asyncio
        r, w = await serial_asyncio.open_serial_connection(url=cable.b, baudrate=baud)
        tasks = [asyncio.create_task(dl.run(PolledTransport(f, poll_ms=1))),
                 asyncio.create_task(hl.run(StreamTransport(r, w)))]
        while dl.status != "up" or hl.counters.get("syncs", 0) < 1:
            await asyncio.sleep(0.01)
        sub = host.connect().subscribe("dev/sensor/#", queue_len=count + 16)
        c = dev.connect()
        payload = os.urandom(64)
        t0 = clock()
        for _ in range(count):
            c.publish(TOPIC, payload)
        for _ in range(count):
            await asyncio.wait_for(sub.recv(), 30)
        dt = clock() - t0
        sent = cable.bytes["a_to_b"]
        for t in tasks:
            t.cancel()
        f.close()
        w.close()
        return count / dt, sent


def pty_throughput(smoke=False, baud=115200):
    count = 100 if smoke else 800
    per_msg = wire_bytes()[1]["on_line"]
    limit = baud / 10 / per_msg    # 8N1: 10 bits a byte on the line
    runs = [asyncio.run(_pty_rate(count, baud)) for _ in range(1 if smoke else 3)]
    rate = repeat(iter([r[0] for r in runs]).__next__, len(runs))
    return {"baud": baud, "payload": 64, "bytes_per_msg": per_msg, "msgs_per_s": rate,
            "line_limit_msgs_per_s": limit, "of_limit": rate["median"] / limit}


async def _roundtrips(n):
    dev, host = edgebus.Bus(), edgebus.Bus()
    dl = Link(dev, "dev", key=b"k", export_calls=[("rpc/#", "")], heartbeat=1.0)
    hl = Link(host, "host", key=b"k", role="responder", import_calls=[("#", "dev")],
              heartbeat=1.0)
    ta, tb = pair()
    tasks = [asyncio.create_task(dl.run(ta)), asyncio.create_task(hl.run(tb))]
    ep = dev.connect().bind("rpc/echo", queue_len=4)

    async def echo():
        async for req in ep:
            req.reply(req.payload)
    tasks.append(asyncio.create_task(echo()))
    while ("dev", "rpc", "echo") not in host.endpoints():
        await asyncio.sleep(0.01)
    c = host.connect()
    t0 = clock()
    for i in range(n):
        await c.call("dev/rpc/echo", i)
    dt = clock() - t0
    for t in tasks:
        t.cancel()
    return n / dt


def call_roundtrips(smoke=False):
    n = 200 if smoke else 2000
    return repeat(lambda: asyncio.run(_roundtrips(n)), 1 if smoke else 3)


def run(smoke=False):
    return {"wire": wire_bytes(), "pty": pty_throughput(smoke),
            "roundtrips_per_s": call_roundtrips(smoke)}


if __name__ == "__main__":
    import json
    print(json.dumps(run(smoke=True), indent=1))
