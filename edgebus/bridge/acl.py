"""The host bus's authoriser: local users (unix credentials) get what their
[[acl]] entry allows; a user without one gets nothing unless it is the
bridge's own user or root (the socket's file mode admits every user, so the
ACL is the only gate); links and the bridge itself are trusted (a device's
reach is already bounded by its link's import rules and mapped prefix)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Iterable

from edgebus.topic import ANY, REST, key, pattern

if TYPE_CHECKING:
    from edgebus.bridge.config import Acl, Config

# Endpoints any local user may call: they answer the caller about itself
# (bridge/callerinfo.py), nothing it could not learn by trying; the mailbox
# (bridge/mailbox.py) holds a call only where this ACL lets the caller make it.
OPEN_CALLS = (("bridge", "whoami"), ("bridge", "may"), ("bridge", "mailbox"))

# bus action -> the ACL list that grants it
ACTIONS = {
    "publish": "write",
    "retain": "write",
    "unretain": "write",
    "subscribe": "read",
    "watch_retained": "read",
    "call": "call",
    "bind": "serve",
}


class Authoriser:
    """``allow(ctx)``: (bool, reason) for the bus. A principal that is a dict
    with 'uid' is a local user; anything else is trusted. ``trusted``: uids
    allowed everything while they have no [[acl]] entry of their own."""

    def __init__(self, acls: Iterable[Acl], trusted: Iterable[int] = ()) -> None:
        self.trusted = frozenset(trusted)
        self.by_uid = {}
        for a in acls:
            self.by_uid[a.uid] = {
                lst: [pattern(p, "+", "#")[1] for p in getattr(a, lst)]
                for lst in ("read", "write", "call", "serve")
            }
        self.denied = 0

    def allow(self, ctx: dict[str, Any]) -> bool | tuple[bool, str]:
        p = ctx["principal"]
        if not isinstance(p, dict) or "uid" not in p:
            return True
        if ctx["action"] == "call" and ctx["topic"] in OPEN_CALLS:
            return True
        rules = self.by_uid.get(p["uid"])
        if rules is None:
            if p["uid"] in self.trusted:
                return True
            self.denied += 1
            return False, (
                "uid %d has no [[acl]] entry (without one only the bridge's own user "
                "and root may use its socket)" % p["uid"]
            )
        lst = ACTIONS[ctx["action"]]
        t = ctx["topic"]
        k = (
            key(t)
            if ctx["action"] not in ("subscribe", "watch_retained")
            else pattern(t, "+", "#")[1]
        )
        for r in rules[lst]:
            if _covers(r, k):
                return True
        self.denied += 1
        return False, "uid %d may not %s %s" % (
            p["uid"],
            ctx["action"],
            "/".join(str(x) for x in t),
        )


def _covers(rule: tuple[Any, ...], k: tuple[Any, ...]) -> bool:
    """Does rule (a pattern key) cover k (a concrete key, or a pattern key whose
    every match the rule also matches)?"""
    for i, r in enumerate(rule):
        if r is REST:
            return True
        if i >= len(k):
            return False
        t = k[i]
        if t is REST:
            return False
        if r is ANY:
            continue
        if t is ANY or type(t) is not type(r) or t != r:
            return False
    return len(rule) == len(k)


def trusted_uids() -> tuple[int, int]:
    """The uids allowed everything without an [[acl]] entry: root and the
    bridge's own user."""
    return (0, os.geteuid())


def make(cfg: Config) -> Authoriser:
    return Authoriser(cfg.acl, trusted_uids())


def read_patterns(cfg: Config, uid: int) -> list[str]:
    """What a local user may read, as patterns (a socket client's exports)."""
    for a in cfg.acl:
        if a.uid == uid:
            return list(a.read)
    return ["#"] if uid in trusted_uids() else []
