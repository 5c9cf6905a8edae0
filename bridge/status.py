"""`edgebus status`: a human-readable snapshot of a running bridge (links,
peers, generations, queues, drop/gap/error counters), asked over its socket."""
import asyncio
import json

import edgebus
from bridge.config import default_socket
from bridge.links import attach_local


def add_arguments(p):
    p.add_argument("--socket", "-s", default=default_socket(),
                   help="the bridge's unix socket (its [bridge] socket setting; default "
                        "$EDGEBUS_SOCKET, else %(default)s)")
    p.add_argument("--json", action="store_true", help="print the raw JSON")
    p.add_argument("--timeout", type=float, default=3.0)


async def fetch(path, timeout=3.0):
    bus = edgebus.Bus()
    link, task = await attach_local(bus, path, node="status", exports=(), imports=(),
                                    export_calls=(), import_calls=[("bridge/#", "")])
    try:
        for _ in range(int(timeout / 0.02)):
            if ("bridge", "status") in bus.endpoints():
                break
            await asyncio.sleep(0.02)
        return await bus.connect().call("bridge/status", None, timeout=timeout)
    finally:
        await link.close("done")
        task.cancel()


def render(st):
    L = ["bridge %s  up %ss  bus: %d connections, %d retained, %d dropped, %d disconnected "
         "(could not keep up)" % (st["node"], st["uptime"], st["bus"]["connections"],
                                  st["bus"]["retained"], st["bus"]["dropped"],
                                  st["bus"].get("overflows", 0))]
    lg = st.get("log")
    if lg:
        L.append("log %s: %d appended, %d dropped, %d errors, at segment %s offset %s; "
                 "%d syncs (every %g ms at most, last %s ms), %d unsynced" % (
                     lg["dir"], lg["appended"], lg["dropped"], lg["errors"], *lg["position"],
                     lg["syncs"], lg["commit_ms"], lg["last_sync_ms"], lg["unsynced"]))
        if "state" in lg:
            L.append("log health: %s: %d of %d queued (durable links held from %d), %d data "
                     "frames held back so far" % (
                         lg["state"].upper() if lg["state"] != "ok" else "ok", lg["queued"],
                         lg["queue_len"], lg["high_water"], lg["held"]))
    L.append("")
    L.append("%-22s %-10s %-14s %4s %7s %7s %6s %6s %6s %s" % (
        "LINK", "STATE", "PEER", "GEN", "IN", "OUT", "GAPS", "DROPS", "ERRS", "LAST ERROR"))
    for lid, s in st["links"].items():
        c = s["counters"]
        errs = sum(c.get(k, 0) for k in ("bad_frames", "auth_failures", "errors", "refused",
                                         "denied", "forged", "replayed")) + sum((s.get("transport") or {}).get(k, 0)
                                                          for k in ("crc_errors", "cobs_errors"))
        L.append("%-22s %-10s %-14s %4s %7d %7d %6d %6d %6d %s" % (
            lid[:22], s["state"], (s.get("peer") or "-")[:14], s.get("generation") or "-",
            c.get("frames_in", 0), c.get("frames_out", 0), c.get("gaps", 0),
            c.get("dropped_out", 0) + c.get("dropped_down", 0), errs, s.get("last_error") or ""))
    return "\n".join(L)


def run(args):
    try:
        st = asyncio.run(fetch(args.socket, args.timeout))
    except (OSError, ConnectionError) as e:
        raise SystemExit("edgebus status: cannot reach the bridge at %s: %s" % (args.socket, e))
    except edgebus.CallError as e:
        raise SystemExit("edgebus status: the bridge did not answer: %s" % e)
    print(json.dumps(st, indent=1) if args.json else render(st))
    return 0
