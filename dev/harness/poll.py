"""Waiting for a condition with a deadline, never a fixed sleep: a loaded
machine (CI has 2 cores) takes longer, not a different path.

Portable: tests/portable use ``until`` under the real MicroPython too
(tests/conftest.py's mpy_tree compiles this module), so it needs only
asyncio, time and edgebus.compat's clock, in whole milliseconds (a float
is garbage on MicroPython)."""

import asyncio
import time

from edgebus.compat import ms


def _late(what, timeout):
    return AssertionError("%s: not within %g s" % (what() if callable(what) else what, timeout))


def wait_until(cond, timeout=10.0, what="the condition", step=0.1, procs=()):
    """cond()'s first true value, tried every step seconds; AssertionError
    after timeout seconds naming what (a string, or a function giving the
    state at the failure), or at once when one of procs (each with .poll(),
    as a Popen) has ended."""
    deadline = ms() + int(timeout * 1000)
    while True:
        v = cond()
        if v:
            return v
        dead = [getattr(p, "args", p) for p in procs if p.poll() is not None]
        if dead:
            raise AssertionError(
                "ended while waiting for %s: %s" % (what() if callable(what) else what, dead)
            )
        if ms() >= deadline:
            raise _late(what, timeout)
        time.sleep(step)


async def until(cond, timeout=10.0, what="the condition", step=0.02):
    """wait_until inside a coroutine: the event loop runs between the tries."""
    deadline = ms() + int(timeout * 1000)
    while True:
        v = cond()
        if v:
            return v
        if ms() >= deadline:
            raise _late(what, timeout)
        await asyncio.sleep(step)
