"""Endpoints that answer a caller about itself, for the shell commands:
``bridge/whoami`` (the principal this bus sees for the caller, as sbus's
whoami) and ``bridge/may`` (would the ACL let the caller do an action on a
topic). A publish over a link that the ACL refuses is dropped at the bridge
and a subscription it does not cover simply stays quiet; asking first lets
`edgebus pub/sub/watch` say "denied" instead. Both are open to every caller
(bridge/acl.py): they only tell a caller what it could learn by trying."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Callable

from edgebus import topic

if TYPE_CHECKING:
    from edgebus import Request
    from edgebus.bridge.context import BridgeView

WHOAMI = "bridge/whoami"
MAY = "bridge/may"
ACTIONS = ("publish", "retain", "subscribe", "watch_retained", "call")


def whoami(bridge: BridgeView, req: Request) -> dict[str, Any]:
    o = req.origin
    p = o.principal
    return {
        "principal": p if isinstance(p, dict) else list(p) if isinstance(p, tuple) else p,
        "link": o.link_id,
        "bridge": bridge.cfg.node,
    }


def may(bridge: BridgeView, req: Request) -> dict[str, Any]:
    """{"allowed": bool, "reason": str|None} for payload {"action", "topic"}."""
    q = req.payload
    if (
        not isinstance(q, dict)
        or q.get("action") not in ACTIONS
        or not isinstance(q.get("topic"), str)
    ):
        raise ValueError('payload must be {"action": one of %s, "topic": str}' % ", ".join(ACTIONS))
    if bridge.auth is None:
        return {"allowed": True, "reason": None}
    t = topic.norm(q["topic"])
    r = bridge.auth.allow(
        {"principal": req.origin.principal, "action": q["action"], "topic": t, "extra": None}
    )
    ok, why = r if isinstance(r, tuple) else (r, None)
    return {"allowed": bool(ok), "reason": why}


async def serve(bridge: BridgeView) -> None:
    """Serve both endpoints until cancelled."""

    async def loop(name: str, answer: Callable[[BridgeView, Request], dict[str, Any]]) -> None:
        async for req in bridge.conn.bind(name, queue_len=8):
            try:
                req.reply(answer(bridge, req))
            except ValueError as e:
                req.fail(str(e))

    await asyncio.gather(loop(WHOAMI, whoami), loop(MAY, may))
