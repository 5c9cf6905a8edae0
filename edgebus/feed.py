"""Bounded feeds: Subscription, RetainedWatch and Endpoint.

Each feed owns a preallocated ring of fixed size. ``offer`` never blocks and
never allocates: when the ring is full the policy evicts the oldest item or
rejects the new one, and the drop is counted on the feed, its connection and
the bus; under ``disconnect`` (sbus's flood control: a subscriber that
cannot keep up is misbehaving) the feed closes instead, with reason
"overflow". A queue length of 0 is a rendezvous: an item is admitted only while
a receiver is waiting for it.
"""

from . import topic as topics
from .compat import Event, const

# Annotations are for mypyc (a compiled build of the core on CPython, setup.py):
# the MicroPython compiler drops them; CPython reads this import only in mypy.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, ClassVar

DROP_OLDEST = const(0)
REJECT_NEWEST = const(1)
DISCONNECT = const(2)
RENDEZVOUS = const(4)  # added to the policy when the queue length is 0
POLICIES = ("drop_oldest", "reject_newest", "disconnect")


class Feed:
    """Base of the queued feeds; see the API contract for the public methods."""

    kind: "ClassVar[str]" = "feed"

    def __init__(self, conn, topic, queue_len: int, policy: int) -> None:
        # Few attributes on purpose: on MicroPython each costs heap per feed.
        self._conn = conn
        self.topic = topic
        # A rendezvous keeps one slot to hand an item to a waiting receiver.
        self._buf: list = [None] * (queue_len or 1)
        self._head: int = 0
        self._n: int = 0
        self._policy: int = policy if queue_len else policy + RENDEZVOUS
        self._dropped: int = 0
        self._why: object = None
        self._ev: "Any" = None  # made on first wait, then reused
        self._waiting: int = 0  # receivers blocked in recv()

    # -- producer side -------------------------------------------------
    def offer(self, item: object) -> bool:  # mpy: native
        """Enqueue without blocking; False (and a counted drop) if refused."""
        n = self._n
        buf = self._buf
        cap = len(buf)
        if n == cap or self._policy >= RENDEZVOUS:  # full, or a rendezvous
            p = self._policy
            if p >= RENDEZVOUS:
                if n or not self._waiting:
                    self._drop()
                    return False
            else:
                self._drop()
                if p != DROP_OLDEST:
                    return False
                Feed.recv_nowait(self)
                n -= 1
        i = self._head + n  # _push, inlined: this runs once per delivery
        if i >= cap:
            i -= cap
        buf[i] = item
        self._n = n + 1
        if self._waiting:
            self._ev.set()
        return True

    def _push(self, item: object) -> None:
        buf = self._buf
        i = self._head + self._n
        if i >= len(buf):
            i -= len(buf)
        buf[i] = item
        self._n += 1

    def _drop(self) -> None:
        self._dropped += 1
        c = self._conn
        c._dropped += 1
        c._bus._dropped += 1
        if self._policy & DISCONNECT and self._why is None:
            # Safe while the bus walks its index: removal replaces the slot's list.
            c._bus._overflows += 1
            self._close("overflow")

    def wake_on(self, event):
        """Set ``event`` whenever an item is accepted: one task can then serve
        many feeds with recv_nowait() instead of a task per feed."""
        self._ev = event
        self._waiting = 1

    # -- consumer side -------------------------------------------------
    def recv_nowait(self) -> "Any":  # mpy: native
        """The next queued item, or None when none is queued or it is closed.

        The ring's pop itself, not a method calling it: a call less per
        delivery for whoever drains feeds in a loop."""
        if not self._n:
            return None
        buf = self._buf
        h = self._head
        item = buf[h]
        buf[h] = None
        h += 1
        self._head = 0 if h == len(buf) else h
        self._n -= 1
        return item

    async def recv(self):
        """The next item, waiting for one; None once the feed is closed and drained.

        Cancellation-safe: an item leaves the ring only when recv returns it.
        """
        while True:
            item = self.recv_nowait()
            if item is not None:
                return item
            if self._why is not None:
                return None
            ev = self._ev
            if ev is None:
                ev = self._ev = Event()
            ev.clear()
            self._waiting += 1
            try:
                await ev.wait()
            finally:
                self._waiting -= 1

    def __aiter__(self):
        return self

    async def __anext__(self):
        item = await self.recv()
        if item is None:
            raise StopAsyncIteration
        return item

    async def closed(self):
        """Wait until the feed is closed; return the reason."""
        while self._why is None:
            ev = self._ev
            if ev is None:
                ev = self._ev = Event()
            ev.clear()
            await ev.wait()
        return self._why

    # -- lifecycle -----------------------------------------------------
    def why(self):
        """The close reason, or None while open."""
        return self._why

    def dropped(self):
        return self._dropped

    def close(self):
        """Close the feed (idempotent); queued items can still be drained."""
        self._close("closed")
        return True

    def _close(self, why):
        if self._why is not None:
            return
        self._why = why
        self._detach()
        self._conn._forget(self)
        if self._ev is not None:
            self._ev.set()

    def _detach(self):
        pass

    def _pattern_key(self):
        bus = self._conn._bus
        return topics.pattern(self.topic, bus.s_wild, bus.m_wild)[1]

    def stats(self):
        p = self._policy
        return {
            "kind": self.kind,
            "topic": self.topic,
            "queue_len": 0 if p >= RENDEZVOUS else len(self._buf),
            "full": POLICIES[p & 3],
            "queued": self._n,
            "dropped": self._dropped,
            "closed": self._why,
        }


