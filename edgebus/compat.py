"""Runtime differences between CPython and MicroPython, in one place.

Everything else in ``edgebus`` imports these names instead of probing the
runtime itself, so the rest of the package is one source for both.
"""
import sys

MICROPYTHON = sys.implementation.name == "micropython"

import asyncio  # MicroPython >= 1.22 names it asyncio too

Event = asyncio.Event
CancelledError = asyncio.CancelledError
TimeoutError = asyncio.TimeoutError
wait_for = asyncio.wait_for
if hasattr(asyncio, "timeout") and sys.version_info < (3, 12):
    # CPython 3.11's wait_for swallows a cancellation that arrives in the turn
    # its awaitable completes (gh-86296): a `while True: await wait_for(...)`
    # loop then never ends and whoever awaits its cancellation hangs (the
    # bridge's shutdown did, under load). asyncio.timeout, what 3.12's
    # wait_for is built on, keeps the cancellation.
    async def wait_for(aw, timeout):
        """asyncio.wait_for without the lost-cancellation race."""
        if timeout is None:
            return await aw
        async with asyncio.timeout(timeout):
            return await aw

try:
    from micropython import const
except ImportError:
    def const(x):
        return x

if MICROPYTHON:
    from time import ticks_ms, ticks_diff

    # ticks_ms() wraps (after ~12 days on boards); accumulate differences so
    # now() stays monotonic for as long as it is called more often than that.
    _clock = [ticks_ms(), 0]

    def now():
        """Bus clock: monotonic seconds (float)."""
        t = ticks_ms()
        c = _clock
        c[1] += ticks_diff(t, c[0])
        c[0] = t
        return c[1] / 1000
else:
    from time import monotonic as now


def type_name(x):
    """The name of x's type, for error messages (works on both runtimes)."""
    return type(x).__name__
