"""`edgebus call TOPIC [VALUE]`: call the endpoint at TOPIC on the host bus
(a device's sys/info, the bridge's bridge/status...) and print its reply."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from edgebus.tools import busclient as bc

if TYPE_CHECKING:
    import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("topic", help="the endpoint, e.g. dev/node-1/sys/info")
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
    p.add_argument("--json", action="store_true", help="print the reply as JSON, strings too")
    bc.add_socket(p)


async def call(args: argparse.Namespace) -> None:
    async with bc.Session(bc.socket_path(args)) as s:
        r = await s.call(args.topic, bc.value(args.value), args.timeout)
    bc.emit(json.dumps(bc.jsonable(r)) if args.json else bc.render(r))


def run(args: argparse.Namespace) -> int:
    return bc.main("call", call(args))
