"""Link figures: bytes on the wire per message, messages/s over a pty paced at
115,200 baud against that line's physical limit, call round trips/s, the
cost of acknowledgements (throughput with acks on vs off, CPython and
MicroPython) and how long an outage the default spools cover."""

import asyncio
import glob
import json
import os
import random
import shutil
import statistics
import tempfile

import edgebus
from dev import mpyrun
from dev.bench import link_ack_script
from dev.bench.stats import clock, repeat, summary
from edgebus.link import cipher, frame, seal, wire
from edgebus.link.link import Link
from edgebus.link.options import Options
from edgebus.link.pipe import pair
from edgebus.link.stream import PolledTransport, StreamTransport
from edgebus.tools.sim.ptycable import PtyCable

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ACK_SCRIPT = link_ack_script.__file__
WINDOW = 16  # a board's uplink out_queue (boards/unix.json, esp32.json)
RATE = 20  # readings/s for the outage figure (its goal: 10 s)
DAY = 86400 * RATE  # the reading counter after a day at RATE
HEALTH = (10, 2)  # sys/health periods: the firmware's default, `edgebus fleet`'s

TOPIC = "sensor/temp"


def wire_bytes():
    """Bytes for one PUB of a binary payload of 8, 64, 512 bytes: on a byte
    stream (a frame with its lead delimiter) and as an MQTT message
    (frame.message), unsealed, sealed (seal.TAIL more: the frame counter and
    tag) and, on MQTT, sealed and bare (0x00, body and tail, no COBS or CRC).
    Encrypted: the body after its type byte through cipher.ctr (the same
    length; COBS may take a byte more or less per 254 of it on a stream).
    Payloads are pseudo-random from a fixed seed, so the figures repeat.
    "over_*": what the framing, header and seal add
    (the bytes less the payload and the topic's JSON)."""
    key = cipher.key(bytes(16)) if cipher.BACKEND else None
    tail = bytes(seal.TAIL)
    out = []
    for n in (8, 64, 512):
        body = bytes(
            wire.encode(wire.PUB, [TOPIC, None], seq=1234, blob=random.Random(n).randbytes(n))
        )
        enc = body[:1] + cipher.ctr(key, 1, body[1:]) if key else None
        topic_json = len(('["%s",null]' % TOPIC).encode()) + 1  # 1: varint JSON length
        sizes = {
            "on_line": len(frame.encode(body, lead=True)),
            "on_line_sealed": len(frame.encode(body, lead=True, tail=tail)),
            "mqtt": len(frame.message(body)),
            "mqtt_sealed": len(frame.message(body, tail=tail)),
            "mqtt_bare": len(frame.message(body, tail=tail, bare=True)),
        }
        if enc is not None:
            sizes["on_line_encrypted"] = len(frame.encode(enc, lead=True, tail=tail))
            sizes["mqtt_bare_encrypted"] = len(frame.message(enc, tail=tail, bare=True))
        row = {"payload": n, "topic_and_json": topic_json, "efficiency": n / sizes["on_line"]}
        row.update(sizes)
        row.update({"over_" + k: v - n - topic_json for k, v in sizes.items()})
        # the names the report has used for the byte stream
        row["framing_and_header"] = row["over_on_line"]
        row["framing_header_seal"] = row["over_on_line_sealed"]
        out.append(row)
    return out


async def _pty_rate(count, baud):
    with PtyCable(baud=baud) as cable:
        dev, host = edgebus.Bus(q_length=16), edgebus.Bus(q_length=count + 16)
        # the whole burst waits in the spool (~90 bytes a message): nothing evicted
        dl = Link(
            dev,
            "dev",
            key=b"k",
            exports=[("sensor/#", "")],
            heartbeat=1.0,
            out_queue=count + 16,
            spool=count * 128 + 4096,
        )
        hl = Link(host, "host", key=b"k", role="responder", imports=[("#", "dev")], heartbeat=1.0)
        # Non-blocking, as a polled device must be: both ends share this event loop.
        f = open(os.open(cable.a, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK), "r+b", buffering=0)
        import serial_asyncio

        r, w = await serial_asyncio.open_serial_connection(url=cable.b, baudrate=baud)
        tasks = [
            asyncio.create_task(dl.run(PolledTransport(f, poll_ms=1))),
            asyncio.create_task(hl.run(StreamTransport(r, w))),
        ]
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
    limit = baud / 10 / per_msg  # 8N1: 10 bits a byte on the line
    runs = [asyncio.run(_pty_rate(count, baud)) for _ in range(1 if smoke else 3)]
    rate = repeat(iter([r[0] for r in runs]).__next__, len(runs))
    return {
        "baud": baud,
        "payload": 64,
        "bytes_per_msg": per_msg,
        "msgs_per_s": rate,
        "line_limit_msgs_per_s": limit,
        "of_limit": rate["median"] / limit,
    }


async def _roundtrips(n):
    dev, host = edgebus.Bus(), edgebus.Bus()
    dl = Link(dev, "dev", key=b"k", export_calls=[("rpc/#", "")], heartbeat=1.0)
    hl = Link(host, "host", key=b"k", role="responder", import_calls=[("#", "dev")], heartbeat=1.0)
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


def _ack_figures(r):
    on = [x["rate"] for x in r["on"]]
    off = [x["rate"] for x in r["off"]]
    return {
        "on": summary(on),
        "off": summary(off),
        "ratio": statistics.median(on) / statistics.median(off),
        "acks_per_msg": statistics.median(x["frames_in_dev"] for x in r["on"]) / r["messages"],
    }


