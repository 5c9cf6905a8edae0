"""`edgebus watch PATTERN`: print the retained values matching PATTERN (the
current state), then every change to them, one line each."""
import json

from edgebus.tools import busclient as bc


def add_arguments(p):
    p.add_argument("pattern", help="a topic pattern: + one level, # the rest (e.g. dev/+/sys/#)")
    bc.add_feed(p)
    bc.add_socket(p)


def line(args, ev):
    """The line for a retained event, or None for the end of the replay
    (a JSON line {"event": "synced"} with --json)."""
    if ev.op == "replay_done":
        return json.dumps({"event": "synced"}) if args.json else None
    t = "/".join(map(str, ev.topic))
    if args.json:
        d = {"topic": t, "event": ev.op, "value": bc.jsonable(ev.payload)}
        if args.provenance:
            d["origin"] = bc.provenance(ev.origin)
        return json.dumps(d)
    s = "%s %s" % (t, bc.render(ev.payload) if ev.op == "retain" else "<unretained>")
    return s + "  # " + json.dumps(bc.provenance(ev.origin)) if args.provenance else s


def show(args, ev):
    out = line(args, ev)
    if out is not None:
        bc.emit(out)
    return ev.op != "replay_done"    # the marker is not one of --count's messages


async def watch(args):
    async with bc.Session(bc.socket_path(args), imports=[("#", "")]) as s:
        await s.check("watch_retained", args.pattern, "you may not read %s" % args.pattern)
        # The bridge's snapshot of its retained values comes first on a session.
        await s.until(lambda: s.link.counters.get("syncs", 0) >= 1, bc.ROUTE_WAIT,
                      "no snapshot from the bridge within %g s" % bc.ROUTE_WAIT)
        feed = s.conn.watch_retained(args.pattern, queue_len=args.queue, full=args.full,
                                     replay=True)
        await bc.follow(s, feed, lambda ev: show(args, ev), args.count)


def run(args):
    return bc.main("watch", watch(args))
