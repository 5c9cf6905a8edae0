"""Link throughput with acknowledgements on and off, and what the spool holds:
portable, run in-process on CPython (dev/bench/link_bench.py) and as a script
on the MicroPython unix port (from the .mpy bundle).

usage: link_ack_script.py rate N REPS WINDOW     (one JSON line)
       link_ack_script.py seal N REPS WINDOW
       link_ack_script.py spool SIZE,... N0,... JOURNAL_DIR JOURNAL_BYTES [HEALTH_S,...]

rate: a device link and a host link joined by the in-memory byte pipe (real
COBS frames), one process; N messages of ~60 bytes published on the device
bus, at most WINDOW ahead of what the device link has sent (a device's
out_queue), received on the host bus. Rate from the first publish to the last
arrival, REPS runs each of ack=True (the capability offered, so negotiated:
numbered entries kept in the spool until the host's ACK frees them) and
ack=False (not offered: the peers link as protocol 1, the spool frees an
entry as it is sent), interleaved so that noise hits both alike.

seal: the same with acks on, sealed and authenticated only (seal="mac" on
both: a counter and tag on every frame, docs/protocol.md section 17), sealed
and encrypted (seal="encrypt": AES-128-CTR too; left out where this runtime
has no AES) and unsealed (seal="off"), interleaved; with the AES backend
(edgebus/link/cipher.py's BACKEND).

spool: the firmware's temp service readings (firmware/services/temp.py: the
same payload, from its service connection) put into the firmware's uplink
Link (firmware/uplink.py; needs the firmware package in the bundle) with a
spool of SIZE bytes and no session, as they wait during an outage, from the
reading counter N0 on, 20 a second of the link clock; how many the spool
holds when it first has to evict one, and their bytes. With HEALTH_S, the
health service's sys/health (as it builds it) every HEALTH_S seconds too,
as a device spools it during an outage. The journal: the same readings into
the flash journal (link.journal) of JOURNAL_BYTES, until it drops its oldest
file.
"""

import asyncio
import math
import sys
import time

from edgebus import Bus
from edgebus.link import cipher, tx
from edgebus.link import seal as sealing
from edgebus.link.link import Link
from edgebus.link.pipe import pair

PAD = "x" * 40


def _ns():
    return time.time_ns()


async def _rate(n, ack, window, seal="offer"):
    dev, host = Bus(q_length=8), Bus(q_length=8)
    dl = Link(
        dev,
        "dev",
        key=b"k",
        exports=[("sensor/#", "")],
        heartbeat=5.0,
        out_queue=window + 8,
        spool=(window + 8) * 128 + 4096,
        ack=ack,
        status=False,
        seal=seal,
    )
    hl = Link(
        host,
        "host",
        key=b"k",
        role="responder",
        imports=[("#", "dev")],
        heartbeat=5.0,
        ack=ack,
        status=False,
        seal=seal,
    )
    ta, tb = pair()
    tasks = [asyncio.create_task(dl.run(ta)), asyncio.create_task(hl.run(tb))]
    while dl.status != "up" or hl.counters.get("syncs", 0) < 1:
        await asyncio.sleep(0.01)
    enc = seal == "encrypt" or seal == "offer" and cipher.BACKEND is not None
    if (
        dl._acking != ack
        or (dl._seal is not None) != (seal != "off")
        or sealing.encrypted(dl) != enc
    ):
        raise RuntimeError(
            "negotiated acks %s, seal %s, encrypted %s; wanted %s, %s"
            % (dl._acking, dl._seal is not None, sealing.encrypted(dl), ack, seal)
        )
    sub = host.connect().subscribe("dev/sensor/#", queue_len=window + 64)
    c = dev.connect()
    base = dl.counters.get("frames_out", 0)
    got = 0
    t0 = _ns()
    i = 0
    while got < n:
        while i < n and i - (dl.counters.get("frames_out", 0) - base) < window:
            c.publish("sensor/v", {"t": i, "i": i, "pad": PAD})
            i += 1
        await asyncio.sleep(0)
        while sub.recv_nowait() is not None:
            got += 1
    dt = (_ns() - t0) / 1e9
    acked = dl.counters.get("acked", 0)
    for t in tasks:
        t.cancel()
    await asyncio.sleep(0)
    return {
        "rate": n / dt,
        "acked": acked,
        "acks_out": hl._rx_acked,
        "frames_in_dev": dl.counters.get("frames_in", 0),
    }


SEALS = ("mac", "encrypt", "off")


