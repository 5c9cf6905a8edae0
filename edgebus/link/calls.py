"""The link's calls: routes offered and proxied, forwarding calls to the
peer, serving the peer's calls here, and their results."""

from .. import compat, errors, topic
from . import presence, routes, rules, tx, wire


def init(link):
    """No calls forwarded or served, none numbered yet (Link.__init__); then reset()."""
    link._next_cid, link._served = 1, 0
    link._tasks = []
    reset(link)


def reset(link):
    """No calls forwarded (end_session fails those that were), no ROUTES sent."""
    link._pending = {}
    link._routes_sent = None


def send_routes(link):
    """Send ROUTES, the sorted wire topics of the endpoints this side offers
    the peer (relayed ones as [topic, path]), if they changed since last sent."""
    out = []
    keys = []
    for k in link.bus.endpoints():
        path = routes.advertised(link, k)
        if path is False:
            continue
        r = rules.first(link._export_calls, k)
        if r is not None and not rules.local(link, k):
            wt = wire.topic_out(k[len(r[1]) :])
            out.append(wt if path is None else [wt, path])
            keys.append(k)
    out.sort(key=str)
    if out != link._routes_sent:
        link._routes_sent = out
        link.count("routes_sent")
        tx.control(link, wire.ROUTES, out)
        presence.offered(link, keys)


def on_routes(link, obj):
    want = {}
    for e in obj:
        e = routes.path_in(link, e)
        if e is None:
            continue
        k = rules.map_in(link, e[0], link._import_calls)
        if k is not None:
            want[k] = e
    routes.update(link, want, proxy)


def spawn(link, coro):
    t = compat.asyncio.create_task(coro)
    keep = []  # a loop, not a comprehension: one function less on the heap
    for x in link._tasks:
        if not x.done():
            keep.append(x)
    keep.append(t)
    link._tasks = keep
    return t


async def proxy(r):
    """Forward the requests on a proxy endpoint, each to its best offer."""
    while True:
        while (
            r.offers
            and len(r.offers[0][0]._pending) >= r.offers[0][0].opts.max_pending
            and r.ep.why() is None
        ):
            # Leaving requests queued makes further callers see Full at once.
            link = r.offers[0][0]
            link._freed.clear()
            await link._freed.wait()
        req = await r.ep.recv()
        if req is None:
            return
        forward(r, req, ())


def forward(r, req, tried):
    """Send ``req`` over the best offer of route ``r`` that can take it (up,
    not where the call came from, not in ``tried``, not at its cap)."""
    o = routes.pick(r, req, tried)
    if o is None:
        return req.abandon("link_down" if r.offers and not tried else "no_route")
    link, wt = o[0], o[1]
    if len(link._pending) >= link.opts.max_pending:
        return req.abandon("full")
    ttl = None
    if req.deadline is not None:
        ttl = int((req.deadline - compat.now()) * 1000)
        if ttl <= 0:
            return req.abandon("timeout")
    cid = link._next_cid
    link._next_cid = cid + 1
    p = req.payload
    blob = None
    if isinstance(p, (bytes, bytearray)):
        blob, p = p, None
    x = req.origin.extra
    try:
        tx.call_frame(link, wire.CALL, [cid, wt, p, ttl, x or None], blob)
    except (TypeError, ValueError) as e:
        return req.fail("unencodable: %s" % e)
    link._pending[cid] = (req, r, tried)
    link.count("calls_out")


def on_result(link, t, obj, blob):
    p = link._pending.pop(obj[0], None)
    link._freed.set()
    if p is None:
        return link.count("late_replies")
    req = p[0]
    if t == wire.REPLY:
        req.reply(blob if blob is not None else obj[1])
    elif obj[1] == "timeout" and req.deadline is not None:
        pass  # the peer ran out of our own deadline: the caller sees Timeout itself
    elif obj[1] == "failed":
        req.fail(obj[2])
    elif obj[1] == "no_route" and routes.pick(p[1], req, p[2] + (link,)) is not None:
        link.count("calls_fell_through")  # nothing ran there: the next route takes it
        forward(p[1], req, p[2] + (link,))
    else:
        req.abandon(obj[2] if obj[1] == "closed" else obj[1])


def on_call(link, obj, blob):
    cid = obj[0]
    if link._served >= link.opts.max_pending:
        link.count("busy")
        return tx.call_frame(link, wire.FAIL, [cid, "busy", None])
    k = wire.topic_in(obj[1])
    r = None
    if not rules.wild(link.bus, k):  # a call names one concrete endpoint
        for ec in link._export_calls:
            if topic.matches(ec[0], ec[1] + k):
                r = ec
                break
    if r is None:
        link.count("refused")
        return tx.call_frame(link, wire.FAIL, [cid, "no_route", None])
    link._served += 1
    link.count("calls_in")
    ttl = obj[3]
    x = obj[4] if len(obj) > 4 and type(obj[4]) is dict else None
    spawn(
        link,
        serve(link, link._session, cid, r[1] + k, blob if blob is not None else obj[2], ttl, x),
    )


async def serve(link, session, cid, k, payload, ttl, x):
    """Call endpoint ``k`` here for the peer and send the result back."""
    res = None
    try:
        v = await link._imp.call(k, payload, timeout=None if ttl is None else ttl / 1000, extra=x)
        blob = None
        if isinstance(v, (bytes, bytearray)):
            blob, v = v, None
        res = (wire.REPLY, [cid, v], blob)
    except errors.Failed as e:
        res = (wire.FAIL, [cid, "failed", e.reason], None)
    except errors.Closed as e:
        # a relay that found no route says so: the caller's side may try another
        res = (wire.FAIL, [cid, "no_route" if e.reason == "no_route" else "closed", e.reason], None)
    except errors.Disconnected:
        res = (wire.FAIL, [cid, "session_reset", None], None)
    except errors.CallError as e:
        res = (wire.FAIL, [cid, e.reason, None], None)
    except errors.BusError as e:
        res = (wire.FAIL, [cid, "denied", str(e)], None)
    except ValueError as e:  # a topic the bus refuses: answer, never leave the caller waiting
        res = (wire.FAIL, [cid, "failed", str(e)], None)
    except MemoryError:  # a small board: answer rather than leave the caller waiting
        res = (wire.FAIL, [cid, "failed", "out of memory on %s" % link.node], None)
    finally:
        link._served -= 1
    if session == link._session and link.status == wire.UP:  # replies to a dead session go nowhere
        try:
            tx.call_frame(link, *res)
        except (TypeError, ValueError, MemoryError) as e:
            tx.call_frame(link, wire.FAIL, [cid, "failed", "unencodable reply: %s" % e])
