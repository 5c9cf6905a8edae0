"""Calls: deadline vs timeout, and abandonment by a caller that gave up (docs/api.md: Calls)."""

import asyncio

import edgebus
from tests.portable.support import araises, run, settle


async def _timed(c, **kw):
    t0 = edgebus.now()
    await araises(edgebus.Timeout, c.call("rpc", 1, **kw))
    return edgebus.now() - t0


def test_earlier_of_timeout_and_deadline_wins():
    async def main():
        c = edgebus.Bus().connect()
        ep = c.bind("rpc", queue_len=4)
        dt = await _timed(c, timeout=10, deadline=edgebus.now() + 0.05)
        assert 0.04 <= dt < 1
        dt = await _timed(c, timeout=0.05, deadline=edgebus.now() + 10)
        assert 0.04 <= dt < 1
        dt = await _timed(c, timeout=None, deadline=edgebus.now() + 0.05)
        assert 0.04 <= dt < 1
        dt = await _timed(c, timeout=10, deadline=edgebus.now() - 1)
        assert dt < 0.5
        assert ep.recv_nowait() is None  # every request was abandoned

    run(main())


def test_no_timeout_waits_for_the_reply():
    async def main():
        c = edgebus.Bus().connect()
        ep = c.bind("rpc")
        t = asyncio.create_task(c.call("rpc", 1, timeout=None))
        req = await ep.recv()
        await asyncio.sleep(0.05)
        assert not t.done()
        req.reply(2)
        assert await t == 2

    run(main())


def test_timed_out_call_abandons_the_held_request():
    async def main():
        c = edgebus.Bus().connect()
        ep = c.bind("rpc")
        t = asyncio.create_task(c.call("rpc", 1, timeout=0.05))
        req = await ep.recv()
        await araises(edgebus.Timeout, t)
        assert req.done() is True
        assert req.reply(1) is False and req.fail(1) is False
        assert req.abandon("x") is False

    run(main())


def test_cancelled_call_abandons_the_request():
    async def main():
        c = edgebus.Bus().connect()
        ep = c.bind("rpc")
        t = asyncio.create_task(c.call("rpc", 1, timeout=5))
        req = await ep.recv()
        t.cancel()
        await araises(asyncio.CancelledError, t)
        assert req.done() is True and req.reply(1) is False

    run(main())


def test_queued_request_of_a_departed_caller_is_skipped():
    async def main():
        c = edgebus.Bus().connect()
        ep = c.bind("rpc", queue_len=2)
        await araises(edgebus.Timeout, c.call("rpc", "old", timeout=0.02))
        t = asyncio.create_task(c.call("rpc", "new", timeout=5))
        await settle()
        req = await asyncio.wait_for(ep.recv(), 0.5)
        assert req.payload == "new"
        req.reply(1)
        assert await t == 1

    run(main())
