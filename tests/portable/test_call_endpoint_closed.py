"""Calls: Closed reasons when the endpoint goes away
(docs/api.md: Precise edge cases: Calls, Feeds)."""

import asyncio

import edgebus
from tests.portable.support import araises, run, settle


async def _queued_then(close, reason):
    c = edgebus.Bus().connect()
    ep = c.bind("rpc")
    t = asyncio.create_task(c.call("rpc", 1, timeout=5))
    await settle()
    t0 = edgebus.now()
    close(c, ep)
    e = await araises(edgebus.Closed, t)
    assert e.reason == reason and isinstance(e, edgebus.CallError)
    assert edgebus.now() - t0 < 1
    assert ep.recv_nowait() is None  # not handed out


def test_queued_requests_fail_when_the_endpoint_closes():
    async def main():
        await _queued_then(lambda c, ep: ep.unbind(), "unbound")
        await _queued_then(lambda c, ep: c.unbind(ep), "unbound")
        await _queued_then(lambda c, ep: ep.close(), "closed")
        await _queued_then(lambda c, ep: c.disconnect(), "disconnected")

    run(main())


def test_abandon_is_seen_as_closed():
    async def main():
        c = edgebus.Bus().connect()
        ep = c.bind("rpc")
        t = asyncio.create_task(c.call("rpc", 1))
        req = await ep.recv()
        assert req.abandon("busy") is True and req.done()
        assert req.reply(1) is False
        assert (await araises(edgebus.Closed, t)).reason == "busy"
        t = asyncio.create_task(c.call("rpc", 2))
        (await ep.recv()).abandon()
        assert (await araises(edgebus.Closed, t)).reason == "abandoned"

    run(main())


def test_held_request_survives_unbind():
    async def main():
        c = edgebus.Bus().connect()
        ep = c.bind("rpc")
        t = asyncio.create_task(c.call("rpc", 1))
        req = await ep.recv()
        ep.unbind()
        await settle()
        assert not t.done()
        assert req.reply("late") is True
        assert await t == "late"
        assert await ep.recv() is None

    run(main())


def test_held_request_fails_when_the_binding_connection_disconnects():
    async def main():
        bus = edgebus.Bus()
        server = bus.connect()
        caller = bus.connect()
        ep = server.bind("rpc")
        t = asyncio.create_task(caller.call("rpc", 1))
        req = await ep.recv()
        server.disconnect()
        assert (await araises(edgebus.Closed, t)).reason == "disconnected"
        assert req.done() and req.reply(1) is False

    run(main())


def test_held_request_after_unbind_fails_on_disconnect():
    async def main():
        bus = edgebus.Bus()
        server = bus.connect()
        caller = bus.connect()
        ep = server.bind("rpc")
        t = asyncio.create_task(caller.call("rpc", 1))
        req = await ep.recv()
        ep.unbind()
        server.disconnect()
        assert (await araises(edgebus.Closed, t)).reason == "disconnected"
        assert req.reply(1) is False

    run(main())
