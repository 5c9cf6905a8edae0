"""`edgebus pub TOPIC VALUE [--retain]`: publish (or retain) one value on the
bridge's host bus, as your unix user, scoped by the bridge's ACL."""

from __future__ import annotations

from typing import TYPE_CHECKING

from edgebus.tools.commands import busclient as bc

if TYPE_CHECKING:
    import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("topic", help="a concrete topic, e.g. dev/node-1/cmd/led")
    p.add_argument("value", help="JSON if it parses, else a string")
    p.add_argument(
        "--retain",
        "-r",
        action="store_true",
        help="retain it: the topic's current value, replayed to later watchers",
    )
    bc.add_socket(p)


async def pub(args: argparse.Namespace) -> None:
    action = "retain" if args.retain else "publish"
    words = args.topic.split("/")
    if "+" in words or "#" in words:
        raise ValueError("%s: a publish names one topic, without + or #" % args.topic)
    if words[0] in ("local", "link"):
        raise ValueError("%s: local/ and link/ topics never leave a bus" % args.topic)
    async with bc.Session(bc.socket_path(args), exports=[(args.topic, "")], route=args.topic) as s:
        await s.check(action, args.topic, "you may not %s %s" % (action, args.topic))
        link = s.link
        assert link is not None  # for mypy: the session is up
        seq = link.tx_seq
        getattr(s.conn, action)(args.topic, bc.value(args.value))
        # Sent when the link has numbered it and nothing waits in its spool;
        # the goodbye that follows on the same socket cannot overtake it.
        await s.until(
            lambda: link.tx_seq > seq and link.spool_stats()["unsent"] == 0,
            bc.ROUTE_WAIT,
            "the value was not sent within %g s" % bc.ROUTE_WAIT,
        )


def run(args: argparse.Namespace) -> int:
    return bc.main("pub", pub(args))
