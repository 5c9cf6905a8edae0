"""Connection: the capability a service holds on a bus."""

# Cold-path names go through their module: on MicroPython every imported name
# is a globals entry paid for in heap, and this module would import ~25.
from . import compat, errors, request, values
from . import feed as feeds
from . import topic as topics
from .compat import type_name
from .values import Message, Origin, RetainedEvent
from .values import new as _new

# Annotations are for mypyc (a compiled build of the core on CPython, setup.py):
# the MicroPython compiler drops them; CPython reads this import only in mypy.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from .trie import PatternTrie

_INHERIT = object()
_NO_FACTORY: dict = {}


def check_factory(f):
    """Validate an origin_factory: None, a dict, or a zero-argument callable."""
    if f is None or type(f) is dict or callable(f):
        return f
    raise TypeError("origin_factory must be a dict or a callable, not " + type_name(f))


def _extra(extra):
    if extra is None:
        return None
    if not isinstance(extra, dict):
        raise TypeError("extra must be a dict, not " + type_name(extra))
    if not extra:
        return None
    if type(extra) is dict:  # a plain dict copies in one step (a link's every import)
        return values.FrozenDict(extra)
    # .items(): MicroPython's dict() misreads a dict subclass (an extra taken
    # from another origin) as a sequence of pairs.
    return values.FrozenDict(extra.items())


