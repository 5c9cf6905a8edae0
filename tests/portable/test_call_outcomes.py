"""Calls: reply, fail, NoRoute, Full, Timeout
(docs/api.md: Connection, Precise edge cases: Calls)."""

import asyncio

import edgebus
from tests.portable.support import araises, run, settle


def test_reply_roundtrip_and_request_fields():
    async def main():
        bus = edgebus.Bus()
        server = bus.connect()
        caller = bus.connect(principal="me")
        ep = server.bind("rpc/echo")
        t = asyncio.create_task(caller.call("rpc/echo", {"x": 1}, extra={"id": 9}))
        req = await ep.recv()
        assert type(req) is edgebus.Request
        assert req.topic == ("rpc", "echo") and req.payload == {"x": 1}
        o = req.origin
        assert o.conn_id == caller.conn_id and o.principal == "me" and o.kind == "local"
        assert o.extra == {"id": 9}
        assert req.done() is False
        assert req.reply("pong") is True
        assert req.done() is True
        assert req.reply("again") is False and req.fail("x") is False
        assert req.abandon() is False
        assert await t == "pong"

    run(main())


def test_fail_raises_failed_with_the_value():
    async def main():
        c = edgebus.Bus().connect()
        ep = c.bind("rpc")
        err = {"code": 7}
        t = asyncio.create_task(c.call("rpc", 1))
        req = await ep.recv()
        assert req.fail(err) is True and req.reply(1) is False
        e = await araises(edgebus.Failed, t)
        assert e.reason is err
        assert isinstance(e, edgebus.CallError) and isinstance(e, edgebus.BusError)

    run(main())


def test_no_route_is_raised_at_once():
    async def main():
        c = edgebus.Bus().connect()
        t0 = edgebus.now()
        e = await araises(edgebus.NoRoute, c.call("nobody", 1, timeout=5))
        assert e.reason == "no_route" and isinstance(e, edgebus.CallError)
        assert edgebus.now() - t0 < 1
        ep = c.bind("gone")
        ep.unbind()
        await araises(edgebus.NoRoute, c.call("gone", 1))

    run(main())


def test_full_is_raised_at_once():
    async def main():
        c = edgebus.Bus().connect()
        ep = c.bind("rpc")  # queue_len=1
        t = asyncio.create_task(c.call("rpc", 1, timeout=5))
        await settle()
        t0 = edgebus.now()
        e = await araises(edgebus.Full, c.call("rpc", 2, timeout=5))
        assert e.reason == "full" and edgebus.now() - t0 < 1
        req = await ep.recv()
        assert req.payload == 1
        req.reply(None)
        assert await t is None

    run(main())


def test_timeout():
    async def main():
        c = edgebus.Bus().connect()
        c.bind("rpc")
        t0 = edgebus.now()
        e = await araises(edgebus.Timeout, c.call("rpc", 1, timeout=0.05))
        dt = edgebus.now() - t0
        assert e.reason == "timeout" and isinstance(e, edgebus.CallError)
        assert 0.04 <= dt < 1

    run(main())
