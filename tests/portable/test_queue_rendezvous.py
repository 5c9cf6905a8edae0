"""Rendezvous queues (length 0) and endpoint drop accounting (docs/api.md: Feeds)."""

import asyncio

import edgebus
from tests.portable.support import araises, run, settle


def test_rendezvous_without_receiver_drops_under_both_policies():
    bus = edgebus.Bus()
    pub = bus.connect()
    c = bus.connect()
    a = c.subscribe("t", queue_len=0, full="drop_oldest")
    b = c.subscribe("t", queue_len=0, full="reject_newest")
    pub.publish("t", 1)
    assert a.recv_nowait() is None and b.recv_nowait() is None
    assert a.dropped() == 1 and b.dropped() == 1
    assert c.dropped() == 2 and bus.stats()["dropped"] == 2 and pub.dropped() == 0


def test_rendezvous_delivers_only_to_a_waiting_receiver():
    async def main():
        c = edgebus.Bus().connect()
        s = c.subscribe("t", queue_len=0)
        t = asyncio.create_task(s.recv())
        await settle()
        c.publish("t", 1)
        c.publish("t", 2)  # the one receiver already has an item
        m = await t
        assert m.payload == 1 and s.dropped() == 1
        c.publish("t", 3)  # nobody waiting now
        assert s.recv_nowait() is None and s.dropped() == 2

    run(main())


def test_rendezvous_receiver_that_timed_out_no_longer_counts():
    async def main():
        c = edgebus.Bus().connect()
        s = c.subscribe("t", queue_len=0)
        await araises(asyncio.TimeoutError, asyncio.wait_for(s.recv(), 0.02))
        c.publish("t", 1)
        assert s.recv_nowait() is None and s.dropped() == 1

    run(main())


def test_endpoint_rejections_count_against_the_binding_connection():
    async def main():
        bus = edgebus.Bus()
        server = bus.connect()
        caller = bus.connect()
        ep = server.bind("rpc", queue_len=1)
        t = asyncio.create_task(caller.call("rpc", 1))
        await settle()
        e = await araises(edgebus.Full, caller.call("rpc", 2))
        assert e.reason == "full"
        assert ep.dropped() == 1 and server.dropped() == 1
        assert caller.dropped() == 0 and bus.stats()["dropped"] == 1
        (await ep.recv()).reply("ok")
        assert await t == "ok"

    run(main())