class Connection:
    """Publishes, retains, subscribes, watches, binds and calls on one bus."""

    def __init__(self, bus, principal, factory, parent) -> None:
        self._bus = bus
        self.principal = principal
        self._factory = factory
        self.conn_id = bus._new_id()
        self._parent = parent
        self._children: list = []
        self._feeds: list = []
        self._held: list = []  # Requests its handlers hold and have not completed
        self._dropped: int = 0
        self._closed: bool = False
        self._origin: object = None  # the last origin built without extra, reused
        self._dynamic: bool = callable(factory)

    # -- provenance ----------------------------------------------------
    def _make_origin(self, extra):
        c = self._origin
        if c is not None and _new is not None and not self._dynamic:
            # CPython: the static fields of the origin made before, this extra
            # (half the time of eight fields read and a namedtuple built)
            return c if extra is None else _new(Origin, c[:7] + (extra,))
        f = self._factory
        if self._dynamic:
            f = f()
            if type(f) is not dict:
                raise TypeError("origin_factory must return a dict, not " + type_name(f))
        elif not f:
            f = _NO_FACTORY
        o = Origin(
            f.get("kind", "local"),
            self.conn_id,
            self.principal,
            f.get("link_id"),
            f.get("peer_node"),
            f.get("peer_sid"),
            f.get("generation"),
            extra,
        )
        if extra is None:
            if c is not None and c == o:
                return c  # share the origin object while nothing in it changes
            self._origin = o
        elif c is None and _new is not None and not self._dynamic:
            self._origin = _new(Origin, o[:7] + (None,))  # its static fields, for the next
        return o

    def _live(self):
        if self._closed:
            raise errors.Disconnected("connection %s is disconnected" % self.conn_id)

    def _stamp(self, action, topic, extra, payload=None):
        """Validate extra, authorise the operation, and return its origin."""
        x = None if extra is None else _extra(extra)
        bus = self._bus
        if bus._auth is not None:
            bus._authorise(self, action, topics.norm(topic), extra, payload)
        o = self._origin
        if o is None or x is not None or self._dynamic:
            o = self._make_origin(x)
        return o

    def _check(self, action, norm):
        bus = self._bus
        if bus._auth is not None:
            bus._authorise(self, action, norm, None, None)

    # -- state/event plane ---------------------------------------------
    def publish(self, topic, payload, extra=None) -> bool:  # mpy: native
        """Deliver a Message to every matching subscription (never blocks)."""
        if self._closed:
            self._live()
        k = topics.key(topic)
        bus = self._bus
        o = self._origin
        # Fast path: no extra, no authoriser, a cached static origin.
        if extra is not None or o is None or self._dynamic or bus._auth is not None:
            o = self._stamp("publish", topic, extra, payload)
        subs: "PatternTrie" = bus._subs
        obs: "PatternTrie" = bus._observers
        if subs.count or obs.count:
            msg = Message(k, payload, o) if _new is None else _new(Message, (k, payload, o))
            subs.match(k, msg)
            obs.match(k, msg)
        return True

    def retain(self, topic, payload, extra=None):
        """Publish, store as current truth, and notify watches and views."""
        self._live()
        k = topics.key(topic)
        origin = self._stamp("retain", topic, extra, payload)
        bus = self._bus
        msg = Message(k, payload, origin)
        bus._subs.match(k, msg)
        bus._store.set(k, msg)
        if bus._watches.count or bus._observers.count:
            ev = RetainedEvent("retain", k, payload, origin)
            bus._watches.match(k, ev)
            bus._observers.match(k, ev)
        bus._views.match(k, msg)
        return True

    def unretain(self, topic, extra=None):
        """Remove a retained topic and notify watches and views (no publish)."""
        self._live()
        k = topics.key(topic)
        ev = RetainedEvent("unretain", k, None, self._stamp("unretain", topic, extra))
        bus = self._bus
        bus._store.pop(k)
        bus._watches.match(k, ev)
        bus._observers.match(k, ev)
        bus._views.match(k, ev)
        return True

    def subscribe(self, pattern, queue_len=None, full=None):
        """A Subscription to published messages matching pattern, primed with
        the matching retained messages (as many as its queue holds)."""
        self._live()
        bus = self._bus
        n, k = topics.pattern(pattern, bus.s_wild, bus.m_wild)
        q, p = bus._queue_opts(queue_len, full)
        self._check("subscribe", n)
        sub = feeds.Subscription(self, n, q, p)
        bus._subs.insert(k, sub)
        self._feeds.append(sub)
        for msg in bus._store.query(k, []):
            sub.offer(msg)
        return sub

    def unsubscribe(self, sub):
        return sub.unsubscribe()

    def watch_retained(self, pattern, queue_len=None, full=None, replay=False):
        """A RetainedWatch of retain/unretain events; with replay=True it first
        receives the current values, then one ``replay_done`` event."""
        self._live()
        bus = self._bus
        n, k = topics.pattern(pattern, bus.s_wild, bus.m_wild)
        q, p = bus._queue_opts(queue_len, full)
        self._check("watch_retained", n)
        w = feeds.RetainedWatch(self, n, q, p)
        bus._watches.insert(k, w)
        self._feeds.append(w)
        if replay:
            for m in bus._store.query(k, []):
                w.offer(RetainedEvent("retain", m.topic, m.payload, m.origin))
            if not w.offer(bus._replay_done):
                w._close("replay_overflow")
        return w

    def observe(self, pattern, queue_len=None, full=None):
        """An Observer: publishes (as Message) and retain/unretain (as
        RetainedEvent) matching pattern, in bus order, in one bounded feed.

        Not in the portable contract's core four styles: it is what a
        federation layer needs to forward traffic without reordering it.
        Authorised as both 'subscribe' and 'watch_retained'."""
        self._live()
        bus = self._bus
        n, k = topics.pattern(pattern, bus.s_wild, bus.m_wild)
        q, p = bus._queue_opts(queue_len, full)
        self._check("subscribe", n)
        self._check("watch_retained", n)
        o = feeds.Observer(self, n, q, p)
        bus._observers.insert(k, o)
        self._feeds.append(o)
        return o

    def unwatch_retained(self, watch):
        return watch.unwatch()

    def retained_view(self, pattern):
        """A RetainedView of the retained state matching pattern."""
        self._live()
        bus = self._bus
        n, k = topics.pattern(pattern, bus.s_wild, bus.m_wild)
        self._check("watch_retained", n)
        # Loaded on first use: a device that views nothing (the firmware)
        # keeps 528 bytes of a 32-bit board's heap free of its code.
        from . import view

        v = view.RetainedView(self, n)
        for m in bus._store.query(k, []):
            v._msgs[m.topic] = m
        bus._views.insert(k, v)
        self._feeds.append(v)
        return v

    # -- command plane -------------------------------------------------
    def bind(self, topic, queue_len=1):
        """An Endpoint receiving Requests for one concrete topic."""
        self._live()
        bus = self._bus
        n, k = topics.concrete(topic, bus.s_wild, bus.m_wild)
        q, _ = bus._queue_opts(queue_len, None)
        self._check("bind", n)
        if k in bus._eps:
            raise ValueError("topic %s is already bound" % topics.render(k))
        ep = feeds.Endpoint(self, n, q)
        bus._eps[k] = ep
        self._feeds.append(ep)
        return ep

    def unbind(self, ep):
        return ep.unbind()

    async def call(self, topic, payload, timeout=1.0, deadline=None, extra=None):
        """Send a Request to the endpoint bound at topic and wait for its reply.

        Raises NoRoute or Full at once; Timeout when the earlier of timeout and
        deadline passes (the request is then abandoned); Closed or Failed.
        """
        self._live()
        bus = self._bus
        n, k = topics.concrete(topic, bus.s_wild, bus.m_wild)
        origin = self._stamp("call", n, extra, payload)
        ep = bus._eps.get(k)
        if ep is None:
            raise errors.NoRoute("no_route")
        if timeout is not None:
            t = compat.now() + timeout
            if deadline is None or t < deadline:
                deadline = t
        ev = compat.Event()
        req = request.Request(k, payload, origin, deadline, ev)
        if not ep.offer(req):
            raise errors.Full("full")
        try:
            if deadline is None:
                await ev.wait()
            else:
                left = deadline - compat.now()
                if left <= 0:
                    raise compat.TimeoutError()
                await compat.wait_for(ev.wait(), left)
        except compat.TimeoutError:
            if req.abandon("timeout"):
                raise errors.Timeout("timeout")
        except compat.CancelledError:
            req.abandon("cancelled")
            raise
        s = req._state
        if s == request.REPLIED:
            return req._value
        if s == request.FAILED:
            raise errors.Failed(req._value)
        raise errors.Closed(req._value)

    # -- lifecycle -----------------------------------------------------
    def derive(self, principal=_INHERIT, origin_factory=None, origin_base=None):
        """A sibling connection on the same bus, disconnected with this one.
        It inherits the principal, not the origin_factory."""
        self._live()
        if principal is _INHERIT:
            principal = self.principal
        f = check_factory(origin_factory if origin_factory is not None else origin_base)
        c = self._bus._connect(principal, f, self)
        self._children.append(c)
        return c

    def disconnect(self):
        """Close every feed and derived connection (idempotent)."""
        if self._closed:
            return True
        self._closed = True
        for c in list(self._children):
            c.disconnect()
        for f in list(self._feeds):
            f._close("disconnected")
        for req in list(self._held):  # abandon() removes it from _held
            req.abandon("disconnected")
        if self._parent is not None and self in self._parent._children:
            self._parent._children.remove(self)
        self._bus._conns -= 1
        return True

    def is_disconnected(self):
        return self._closed

    def _forget(self, feed):
        if feed in self._feeds:
            self._feeds.remove(feed)

    def dropped(self):
        return self._dropped

    def _count(self, kind):
        n = 0
        for f in self._feeds:
            if f.kind == kind:
                n += 1
        return n

    def stats(self):
        return {
            "conn_id": self.conn_id,
            "dropped": self._dropped,
            "subscriptions": self._count("subscription"),
            "endpoints": self._count("endpoint"),
            "retained_watches": self._count("retained_watch"),
            "retained_views": self._count("retained_view"),
            "disconnected": self._closed,
        }

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.disconnect()
        return False

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        self.disconnect()
        return False
