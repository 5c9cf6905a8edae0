"""Request: one call in flight, completed once by reply, fail or abandon."""

from .compat import const

PENDING = const(0)
REPLIED = const(1)
FAILED = const(2)
CLOSED = const(3)


class Request:
    """Handed to an endpoint's handler; ``reply``/``fail``/``abandon`` complete it.

    ``deadline`` is the caller's absolute deadline in ``edgebus.now()`` seconds
    (None when the caller waits without one), so a proxy can propagate it.
    """

    def __init__(self, topic, payload, origin, deadline, ev):
        self.topic = topic
        self.payload = payload
        self.origin = origin
        self.deadline = deadline
        self._ev = ev
        self._state = PENDING
        self._value = None
        self._held = None  # the holding connection's list while a handler has it

    def _complete(self, state, value):
        if self._state != PENDING:
            return False
        self._state = state
        self._value = value
        h = self._held
        if h is not None:
            h.remove(self)
            self._held = None
        self._ev.set()
        return True

    def reply(self, value):
        """Answer the caller; False if the request was already completed."""
        return self._complete(REPLIED, value)

    def fail(self, err):
        """Fail the call with ``Failed(err)``; False if already completed."""
        return self._complete(FAILED, err)

    def abandon(self, reason="abandoned"):
        """Give up: the caller sees ``Closed(reason)``; False if already completed."""
        return self._complete(CLOSED, reason)

    def done(self):
        return self._state != PENDING
