"""A virtual clock for the link's timing tests (CPython): an asyncio loop
whose time jumps to its next timer whenever nothing is ready, and the bus
clock (edgebus.compat.now, which the link reads) reading that same time. The
link's timers (RESEND once a second while stuck, heartbeats, the ACK delay)
then cost no wall time, and a test's own timeouts (asyncio.wait_for) still
fire in the order the protocol's would. Only for tests whose links run over
in-memory pipes (edgebus.link.pipe): with nothing to wait for but timers,
no real I/O can be overtaken. MicroPython's asyncio has no pluggable loop:
the portable tests run on the real clock."""

import asyncio
import contextlib
import selectors
import sys

import edgebus.compat


class _SkipIdle(selectors.DefaultSelector):
    """The loop's selector: what is ready now, else the clock moved on by
    the timeout the loop would have slept (its next timer)."""

    def __init__(self, clock):
        super().__init__()
        self.clock = clock

    def select(self, timeout=None):
        ready = super().select(0)
        if ready or timeout == 0:
            return ready
        if timeout is None:  # no timer at all: a thread's wake-up, really waited for
            return super().select(None)
        self.clock[0] += timeout
        return []


class VirtualLoop(asyncio.SelectorEventLoop):
    """An event loop on virtual seconds, starting at 1000."""

    def __init__(self):
        self.clock = [1000.0]
        super().__init__(_SkipIdle(self.clock))

    def time(self):
        return self.clock[0]


@contextlib.contextmanager
def _bus_clock(now):
    """compat.now, and every edgebus module's own name for it (``from
    ..compat import now``: edgebus, edgebus.link.spool), reading ``now``."""
    real = edgebus.compat.now
    mods = [
        m
        for name, m in list(sys.modules.items())
        if (name == "edgebus" or name.startswith("edgebus.")) and getattr(m, "now", None) is real
    ]
    for m in mods:
        m.now = now
    try:
        yield
    finally:
        for m in mods:
            m.now = real


def run(main):
    """asyncio.run(main) on a VirtualLoop, the bus clock reading its time."""
    loop = VirtualLoop()
    with _bus_clock(loop.time), asyncio.Runner(loop_factory=lambda: loop) as runner:
        return runner.run(main)
