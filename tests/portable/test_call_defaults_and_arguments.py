"""Calls: default timeout, argument errors, a raising authoriser (docs/api.md: Connection)."""

import asyncio

import edgebus
from tests.portable.support import araises, run, settle


def test_default_timeout_is_one_second():
    async def main():
        c = edgebus.Bus().connect()
        c.bind("rpc")
        t0 = edgebus.now()
        await araises(edgebus.Timeout, c.call("rpc", 1))
        assert 0.9 <= edgebus.now() - t0 < 2

    run(main())


def test_bad_extra_sends_nothing():
    async def main():
        c = edgebus.Bus().connect()
        ep = c.bind("rpc")
        await araises(TypeError, c.call("rpc", 1, extra=["x"]))
        await araises(TypeError, c.call(("rpc", 1.5), 1))
        await araises(ValueError, c.call((), 1))
        assert ep.recv_nowait() is None

    run(main())


class Oops(Exception):
    pass


def _auth(ctx):
    if ctx["action"] == "call":
        raise Oops()
    return True


def test_raising_authoriser_on_call_sends_nothing():
    async def main():
        c = edgebus.Bus(authoriser=_auth).connect()
        ep = c.bind("rpc")
        await araises(Oops, c.call("rpc", 1))
        assert ep.recv_nowait() is None and ep.dropped() == 0

    run(main())


def test_int_and_literal_tokens_in_calls():
    async def main():
        c = edgebus.Bus().connect()
        ep = c.bind(("dev", 3, edgebus.literal("#")))
        await araises(edgebus.NoRoute, c.call(("dev", "3", edgebus.literal("#")), 1))
        t = asyncio.create_task(c.call(("dev", 3, edgebus.literal("#")), 1))
        await settle()
        req = ep.recv_nowait()
        assert req.topic == ("dev", 3, "#") and type(req.topic[1]) is int
        req.reply(0)
        assert await t == 0

    run(main())
