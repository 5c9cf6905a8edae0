"""Routes to the endpoints that peers offer: one table per bus, shared by all
of its links, so a call can cross several links (relay).

Each topic offered by one or more peers is bound once on the bus, as a
proxy endpoint owned by the table. Its offers (link, wire topic, path) are
tried best first: the link's ``priority``, then the fewest hops. A call goes
to the first offer whose link is up and is not where the call came from; a
``no_route`` answer moves it to the next offer (nothing ran there, so no work
is done twice: the seed's priority cursor). A route learned on one link is
offered on the others by their call-export rules with the path it came by;
a link refuses a route whose path names its own node (a loop) or that has
more than MAX_HOPS hops, and never sends a route back over the link its best
offer came by (split horizon). A withdrawn route is withdrawn wherever it
went, because every link's next ROUTES is computed from this table.
"""

from .. import compat
from . import wire

MAX_HOPS = 8


class Route:
    """One proxied topic: its endpoint and its offers, best first."""

    def __init__(self, ep):
        self.ep = ep
        self.offers = []  # [link, wire topic, path]


def table(bus):
    """The bus's route table (topic key -> Route), made on first use."""
    t = bus.link_routes
    if t is None:
        # One connection for every proxy: a route outlives the link that
        # first offered it as long as another offers it too.
        t = bus.link_routes = {"conn": bus.connect(principal=("link", "routes")), "routes": {}}
    return t


def _rank(o):
    return (-o[0].opts.priority, len(o[2]))


def path_in(link, entry):
    """(wire topic, path) of a ROUTES entry, or None for a looping or too
    long route (counted). A bare topic is the peer's own endpoint."""
    if type(entry) is not list:
        return entry, [link.peer_node]
    if len(entry) != 2 or type(entry[1]) is not list:
        link.count("refused")
        return None
    path = entry[1]
    if link.node in path or len(path) > MAX_HOPS:
        link.count("route_loops")
        return None
    return entry[0], path


def update(link, want, serve):
    """Make ``want`` (key -> (wire topic, path)) the routes through ``link``:
    new ones are bound (``serve(route)`` runs each new proxy), the others
    this link offered are withdrawn."""
    t = table(link.bus)
    routes = t["routes"]
    for k in list(routes):
        if k not in want:
            _drop(routes, k, link)
    for k in want:
        wt, path = want[k]
        r = routes.get(k)
        if r is None:
            try:
                ep = t["conn"].bind(k, queue_len=link.opts.max_pending)
            except ValueError:  # bound locally already: the local owner wins
                link.count("route_conflicts")
                continue
            r = routes[k] = Route(ep)
            compat.asyncio.create_task(serve(r))
        for o in r.offers:
            if o[0] is link:
                o[1] = wt
                o[2] = path
                break
        else:
            r.offers.append([link, wt, path])
        r.offers.sort(key=_rank)


def withdraw(link):
    """Every route through ``link`` goes (its session ended)."""
    routes = table(link.bus)["routes"]
    for k in list(routes):
        _drop(routes, k, link)


def _drop(routes, k, link):
    r = routes[k]
    keep = []
    for o in r.offers:
        if o[0] is not link:
            keep.append(o)
    r.offers = keep
    if not keep:
        del routes[k]
        r.ep.unbind()  # callers now get NoRoute at once


def count(link):
    """How many routes ``link`` offers on its bus."""
    n = 0
    for r in table(link.bus)["routes"].values():
        for o in r.offers:
            if o[0] is link:
                n += 1
    return n


def advertised(link, k):
    """For ``link``'s ROUTES: None if ``k`` is an endpoint of this bus, the
    path to send if it is a relayed route, False if it must not go to this
    peer (its best route is through this peer, or the path is at MAX_HOPS)."""
    r = table(link.bus)["routes"].get(k)
    if r is None:
        return None
    best = r.offers[0]
    if best[0] is link or len(best[2]) >= MAX_HOPS:
        return False  # split horizon: never back where it comes from
    return best[2] + [link.node]


def pick(r, req, tried):
    """The best offer of ``r`` that can take ``req`` now: up, not where the
    call came from, not a link in ``tried``; or None."""
    came = req.origin.conn_id  # a link's calls come from its session's connection
    for o in r.offers:
        link = o[0]
        imp = link._imp
        if link.status == wire.UP and link not in tried and (imp is None or imp.conn_id != came):
            return o
    return None
