"""RetainedView: a versioned, coalescing snapshot of retained state."""

from .compat import Event
from .topic import key, pattern, render
from .values import Message


def _sort_key(msg):
    k = msg.topic
    return (render(k), tuple([0 if type(t) is int else 1 for t in k]))


class RetainedView:
    """Current retained messages matching a pattern; not a queue, never drops."""

    kind = "retained_view"

    def __init__(self, conn, topic):
        self._conn = conn
        self.topic = topic
        self._msgs = {}
        self.version = 0
        self._why = None
        self._ev = None

    def offer(self, item):
        # Retains arrive as Message, unretains as RetainedEvent.
        if type(item) is Message:
            self._msgs[item.topic] = item
        elif self._msgs.pop(item.topic, None) is None:
            return True
        self.version += 1
        if self._ev is not None:
            self._ev.set()
        return True

    def get(self, topic):
        """The retained Message at a concrete topic, or None."""
        return self._msgs.get(key(topic))

    def snapshot(self):
        """Every Message in the view, sorted by topic."""
        return sorted(self._msgs.values(), key=_sort_key)

    items = snapshot

    def __len__(self):
        return len(self._msgs)

    async def changed(self, last_seen):
        """The new version once it differs from last_seen; None once closed."""
        while True:
            if self._why is not None:
                return None
            if self.version != last_seen:
                return self.version
            ev = self._ev
            if ev is None:
                ev = self._ev = Event()
            ev.clear()
            await ev.wait()

    async def closed(self):
        """Wait until the view is closed; return the reason."""
        while self._why is None:
            await self.changed(self.version)
        return self._why

    def why(self):
        return self._why

    def close(self):
        self._close("closed")
        return True

    def _close(self, why):
        if self._why is not None:
            return
        self._why = why
        bus = self._conn._bus
        bus._views.remove(pattern(self.topic, bus.s_wild, bus.m_wild)[1], self)
        self._conn._forget(self)
        if self._ev is not None:
            self._ev.set()

    def stats(self):
        return {
            "kind": self.kind,
            "topic": self.topic,
            "version": self.version,
            "size": len(self._msgs),
            "closed": self._why,
        }
