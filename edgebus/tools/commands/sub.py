"""`edgebus sub PATTERN`: print the host bus's messages matching PATTERN, one
line each ('TOPIC VALUE', or JSON lines), until interrupted, --count, or the
bridge goes away (exit 7)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from edgebus.tools.commands import busclient as bc

if TYPE_CHECKING:
    import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("pattern", help="a topic pattern: + one level, # the rest (e.g. dev/+/temp)")
    bc.add_feed(p)
    bc.add_socket(p)


def line(args: argparse.Namespace, m: Any) -> str:
    if args.json:
        d = {"topic": "/".join(map(str, m.topic)), "value": bc.jsonable(m.payload)}
        if args.provenance:
            d["origin"] = bc.provenance(m.origin)
        return json.dumps(d)
    s = "%s %s" % ("/".join(map(str, m.topic)), bc.render(m.payload))
    return s + "  # " + json.dumps(bc.provenance(m.origin)) if args.provenance else s


async def sub(args: argparse.Namespace) -> None:
    s = bc.Session(bc.socket_path(args), imports=[("#", "")], everywhere=True)
    # Subscribed before joining: nothing the bridge sends first is missed.
    feed = s.conn.subscribe(args.pattern, queue_len=args.queue, full=args.full)
    async with s:
        await s.check("subscribe", args.pattern, "you may not read %s" % args.pattern)

        def show(m: Any) -> bool:
            bc.emit(line(args, m))
            return True

        await bc.follow(s, feed, show, args.count)


def run(args: argparse.Namespace) -> int:
    return bc.main("sub", sub(args))
