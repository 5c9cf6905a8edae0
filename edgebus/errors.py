"""The exceptions edgebus raises."""


class BusError(Exception):
    """Base of every edgebus exception."""


class Denied(BusError):
    """The authoriser refused an operation."""


class Disconnected(BusError):
    """An operation on a disconnected connection."""


class CallError(BusError):
    """Base of call failures; ``reason`` says why."""

    def __init__(self, reason):
        super().__init__(reason)
        self.reason = reason


class NoRoute(CallError):
    """No endpoint is bound at the called topic."""


class Full(CallError):
    """The endpoint's queue is full."""


class Closed(CallError):
    """The endpoint closed (or abandoned the request) before replying."""


class Timeout(CallError):
    """The call's deadline passed."""


class Failed(CallError):
    """The handler called ``req.fail(err)``; ``reason`` is ``err``."""
