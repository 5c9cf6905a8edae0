"""Binding rules and endpoint queues (docs/api.md: Connection, Precise edge cases: Calls)."""

import asyncio

import edgebus
from tests.portable.support import araises, raises, run, settle


def test_second_bind_is_value_error():
    bus = edgebus.Bus()
    a = bus.connect()
    b = bus.connect()
    ep = a.bind("rpc")
    raises(ValueError, a.bind, "rpc")
    raises(ValueError, b.bind, ("rpc",))
    assert bus.stats()["endpoints"] == 1 and b.stats()["endpoints"] == 0
    ep.unbind()
    ep2 = b.bind("rpc")
    assert ep2.why() is None and bus.stats()["endpoints"] == 1


def test_endpoint_is_reject_newest_with_queue_one():
    async def main():
        c = edgebus.Bus(full="drop_oldest").connect()
        ep = c.bind("rpc")
        st = ep.stats()
        assert st["queue_len"] == 1 and st["full"] == "reject_newest"
        t = asyncio.create_task(c.call("rpc", "first", timeout=5))
        await settle()
        await araises(edgebus.Full, c.call("rpc", "second"))
        assert (await ep.recv()).payload == "first"  # not evicted
        t.cancel()
        await araises(asyncio.CancelledError, t)

    run(main())


def test_rendezvous_endpoint_needs_a_waiting_handler():
    async def main():
        c = edgebus.Bus().connect()
        ep = c.bind("rpc", queue_len=0)
        await araises(edgebus.Full, c.call("rpc", 1))
        assert ep.dropped() == 1
        r = asyncio.create_task(ep.recv())
        await settle()
        t = asyncio.create_task(c.call("rpc", 2))
        req = await r
        req.reply(req.payload + 1)
        assert await t == 3

    run(main())
