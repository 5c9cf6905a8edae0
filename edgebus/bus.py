"""Bus: the router, retained store, endpoint registry and their indexes."""

from .compat import MICROPYTHON, type_name
from .conn import Connection, check_factory
from .errors import Denied
from .feed import POLICIES
from .trie import KeyTrie, PatternTrie
from .values import Origin, RetainedEvent

_Trie = PatternTrie
if not MICROPYTHON:
    from .memo_cpython import RoutedTrie as _Trie  # noqa: F811


def _token(name, v):
    t = type(v)
    if t is not str and t is not int:
        raise TypeError("%s must be a str or int, not %s" % (name, type_name(v)))
    return v


def _resolve_authoriser(a):
    if a is None:
        return None
    for name in ("allow", "authorize"):
        f = getattr(a, name, None)
        if f is not None:
            return f
    if callable(a):
        return a
    raise TypeError("authoriser must be callable or have allow()/authorize()")


class Bus:
    """An in-process, bounded, non-blocking message bus.

    ``q_length`` and ``full`` are the default queue length and full policy of
    feeds; ``s_wild``/``m_wild`` the single- and multi-level wildcard tokens;
    ``authoriser`` decides every operation (see the API contract).
    """

    def __init__(
        self, q_length=10, full="drop_oldest", s_wild="+", m_wild="#", authoriser=None
    ) -> None:
        self.s_wild = _token("s_wild", s_wild)
        self.m_wild = _token("m_wild", m_wild)
        if s_wild == m_wild and type(s_wild) is type(m_wild):
            raise ValueError("s_wild and m_wild must differ")
        # None means "the bus default" for a feed; the bus has none to fall back on.
        if q_length is None:
            raise TypeError("q_length must be an int, not NoneType")
        if full is None:
            raise ValueError("full must be one of %s, not None" % (POLICIES,))
        self.q_length, self._policy = self._queue_opts(q_length, full)
        self.full = full
        self._auth = _resolve_authoriser(authoriser)
        self._subs: PatternTrie = _Trie()
        self._watches: PatternTrie = _Trie()
        self._views: PatternTrie = _Trie()
        self._observers: PatternTrie = _Trie()
        self._store: KeyTrie = KeyTrie()
        self._eps: dict = {}
        self._conns: int = 0
        self._ids: int = 0
        self._dropped: int = 0
        self._overflows: int = 0  # feeds closed by the disconnect policy
        # the links' shared route table (link/routes.py), on first use
        self.link_routes: object = None
        self._replay_done = RetainedEvent(
            "replay_done", None, None, Origin("bus", None, None, None, None, None, None, None)
        )

    def _queue_opts(self, queue_len, full):
        """Validated (queue length, policy index), defaults from the bus."""
        if queue_len is None:
            queue_len = self.q_length
        elif type(queue_len) is not int:
            raise TypeError("queue_len must be an int, not " + type_name(queue_len))
        if queue_len < 0:
            raise ValueError("queue_len must be >= 0, not %d" % queue_len)
        if full is None:
            p = self._policy
        elif full in POLICIES:
            p = POLICIES.index(full)
        else:
            raise ValueError(
                "full must be one of %s, not %r (the bus never blocks a publisher)"
                % (POLICIES, full)
            )
        return queue_len, p

    def _new_id(self):
        self._ids += 1
        return "c%d" % self._ids

    def connect(self, principal=None, origin_factory=None, origin_base=None):
        """A new Connection; origin_factory (alias origin_base) supplies the
        trusted origin fields of what it sends."""
        f = origin_factory if origin_factory is not None else origin_base
        return self._connect(principal, check_factory(f), None)

    def _connect(self, principal, factory, parent):
        if type(factory) is dict:
            factory = dict(factory)  # later changes by the caller do not leak in
        self._conns += 1
        return Connection(self, principal, factory, parent)

    def _authorise(self, conn, action, topic, extra, payload):
        ctx = {
            "bus": self,
            "principal": conn.principal,
            "action": action,
            "topic": topic,
            "extra": extra,
        }
        if action == "publish" or action == "retain" or action == "call":
            ctx["payload"] = payload
        r = self._auth(ctx)
        reason = None
        if type(r) is tuple or type(r) is list:
            r, reason = r[0], (r[1] if len(r) > 1 else None)
        if not r:
            msg = "permission denied: %s %s" % (action, "/".join([str(t) for t in topic]))
            if reason is not None:
                msg += " (%s)" % (reason,)
            raise Denied(msg)

    def endpoints(self):
        """The topic keys (tuples) of the endpoints bound now, a new list."""
        return list(self._eps)

    def stats(self):
        """Counts of connections, open feeds by kind, and total drops."""
        return {
            "connections": self._conns,
            "dropped": self._dropped,
            "overflows": self._overflows,
            "queue_len": self.q_length,
            "full_policy": self.full,
            "s_wild": self.s_wild,
            "m_wild": self.m_wild,
            "subscriptions": self._subs.count,
            "retained_watches": self._watches.count,
            "retained_views": self._views.count,
            "observers": self._observers.count,
            "retained": self._store.count,
            "endpoints": len(self._eps),
        }
