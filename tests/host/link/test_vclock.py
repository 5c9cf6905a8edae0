"""The virtual clock the link's timing tests run on (vclock.py)."""

import asyncio
import sys
import time

import edgebus.compat
from edgebus.link import spool
from tests.host.link import vclock


def test_timers_cost_no_wall_time_and_the_bus_clock_follows():
    real = edgebus.compat.now

    async def main():
        t0 = edgebus.compat.now()
        await asyncio.sleep(30)
        with_timeout = asyncio.wait_for(asyncio.Event().wait(), 5)
        try:
            await with_timeout
        except asyncio.TimeoutError:
            pass
        return t0, edgebus.compat.now(), spool.now(), edgebus.compat.ms()

    w0 = time.monotonic()
    t0, t1, t_spool, ms = vclock.run(main())
    assert time.monotonic() - w0 < 10  # 35 s of timers, none waited for
    assert t1 - t0 == 35 and t_spool == t1 and ms == int(t1 * 1000)
    assert edgebus.compat.now is real and spool.now is real  # put back


def test_every_edgebus_name_for_the_bus_clock_reads_it():
    import importlib
    import pkgutil

    import edgebus

    for m in pkgutil.walk_packages(edgebus.__path__, "edgebus."):
        if m.name.startswith("edgebus.link.") or m.name.count(".") == 1:  # core and link
            try:
                importlib.import_module(m.name)
            except ImportError:  # a runtime's module (MicroPython's) or an extra's
                pass
    real = edgebus.compat.now
    named = [
        n
        for n, mod in list(sys.modules.items())
        if n.startswith("edgebus") and getattr(mod, "now", None) is real
    ]
    assert "edgebus.link.spool" in named and "edgebus" in named

    async def main():
        return {n: sys.modules[n].now() for n in named}

    assert set(vclock.run(main()).values()) == {1000.0}


def test_ready_work_runs_before_the_clock_moves():
    async def main():
        order = []

        async def tick():
            await asyncio.sleep(1)
            order.append(("timer", edgebus.compat.now()))

        t = asyncio.create_task(tick())
        for _ in range(3):
            await asyncio.sleep(0)
            order.append(("ready", edgebus.compat.now()))
        await t
        return order

    order = vclock.run(main())
    assert [k for k, _ in order] == ["ready"] * 3 + ["timer"]
    assert order[0][1] == order[2][1] == 1000.0 and order[3][1] == 1001.0
