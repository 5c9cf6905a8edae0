"""edgebus: a bounded, non-blocking message bus for CPython and MicroPython.

Publish facts, retain current truth, observe retained truth, call owned
actions. The contract is ``docs/api.md``.
"""

from .bus import Bus
from .compat import now
from .errors import (
    BusError,
    CallError,
    Closed,
    Denied,
    Disconnected,
    Failed,
    Full,
    NoRoute,
    Timeout,
)
from .request import Request
from .topic import literal
from .values import Message, Origin, RetainedEvent

__version__ = "0.1.0"
