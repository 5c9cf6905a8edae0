"""Helpers for the portable tests: the same module runs under pytest (CPython)
and under tests/mpy/run.py (the real MicroPython unix port)."""

import asyncio


def run(coro):
    """Run an async test body to completion."""
    return asyncio.run(coro)


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