def _seal_figures(r):
    """Per seal mode its rates and the ratio of its median to unsealed's."""
    off = statistics.median(x["rate"] for x in r["off"])
    out = {"backend": r["backend"]}
    for m in link_ack_script.SEALS:
        if m in r:
            rates = [x["rate"] for x in r[m]]
            out[m] = {"rate": summary(rates), "of_off": statistics.median(rates) / off}
    return out


def ack_cost(smoke=False, what="ack"):
    """Messages/s over the in-memory byte pipe with acks on and off (what=
    "seal": sealed with "mac", "encrypt" and "off"), interleaved, on CPython
    (in this process) and on the MicroPython unix port (.mpy bundle)."""
    n, nm, reps = (500, 300, 1) if smoke else (20000, 5000, 9)
    cp = link_ack_script.rate(n, reps, WINDOW, what)
    cp["messages"] = n
    r = mpyrun.run(
        ACK_SCRIPT,
        ["rate" if what == "ack" else what, str(nm), str(reps), str(WINDOW)],
        heap="256K",
        capture_output=True,
        text=True,
        timeout=600,
    )
    if r.returncode != 0:
        raise RuntimeError("MicroPython link benchmark failed:\n" + r.stdout + r.stderr)
    mp = json.loads(r.stdout.strip().splitlines()[-1])
    mp["messages"] = nm
    fig = _seal_figures if what == "seal" else _ack_figures
    return {
        "window": WINDOW,
        "cpython": fig(cp),
        "micropython": fig(mp),
        "messages": n,
        "mpy_messages": nm,
        "reps": reps,
    }


def spool_cover():
    """Readings (firmware/services/temp.py's, as the device's link encodes
    them, measured on the MicroPython unix port) that each board's default
    RAM spool and the default flash journal hold, and so the seconds of an
    outage they cover at RATE readings/s; fresh from boot and after a day
    (the counter and the link clock have more digits by then)."""
    from firmware.services import temp

    for k in (0, 7, 123, 4567, DAY):  # the script's copy of the reading is the service's
        assert link_ack_script.read(k) == temp.read(k), k
    boards = {}
    for path in sorted(glob.glob(os.path.join(ROOT, "boards", "*.json"))):
        with open(path) as f:
            b = json.load(f)
        boards[b["name"]] = b.get("queues", {}).get("spool")
    from firmware import boot

    default = boot.DEFAULTS["queues"]["spool"]
    sizes = sorted(set([v for v in boards.values() if v] + [default]))
    jbytes = Options.journal_bytes
    d = tempfile.mkdtemp(prefix="edgebus-journal-bench-")
    try:
        r = mpyrun.run(
            ACK_SCRIPT,
            [
                "spool",
                ",".join(map(str, sizes)),
                "0,%d" % DAY,
                d,
                str(jbytes),
                ",".join(map(str, HEALTH)),
            ],
            heap="2M",
            packages=("edgebus", "firmware"),
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        shutil.rmtree(d, ignore_errors=True)
    if r.returncode != 0:
        raise RuntimeError("MicroPython spool measure failed:\n" + r.stdout + r.stderr)
    m = json.loads(r.stdout.strip().splitlines()[-1])
    held = {(x["size"], x["n0"], x["health"]): x["held"] for x in m["ram"]}
    # A reading's bytes in the unix board's spool (the fleet's device), fresh
    # and after a day; beside its body as sent (what an entry holding the
    # body as sent behind a 10-byte header would take).
    per = {x["n0"]: x for x in m["ram"] if x["size"] == boards["unix"] and not x["health"]}
    reading = {
        k: {
            "spooled": per[n0]["reading_spooled"],
            "sent": per[n0]["reading_sent"],
            "table_bytes": per[n0]["table_bytes"],
        }
        for k, n0 in (("boot", 0), ("day", DAY))
    }
    reading["table_bytes_health"] = max(
        x["table_bytes"] for x in m["ram"] if x["size"] == boards["unix"] and x["health"]
    )
    rows = []
    for name, size in sorted(boards.items(), key=lambda kv: (kv[1] or 0, kv[0])):
        if not size:
            continue
        row = {
            "board": name,
            "spool": size,
            "held_boot": held[(size, 0, 0)],
            "held_day": held[(size, DAY, 0)],
            "bytes_per_reading": size / held[(size, DAY, 0)],
        }
        for h in HEALTH:  # the fewest of boot and a day, with sys/health spooled too
            row["held_health_%d" % h] = min(held[(size, 0, h)], held[(size, DAY, h)])
        row["seconds"] = min(row["held_boot"], row["held_day"]) / RATE
        row["seconds_health"] = {str(h): row["held_health_%d" % h] / RATE for h in HEALTH}
        rows.append(row)
    j = m["journal"]
    return {
        "rate": RATE,
        "reading": reading,
        "firmware_default": default,
        "boards": rows,
        "health": list(HEALTH),
        "journal": {
            "bytes": jbytes,
            "held_boot": j[0]["held"],
            "held_day": j[1]["held"],
            "seconds": min(j[0]["held"], j[1]["held"]) / RATE,
        },
    }


def run(smoke=False):
    return {
        "wire": wire_bytes(),
        "pty": pty_throughput(smoke),
        "roundtrips_per_s": call_roundtrips(smoke),
        "acks": ack_cost(smoke),
        "seal": ack_cost(smoke, "seal"),
        "spool_cover": spool_cover(),
    }


if __name__ == "__main__":
    import json

    print(json.dumps(run(smoke=True), indent=1))