def rate(n, reps, window, what="ack"):
    """{"on": runs, "off": runs}: acks on and off; with what="seal", runs by
    seal mode (SEALS that this runtime can keep) and "backend", its AES."""
    if what == "seal":
        modes = [m for m in SEALS if m != "encrypt" or cipher.BACKEND is not None]
        r = {m: [] for m in modes}
        for _ in range(reps):
            for m in modes:
                r[m].append(asyncio.run(_rate(n, True, window, m)))
        r["backend"] = cipher.BACKEND
        return r
    on, off = [], []
    for _ in range(reps):
        on.append(asyncio.run(_rate(n, True, window)))
        off.append(asyncio.run(_rate(n, False, window)))
    return {"on": on, "off": off}


def read(n):
    # firmware/services/temp.py's reading (kept in step with it; the host
    # side of the benchmark checks that the two agree)
    return round(21.0 + 3.0 * math.sin(n / 10), 2)


async def _spool(size, n0, journal=None, journal_bytes=262144, health=0, period_ms=50):
    from edgebus import compat

    clock = [n0 * period_ms]
    compat.ms = lambda: clock[0]  # the link clock: the uptime at 20 readings/s
    compat.now = lambda: clock[0] / 1000
    # The firmware's own uplink Link (firmware/uplink.py: its export rules,
    # out_queue, classes) on the firmware's bus and service connections.
    from firmware.boot import DEFAULTS
    from firmware.main import Ctx
    from firmware.uplink import Uplink

    cfg = {
        "node": "dev1",
        "key": "k",
        "uplink": {"kind": "uart"},
        "health_period": health,
        "link": {"journal": journal, "journal_bytes": journal_bytes},
    }
    board = dict(DEFAULTS)  # the firmware's values without a board.json (the spool is set below)
    board["name"] = None
    board["manifest"] = None
    bus = Bus(q_length=board["queues"]["bus"])
    ctx = Ctx(bus, cfg, None, board)
    ctx.spool = bytearray(size)
    ctx.uplink = Uplink(ctx)
    link = ctx.link
    link.start()  # spooling with no transport: an outage
    c = ctx.connect("temp")
    hc = ctx.connect("health")
    hk = health * 1000 // period_ms  # readings between two sys/health
    if health:
        from firmware.services.health import health as health_of
    sp = link._spool
    j = link._journal
    n = n0
    used = 0
    healths = 0
    sent = kept = k = 0  # k readings' bodies as sent, and the bytes their entries take
    while (j.dropped == 0) if j is not None else (sp.evicted == 0):
        c.publish("sensor/temp", {"c": read(n), "n": n, "simulated": True})
        n += 1
        if hk and (n - n0) % hk == 0:
            hc.publish("sys/health", health_of(ctx))
            healths += 1
        tx.pump(link)
        clock[0] += period_ms
        if sp.evicted == 0:
            used = sp.used
            if not hk and j is None:
                sent += len(sp.body(sp.last))
                kept += sp._size(sp.last)
                k += 1
    for t in [link._pump] + link._tasks:
        t.cancel()
    if j is not None:
        # the oldest file went: what is left is the window it always keeps
        return {
            "bytes": j.size,
            "n0": n0,
            "held": n - n0 - j.dropped,
            "bytes_on_flash": j.bytes + j.n,
        }
    held = sp.n - (healths if sp.n > healths else 0)
    return {
        "size": size,
        "n0": n0,
        "health": health,
        "held": held,
        "bytes_used": used,
        "entries": sp.n,
        "bytes_per_entry": used / sp.n if sp.n else 0,
        "reading_sent": sent / k if k else None,
        "reading_spooled": kept / k if k else None,
        "table_bytes": sp.table_bytes(),
    }


def spool(sizes, n0s, journal_dir, journal_bytes, health=()):
    """Readings held by RAM spools of each size, from each counter n0 (a
    fresh boot, or later: the counter and the link clock have more digits),
    also with sys/health every h seconds for h in health; and by a flash
    journal of journal_bytes in journal_dir."""
    ram = [asyncio.run(_spool(s, n0)) for n0 in n0s for s in sizes]
    ram += [asyncio.run(_spool(s, n0, health=h)) for h in health for n0 in n0s for s in sizes]
    fl = (
        [asyncio.run(_spool(4096, n0, "%s/%d" % (journal_dir, n0), journal_bytes)) for n0 in n0s]
        if journal_bytes
        else []
    )
    return {"ram": ram, "journal": fl}


def main(argv):
    import json

    if argv[0] in ("rate", "seal"):
        r = rate(int(argv[1]), int(argv[2]), int(argv[3]), "seal" if argv[0] == "seal" else "ack")
    else:
        r = spool(
            [int(x) for x in argv[1].split(",")],
            [int(x) for x in argv[2].split(",")],
            argv[3],
            int(argv[4]),
            [int(x) for x in argv[5].split(",")] if len(argv) > 5 else (),
        )
    print(json.dumps(r))


if __name__ == "__main__":
    main(sys.argv[1:])
