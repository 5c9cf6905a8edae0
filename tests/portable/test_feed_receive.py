"""Receiving: recv, recv_nowait, async for, drain after close, cancellation
(docs/api.md: Feeds)."""

import asyncio

import edgebus
from tests.portable.support import araises, run, settle


def test_recv_waits_for_an_item():
    async def main():
        c = edgebus.Bus().connect()
        s = c.subscribe("t")
        assert s.recv_nowait() is None
        t = asyncio.create_task(s.recv())
        await settle()
        assert not t.done()
        c.publish("t", 7)
        assert (await t).payload == 7

    run(main())


def test_items_accepted_before_close_are_drained():
    async def main():
        c = edgebus.Bus().connect()
        s = c.subscribe("t")
        w = c.watch_retained("t")
        c.retain("t", 1)
        c.publish("t", 2)
        s.close()
        w.unwatch()
        c.publish("t", 3)
        assert (await s.recv()).payload == 1
        assert s.recv_nowait().payload == 2
        assert await s.recv() is None and s.recv_nowait() is None
        got = []
        async for ev in w:
            got.append(ev.payload)
        assert got == [1]

    run(main())


def test_blocked_receivers_wake_on_close():
    async def main():
        c = edgebus.Bus().connect()
        s = c.subscribe("t")
        t1 = asyncio.create_task(s.recv())
        t2 = asyncio.create_task(s.closed())
        await settle()
        s.close()
        await settle()
        assert t1.done() and t2.done()
        assert await t1 is None and await t2 == "closed"
        assert await s.closed() == "closed"

    run(main())


def test_async_for_ends_when_the_feed_closes():
    async def main():
        c = edgebus.Bus().connect()
        s = c.subscribe("t")
        got = []

        async def consume():
            async for m in s:
                got.append(m.payload)
            return "ended"

        t = asyncio.create_task(consume())
        await settle()
        c.publish("t", 1)
        c.publish("t", 2)
        await settle()
        c.disconnect()
        assert await asyncio.wait_for(t, 0.5) == "ended"
        assert got == [1, 2]

    run(main())


def test_timed_out_recv_loses_nothing():
    async def main():
        c = edgebus.Bus().connect()
        s = c.subscribe("t")
        await araises(asyncio.TimeoutError, asyncio.wait_for(s.recv(), 0.05))
        c.publish("t", 1)
        t = asyncio.create_task(asyncio.wait_for(s.recv(), 0.05))
        await asyncio.sleep(0)
        c.publish("t", 2)
        assert (await t).payload == 1
        assert (await asyncio.wait_for(s.recv(), 0.05)).payload == 2
        assert s.dropped() == 0

    run(main())
