"""Requests whose caller gave up do not take endpoint queue space
(docs/api.md: Precise edge cases: Calls)."""

import asyncio

import edgebus
from tests.portable.support import araises, run, settle


def test_dead_request_does_not_make_the_endpoint_full():
    async def main():
        c = edgebus.Bus().connect()
        for q in (1, 0):
            ep = c.bind("rpc", queue_len=q)
            # A rendezvous endpoint needs its handler waiting first.
            r = None if q else asyncio.create_task(ep.recv())
            await settle()
            # Offered, then abandoned at once: the deadline has passed.
            await araises(edgebus.Timeout, c.call("rpc", "old", timeout=0))
            t = asyncio.create_task(c.call("rpc", "new", timeout=5))
            await settle()
            req = await asyncio.wait_for(r if r else ep.recv(), 0.5)
            assert req.payload == "new" and ep.dropped() == 0
            req.reply(q)
            assert await t == q
            ep.unbind()

    run(main())


def test_purging_dead_requests_keeps_the_order_of_live_ones():
    async def main():
        c = edgebus.Bus().connect()
        ep = c.bind("rpc", queue_len=3)
        ts = []

        def call(p, timeout=5):
            ts.append(asyncio.create_task(c.call("rpc", p, timeout=timeout)))

        call("w")
        await settle()
        (await ep.recv()).reply(0)  # moves the ring's head off slot 0
        call("a")
        await settle()
        await araises(edgebus.Timeout, c.call("rpc", "dead", timeout=0))
        call("b")
        call("c")  # the ring is full of a, dead, b: the dead one makes room
        await settle()
        got = []
        for _ in range(3):
            req = ep.recv_nowait()
            got.append(req.payload)
            req.reply(req.payload)
        assert got == ["a", "b", "c"] and ep.dropped() == 0
        res = []
        for t in ts:
            res.append(await t)
        assert res == [0, "a", "b", "c"]

    run(main())
