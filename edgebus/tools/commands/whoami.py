"""`edgebus whoami`: the principal the bridge sees for you on its socket
(uid, gid, pid from the socket's credentials), as sbus's whoami."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from edgebus.tools.commands import busclient as bc

if TYPE_CHECKING:
    import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the bridge's answer as JSON")
    bc.add_socket(p)


async def whoami(args: argparse.Namespace) -> None:
    async with bc.Session(bc.socket_path(args)) as s:
        r = await s.call("bridge/whoami", None, bc.ROUTE_WAIT)
    p = r["principal"]
    if args.json:
        bc.emit(json.dumps(r))
    elif isinstance(p, dict):
        bc.emit(
            "uid=%s gid=%s pid=%s link=%s bridge=%s"
            % (p.get("uid"), p.get("gid"), p.get("pid"), r["link"], r["bridge"])
        )
    else:
        bc.emit("principal=%s link=%s bridge=%s" % (json.dumps(p), r["link"], r["bridge"]))


def run(args: argparse.Namespace) -> int:
    return bc.main("whoami", whoami(args))
