"""`edgebus call TOPIC [VALUE]`: call the endpoint at TOPIC on the host bus
(a device's sys/config/get, the bridge's bridge/status...) and print its
reply. A retained fact (a device's sys/info) is no endpoint: `watch` reads it,
and a call to one says so.

A device asleep (duty cycle) has no route while it sleeps: the call goes to
the bridge's mailbox (bridge/mailbox.py), which hands it over at the wake;
the command waits for the reply within --timeout, or with --queue returns at
once saying until when the call is held."""

from __future__ import annotations

import datetime
import json
from typing import TYPE_CHECKING, Any

import edgebus
from edgebus.tools.commands import busclient as bc

if TYPE_CHECKING:
    import argparse

MAILBOX = "bridge/mailbox"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "topic",
        help="the endpoint, e.g. dev/node-1/sys/config/get (a retained fact such as "
        "dev/node-1/sys/info is read with edgebus watch)",
    )
    p.add_argument(
        "value",
        nargs="?",
        default="null",
        help="the request: JSON if it parses, else a string (default null)",
    )
    p.add_argument(
        "--timeout",
        "-t",
        type=float,
        default=5.0,
        help="seconds to wait for the reply (%(default)s)",
    )
    p.add_argument(
        "--queue",
        action="store_true",
        help="for a device asleep (duty cycle): hold the call in the bridge's mailbox "
        "until its next wake and return at once (the outcome: the bridge's log and "
        "the retained bridge/mailbox/NODE)",
    )
    p.add_argument("--json", action="store_true", help="print the reply as JSON, strings too")
    bc.add_socket(p)


def _when(t: float) -> str:
    return datetime.datetime.fromtimestamp(t).isoformat(timespec="seconds")


async def _held(s: bc.Session, args: argparse.Namespace, v: Any, wait: bool) -> Any:
    """The mailbox's answer for a call held for a device asleep."""
    try:
        return await s.conn.call(
            MAILBOX, {"topic": args.topic, "value": v, "wait": wait}, timeout=args.timeout
        )
    except edgebus.Failed as e:
        raise bc.Fail(bc.FAILED, "%s: %s" % (args.topic, bc.render(e.reason))) from None
    except edgebus.Timeout:
        raise bc.Fail(
            bc.TIMEOUT,
            "timeout: %s is asleep and did not wake within %g s; the call stays held in "
            "the bridge's mailbox until its wake or expiry" % (args.topic, args.timeout),
        ) from None


async def _no_route(s: bc.Session, topic: str, e: bc.Fail) -> bc.Fail:
    """The failure of a call that found no route: said so for a retained
    fact (the session imports ``topic``), else ``e``."""
    try:
        await s.synced()
    except bc.Fail:
        return e
    if s.conn.retained_view(topic).get(topic) is None:
        return e
    return bc.Fail(
        bc.NO_ROUTE,
        "no route: %s is a retained fact, not an endpoint: read it with edgebus watch %s"
        % (topic, topic),
    )


async def call(args: argparse.Namespace) -> None:
    v = bc.value(args.value)
    # The topic imported too: a retained fact there is told apart from an endpoint gone.
    async with bc.Session(bc.socket_path(args), imports=[(args.topic, "")], route=args.topic) as s:
        if args.queue:
            r = await _held(s, args, v, False)
            bc.emit(
                "held: %s until %s wakes (at %s); expires at %s"
                % (args.topic, r["node"], _when(r["wakes"]), _when(r["expires"]))
            )
            return
        try:
            r = await s.call(args.topic, v, args.timeout)
        except bc.Fail as e:
            if e.code != bc.NO_ROUTE:
                raise
            if not args.topic.startswith("dev/"):
                raise await _no_route(s, args.topic, e) from None
            try:
                r = await _held(s, args, v, True)
            except bc.Fail as e2:
                if "is not asleep" in str(e2):  # the mailbox's word: a plain no route
                    raise await _no_route(s, args.topic, e) from None
                raise
    bc.emit(json.dumps(bc.jsonable(r)) if args.json else bc.render(r))


def run(args: argparse.Namespace) -> int:
    return bc.main("call", call(args))
