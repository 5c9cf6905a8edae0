"""The pages the bridge answers bridge/status with (``page``), so that a
fleet of any size fits the socket's frames; `edgebus status` reads them
(tools/commands/status.py)."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any, Iterable

if TYPE_CHECKING:
    from edgebus.bridge.context import BridgeView, MailboxView
    from edgebus.link.link import Link

# A reply's links take at most this many bytes of JSON (one link's stats are
# ~1 KB): the rest come in later pages, and a reply fits the local socket's
# 64 KiB frame with room for the bridge's own stats.
PAGE_BYTES = 40 * 1024


def state(link: Link, mailbox: MailboxView | None) -> str:
    """The link's state, but "asleep" for a device asleep as it announced
    (bridge/mailbox.py), not down, and "overslept" past its wake's margin."""
    sl = mailbox.sleep_of(link.peer) if mailbox is not None and link.status != "up" else None
    return link.status if sl is None else sl["state"]


def link_stats(bridge: BridgeView, link: Link) -> dict[str, Any]:
    """link.stats(), with "since" (Unix s: its state's last change), "state"
    as state() and, for a device asleep, "asleep_until" (Unix s of its
    announced wake)."""
    s = link.stats()
    s["since"] = round(time.time() - link.state_age(), 1)
    if s["state"] != "up":
        sl = bridge.mailbox.sleep_of(link.peer)
        if sl is not None:
            s["state"] = sl["state"]
            s["asleep_until"] = sl["until"]
    return s


def totals(links: Iterable[Link], mailbox: MailboxView | None = None) -> dict[str, Any]:
    """The fleet at a glance: how many links, by state (state()), and every
    counter summed over them."""
    states: dict[str, int] = {}
    sums: dict[str, int] = {}
    n = 0
    for lk in links:
        n += 1
        st = state(lk, mailbox)
        states[st] = states.get(st, 0) + 1
        for k, v in lk.counters.items():
            sums[k] = sums.get(k, 0) + v
    return {"links": n, "states": states, "counters": sums}


def page(bridge: BridgeView, req: Any) -> dict[str, Any]:
    """The bridge's answer to bridge/status ``req``: null or {"from": i}:
    its stats with the links from the i-th (by id) on, as many as fit
    PAGE_BYTES, and "next", where the next page starts (null: none);
    {"links": false}: none of them; {"link": id}: that one."""
    req = {} if req is None else req
    if not isinstance(req, dict) or set(req) - {"from", "link", "links"}:
        raise ValueError('bridge/status takes null, {"from": N}, {"links": false} or {"link": ID}')
    if "link" in req:
        if req["link"] not in bridge.links:
            raise ValueError("no link %r" % (req["link"],))
        return dict(bridge.stats([req["link"]]), next=None)
    i = req.get("from", 0)
    if type(i) is not int or i < 0:
        raise ValueError("from must be a link index, got %r" % (i,))
    st = bridge.stats((), fleet=i == 0)  # the totals once, with the first page
    if req.get("links", True) is False:
        return dict(st, next=None)
    ids = sorted(bridge.links)
    size, j = 0, i
    while j < len(ids):
        s = link_stats(bridge, bridge.links[ids[j]])
        size += len(json.dumps(s))
        if size > PAGE_BYTES and j > i:
            break
        st["links"][ids[j]] = s
        j += 1
    return dict(st, next=j if j < len(ids) else None)
