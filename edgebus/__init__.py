"""edgebus: a bounded, non-blocking message bus for CPython and MicroPython.

Publish facts, retain current truth, observe retained truth, call owned
actions. The contract is ``docs/api.md``.
"""
from .compat import now
from .errors import (BusError, Denied, Disconnected, CallError, NoRoute, Full,
                     Closed, Timeout, Failed)
from .topic import literal
from .values import Origin, Message, RetainedEvent
from .request import Request
from .bus import Bus

__version__ = "0.1.0"
