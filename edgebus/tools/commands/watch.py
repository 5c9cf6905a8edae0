"""`edgebus watch PATTERN`: print the retained values matching PATTERN (the
current state), then every change to them, one line each."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from edgebus.tools.commands import busclient as bc

if TYPE_CHECKING:
    import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("pattern", help="a topic pattern: + one level, # the rest (e.g. dev/+/sys/#)")
    bc.add_feed(p)
    bc.add_socket(p)


def line(args: argparse.Namespace, ev: Any) -> str | None:
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


def show(args: argparse.Namespace, ev: Any) -> bool:
    out = line(args, ev)
    if out is not None:
        bc.emit(out)
    return ev.op != "replay_done"  # the marker is not one of --count's messages


async def watch(args: argparse.Namespace) -> None:
    async with bc.Session(bc.socket_path(args), imports=[("#", "")], everywhere=True) as s:
        await s.check("watch_retained", args.pattern, "you may not read %s" % args.pattern)
        await s.synced()
        feed = s.conn.watch_retained(
            args.pattern, queue_len=args.queue, full=args.full, replay=True
        )
        await bc.follow(s, feed, lambda ev: show(args, ev), args.count)


def run(args: argparse.Namespace) -> int:
    return bc.main("watch", watch(args))
