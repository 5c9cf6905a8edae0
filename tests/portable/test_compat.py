"""compat.wait_for: the timeout every edgebus loop uses, on both runtimes."""

import asyncio

from edgebus import compat
from tests.portable.support import araises, run, settle


def test_wait_for_returns_the_result():
    async def main():
        async def val():
            await asyncio.sleep(0)
            return 7

        assert await compat.wait_for(val(), 1) == 7
        assert await compat.wait_for(val(), None) == 7

    run(main())


def test_wait_for_times_out():
    async def main():
        ev = compat.Event()
        await araises(compat.TimeoutError, compat.wait_for(ev.wait(), 0.01))

    run(main())


def test_a_wait_for_loop_ends_when_cancelled_as_its_event_fires():
    # The race CPython 3.11's own wait_for loses: the awaited event is set
    # in the same turn as the task is cancelled. The loop must end.
    async def main():
        ev = compat.Event()
        turns = [0]

        async def loop():
            while True:
                ev.clear()
                try:
                    await compat.wait_for(ev.wait(), 1.0)
                except compat.TimeoutError:
                    pass
                turns[0] += 1

        for _ in range(20):
            t = asyncio.create_task(loop())
            await settle(2)
            ev.set()
            t.cancel()
            await settle(5)
            assert t.done(), "the cancelled loop is still running"
            await araises(compat.CancelledError, t)

    run(main())