class Subscription(Feed):
    """A bounded mailbox of published Messages matching a pattern."""

    kind: "ClassVar[str]" = "subscription"

    def unsubscribe(self):
        self._close("unsubscribed")
        return True

    def _detach(self):
        self._conn._bus._subs.remove(self._pattern_key(), self)


class RetainedWatch(Feed):
    """A bounded mailbox of RetainedEvents for retained topics matching a pattern."""

    kind: "ClassVar[str]" = "retained_watch"

    def unwatch(self):
        self._close("unwatched")
        return True

    def _detach(self):
        self._conn._bus._watches.remove(self._pattern_key(), self)


class Observer(Feed):
    """A bounded feed of publishes (Message) and retained changes
    (RetainedEvent) matching a pattern, in the order the bus saw them."""

    kind: "ClassVar[str]" = "observer"

    def _detach(self):
        self._conn._bus._observers.remove(self._pattern_key(), self)


class Endpoint(Feed):
    """A bounded mailbox of Requests for one concrete topic (reject_newest)."""

    kind: "ClassVar[str]" = "endpoint"

    def __init__(self, conn, topic, queue_len: int) -> None:
        Feed.__init__(self, conn, topic, queue_len, REJECT_NEWEST)

    def unbind(self):
        self._close("unbound")
        return True

    def offer(self, req: object) -> bool:
        # Requests whose caller gave up still sit in the ring; clear them
        # out before refusing a live call as Full.
        if self._n and (self._n == len(self._buf) or self._policy >= RENDEZVOUS):
            for _ in range(self._n):  # rotate once, keeping live requests in order
                r = Feed.recv_nowait(self)
                if not r.done():
                    self._push(r)
        return Feed.offer(self, req)

    def recv_nowait(self) -> "Any":
        while True:
            req = Feed.recv_nowait(self)
            if req is None or not req.done():  # skip requests their caller gave up
                break
        if req is not None:
            # Held on the connection, not the endpoint: a held request stays
            # valid after unbind but fails when the binding connection goes.
            h = self._conn._held
            req._held = h
            h.append(req)
        return req

    def _detach(self):
        eps = self._conn._bus._eps
        k = topics.key(self.topic)
        if eps.get(k) is self:
            del eps[k]
        # Queued requests fail at once with the close reason.
        while True:
            req = Feed.recv_nowait(self)
            if req is None:
                break
            req.abandon(self._why)
