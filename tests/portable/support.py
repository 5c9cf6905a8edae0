"""Helpers for the portable tests: the same module runs under pytest (CPython)
and under tests/mpy/run.py (the real MicroPython unix port)."""

import asyncio
import sys

_MICROPYTHON = sys.implementation.name == "micropython"


def run(coro, virtual=False):
    """Run an async test body to completion, and end the tasks it left, as
    CPython's asyncio.run does. MicroPython's keeps them queued: the next test
    would resume a finished test's links and carry their buffers, which on a
    tight heap fragmented it until a Link's 1.5 KB attribute table found no
    room (test_link_calls and test_link_relay, on a loaded machine).
    virtual: on CPython, on the virtual clock (tests/host/link/vclock.py), for
    a body whose links run over in-memory pipes and wait on the protocol's
    timers; MicroPython runs it on the real clock."""
    if virtual and not _MICROPYTHON:
        from tests.host.link import vclock

        return vclock.run(coro)
    try:
        return asyncio.run(coro)
    finally:
        if _MICROPYTHON:
            asyncio.new_event_loop()  # empties the task queue


def raises(exc, fn, *args, **kw):
    """Call fn and return the exception of type exc it raised (fail otherwise)."""
    try:
        fn(*args, **kw)
    except exc as e:
        return e
    raise AssertionError("%s not raised by %r" % (exc.__name__, fn))


async def araises(exc, coro):
    """Await coro and return the exception of type exc it raised."""
    try:
        await coro
    except exc as e:
        return e
    raise AssertionError("%s not raised" % exc.__name__)


async def settle(n=5):
    """Let other tasks run n times."""
    for _ in range(n):
        await asyncio.sleep(0)


def flooded(full, n=4):
    """(bus, publisher, subscriber connection, subscription) after n
    publishes into a subscription of queue length 2 under policy full."""
    import edgebus

    bus = edgebus.Bus()
    pub = bus.connect()
    c = bus.connect()
    s = c.subscribe("t", queue_len=2, full=full)
    for i in range(n):
        assert pub.publish("t", i) is True  # never refused, whatever the feed does
    return bus, pub, c, s
