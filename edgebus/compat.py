"""Runtime differences between CPython and MicroPython, in one place.

Everything else in ``edgebus`` imports these names instead of probing the
runtime itself, so the rest of the package is one source for both.
"""

import sys
import time

MICROPYTHON = sys.implementation.name == "micropython"

import asyncio  # noqa: E402  (MicroPython >= 1.22 names it asyncio too)

Event = asyncio.Event
CancelledError = asyncio.CancelledError
TimeoutError = asyncio.TimeoutError
wait_for = asyncio.wait_for
if not MICROPYTHON and sys.version_info < (3, 12):
    # In a module of its own: on MicroPython even code that never runs costs heap.
    from edgebus.compat_cpython import wait_for  # noqa: F401, F811

try:
    from micropython import const
except ImportError:

    def const(x):
        return x


if MICROPYTHON:
    from time import ticks_diff, ticks_ms

    # ticks_ms() wraps (after ~12 days on boards); accumulate differences so
    # now() stays monotonic for as long as it is called more often than that.
    _clock = [ticks_ms(), 0]

    def ms():
        """Bus clock: monotonic milliseconds (int, a small int for 12 days)."""
        t = ticks_ms()
        c = _clock
        c[1] += ticks_diff(t, c[0])
        c[0] = t
        return c[1]

    def now():
        """Bus clock: monotonic seconds (float)."""
        return ms() / 1000
else:
    from time import monotonic as now

    def ms():
        """Bus clock: monotonic milliseconds (int)."""
        return int(now() * 1000)


def close_stream(w):
    """Close an asyncio stream writer now. MicroPython's close() does nothing
    and its wait_closed() closes the socket, synchronously: left at close(),
    every reconnect would leak a socket (a board has a handful) and the
    broker would not see the connection go. Its body runs here, no await."""
    w.close()
    if MICROPYTHON and hasattr(w, "wait_closed"):
        try:
            w.wait_closed().send(None)
        except StopIteration:
            pass


# Boards whose epoch is 2000 count from there; wall_ms() is Unix time either way.
# A port may have no calendar (gmtime) or no wall clock at all (the qemu port).
_EPOCH = 946684800 if hasattr(time, "gmtime") and time.gmtime(0)[0] == 2000 else 0

# This node's wall clock: [source, ms added]. Source None: unstated, the clock
# is used when it looks set; "ntp" or "rtc" (firmware/clock.py says); "bridge":
# withheld until NTP sets it, the peer's alignment stands in. The ms added are
# the RTC simulator's offset (firmware/rtcsim.py), else 0.
wall = [None, 0]


def wall_ms():
    """Unix time in ms if this node's clock looks set (after 2020) and is not
    withheld (``wall``), else None: a board without an RTC or NTP counts from
    its epoch at boot."""
    if wall[0] == "bridge":
        return None
    try:
        t = time.time_ns() // 1000000
    except AttributeError:
        if not hasattr(time, "time"):
            return None
        t = int(time.time() * 1000)
    t += _EPOCH * 1000 + wall[1]
    return t if t > 1577836800000 else None


def type_name(x):
    """The name of x's type, for error messages (works on both runtimes)."""
    return type(x).__name__
