"""Cancellation safety when an item arrives as the receiver is cancelled (docs/api.md: Feeds)."""

import asyncio

import edgebus
from tests.portable.support import araises, run, settle


def test_receiver_cancelled_after_wakeup_loses_nothing():
    async def main():
        c = edgebus.Bus().connect()
        for q in (3, 0):
            s = c.subscribe("t", queue_len=q)
            t = asyncio.create_task(s.recv())
            await settle()
            c.publish("t", q)
            t.cancel()  # before the woken receiver runs
            await araises(asyncio.CancelledError, t)
            assert s.recv_nowait().payload == q
            assert s.dropped() == 0
            s.close()

    run(main())


def test_each_waiting_receiver_gets_one_item():
    async def main():
        c = edgebus.Bus().connect()
        s = c.subscribe("t")
        ts = [asyncio.create_task(s.recv()) for _ in range(3)]
        await settle()
        for i in range(3):
            c.publish("t", i)
        got = []
        for t in ts:
            got.append((await asyncio.wait_for(t, 0.5)).payload)
        assert sorted(got) == [0, 1, 2]

    run(main())


def test_endpoint_recv_is_cancellation_safe():
    async def main():
        c = edgebus.Bus().connect()
        ep = c.bind("rpc")
        await araises(asyncio.TimeoutError, asyncio.wait_for(ep.recv(), 0.02))
        t = asyncio.create_task(c.call("rpc", 1))
        await settle()
        req = ep.recv_nowait()
        assert req.payload == 1 and req.reply(2) is True
        assert await t == 2

    run(main())


def test_feeds_drain_after_disconnect_and_endpoint_iteration_ends():
    async def main():
        c = edgebus.Bus().connect()
        s = c.subscribe("t")
        ep = c.bind("rpc")
        c.publish("t", 1)
        got = []

        async def serve():
            async for req in ep:
                got.append(req)

        t = asyncio.create_task(serve())
        await settle()
        c.disconnect()
        await asyncio.wait_for(t, 0.5)
        assert got == [] and await ep.closed() == "disconnected"
        assert s.recv_nowait().payload == 1 and await s.recv() is None

    run(main())
