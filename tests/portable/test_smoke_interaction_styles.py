"""A first end-to-end pass through the four interaction styles."""

import asyncio

import edgebus
from tests.portable.support import raises, run, settle


def test_publish_reaches_matching_subscription():
    bus = edgebus.Bus()
    c = bus.connect()
    sub = c.subscribe("a/+")
    c.publish("a/b", 1)
    c.publish("x/b", 2)
    m = sub.recv_nowait()
    assert m.topic == ("a", "b") and m.payload == 1
    assert sub.recv_nowait() is None


def test_call_roundtrip():
    async def main():
        bus = edgebus.Bus()
        c = bus.connect()
        ep = c.bind("rpc/echo")

        async def handler():
            async for req in ep:
                req.reply(req.payload * 2)

        t = asyncio.create_task(handler())
        assert await c.call("rpc/echo", 21) == 42
        ep.unbind()
        await settle()
        assert t.done()

    run(main())


def test_bad_policy_is_value_error():
    raises(ValueError, edgebus.Bus, full="block")
